import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { egressAgent } from '../../egress/dispatcher.js';
import { EgressPolicy } from '../../egress/policy.js';
import type { Pagination } from '../types.js';
import { connectorSpec, endpointSpec, engineContext, ids, range, readAll } from './testing/specs.js';

/**
 * A read's pages go over one kept-alive connection to the source, as the hub's dispatcher (undici's Agent, the
 * egress policy's) allows. undici gives a connection back one turn of the event loop after a response's end: the
 * next page asked for before that turn went out on a second connection, and the pages alternated between the two.
 */

let server: Server;
let url: string;
/** Each request's connection, by the order the server accepted them (1, 2, …). */
const served: number[] = [];
let accepted = 0;
const numbers = new WeakMap<Socket, number>();

beforeAll(async () => {
  // 95 rows of offset pages with a total, as a plain source serves them (keep-alive, Node's defaults).
  server = createServer((req, res) => {
    served.push(numbers.get(req.socket)!);
    const asked = new URL(req.url!, 'http://source');
    const offset = Number(asked.searchParams.get('offset') ?? 0);
    const limit = Number(asked.searchParams.get('limit') ?? 20);
    const data = Array.from({ length: Math.max(0, Math.min(limit, 95 - offset)) }, (_, i) => ({ id: offset + i + 1 }));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ data, total: 95 }));
  });
  server.on('connection', (socket) => numbers.set(socket, ++accepted));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const offset: Pagination = { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 20, response_path: '$.data', total_path: '$.total' };

describe("a read's connections to its source", () => {
  it('every page of an offset read goes over the one connection, and so does the next read', async () => {
    const agent = egressAgent(EgressPolicy.open());
    try {
      for (const read of [1, 2]) {
        const result = await readAll(connectorSpec(url), endpointSpec('/partners', offset), engineContext({}, { dispatcher: agent }));
        expect(result.error).toBeUndefined();
        expect(ids(result.items)).toEqual(range(95));
        expect(served).toHaveLength(5 * read);
      }
      expect(served).toEqual(Array(10).fill(1));
      expect(accepted).toBe(1);
    } finally {
      await agent.close();
    }
  });
});

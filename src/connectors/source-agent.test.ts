import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { request } from 'undici';
import { until } from '../../test/harness/until.js';
import { Config } from '../config/config.js';
import { EgressPolicy } from '../egress/policy.js';
import { sourceAgent } from './services.js';

/**
 * The agent of the connectors' requests against a real loopback source that asks, with its
 * `Keep-Alive: timeout=600` header, for idle connections to be kept ten minutes: the agent closes
 * them after svc.connectors.http.idle-timeout instead, so a hub reading many tenants' sources does
 * not hold their idle sockets between runs.
 */

let source: Server;
let base: string;
/** The source's connections that are open now. */
const open = new Set<Socket>();

beforeAll(async () => {
  source = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('[]');
  });
  // Node's server answers `Keep-Alive: timeout=600` and keeps an idle connection that long itself.
  source.keepAliveTimeout = 600_000;
  source.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.on('close', () => open.delete(socket));
  });
  await new Promise<void>((resolve) => source.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(source.address() as AddressInfo).port}`;
});

afterAll(async () => {
  source.closeAllConnections();
  await new Promise<void>((resolve) => source.close(() => resolve()));
});

describe('idle connections to a source', () => {
  it('svc.connectors.http.idle-timeout is 60 s unless set', () => {
    expect(Config.load({ env: { SVC_CONFIG: '/dev/null' } }).duration('svc.connectors.http.idle-timeout')).toBe(60_000);
  });

  it('are closed after svc.connectors.http.idle-timeout, however long the source\'s Keep-Alive header asks them to be kept', async () => {
    const config = Config.load({ env: { SVC_CONFIG: '/dev/null', SVC_CONNECTORS_HTTP_IDLE_TIMEOUT: '300ms' } });
    const agent = sourceAgent(config, EgressPolicy.open());
    try {
      // Three requests at once: three connections, each kept alive once its answer is read.
      const answers = await Promise.all(Array.from({ length: 3 }, () => request(`${base}/page`, { dispatcher: agent })));
      for (const answer of answers) {
        expect(answer.headers['keep-alive']).toBe('timeout=600');
        await answer.body.text();
      }
      expect(open.size).toBe(3);
      // The source would keep them ten minutes: the hub closes them after its own limit.
      const started = Date.now();
      await until('the idle connections closed', () => open.size === 0, { timeoutMs: 10_000, detail: () => `${open.size} still open` });
      expect(Date.now() - started).toBeGreaterThanOrEqual(200);
      // A request after that opens a connection anew and is answered.
      await expect(request(`${base}/page`, { dispatcher: agent }).then((answer) => answer.body.text())).resolves.toBe('[]');
    } finally {
      await agent.close();
    }
  });
});

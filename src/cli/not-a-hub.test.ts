import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { svcRunner } from '../../test/harness/svc-cli.js';

/**
 * `svc` pointed (SVC_URL) at a server on loopback that is not a hub, or not at the hub's base URL:
 * its 404s (an empty body, JSON of its own) say so in every command, through the one HTTP helper.
 */

let server: Server;
let url: string;
let dir: string;
/** What the server answers every request: a 404 with this body (JSON when it is not empty). */
let body = '';

beforeAll(async () => {
  server = createServer((_req, res) => void res.writeHead(404, body ? { 'content-type': 'application/json' } : {}).end(body));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  dir = mkdtempSync(join(tmpdir(), 'svc-not-a-hub-'));
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

const svc = svcRunner(() => ({ env: { SVC_URL: url, SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: join(dir, 'config.json') } }));

describe('a server that is not a hub answering 404', () => {
  const cases: Array<[string[], string]> = [
    [['runs', 'ls'], 'GET /api/platform/runs'],
    [['connectors', 'get', 'partners'], 'GET /api/connectors/partners'],
    [['rediscover', '--scope', 'partners'], 'POST /api/platform/rag/rediscover'],
  ];

  it.each([
    ['an empty body', '', 'not found'],
    ['JSON of its own, a code', '{"error":"not_found"}', 'not_found'],
    ['JSON of its own, more keys', '{"error":"Resource not found","status":404}', 'Resource not found'],
    ["the hub's own for a path it does not serve", '{"error":"not found"}', 'not found'],
  ])('%s: every command names the URL as not a svc-hub, or not its base URL', async (_what, answer, message) => {
    body = answer;
    for (const [args, route] of cases) {
      expect({ args, ...(await svc(args)) }).toEqual({ args, code: 1, out: '', err: `error: ${message}; ${url} does not serve ${route}: not a svc-hub, or not its base URL (HTTP 404)\n` });
    }
  });

  it("the hub's 404 for an object it does not have stays as it is", async () => {
    body = '{"error":"connector partners not found"}';
    expect(await svc(['connectors', 'get', 'partners'])).toEqual({ code: 1, out: '', err: 'error: connector partners not found (HTTP 404)\n' });
  });
});

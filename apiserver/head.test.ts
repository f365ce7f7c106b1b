import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { route, type RouteDecl } from './route.js';

/**
 * HEAD on a GET route runs the GET's handler (the router answers it as GET, without the body), so it is
 * served only where that is a plain read: a route audited as data egress (the CSV download, the event
 * stream, a row by its hash) would do all its work and record data leaving the hub that never left. There
 * HEAD is a 405 with `Allow: GET`, before authentication, the handler or the audit (docs/architecture.md, "The error mapping").
 */

const calls = { plain: 0, egress: 0 };

const probes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/probe/plain', operationId: 'probePlain', summary: 'probe', tags: ['Probe'], auth: ['svc_user'],
    responses: { 200: { description: 'a read' } },
    handler: () => {
      calls.plain++;
      return { read: true };
    },
  }),
  route({
    method: 'GET', path: '/api/probe/egress', operationId: 'probeEgress', summary: 'probe', tags: ['Probe'], auth: ['svc_user'], audit: 'egress',
    responses: { 200: { description: 'data leaving the hub' } },
    handler: () => {
      calls.egress++;
      return { sent: true };
    },
  }),
];

let hub: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  hub = await startTestHub({}, probes);
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

const H = { 'X-Tenant-ID': '1' };

async function auditEntries(): Promise<string[]> {
  const { rows } = await owner.query<{ action: string }>('select action from audit.entries order by id');
  return rows.map((r) => r.action);
}

describe('HEAD', () => {
  it('on a plain read is answered as GET without a body', async () => {
    const before = calls.plain;
    const res = await fetch(`${hub.url}/api/probe/plain`, { method: 'HEAD', headers: H });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('');
    expect(calls.plain).toBe(before + 1);
    expect((await fetch(`${hub.url}/api/probe/plain`, { method: 'OPTIONS', headers: H })).headers.get('allow')).toBe('HEAD, GET');
  });

  it('on a route audited as egress is a 405 naming GET: the handler does not run and nothing is audited', async () => {
    const before = await auditEntries();
    const res = await fetch(`${hub.url}/api/probe/egress`, { method: 'HEAD', headers: H });
    expect({ status: res.status, allow: res.headers.get('allow') }).toEqual({ status: 405, allow: 'GET' });
    expect(calls.egress).toBe(0);
    expect(await auditEntries()).toEqual(before);
    const options = await fetch(`${hub.url}/api/probe/egress`, { method: 'OPTIONS', headers: H });
    expect({ status: options.status, allow: options.headers.get('allow') }).toEqual({ status: 200, allow: 'GET' });
    // GET itself is served, and audited.
    const get = await fetch(`${hub.url}/api/probe/egress`, { headers: H });
    expect({ status: get.status, body: await get.json() }).toEqual({ status: 200, body: { sent: true } });
    expect(calls.egress).toBe(1);
    expect(await auditEntries()).toEqual([...before, 'GET /api/probe/egress']);
  });

  it.each([
    ['the CSV download', '/api/exports/entities/partner/download'],
    ['a row by its hash', '/api/platform/data/row/0123abcd'],
    ['the event stream', '/api/platform/events/stream'],
  ])('on %s is a 405 naming GET, with no audit entry', async (_what, path) => {
    const before = await auditEntries();
    const res = await fetch(`${hub.url}${path}`, { method: 'HEAD', headers: H });
    expect({ status: res.status, allow: res.headers.get('allow') }).toEqual({ status: 405, allow: 'GET' });
    expect(await auditEntries()).toEqual(before);
    // GET still answers (here a 404 or the stream), and a 405 to HEAD's own body-less twin is JSON to a GET-less method.
    const del = await fetch(`${hub.url}${path}`, { method: 'DELETE', headers: H });
    expect({ status: del.status, allow: del.headers.get('allow'), body: await del.json() }).toEqual({
      status: 405,
      allow: 'GET',
      body: { error: 'method DELETE is not allowed on this path; it takes GET' },
    });
  });
});

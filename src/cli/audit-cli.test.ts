import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { svcRunner } from '../../test/harness/svc-cli.js';

/** `svc audit ls` against a real hub (dev bypass, tenant 1): the table, --json, the filters and --all paging. */

let hub: TestHub;
let dir: string;
let config: string;

const svc = svcRunner(() => ({ env: { SVC_CLI_CONFIG: config } }));

beforeAll(async () => {
  hub = await startTestHub();
  dir = mkdtempSync(join(tmpdir(), 'svc-cli-audit-'));
  config = join(dir, 'config.json');
  expect((await svc(['login', '--url', hub.url, '--dev-tenant', '1'])).code).toBe(0);
});

afterAll(async () => {
  await hub?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('svc audit ls', () => {
  it('lists the tenant\'s entries newest first as a table or JSON, filtered, every page with --all', async () => {
    expect(await svc(['audit', 'ls'])).toEqual({ code: 0, out: 'No audit entries.\n', err: '' });
    // Three orgs created (each call audited as the CLI's actor `dev`), one refused (a 409: a code given twice).
    const call = (code: string) =>
      fetch(`${hub.url}/api/tenants/1/orgs`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'content-type': 'application/json' }, body: JSON.stringify({ code, name: code }) });
    for (const code of ['a', 'b', 'c', 'c']) await call(code);
    await fetch(`${hub.url}/api/tenants/1/orgs`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'X-User-ID': 'zoe', 'content-type': 'application/json' }, body: JSON.stringify({ code: 'z', name: 'z' }) });

    const ls = await svc(['audit', 'ls']);
    expect(ls.code).toBe(0);
    const lines = ls.out.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^AT\s+ACTOR\s+ACTION\s+TARGET\s+STATUS\s+FROM$/);
    expect(lines.slice(1).map((l) => l.split(/\s{2,}/).slice(1))).toEqual([
      ['zoe', 'POST /api/tenants/{tid}/orgs', '/api/tenants/1/orgs', '201', '-'],
      ['dev', 'POST /api/tenants/{tid}/orgs', '/api/tenants/1/orgs', '409', '-'],
      ['dev', 'POST /api/tenants/{tid}/orgs', '/api/tenants/1/orgs', '201', '-'],
      ['dev', 'POST /api/tenants/{tid}/orgs', '/api/tenants/1/orgs', '201', '-'],
      ['dev', 'POST /api/tenants/{tid}/orgs', '/api/tenants/1/orgs', '201', '-'],
    ]);
    expect(lines[1]).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}Z\s/);

    // --limit 2 is the first page; --all follows the Link headers to the end.
    expect((await svc(['audit', 'ls', '--actor', 'dev', '--limit', '2'])).out.trimEnd().split('\n')).toHaveLength(3);
    const every = JSON.parse((await svc(['audit', 'ls', '--actor', 'dev', '--limit', '2', '--all', '--json'])).out) as Array<Record<string, unknown>>;
    expect(every.map((e) => e.status)).toEqual([409, 201, 201, 201]);
    expect(every[0]).toEqual({
      at: expect.any(String), actor: 'dev', action: 'POST /api/tenants/{tid}/orgs', target: '/api/tenants/1/orgs', outcome: 'failure', status: 409,
      requestId: expect.any(String), homeTenantId: 1, impersonating: false,
    });
    expect(JSON.parse((await svc(['audit', 'ls', '--outcome', 'failure', '--json'])).out)).toHaveLength(1);
    expect(JSON.parse((await svc(['audit', 'ls', '--action', 'POST /api/tenants/{tid}/orgs', '--since', every[0]!.at as string, '--json'])).out)).toHaveLength(2);
    expect((await svc(['audit', 'ls', '--until', '2000-01-01T00:00:00Z'])).out).toBe('No audit entries.\n');

    const bad = await svc(['audit', 'ls', '--since', 'yesterday']);
    expect(bad).toMatchObject({ code: 1, out: '' });
    expect(bad.err).toContain('since must be a date-time');
    const usage = await svc(['audit', 'ls', '--outcome', 'maybe']);
    expect(usage.code).toBe(2);
    expect(usage.err).toContain("--outcome must be success or failure, not 'maybe'");
  });
});

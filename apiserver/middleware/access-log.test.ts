import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { runWithContext } from '../../src/observability/context.js';
import { logger, registerSecret } from '../../src/observability/logger.js';
import { derivePassword } from '../../src/db/roles.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { captureLogs, type LogCapture } from '../../test/harness/log-capture.js';
import { startIssuer, type TestIssuer } from '../../test/harness/tokens.js';

/** Everything the hub logs while serving, captured as JSON lines. */
let logs: LogCapture;

let issuer: TestIssuer;
let hub: TestHub;
// 32 bytes: the hub refuses a master key of any other length at start.
const MASTER_KEY = 'bWFzdGVyLWtleS10aGF0LWlzLW5ldmVyLWxvZ2dlZCE=';

beforeAll(async () => {
  logs = captureLogs('debug');
  issuer = await startIssuer();
  hub = await startTestHub({
    'svc.oidc.issuer': issuer.issuer,
    'svc.oidc.jwks-uri': issuer.jwksUri,
    'svc.secret.master-key': MASTER_KEY,
    'svc.log.level': 'debug',
  });
  registerSecret(hub.config.string('svc.secret.master-key'));
  const owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'tenant-b', 'Tenant B')`);
  await owner.end();
});

afterAll(async () => {
  await hub.stop();
  await issuer.close();
  logs.restore();
});

describe('logging', () => {
  it('never writes the Authorization header, a token or a secret value', async () => {
    const token = await issuer.mint({ realm_access: { roles: ['svc_user', 'svc_integrator'] }, tenant_id: 1 });
    const forged = await issuer.mint({ realm_access: { roles: ['svc_user'] }, tenant_id: 1 }, { rogue: true });
    await fetch(`${hub.url}/api/bff/v1/me`, { headers: { Authorization: `Bearer ${token}` } });
    await fetch(`${hub.url}/api/platform/health`, { headers: { Authorization: `Bearer ${forged}` } });
    await fetch(`${hub.url}/api/platform/health`, { headers: { Authorization: 'Basic ZGVtbzpkZW1vLXBhc3N3b3Jk' } });
    // A handler or library that logs a whole request or a credential by mistake is scrubbed too.
    logger().info({ req: { headers: { authorization: `Bearer ${token}` } }, password: 'hunter2-hunter2', secret: 'shh-very-secret' }, 'careless line');
    logger().info(`careless text with the key ${MASTER_KEY} and a token Bearer ${token}`);

    expect(logs.lines().length).toBeGreaterThan(3);
    expect(logs.raw()).not.toContain(token);
    expect(logs.raw()).not.toContain(forged);
    expect(logs.raw()).not.toContain(token.split('.')[2]);
    expect(logs.raw()).not.toContain('ZGVtbzpkZW1vLXBhc3N3b3Jk');
    expect(logs.raw()).not.toContain(MASTER_KEY);
    expect(logs.raw()).not.toContain('hunter2-hunter2');
    expect(logs.raw()).not.toContain('shh-very-secret');
    const owner = hub.ownerUrl;
    expect(logs.raw()).not.toContain(derivePassword(owner, 'svc_app'));
    expect(logs.raw()).not.toContain(derivePassword(owner, 'svc_worker'));
    expect(logs.raw()).toContain('[REDACTED]');
  });

  it('keeps at most 2,048 characters of a path, saying how long it was', async () => {
    const long = `/api/made-up-${'x'.repeat(12_000)}`;
    const res = await fetch(`${hub.url}${long}`);
    await res.arrayBuffer();
    const line = logs.lines().find((l) => l.msg === 'request' && typeof l.path === 'string' && l.path.startsWith('/api/made-up-'));
    expect(line?.path).toBe(`${long.slice(0, 2_048)}… (${long.length} characters)`);
  });

  it('puts the tenant and the request id on every line written while serving a request', async () => {
    const token = await issuer.mint({ realm_access: { roles: ['svc_user'] }, tenant_id: 1, sub: 'tenant-line-user' });
    const before = logs.lines().length;
    const res = await fetch(`${hub.url}/api/bff/v1/me`, { headers: { Authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    const requestId = res.headers.get('x-request-id');
    const mine = logs.lines().slice(before).filter((l) => l.reqId === requestId);
    expect(mine.length).toBeGreaterThan(0);
    const access = mine.find((l) => l.msg === 'request' && l.path === '/api/bff/v1/me');
    expect(access).toMatchObject({ tenant: '1', status: 200, method: 'GET' });
    for (const line of mine) expect(line.tenant).toBe('1');
  });

  it("a tenant's secret value is scrubbed from its own work only, never from another tenant's lines; the hub's own credentials everywhere", async () => {
    // Tenant A (1) stores values that are ordinary text in everyone's log lines.
    const admin = await issuer.mint({ realm_access: { roles: ['svc_integrator', 'svc_admin'] }, tenant_id: 1, sub: 'tenant-a-admin' });
    for (const [name, value] of [['verb', 'GET'], ['path', '/api/bff/v1/me'], ['word', 'request']]) {
      const created = await fetch(`${hub.url}/api/platform/secrets`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ name, value }),
      });
      expect(created.status).toBe(201);
    }
    // A job of tenant A decrypts them: its own lines are scrubbed of those long enough to scrub.
    const jobLine = await runWithContext({ job: 'tenant-a-run', tenantId: '1' }, async () => {
      for (const name of ['verb', 'path', 'word']) await hub.services.secrets.resolveSecret(1, `secret:${name}`, 'test');
      logger().info({ mark: 'tenant-a-job' }, 'calling /api/bff/v1/me upstream with request GET');
      return logs.lines().find((l) => l.mark === 'tenant-a-job');
    });
    expect(jobLine?.msg).toBe('calling [REDACTED] upstream with request GET');

    // Tenant B (2) is served afterwards: its lines keep every word.
    const before = logs.lines().length;
    const tokenB = await issuer.mint({ realm_access: { roles: ['svc_user'] }, tenant_id: 2, sub: 'tenant-b-user' });
    const res = await fetch(`${hub.url}/api/bff/v1/me`, { headers: { Authorization: `Bearer ${tokenB}` } });
    expect(res.status).toBe(200);
    const requestId = res.headers.get('x-request-id');
    await runWithContext({ job: 'tenant-b-run', tenantId: '2' }, async () => {
      logger().info({ mark: 'tenant-b-job' }, `a request GET /api/bff/v1/me with key ${MASTER_KEY} and Bearer ${tokenB}`);
    });
    const lines = logs.lines().slice(before);
    const access = lines.find((l) => l.msg === 'request' && l.reqId === requestId);
    expect(access).toMatchObject({ tenant: '2', method: 'GET', path: '/api/bff/v1/me', status: 200 });
    const careless = lines.find((l) => l.mark === 'tenant-b-job');
    // Tenant A's values stay; the hub's master key and the bearer token are still redacted.
    expect(careless?.msg).toBe('a request GET /api/bff/v1/me with key [REDACTED] and Bearer [REDACTED]');
    expect(logs.raw()).not.toContain(MASTER_KEY);
  });

  it('writes JSON lines in the prod profile format with an ISO time and a level name', () => {
    const line = logs.lines().find((l) => l.msg === 'request')!;
    expect(typeof line.time).toBe('string');
    expect(new Date(line.time as string).toISOString()).toBe(line.time);
    expect(line.level).toBe('info');
  });
});

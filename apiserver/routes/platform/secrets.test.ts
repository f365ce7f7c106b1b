import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { parseMasterKey, UnsealError, unseal } from '../../../src/platform/secrets/crypto.js';
import { runWithContext } from '../../../src/observability/context.js';
import { logger } from '../../../src/observability/logger.js';
import { SecretStore } from '../../../src/platform/secrets/store.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { captureLogs, type LogCapture } from '../../../test/harness/log-capture.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';

/**
 * The secret store through HTTP with real tokens: every path, status and body, the role refusals,
 * the events, encryption at rest, the resolver and its cache. Every response, every log line and
 * every outbox payload of the file is kept, and the last test proves no secret value is in any.
 */

let logs: LogCapture;

const MASTER_KEY = Buffer.alloc(32, 0x5a).toString('base64');
/** Every value this file stores. The short ones are below the logger's scrub length: nothing masks them. */
const VALUES = {
  api: 'sk_live_9f8e7d6c5b4a3210-first',
  rotated: 'sk_live_rotated-value-0001',
  rotatedAgain: 'rotated-2',
  short: 'hunter2x',
  other: 'globex-only-value-777',
  again: 'recreated-after-delete',
  ttl: 'ttl-value-abc',
  tamper: 'tamper-me-please',
  cached: 'cached-value-scrub-me',
  unquoted: 'sk_live_unquoted-0123456789',
};

let issuer: TestIssuer;
let hub: TestHub;
let owner: pg.Client;
let otherTenant: number;
const responses: Array<{ what: string; status: number; text: string; headers: string }> = [];

beforeAll(async () => {
  logs = captureLogs('debug');
  issuer = await startIssuer();
  hub = await startTestHub({
    'svc.oidc.issuer': issuer.issuer,
    'svc.oidc.jwks-uri': issuer.jwksUri,
    'svc.secret.master-key': MASTER_KEY,
    'svc.log.level': 'debug',
  });
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  otherTenant = (await owner.query(`insert into core.tenants (code, name) values ('globex', 'Globex') returning id`)).rows[0].id;
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await issuer?.close();
  logs.restore();
});

type Roles = string[];
const ADMIN: Roles = ['svc_integrator', 'svc_admin'];

async function token(roles: Roles, tenant = 1, login = 'ada'): Promise<string> {
  return issuer.mint({ realm_access: { roles }, tenant_id: tenant, preferred_username: login, sub: `${login}-${tenant}` });
}

interface Call {
  roles?: Roles | null;
  tenant?: number;
  body?: unknown;
  /** Sent as it is (application/json), instead of `body` serialised. */
  rawBody?: string;
  login?: string;
}

/** One HTTP call, recorded for the final leak check. `roles: null` sends no token. */
async function call(method: string, path: string, options: Call = {}) {
  const headers: Record<string, string> = {};
  if (options.roles !== null) headers.Authorization = `Bearer ${await token(options.roles ?? ADMIN, options.tenant ?? 1, options.login)}`;
  if (options.body !== undefined || options.rawBody !== undefined) headers['Content-Type'] = 'application/json';
  const body = options.rawBody ?? (options.body === undefined ? undefined : JSON.stringify(options.body));
  const res = await fetch(`${hub.url}${path}`, { method, headers, body });
  const text = await res.text();
  responses.push({ what: `${method} ${path}`, status: res.status, text, headers: JSON.stringify([...res.headers]) });
  return { status: res.status, text, json: () => JSON.parse(text) as unknown, headers: res.headers };
}

async function outbox(type?: string, tenant = 1): Promise<Array<Record<string, unknown>>> {
  const { rows } = await owner.query(
    `select payload from events.outbox where tenant_id = $1 ${type ? 'and type = $2' : "and type like 'platform.secret.%'"} order by id`,
    type ? [tenant, type] : [tenant],
  );
  return rows.map((r) => r.payload);
}

const iso = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

describe('refusals', () => {
  // Three entries each: jest hands a test with more parameters than values a `done` callback.
  const paths: Array<[string, string, unknown]> = [
    ['GET', '/api/platform/secrets', undefined],
    ['GET', '/api/platform/secrets/api-token', undefined],
    ['POST', '/api/platform/secrets', { name: 'x', value: 'never-stored' }],
    ['PUT', '/api/platform/secrets/api-token', { value: 'never-stored' }],
    ['DELETE', '/api/platform/secrets/api-token', undefined],
  ];

  it.each(paths)('%s %s without a token: 401 plain text with WWW-Authenticate: Bearer', async (method, path, body) => {
    const res = await call(method, path, { roles: null, body });
    expect(res.status).toBe(401);
    expect(res.text).toBe('authentication required');
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
  });

  it.each(paths)('%s %s without svc_integrator: 403 plain text `missing role svc_integrator`', async (method, path, body) => {
    const res = await call(method, path, { roles: ['svc_admin', 'svc_superadmin', 'svc_user'], body });
    expect(res.status).toBe(403);
    expect(res.text).toBe('missing role svc_integrator');
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
  });

  it.each(paths.slice(2))('%s %s with svc_integrator but not svc_admin: 403 with an empty body', async (method, path, body) => {
    for (const roles of [['svc_integrator'], ['svc_integrator', 'svc_superadmin', 'svc_user']]) {
      const res = await call(method, path, { roles, body });
      expect(res.status).toBe(403);
      expect(res.text).toBe('');
      expect(res.headers.get('content-type')).toBeNull();
    }
    expect(await outbox()).toEqual([]);
  });

  it('a body that is not JSON (the value unquoted, as a shell writes `"value": $TOKEN`): 400 naming the position, quoting none of it', async () => {
    const create = await call('POST', '/api/platform/secrets', { rawBody: `{"name":"unquoted","value":${VALUES.unquoted}}` });
    expect({ status: create.status, body: create.json() }).toEqual({
      status: 400,
      body: { error: 'body is not valid JSON: Unexpected character in JSON at position 27', field: 'body' },
    });
    const rotate = await call('PUT', '/api/platform/secrets/unquoted', { rawBody: `{"value":${VALUES.unquoted}, "description":"x"}` });
    expect({ status: rotate.status, body: rotate.json() }).toEqual({
      status: 400,
      body: { error: 'body is not valid JSON: Unexpected character in JSON at position 9', field: 'body' },
    });
    for (const text of [create.text, rotate.text]) expect(text).not.toContain(VALUES.unquoted.slice(0, 7));
    expect(await outbox()).toEqual([]);
  });

  it('svc_integrator alone may read the metadata', async () => {
    const res = await call('GET', '/api/platform/secrets', { roles: ['svc_integrator'] });
    expect(res.status).toBe(200);
    expect(res.json()).toEqual([]);
  });
});

describe('create, read, rotate, delete', () => {
  let created: Record<string, unknown>;

  it('POST creates: 201 with the metadata only, a Location, and platform.secret.created in the outbox', async () => {
    const res = await call('POST', '/api/platform/secrets', { body: { name: 'api-token', value: VALUES.api, description: 'CRM API token' } });
    expect(res.status).toBe(201);
    created = res.json() as Record<string, unknown>;
    expect(Object.keys(created).sort()).toEqual(['createdAt', 'description', 'name', 'rotatedAt', 'updatedAt']);
    expect(created).toEqual({ name: 'api-token', description: 'CRM API token', createdAt: expect.stringMatching(iso), updatedAt: created.createdAt, rotatedAt: null });
    expect(res.headers.get('location')).toBe('/api/platform/secrets/api-token');
    expect(await outbox('platform.secret.created')).toEqual([{ name: 'api-token', by: 'ada', at: created.createdAt }]);
  });

  it('POST without a description stores null', async () => {
    const res = await call('POST', '/api/platform/secrets', { body: { name: 'short_one', value: VALUES.short }, login: 'bob' });
    expect(res.status).toBe(201);
    expect(res.json()).toMatchObject({ name: 'short_one', description: null, rotatedAt: null });
    expect((await outbox('platform.secret.created'))[1]).toMatchObject({ name: 'short_one', by: 'bob' });
  });

  it('GET lists metadata by name; GET one answers the metadata; an unknown name is a 404', async () => {
    const list = await call('GET', '/api/platform/secrets', { roles: ['svc_integrator'] });
    expect(list.status).toBe(200);
    const body = list.json() as Array<Record<string, unknown>>;
    expect(body.map((s) => s.name)).toEqual(['api-token', 'short_one']);
    expect(body[0]).toEqual(created);
    const one = await call('GET', '/api/platform/secrets/api-token', { roles: ['svc_integrator'] });
    expect(one.status).toBe(200);
    expect(one.json()).toEqual(created);
    const missing = await call('GET', '/api/platform/secrets/nope', { roles: ['svc_integrator'] });
    expect(missing.status).toBe(404);
    expect(missing.json()).toEqual({ error: 'secret nope not found' });
  });

  it('POST with a name in use: 409', async () => {
    const res = await call('POST', '/api/platform/secrets', { body: { name: 'api-token', value: 'a-different-value' } });
    expect(res.status).toBe(409);
    expect(res.json()).toEqual({ error: 'secret api-token already exists', field: 'name' });
    expect(await outbox('platform.secret.created')).toHaveLength(2);
  });

  it.each([
    [{ value: 'v' }, { error: 'name is required', field: 'name' }],
    [{ name: 'n' }, { error: 'value is required', field: 'value' }],
    [{ name: 'n', value: '' }, { error: 'value must not be empty', field: 'value' }],
    [{ name: 'n', value: 42 }, { error: 'value must be a string', field: 'value' }],
    [{ name: 'secret:n', value: 'v' }, { error: 'name must match the pattern ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$', field: 'name' }],
    [{ name: 'n', value: 'v', values: 'typo' }, { error: 'values is not a known field', field: 'values' }],
  ])('POST %j: 400 %j', async (body, expected) => {
    const res = await call('POST', '/api/platform/secrets', { body });
    expect(res.status).toBe(400);
    expect(res.json()).toEqual(expected);
  });

  it('PUT rotates: 204, rotatedAt set, description kept when absent, platform.secret.updated with previousRotatedAt ""', async () => {
    const res = await call('PUT', '/api/platform/secrets/api-token', { body: { value: VALUES.rotated }, login: 'carol' });
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    const after = (await call('GET', '/api/platform/secrets/api-token')).json() as Record<string, unknown>;
    expect(after).toEqual({ ...created, rotatedAt: expect.stringMatching(iso), updatedAt: after.rotatedAt });
    expect(Date.parse(after.rotatedAt as string)).toBeGreaterThan(Date.parse(created.createdAt as string));
    expect(await outbox('platform.secret.updated')).toEqual([{ name: 'api-token', by: 'carol', at: after.rotatedAt, previousRotatedAt: '' }]);
    created = after;
  });

  it('PUT again: previousRotatedAt is the earlier rotation; a given description replaces it, null clears it', async () => {
    const previous = created.rotatedAt;
    expect((await call('PUT', '/api/platform/secrets/api-token', { body: { value: VALUES.rotatedAgain, description: 'rotated by ops' } })).status).toBe(204);
    const after = (await call('GET', '/api/platform/secrets/api-token')).json() as Record<string, unknown>;
    expect(after.description).toBe('rotated by ops');
    expect((await outbox('platform.secret.updated'))[1]).toEqual({ name: 'api-token', by: 'ada', at: after.rotatedAt, previousRotatedAt: previous });
    expect((await call('PUT', '/api/platform/secrets/api-token', { body: { value: VALUES.rotated, description: null } })).status).toBe(204);
    expect(((await call('GET', '/api/platform/secrets/api-token')).json() as Record<string, unknown>).description).toBeNull();
  });

  it('PUT on an unknown name: 404; without a value: 400', async () => {
    const missing = await call('PUT', '/api/platform/secrets/nope', { body: { value: 'whatever-value' } });
    expect(missing.status).toBe(404);
    expect(missing.json()).toEqual({ error: 'secret nope not found' });
    const invalid = await call('PUT', '/api/platform/secrets/api-token', { body: { description: 'no value' } });
    expect(invalid.status).toBe(400);
    expect(invalid.json()).toEqual({ error: 'value is required', field: 'value' });
    const renamed = await call('PUT', '/api/platform/secrets/api-token', { body: { value: 'v', name: 'other' } });
    expect(renamed.status).toBe(400);
  });

  it('secrets are per tenant: another tenant sees none of them and may use the same name', async () => {
    const list = await call('GET', '/api/platform/secrets', { tenant: otherTenant });
    expect(list.json()).toEqual([]);
    expect((await call('GET', '/api/platform/secrets/api-token', { tenant: otherTenant })).status).toBe(404);
    expect((await call('PUT', '/api/platform/secrets/api-token', { tenant: otherTenant, body: { value: 'cross-tenant-write' } })).status).toBe(404);
    expect((await call('DELETE', '/api/platform/secrets/api-token', { tenant: otherTenant })).status).toBe(404);
    const res = await call('POST', '/api/platform/secrets', { tenant: otherTenant, body: { name: 'api-token', value: VALUES.other } });
    expect(res.status).toBe(201);
    expect(await outbox('platform.secret.created', otherTenant)).toEqual([{ name: 'api-token', by: 'ada', at: (res.json() as { createdAt: string }).createdAt }]);
  });

  it('values are AES-256-GCM at rest: 12-byte IV, tag, ciphertext, bound to tenant and name', async () => {
    const { rows } = await owner.query(`select tenant_id, name, iv, tag, ciphertext, s::text as whole from platform.secrets s where deleted_at is null order by id`);
    const key = parseMasterKey(MASTER_KEY)!;
    expect(rows.map((r) => [Number(r.tenant_id), r.name])).toEqual([
      [1, 'api-token'],
      [1, 'short_one'],
      [otherTenant, 'api-token'],
    ]);
    for (const row of rows) {
      expect(row.iv).toHaveLength(12);
      expect(row.tag).toHaveLength(16);
      for (const value of Object.values(VALUES)) expect(row.whole).not.toContain(value);
    }
    expect(unseal(key, 1, 'api-token', rows[0])).toBe(VALUES.rotated);
    expect(unseal(key, otherTenant, 'api-token', rows[2])).toBe(VALUES.other);
    expect(() => unseal(key, otherTenant, 'api-token', rows[0])).toThrow(UnsealError);
    expect(rows[0].iv.equals(rows[2].iv)).toBe(false);
  });

  it('DELETE is soft: 204, then 404 everywhere and gone from the list; the row stays without its value', async () => {
    const res = await call('DELETE', '/api/platform/secrets/short_one', { login: 'dave' });
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expect((await call('GET', '/api/platform/secrets/short_one')).status).toBe(404);
    expect(((await call('GET', '/api/platform/secrets')).json() as Array<{ name: string }>).map((s) => s.name)).toEqual(['api-token']);
    expect((await call('PUT', '/api/platform/secrets/short_one', { body: { value: 'after-delete' } })).status).toBe(404);
    const again = await call('DELETE', '/api/platform/secrets/short_one');
    expect(again.status).toBe(404);
    expect(again.json()).toEqual({ error: 'secret short_one not found' });
    const { rows } = await owner.query(`select deleted_at, iv, tag, ciphertext from platform.secrets where tenant_id = 1 and name = 'short_one'`);
    expect(rows).toEqual([{ deleted_at: expect.any(Date), iv: null, tag: null, ciphertext: null }]);
    expect(await outbox('platform.secret.deleted')).toEqual([{ name: 'short_one', by: 'dave', at: rows[0].deleted_at.toISOString() }]);
  });

  it('a deleted name can be created again: a new secret, the old row kept as history', async () => {
    const res = await call('POST', '/api/platform/secrets', { body: { name: 'short_one', value: VALUES.again } });
    expect(res.status).toBe(201);
    expect(res.json()).toMatchObject({ name: 'short_one', description: null, rotatedAt: null });
    const { rows } = await owner.query(`select deleted_at is null as live from platform.secrets where tenant_id = 1 and name = 'short_one' order by id`);
    expect(rows).toEqual([{ live: false }, { live: true }]);
    expect(await hub.services.secrets.resolveSecret(1, 'secret:short_one')).toBe(VALUES.again);
  });

  it('names are path segments: URL-encoded names work, odd ones are 404', async () => {
    expect((await call('POST', '/api/platform/secrets', { body: { name: 'db.password-v2', value: 'dotted-name-value' } })).status).toBe(201);
    expect((await call('GET', '/api/platform/secrets/db.password-v2')).status).toBe(200);
    expect((await call('GET', '/api/platform/secrets/db%2Epassword-v2')).status).toBe(200);
    expect((await call('GET', '/api/platform/secrets/secret%3Adb.password-v2')).status).toBe(404);
    expect((await call('DELETE', '/api/platform/secrets/db.password-v2')).status).toBe(204);
  });
});

describe('resolveSecret', () => {
  it('accepts secret:NAME and a bare NAME; unknown, deleted or malformed refs are undefined', async () => {
    const secrets = hub.services.secrets;
    secrets.invalidate();
    expect(await secrets.resolveSecret(1, 'secret:api-token', 'connector:crm')).toBe(VALUES.rotated);
    expect(await secrets.resolveSecret(1, 'api-token')).toBe(VALUES.rotated);
    expect(await secrets.resolveSecret(otherTenant, 'secret:api-token')).toBe(VALUES.other);
    expect(await secrets.resolveSecret(1, 'secret:nope')).toBeUndefined();
    expect(await secrets.resolveSecret(1, 'secret:db.password-v2')).toBeUndefined();
    expect(await secrets.resolveSecret(1, 'secret:')).toBeUndefined();
    expect(await secrets.resolveSecret(1, '')).toBeUndefined();
    expect(await secrets.resolveSecret(9_999, 'secret:api-token')).toBeUndefined();
  });

  it('emits platform.secret.read on a cache miss only; a rotation or delete invalidates at once', async () => {
    const secrets = hub.services.secrets;
    secrets.invalidate();
    const reads = async () => (await outbox('platform.secret.read')).filter((p) => p.name === 'api-token');
    const before = (await reads()).length;
    expect(await secrets.resolveSecret(1, 'secret:api-token', 'connector:crm')).toBe(VALUES.rotated);
    expect(await secrets.resolveSecret(1, 'secret:api-token', 'connector:crm')).toBe(VALUES.rotated);
    expect(await secrets.resolveSecret(1, 'api-token', 'connector:crm')).toBe(VALUES.rotated);
    let all = await reads();
    expect(all).toHaveLength(before + 1);
    expect(all.at(-1)).toEqual({ name: 'api-token', by: 'connector:crm', at: expect.stringMatching(iso) });

    expect((await call('PUT', '/api/platform/secrets/api-token', { body: { value: VALUES.api } })).status).toBe(204);
    expect(await secrets.resolveSecret(1, 'secret:api-token')).toBe(VALUES.api);
    all = await reads();
    expect(all).toHaveLength(before + 2);
    expect(all.at(-1)).toMatchObject({ by: 'system' });

    expect((await call('DELETE', '/api/platform/secrets/api-token')).status).toBe(204);
    expect(await secrets.resolveSecret(1, 'secret:api-token')).toBeUndefined();
    expect(await reads()).toHaveLength(before + 2);
  });

  it('a cached value expires after the cache TTL', async () => {
    let now = Date.now();
    const store = new SecretStore(hub.services.db, hub.services.events, parseMasterKey(MASTER_KEY)!, { cacheTtlMs: 1_000, now: () => now });
    expect((await call('POST', '/api/platform/secrets', { body: { name: 'ttl', value: VALUES.ttl } })).status).toBe(201);
    const reads = async () => (await outbox('platform.secret.read')).filter((p) => p.name === 'ttl').length;
    await store.resolveSecret(1, 'secret:ttl');
    now += 999;
    await store.resolveSecret(1, 'secret:ttl');
    expect(await reads()).toBe(1);
    now += 2;
    expect(await store.resolveSecret(1, 'secret:ttl')).toBe(VALUES.ttl);
    expect(await reads()).toBe(2);
  });

  it('a value served from the cache is scrubbed from the lines of the work that asked for it too', async () => {
    expect((await call('POST', '/api/platform/secrets', { body: { name: 'cached', value: VALUES.cached } })).status).toBe(201);
    const secrets = hub.services.secrets;
    secrets.invalidate();
    const before = logs.raw().length;
    await runWithContext({ job: 'first' }, async () => {
      expect(await secrets.resolveSecret(1, 'secret:cached')).toBe(VALUES.cached);
      logger().warn(`first use of ${VALUES.cached}`);
    });
    await runWithContext({ job: 'second' }, async () => {
      expect(await secrets.resolveSecret(1, 'secret:cached')).toBe(VALUES.cached); // from the cache
      logger().warn(`second use of ${VALUES.cached}`);
    });
    const written = logs.raw().slice(before);
    expect(written).toContain('first use of [REDACTED]');
    expect(written).toContain('second use of [REDACTED]');
    expect(written).not.toContain(VALUES.cached);
  });

  it('a tampered or transplanted ciphertext does not open, and the error carries no value', async () => {
    expect((await call('POST', '/api/platform/secrets', { body: { name: 'tamper', value: VALUES.tamper } })).status).toBe(201);
    expect((await call('POST', '/api/platform/secrets', { tenant: otherTenant, body: { name: 'tamper', value: 'placeholder-value' } })).status).toBe(201);
    // Tenant 1's sealed bytes copied into the other tenant's row of the same name: the AAD differs.
    await owner.query(
      `update platform.secrets t set iv = s.iv, tag = s.tag, ciphertext = s.ciphertext
         from platform.secrets s
        where s.tenant_id = 1 and s.name = 'tamper' and s.deleted_at is null
          and t.tenant_id = $1 and t.name = 'tamper' and t.deleted_at is null`,
      [otherTenant],
    );
    hub.services.secrets.invalidate();
    await expect(hub.services.secrets.resolveSecret(otherTenant, 'secret:tamper')).rejects.toThrow(UnsealError);
    await owner.query(`update platform.secrets set ciphertext = set_byte(ciphertext, 0, get_byte(ciphertext, 0) # 1) where tenant_id = 1 and name = 'tamper'`);
    const failure = await hub.services.secrets.resolveSecret(1, 'secret:tamper').catch((err: Error) => err);
    expect(failure).toBeInstanceOf(UnsealError);
    expect((failure as Error).message).not.toContain(VALUES.tamper);
    // No read event for a value that could not be read.
    expect((await outbox('platform.secret.read')).filter((p) => p.name === 'tamper')).toEqual([]);
  });
});

describe('no secret value ever leaves', () => {
  it('in a response body or header, a log line, an event payload or the audit trail', async () => {
    // Audit entries are written before each response: nothing to wait for.
    expect(responses.length).toBeGreaterThan(40);
    const logText = logs.raw();
    expect(logText).toContain('secret created');
    const { rows: events } = await owner.query(`select type, payload::text as payload from events.outbox`);
    expect(events.length).toBeGreaterThan(10);
    const { rows: audit } = await owner.query(`select to_jsonb(a)::text as row from audit.entries a`);
    for (const value of Object.values(VALUES)) {
      for (const r of responses) {
        expect(`${r.what} ${r.text} ${r.headers}`).not.toContain(value);
      }
      expect(logText).not.toContain(value);
      for (const e of events) expect(e.payload).not.toContain(value);
      for (const a of audit) expect(a.row).not.toContain(value);
    }
    expect(logText).not.toContain(MASTER_KEY);
  });
});

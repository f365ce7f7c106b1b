import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { CLOSED_REASON } from '../../../src/webhooks/model.js';
import { openIntegrationSecret } from '../../../src/webhooks/secret.js';
import { parseMasterKey } from '../../../src/platform/secrets/crypto.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { captureLogs, type LogCapture } from '../../../test/harness/log-capture.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';

/**
 * Integrations through HTTP with real tokens (no dispatcher running): the record, defaults and
 * validation, secrets (encrypted, never returned, rotation), soft delete, the role and tenant
 * refusals, and the journal's read paths.
 */

const MASTER_KEY = Buffer.alloc(32, 0x3c).toString('base64');
const SECRET = 'whsec-integration-secret-001';
const ROTATED = 'whsec-integration-secret-002';

let logs: LogCapture;
let issuer: TestIssuer;
let hub: TestHub;
let owner: pg.Client;
let other: number;
const texts: string[] = [];

beforeAll(async () => {
  logs = captureLogs('debug');
  issuer = await startIssuer();
  hub = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.secret.master-key': MASTER_KEY, 'svc.log.level': 'debug' });
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  other = (await owner.query(`insert into core.tenants (code, name) values ('globex', 'Globex') returning id`)).rows[0].id;
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await issuer?.close();
  logs.restore();
});

const ADMIN = ['svc_admin'];

async function call(method: string, path: string, options: { roles?: string[] | null; tenant?: number; body?: unknown } = {}) {
  const headers: Record<string, string> = {};
  if (options.roles !== null) {
    const token = await issuer.mint({ realm_access: { roles: options.roles ?? ADMIN }, tenant_id: options.tenant ?? 1, preferred_username: 'ada', sub: `ada-${options.tenant ?? 1}` });
    headers.Authorization = `Bearer ${token}`;
  }
  if (options.body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`${hub.url}${path}`, { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  const text = await res.text();
  texts.push(text);
  return { status: res.status, text, body: text && res.headers.get('content-type')?.startsWith('application/json') ? (JSON.parse(text) as Record<string, unknown> & Array<Record<string, unknown>>) : undefined, headers: res.headers };
}

const base = '/api/tenants/1/integrations';
const minimal = { name: 'crm', targetUrl: 'https://hooks.example.com/crm', eventTypes: ['org.created'] };

describe('create and read', () => {
  let id: number;

  it('creates with defaults: 201, the record with id and hasSecret, a Location; never the secret', async () => {
    const res = await call('POST', base, { body: { ...minimal, secret: SECRET } });
    expect(res.status).toBe(201);
    id = res.body!.id as number;
    expect(res.body).toEqual({
      id: expect.any(Number),
      name: 'crm',
      targetUrl: 'https://hooks.example.com/crm',
      platform: 'generic',
      authMode: 'HMAC',
      hasSecret: true,
      eventTypes: ['org.created'],
      enabled: true,
      standardWebhooks: false,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
      deletedAt: null,
    });
    expect(res.headers.get('location')).toBe(`${base}/${id}`);
    expect(res.text).not.toContain(SECRET);
  });

  it('stores the secret encrypted under the master key, bound to the integration', async () => {
    const { rows } = await owner.query('select tenant_id, secret_iv, secret_tag, secret_ciphertext from hub.integrations where id = $1', [id]);
    expect(rows[0].secret_ciphertext.toString('utf8')).not.toContain(SECRET);
    expect(openIntegrationSecret(parseMasterKey(MASTER_KEY)!, 1, id, rows[0])).toBe(SECRET);
    expect(() => openIntegrationSecret(parseMasterKey(MASTER_KEY)!, 1, id + 1, rows[0])).toThrow(/cannot be decrypted/);
  });

  it('accepts HMAC and BEARER without a secret (hasSecret false), and every field', async () => {
    const hmac = await call('POST', base, { body: { ...minimal, name: 'no-secret' } });
    expect(hmac.status).toBe(201);
    expect(hmac.body).toMatchObject({ authMode: 'HMAC', hasSecret: false });
    const bearer = await call('POST', base, {
      body: { name: 'zap', targetUrl: 'http://127.0.0.1:9/x?y=1', eventTypes: ['connector.run.*', 'org.created', 'org.created'], platform: 'zapier', authMode: 'BEARER', secret: '   ', enabled: false, standardWebhooks: true },
    });
    expect(bearer.status).toBe(201);
    expect(bearer.body).toMatchObject({ platform: 'zapier', authMode: 'BEARER', hasSecret: false, enabled: false, standardWebhooks: true, eventTypes: ['connector.run.*', 'org.created'] });
    for (const platform of ['make', 'n8n', 'generic']) {
      expect((await call('POST', base, { body: { ...minimal, name: `p-${platform}`, platform, authMode: 'NONE' } })).status).toBe(201);
    }
  });

  it('lists the tenant\'s integrations by id; reads one', async () => {
    const list = await call('GET', base);
    expect(list.status).toBe(200);
    expect(list.body!.map((i) => i.name)).toEqual(['crm', 'no-secret', 'zap', 'p-make', 'p-n8n', 'p-generic']);
    expect(list.text).not.toContain(SECRET);
    const one = await call('GET', `${base}/${id}`);
    expect(one.status).toBe(200);
    expect(one.body!.name).toBe('crm');
  });

  it('names are unique in the tenant: 409 naming the field', async () => {
    const res = await call('POST', base, { body: minimal });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ field: 'name' });
  });

  it('404 for an id that never existed, or is not an id', async () => {
    for (const path of [`${base}/999999`, `${base}/abc`, `${base}/00000000-0000-0000-0000-000000000000`]) {
      expect((await call('GET', path)).status).toBe(404);
    }
  });
});

describe('validation', () => {
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['no name', { targetUrl: 'https://x.example/h', eventTypes: ['org.created'] }, 'name'],
    ['blank name', { name: '  ', targetUrl: 'https://x.example/h', eventTypes: ['org.created'] }, 'name'],
    ['a line break in the name', { name: 'crm\r\nsync', targetUrl: 'https://x.example/h', eventTypes: ['org.created'] }, 'name'],
    ['an escape in the name', { name: 'crm\x1b[2J', targetUrl: 'https://x.example/h', eventTypes: ['org.created'] }, 'name'],
    ['no targetUrl', { name: 'a', eventTypes: ['org.created'] }, 'targetUrl'],
    ['no eventTypes', { name: 'a', targetUrl: 'https://x.example/h' }, 'eventTypes'],
    ['empty eventTypes', { name: 'a', targetUrl: 'https://x.example/h', eventTypes: [] }, 'eventTypes'],
    ['bare *', { name: 'a', targetUrl: 'https://x.example/h', eventTypes: ['org.created', '*'] }, 'eventTypes[1]'],
    ['inner wildcard', { name: 'a', targetUrl: 'https://x.example/h', eventTypes: ['org.*.x'] }, 'eventTypes[0]'],
    ['glob without dot', { name: 'a', targetUrl: 'https://x.example/h', eventTypes: ['org*'] }, 'eventTypes[0]'],
    ['blank type', { name: 'a', targetUrl: 'https://x.example/h', eventTypes: [' '] }, 'eventTypes[0]'],
    ['ftp URL', { name: 'a', targetUrl: 'ftp://x.example/h', eventTypes: ['org.created'] }, 'targetUrl'],
    ['file URL', { name: 'a', targetUrl: 'file:///etc/passwd', eventTypes: ['org.created'] }, 'targetUrl'],
    ['javascript URL', { name: 'a', targetUrl: 'javascript:alert(1)', eventTypes: ['org.created'] }, 'targetUrl'],
    ['relative URL', { name: 'a', targetUrl: '/hooks', eventTypes: ['org.created'] }, 'targetUrl'],
    ['credentials in URL', { name: 'a', targetUrl: 'https://user:pw@x.example/h', eventTypes: ['org.created'] }, 'targetUrl'],
    ['fragment', { name: 'a', targetUrl: 'https://x.example/h#frag', eventTypes: ['org.created'] }, 'targetUrl'],
    ['unknown platform', { name: 'a', targetUrl: 'https://x.example/h', eventTypes: ['org.created'], platform: 'ifttt' }, 'platform'],
    ['unknown authMode', { name: 'a', targetUrl: 'https://x.example/h', eventTypes: ['org.created'], authMode: 'BASIC' }, 'authMode'],
    ['unknown field', { name: 'a', targetUrl: 'https://x.example/h', eventTypes: ['org.created'], colour: 'red' }, 'colour'],
  ];

  it.each(cases)('%s: 400 naming the field', async (_, body, field) => {
    const res = await call('POST', base, { body });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: expect.any(String), field });
  });

  it('a bare * is refused with a message that says why', async () => {
    const res = await call('POST', base, { body: { name: 'a', targetUrl: 'https://x.example/h', eventTypes: ['*'] } });
    expect(res.body!.error).toMatch(/eventTypes\[0\].*bare \*/);
  });
});

describe('update', () => {
  let id: number;

  beforeAll(async () => {
    id = (await call('POST', base, { body: { name: 'erp', targetUrl: 'https://erp.example.com/in', eventTypes: ['org.*'], secret: SECRET } })).body!.id as number;
  });

  it('applies only the fields present', async () => {
    const res = await call('PUT', `${base}/${id}`, { body: { targetUrl: 'https://erp.example.com/v2', enabled: false } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: 'erp', targetUrl: 'https://erp.example.com/v2', eventTypes: ['org.*'], enabled: false, hasSecret: true, authMode: 'HMAC' });
  });

  it('a null or blank secret is ignored; another value rotates it', async () => {
    const read = async () => openIntegrationSecret(parseMasterKey(MASTER_KEY)!, 1, id, (await owner.query('select * from hub.integrations where id = $1', [id])).rows[0]);
    expect((await call('PUT', `${base}/${id}`, { body: { secret: null } })).body).toMatchObject({ hasSecret: true });
    expect((await call('PUT', `${base}/${id}`, { body: { secret: '' } })).status).toBe(200);
    expect(await read()).toBe(SECRET);
    const res = await call('PUT', `${base}/${id}`, { body: { secret: ROTATED } });
    expect(res.status).toBe(200);
    expect(res.text).not.toContain(ROTATED);
    expect(await read()).toBe(ROTATED);
  });

  it('a whsec_ secret must be canonical standard base64 (as the Standard Webhooks libraries decode it), on create and on PUT', async () => {
    for (const secret of ['whsec_c2VjcmV0!!', 'whsec_c2VjcmV0LWtleS1ieXRlcw==\n', 'whsec_c2Vj-mV0_w==', 'whsec_', 'whsec_c2VjcmV0LWtleS1ieXRlcw']) {
      for (const res of [await call('POST', base, { body: { ...minimal, name: 'strict-secret', secret } }), await call('PUT', `${base}/${id}`, { body: { secret } })]) {
        expect({ secret, status: res.status, field: (res.body as { field?: string }).field }).toEqual({ secret, status: 400, field: 'secret' });
        expect(res.text).not.toContain(secret.slice(6, 14) || '\u0000');
      }
    }
    // What the libraries generate is taken.
    expect((await call('PUT', `${base}/${id}`, { body: { secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' } })).status).toBe(200);
    expect((await call('PUT', `${base}/${id}`, { body: { secret: ROTATED } })).status).toBe(200);
  });

  it('a BEARER secret must be sendable in the Authorization header (printable ASCII or Latin-1, no line breaks): 400 naming the field, on create and on PUT, never quoting it', async () => {
    // Every delivery of such an integration failed: the HTTP client refuses the header (`invalid Authorization header`).
    const rule = 'a BEARER secret is sent as the HTTP header Authorization: Bearer <secret>, so it may hold only printable ASCII or Latin-1 characters (no line breaks or other control characters)';
    const bearer = { ...minimal, name: 'bearer-strict', authMode: 'BEARER' };
    const cases = [
      ['bearer-token-abc\n', 'a line break'], ['bearer-token-abc\r\n', 'a line break'], ['bearer-\r-token', 'a line break'],
      ['bearer-token-\tabc', 'a control character'], ['bearer-token-\u007f', 'a control character'], ['bearer-token-\u0085', 'a control character'],
      ['bearer-token-\u20ac', 'a character outside Latin-1'], ['bearer-token-\u{1f511}', 'a character outside Latin-1'],
    ] as const;
    const bearerId = (await call('POST', base, { body: { ...bearer, secret: 'bearer-token-ok' } })).body!.id as number;
    for (const [secret, holds] of cases) {
      for (const res of [await call('POST', base, { body: { ...bearer, name: 'bearer-strict-2', secret } }), await call('PUT', `${base}/${bearerId}`, { body: { secret } }), await call('PUT', `${base}/${id}`, { body: { authMode: 'BEARER', secret } })]) {
        expect({ secret, status: res.status, body: res.body }).toEqual({
          secret, status: 400, body: { error: `secret: ${rule}; it holds ${holds}`, field: 'secret', hint: 'use the token exactly as issued, without a trailing line break' },
        });
        expect(res.text).not.toContain('bearer-token');
      }
    }
    expect((await call('GET', `${base}/${id}`)).body).toMatchObject({ authMode: 'HMAC' });
    // Printable ASCII and Latin-1 are taken (sent one byte per character); HMAC keys with any text.
    expect((await call('PUT', `${base}/${bearerId}`, { body: { secret: 'b\u00e9arer token ~!' } })).status).toBe(200);
    const hmac = await call('POST', base, { body: { ...minimal, name: 'hmac-any', secret: 'line\nbreak-\u20ac' } });
    expect(hmac.status).toBe(201);
    // Switching that one to BEARER without a new secret would send the stored one: 400 naming authMode, nothing changed.
    const switched = await call('PUT', `${base}/${hmac.body!.id}`, { body: { authMode: 'BEARER', enabled: false } });
    expect(switched).toMatchObject({ status: 400, body: { error: `authMode: the stored secret holds a line break, and ${rule}`, field: 'authMode', hint: 'send a new secret along with authMode BEARER' } });
    expect(switched.text).not.toContain('break-');
    expect((await call('GET', `${base}/${hmac.body!.id}`)).body).toMatchObject({ authMode: 'HMAC', enabled: true });
    expect((await call('PUT', `${base}/${hmac.body!.id}`, { body: { authMode: 'BEARER', secret: 'bearer-token-new' } })).body).toMatchObject({ authMode: 'BEARER', hasSecret: true });
    // Leaving BEARER, any secret is taken again.
    expect((await call('PUT', `${base}/${bearerId}`, { body: { authMode: 'HMAC', secret: 'line\nbreak' } })).status).toBe(200);
    for (const gone of [bearerId, hmac.body!.id]) expect((await call('DELETE', `${base}/${gone}`)).status).toBe(204);
  });

  it('accepts a record sent back whole (read-only fields ignored)', async () => {
    const record = (await call('GET', `${base}/${id}`)).body!;
    const res = await call('PUT', `${base}/${id}`, { body: { ...record, name: 'erp-2' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id, name: 'erp-2' });
  });

  it('validates like create; a taken name is 409; an unknown id 404', async () => {
    expect((await call('PUT', `${base}/${id}`, { body: { eventTypes: [] } })).body).toMatchObject({ field: 'eventTypes' });
    expect((await call('PUT', `${base}/${id}`, { body: { targetUrl: 'gopher://x' } })).body).toMatchObject({ field: 'targetUrl' });
    expect((await call('PUT', `${base}/${id}`, { body: { name: 'crm' } })).status).toBe(409);
    expect((await call('PUT', `${base}/424242`, { body: { enabled: true } })).status).toBe(404);
  });
});

describe('soft delete', () => {
  let id: number;

  beforeAll(async () => {
    id = (await call('POST', base, { body: { name: 'doomed', targetUrl: 'https://gone.example.com/', eventTypes: ['org.created'] } })).body!.id as number;
    // An open delivery (as if an attempt had failed) and a settled one.
    await owner.query(
      `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, succeeded, http_status)
       values (1, $1, 'event', 1, 'org.created', '{}', 1, false, 500), (1, $1, 'event', 2, 'org.created', '{}', 1, true, 200)`,
      [id],
    );
  });

  it('DELETE: 204; list omits it; the single lookup answers 200 with deletedAt; history is kept', async () => {
    expect((await call('DELETE', `${base}/${id}`)).status).toBe(204);
    expect((await call('GET', base)).body!.map((i) => i.name)).not.toContain('doomed');
    const one = await call('GET', `${base}/${id}`);
    expect(one.status).toBe(200);
    expect(one.body!.deletedAt).toEqual(expect.any(String));
    const history = await call('GET', `${base}/${id}/deliveries`);
    expect(history.status).toBe(200);
    expect(history.body!.length).toBe(2);
    expect(history.body!.map((d) => d.eventId)).toEqual([2, 1]);
    const failedOnly = await call('GET', `${base}/${id}/deliveries?status=failed`);
    expect(failedOnly.body!.map((d) => [d.eventId, d.succeeded])).toEqual([[1, false]]);
  });

  it('deliveries of an integration with none: 200 and an empty list; of an unknown one: 404', async () => {
    const fresh = (await call('POST', base, { body: { name: 'quiet', targetUrl: 'https://quiet.example.com/', eventTypes: ['org.created'] } })).body!.id as number;
    expect(await call('GET', `${base}/${fresh}/deliveries`)).toMatchObject({ status: 200, body: [] });
    for (const unknown of ['987654', 'nope']) {
      const r = await call('GET', `${base}/${unknown}/deliveries`);
      expect(r.status).toBe(404);
      expect(JSON.stringify(r.body)).toContain(`integration ${unknown} not found`);
    }
    await call('DELETE', `${base}/${fresh}`);
  });

  it('open deliveries close with the spec\'s reason; settled ones stay as they were', async () => {
    const { rows } = await owner.query('select succeeded, closed_reason from hub.deliveries where integration_id = $1 order by event_id', [id]);
    expect(rows).toEqual([
      { succeeded: false, closed_reason: CLOSED_REASON },
      { succeeded: true, closed_reason: null },
    ]);
  });

  it('test, replay, PUT and a second DELETE answer 404; the name is free again', async () => {
    const did = (await owner.query('select id from hub.deliveries where integration_id = $1 limit 1', [id])).rows[0].id;
    expect((await call('POST', `${base}/${id}/test`, { body: { eventType: 'org.created' } })).status).toBe(404);
    expect((await call('POST', `${base}/${id}/deliveries/${did}/replay`)).status).toBe(404);
    expect((await call('POST', `/api/platform/deliveries/${did}/replay`, { roles: ['svc_integrator', 'svc_admin'] })).status).toBe(404);
    expect((await call('PUT', `${base}/${id}`, { body: { enabled: true } })).status).toBe(404);
    expect((await call('DELETE', `${base}/${id}`)).status).toBe(404);
    expect((await call('POST', base, { body: { name: 'doomed', targetUrl: 'https://back.example.com/', eventTypes: ['org.created'] } })).status).toBe(201);
  });
});

describe('refusals', () => {
  it('integration paths need svc_admin: an empty-body 403 otherwise; no token: 401', async () => {
    for (const roles of [['svc_integrator'], ['svc_user', 'svc_superadmin']]) {
      const res = await call('GET', base, { roles });
      expect([res.status, res.text, res.headers.get('content-type')]).toEqual([403, '', null]);
    }
    expect((await call('GET', base, { roles: null })).status).toBe(401);
  });

  it('{tid} must be the caller\'s tenant: an empty-body 403 (before anything is looked up)', async () => {
    for (const [method, path, body] of [
      ['GET', `/api/tenants/${other}/integrations`, undefined],
      ['POST', `/api/tenants/${other}/integrations`, minimal],
      ['GET', `/api/tenants/${other}/integrations/1`, undefined],
      ['POST', `/api/tenants/${other}/integrations/1/test`, { eventType: 'org.created' }],
      ['GET', `/api/tenants/${other}/integrations/1/deliveries`, undefined],
    ] as const) {
      const res = await call(method, path, { body });
      expect([res.status, res.text]).toEqual([403, '']);
    }
  });

  it('another tenant\'s integration under one\'s own {tid} is a 404', async () => {
    const theirs = await call('POST', `/api/tenants/${other}/integrations`, { tenant: other, body: minimal });
    expect(theirs.status).toBe(201);
    const id = theirs.body!.id as number;
    expect((await call('GET', `${base}/${id}`)).status).toBe(404);
    expect((await call('PUT', `${base}/${id}`, { body: { enabled: false } })).status).toBe(404);
    expect((await call('DELETE', `${base}/${id}`)).status).toBe(404);
    expect((await call('GET', `/api/tenants/${other}/integrations`, { tenant: other })).body!.map((i) => i.name)).toEqual(['crm']);
  });

  it('/api/platform/deliveries needs svc_integrator and (svc_admin or svc_superadmin)', async () => {
    const plain = await call('GET', '/api/platform/deliveries', { roles: ['svc_admin'] });
    expect([plain.status, plain.text]).toEqual([403, 'missing role svc_integrator']);
    const bare = await call('GET', '/api/platform/deliveries', { roles: ['svc_integrator'] });
    expect([bare.status, bare.text]).toEqual([403, '']);
    expect((await call('POST', '/api/platform/deliveries/1/replay', { roles: ['svc_integrator'] })).status).toBe(403);
    expect((await call('GET', '/api/platform/deliveries', { roles: ['svc_integrator', 'svc_admin'] })).status).toBe(200);
    expect((await call('GET', '/api/platform/deliveries', { roles: ['svc_integrator', 'svc_superadmin'] })).status).toBe(200);
    expect((await call('GET', '/api/platform/deliveries', { roles: null })).status).toBe(401);
  });
});

describe('secrets never leak', () => {
  it('no response and no log line of this file carries a secret', () => {
    for (const text of [...texts, logs.raw()]) {
      expect(text).not.toContain(SECRET);
      expect(text).not.toContain(ROTATED);
    }
  });
});

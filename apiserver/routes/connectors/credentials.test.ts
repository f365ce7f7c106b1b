import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { type Receiver, startReceiver } from '../../../test/harness/receiver.js';
import { until } from '../../../test/harness/until.js';

/**
 * Where a connector's named values come from, over HTTP with real runs against a loopback source:
 * the tenant's stored secret first; the hub's environment only for names `svc.credentials.env-allow`
 * matches, and never a name the hub itself reads (SVC_*, DATABASE_URL, PATH …) even when listed.
 * Whatever the hub's own environment holds never reaches a URL the tenant chose.
 */

const HUB_SECRET = 'hub-own-master-key-value-0123456789';
const HUB_DB = 'postgres://owner:hub-db-password@db.internal/svc';
let hub: TestHub;
let receiver: Receiver;
const saved: Record<string, string | undefined> = {};

function setEnv(name: string, value: string): void {
  saved[name] = process.env[name];
  process.env[name] = value;
}

beforeAll(async () => {
  receiver = await startReceiver(() => ({ status: 200, body: JSON.stringify([{ id: 1 }]) }));
  // Listing the hub's own names does not make them readable.
  hub = await startTestHub({ 'svc.credentials.env-allow': 'ALLOWED_*,SVC_*,DATABASE_URL,PATH' });
  const owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other')`);
  await owner.end();
  // Set after the hub read its configuration: values a tenant must never obtain.
  setEnv('SVC_SECRET_MASTER_KEY', HUB_SECRET);
  setEnv('DATABASE_URL', HUB_DB);
  setEnv('ALLOWED_TOKEN', 'allowed-from-environment');
  setEnv('NOT_LISTED', 'not-listed-value');
  for (const [tenant, name, value] of [[1, 'STORED_TOKEN', 'stored-for-tenant-1'], [2, 'OTHER_TENANT_ONLY', 'belongs-to-tenant-2'], [1, 'ALLOWED_SHADOWED', 'stored-wins']] as const) {
    const res = await fetch(`${hub.url}/api/platform/secrets`, { method: 'POST', headers: { 'X-Tenant-ID': String(tenant), 'content-type': 'application/json' }, body: JSON.stringify({ name, value }) });
    expect(res.status).toBe(201);
  }
  setEnv('ALLOWED_SHADOWED', 'environment-loses');
});

afterAll(async () => {
  for (const [name, value] of Object.entries(saved)) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  await hub?.stop();
  await receiver?.close();
});

async function run(name: string, spec: Record<string, unknown>, endpoint: Record<string, unknown> = {}): Promise<{ status: string; errorMessage: string | null }> {
  const manifest = {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    spec: { base_url: receiver.url, ...spec, endpoints: [{ id: 'items', path: `/${name}`, target: { kind: 'hybrid', table: `ext.cred_${name.replace(/-/g, '_')}`, unique_key: '$.id' }, ...endpoint }] },
  };
  const headers = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
  const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers, body: JSON.stringify(manifest) });
  expect({ status: applied.status, body: applied.status === 201 ? '' : await applied.text() }).toEqual({ status: 201, body: '' });
  const started = (await (await fetch(`${hub.url}/api/connectors/${name}/runs`, { method: 'POST', headers })).json()) as { runs: Array<{ id: string }> };
  return until(`run ${name}`, async () => {
    const r = (await (await fetch(`${hub.url}/api/platform/runs/${started.runs[0]!.id}`, { headers })).json()) as { status: string; errorMessage: string | null };
    return r.status !== 'Running' && r.status !== 'Pending' && r;
  });
}

/** Everything the source was sent, as one text: no hub value may appear in it. */
const sentText = () => JSON.stringify(receiver.received.map((r) => ({ path: r.path, headers: r.headers, body: r.body })));

describe('connector credentials', () => {
  it('header value_env: the stored secret and an allow-listed variable are sent; the hub own names, unlisted names and another tenant secret are not', async () => {
    const result = await run('headers', {
      headers: [
        { name: 'X-Leak-Key', value_env: 'SVC_SECRET_MASTER_KEY' },
        { name: 'X-Leak-Db', value_env: 'DATABASE_URL' },
        { name: 'X-Leak-Path', value_env: 'PATH' },
        { name: 'X-Not-Listed', value_env: 'NOT_LISTED' },
        { name: 'X-Other-Tenant', value_env: 'OTHER_TENANT_ONLY' },
        { name: 'X-Stored', value_env: 'STORED_TOKEN' },
        { name: 'X-Stored-Explicit', value_env: 'secret:STORED_TOKEN' },
        { name: 'X-Secret-Only', value_env: 'secret:ALLOWED_TOKEN' },
        { name: 'X-Allowed', value_env: 'ALLOWED_TOKEN' },
        { name: 'X-Shadowed', value_env: 'ALLOWED_SHADOWED' },
      ],
    });
    expect(result.status).toBe('Completed');
    const [request] = receiver.on('/headers');
    expect(request!.headers).toMatchObject({ 'x-stored': 'stored-for-tenant-1', 'x-stored-explicit': 'stored-for-tenant-1', 'x-allowed': 'allowed-from-environment', 'x-shadowed': 'stored-wins' });
    // secret:NAME reads the store only, never the environment.
    for (const dropped of ['x-leak-key', 'x-leak-db', 'x-leak-path', 'x-not-listed', 'x-other-tenant', 'x-secret-only']) expect(request!.headers[dropped]).toBeUndefined();
  });

  it('the pre-flight names every declared header a run leaves out', async () => {
    const headers = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
    const res = await fetch(`${hub.url}/api/connectors/headers/preflight`, { method: 'POST', headers });
    expect(res.status).toBe(200);
    const report = (await res.json()) as { ok: boolean; endpoints: Array<{ verdict: string; warnings?: string[] }> };
    expect(report.ok).toBe(true);
    expect(report.endpoints[0]!.warnings).toEqual(
      ['X-Leak-Key SVC_SECRET_MASTER_KEY', 'X-Leak-Db DATABASE_URL', 'X-Leak-Path PATH', 'X-Not-Listed NOT_LISTED', 'X-Other-Tenant OTHER_TENANT_ONLY', 'X-Secret-Only secret:ALLOWED_TOKEN'].map((pair) => {
        const [name, env] = pair.split(' ');
        return `header ${name} is not sent: its value_env ${env} resolves to nothing (no stored secret of that name)`;
      }),
    );
  });

  it('an inline credential header (by its name or by an authentication scheme in its value) is returned redacted', async () => {
    const headers = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
    const declared = [
      { name: 'Authorization2', value: 'Bearer inline-one-0001' },
      { name: 'X-Custom', value: 'Basic aW5saW5lLXR3by0wMDAy' },
      { name: 'Ocp-Apim-Subscription-Key', value: 'inline-three-0003' },
      { name: 'X-Api-Version', value: '2' },
      { name: 'Authorization', value: 'Bearer inline-four-0004{{env:ALLOWED_TOKEN}}' },
      { name: 'X-Passphrase', value: 'inline-five-0005' },
      { name: 'X-Templated', value: 'Bearer {{env:ALLOWED_TOKEN}}' },
    ];
    const manifest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'inline-headers' },
      connector_type: 'rest-generic',
      spec: { base_url: receiver.url, headers: declared, endpoints: [{ id: 'items', path: '/inline', target: { kind: 'hybrid', table: 'ext.cred_inline', unique_key: '$.id' } }] },
    };
    const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers, body: JSON.stringify(manifest) });
    expect(applied.status).toBe(201);
    const text = await (await fetch(`${hub.url}/api/connectors/inline-headers`, { headers })).text();
    for (const inline of ['inline-one-0001', 'aW5saW5lLXR3by0wMDAy', 'inline-three-0003', 'inline-four-0004', 'inline-five-0005']) expect(text).not.toContain(inline);
    const got = JSON.parse(text) as { manifest: { spec: { headers: unknown[] } }; spec: { headers: unknown[] } };
    const expected = [
      { name: 'Authorization2', value: '[REDACTED]' },
      { name: 'X-Custom', value: '[REDACTED]' },
      { name: 'Ocp-Apim-Subscription-Key', value: '[REDACTED]' },
      { name: 'X-Api-Version', value: '2' },
      { name: 'Authorization', value: '[REDACTED]' },
      { name: 'X-Passphrase', value: '[REDACTED]' },
      { name: 'X-Templated', value: 'Bearer {{env:ALLOWED_TOKEN}}' },
    ];
    expect(got.manifest.spec.headers).toEqual(expected);
    expect(got.spec.headers).toEqual(expected);
  });

  it('a credential stated in an endpoint path\'s query (dev profile) is sent, returned redacted by the connector, its list and the pre-flight', async () => {
    const headers = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
    const path = '/query-cred?limit=5&api_key=inline-query-0006&view=full';
    const manifest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'inline-query' },
      connector_type: 'rest-generic',
      spec: { base_url: receiver.url, endpoints: [{ id: 'items', path, target: { kind: 'hybrid', table: 'ext.cred_query', unique_key: '$.id' } }] },
    };
    expect((await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers, body: JSON.stringify(manifest) })).status).toBe(201);
    const shown = '/query-cred?limit=5&api_key=[REDACTED]&view=full';
    const one = await (await fetch(`${hub.url}/api/connectors/inline-query`, { headers })).text();
    const list = await (await fetch(`${hub.url}/api/connectors`, { headers })).text();
    const before = receiver.received.length;
    const preflight = await (await fetch(`${hub.url}/api/connectors/inline-query/preflight`, { method: 'POST', headers })).text();
    for (const text of [one, list, preflight]) expect(text).not.toContain('inline-query-0006');
    const got = JSON.parse(one) as { manifest: { spec: { endpoints: Array<{ path: string }> } }; spec: { endpoints: Array<{ path: string }> }; endpoints: Array<{ path: string }> };
    expect([got.manifest.spec.endpoints[0]!.path, got.spec.endpoints[0]!.path, got.endpoints[0]!.path]).toEqual([shown, shown, shown]);
    const listed = (JSON.parse(list) as Array<{ name: string; endpoints: Array<{ path: string }> }>).find((c) => c.name === 'inline-query');
    expect(listed?.endpoints.map((e) => e.path)).toEqual([shown]);
    expect((JSON.parse(preflight) as { endpoints: Array<{ url: string; verdict: string }> }).endpoints[0]).toMatchObject({ verdict: 'ok', url: expect.stringContaining('api_key=[REDACTED]') });
    // The source is sent the value as written.
    expect(receiver.received.slice(before).map((r) => r.path)).toEqual([expect.stringContaining('api_key=inline-query-0006')]);
  });

  it('a well-known key or a JWT stated in a body, GraphQL variables or SOAP text (dev profile) is returned redacted in the manifest and the spec', async () => {
    const headers = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
    const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJpbmxpbmUifQ.c2lnbmF0dXJlLWlubGluZS0wMDA3';
    const rest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'inline-body' },
      connector_type: 'rest-generic',
      spec: {
        base_url: receiver.url,
        endpoints: [
          { id: 'items', method: 'POST', path: '/body', body: { auth: { token: 'AKIAINLINE0008BODYXY' }, list: [`x ${jwt} y`], ghp_inlinekey0009abcdefghijklmn: 1, keep: 'plain {{env:ALLOWED_TOKEN}}' }, target: { kind: 'hybrid', table: 'ext.cred_body', unique_key: '$.id' } },
          { id: 'graph', query: 'query Items($k: String, $after: String) { items(k: $k, after: $after) { edges { node { id } } pageInfo { endCursor hasNextPage } } }', variables: { k: 'sk_live_inline0010abcdefgh' }, pagination: { kind: 'graphql-relay' }, target: { kind: 'hybrid', table: 'ext.cred_graph', unique_key: '$.id' } },
        ],
      },
    };
    const soap = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'inline-soap' },
      connector_type: 'soap-generic',
      spec: {
        base_url: receiver.url,
        endpoints: [
          {
            id: 'calls',
            path: '/soap',
            soap: { version: '1.1', action: 'Q', body: '<Q><Key>xoxb-inline0011-abcdef</Key></Q>', records: 'R', session: { token_env: 'STORED_TOKEN', header: `<T>{{token}}</T><J>${jwt}</J>` } },
            pagination: { kind: 'soap', page_size: 10, start_row: 0 },
            target: { kind: 'hybrid', table: 'ext.cred_soap', unique_key: 'id' },
          },
        ],
      },
    };
    for (const manifest of [rest, soap]) {
      const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers, body: JSON.stringify(manifest) });
      expect({ status: applied.status, body: applied.status === 201 ? '' : await applied.text() }).toEqual({ status: 201, body: '' });
    }
    const restText = await (await fetch(`${hub.url}/api/connectors/inline-body`, { headers })).text();
    const soapText = await (await fetch(`${hub.url}/api/connectors/inline-soap`, { headers })).text();
    for (const inline of ['AKIAINLINE0008', 'c2lnbmF0dXJlLWlubGluZS0wMDA3', 'ghp_inlinekey0009', 'sk_live_inline0010', 'xoxb-inline0011']) expect(restText + soapText).not.toContain(inline);
    type Shown = { endpoints: Array<{ body?: unknown; variables?: unknown; soap?: { body: string; session: { header: string } } }> };
    const shownRest = JSON.parse(restText) as { manifest: { spec: Shown }; spec: Shown };
    const shownSoap = JSON.parse(soapText) as { manifest: { spec: Shown }; spec: Shown };
    for (const shown of [shownRest.manifest.spec, shownRest.spec]) {
      expect(shown.endpoints[0]!.body).toEqual({ auth: { token: '[REDACTED]' }, list: ['x [REDACTED] y'], '[REDACTED]': 1, keep: 'plain {{env:ALLOWED_TOKEN}}' });
      expect(shown.endpoints[1]!.variables).toEqual({ k: '[REDACTED]' });
    }
    for (const shown of [shownSoap.manifest.spec, shownSoap.spec]) {
      expect(shown.endpoints[0]!.soap).toMatchObject({ body: '<Q><Key>[REDACTED]</Key></Q>', session: { token_env: 'STORED_TOKEN', header: '<T>{{token}}</T><J>[REDACTED]</J>' } });
    }
  });

  it.each([
    ['token_env naming the master key', 'token-key', { auth: { kind: 'bearer', token_env: 'SVC_SECRET_MASTER_KEY' } }, {}],
    ['password_env naming DATABASE_URL', 'basic-db', { auth: { kind: 'basic', username: 'u', password_env: 'DATABASE_URL' } }, {}],
    ['{{env:SVC_SECRET_MASTER_KEY}} in a header', 'template-key', { headers: [{ name: 'X-Template', value: 'k={{env:SVC_SECRET_MASTER_KEY}}' }] }, {}],
    ['{{env:OTHER_TENANT_ONLY}} in a request body', 'template-other', {}, { method: 'POST', body: { k: '{{env:OTHER_TENANT_ONLY}}' } }],
  ])('%s: the run fails before sending anything', async (_what, name, spec, endpoint) => {
    const before = receiver.received.length;
    const result = await run(name, spec, endpoint);
    expect(result.status).toBe('Failed');
    expect(result.errorMessage).toMatch(/did not resolve/);
    expect(result.errorMessage).not.toContain(HUB_SECRET);
    expect(receiver.received.length).toBe(before);
  });

  it('a stored secret sealed under another master key: the run fails naming it, the pre-flight says so (no 500), the start-up check sees it', async () => {
    expect(await hub.services.secrets.newestSealedUnder()).toBe('current');
    // What a hub started with another svc.secret.master-key than the secret was stored under finds.
    const { seal } = await import('../../../src/platform/secrets/crypto.js');
    const { randomBytes } = await import('node:crypto');
    const sealed = seal(randomBytes(32), 1, 'EARLIER_KEY_TOKEN', 'sealed-under-another-key');
    const owner = await ownerClient(hub.ownerUrl);
    await owner.query('insert into platform.secrets (tenant_id, name, iv, tag, ciphertext) values (1, $1, $2, $3, $4)', ['EARLIER_KEY_TOKEN', sealed.iv, sealed.tag, sealed.ciphertext]);
    await owner.end();
    const message = "the stored secret EARLIER_KEY_TOKEN cannot be decrypted with this hub's svc.secret.master-key";
    const before = receiver.received.length;
    const result = await run('earlier-key', { auth: { kind: 'bearer', token_env: 'secret:EARLIER_KEY_TOKEN' } });
    expect(result.status).toBe('Failed');
    expect(result.errorMessage).toContain(message);
    expect(receiver.received.length).toBe(before);
    const res = await fetch(`${hub.url}/api/connectors/earlier-key/preflight`, { method: 'POST', headers: { 'X-Tenant-ID': '1' } });
    expect(res.status).toBe(200);
    const report = (await res.json()) as { ok: boolean; endpoints: Array<{ verdict: string }> };
    expect(report.ok).toBe(false);
    expect(report.endpoints[0]!.verdict).toContain(message);
    expect(await hub.services.secrets.newestSealedUnder()).toBe('none');
  });

  it('no request the hub sent carries a value of its own environment', () => {
    expect(receiver.received.length).toBeGreaterThan(0);
    const sent = sentText();
    for (const value of [HUB_SECRET, HUB_DB, 'hub-db-password', process.env.PATH!, 'belongs-to-tenant-2', 'not-listed-value']) expect(sent).not.toContain(value);
  });
});

import { afterAll, beforeAll, beforeEach, describe, expect, it, jest } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { KUBECTL_YAML } from '../../../src/manifests/yaml.js';
import type { Tx } from '../../../src/db/database.js';

/**
 * Connector manifests through HTTP on a dev-bypass hub: apply (YAML and JSON), validate, list,
 * read, delete, reset-cursor, purge; stable endpoint UUIDs; tenant isolation (tenants 1, 2 and a
 * clean tenant 3 for exact lists). The data side of delete and purge (src/connectors/target/drop.ts)
 * is replaced by a recorder: apiserver/tenant-tables.test.ts covers what it does against real rows
 * of two tenants, this one that it is called, in the request's tenant transaction, with the right ids.
 */

const dataCalls: Array<{ fn: string; tenant: number | undefined; args: string[] }> = [];
jest.unstable_mockModule('../../../src/connectors/target/drop.js', () => ({
  dropConnectorData: async (tx: Tx, connectorId: string) => {
    dataCalls.push({ fn: 'dropConnectorData', tenant: tx.tenantId, args: [connectorId] });
  },
  purgeEndpointData: async (tx: Tx, connectorId: string, endpointUuid: string) => {
    dataCalls.push({ fn: 'purgeEndpointData', tenant: tx.tenantId, args: [connectorId, endpointUuid] });
  },
}));
const { startTestHub } = await import('../../../test/harness/hub.js');
const { ownerClient, ISO } = await import('../../../test/harness/api-client.js');
const store = await import('../../../src/connectors/store.js');

let hub: Awaited<ReturnType<typeof startTestHub>>;
let owner: pg.Client;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other'), (3, 'clean', 'Clean')`);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

beforeEach(() => {
  dataCalls.length = 0;
});

interface Reply {
  status: number;
  text: string;
  contentType: string | null;
  body: unknown;
}

async function call(method: string, path: string, options: { tenant?: number; body?: string; type?: string } = {}): Promise<Reply> {
  const headers: Record<string, string> = { 'X-Tenant-ID': String(options.tenant ?? 1) };
  if (options.body !== undefined) headers['Content-Type'] = options.type ?? 'application/yaml';
  const res = await fetch(`${hub.url}${path}`, { method, headers, body: options.body });
  const text = await res.text();
  const contentType = res.headers.get('content-type');
  return { status: res.status, text, contentType, body: text && contentType?.startsWith('application/json') ? JSON.parse(text) : undefined };
}

type Json = Record<string, unknown>;
let seq = 0;
const fresh = (prefix: string) => `${prefix}-${++seq}`;

const endpoint = (id: string, over: Json = {}): Json => ({ id, path: `/open/${id}`, target: { table: 'ext.partners', unique_key: '$.id' }, ...over });

/**
 * A manifest sent to apply with no Content-Type, or in chunks (Transfer-Encoding: chunked, no Content-Length) as
 * text/plain or untyped: each a 415 naming the media types taken, and nothing stored under `name`.
 */
async function expectUntypedRefused(name: string): Promise<void> {
  const untyped = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1' }, body: new TextEncoder().encode(stringify(manifest(name))) });
  expect(untyped.status).toBe(415);
  expect(await untyped.json()).toMatchObject({ error: 'body must be application/yaml or text/yaml or application/x-yaml or application/json (the request names no Content-Type)' });
  // The same sent in chunks (Transfer-Encoding: chunked, no Content-Length), as a client streaming its body sends it.
  for (const [type, sent] of [['text/plain', 'not text/plain'], [undefined, 'the request names no Content-Type']] as const) {
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(stringify(manifest(name))));
        controller.close();
      },
    });
    const chunked = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1', ...(type ? { 'Content-Type': type } : {}) }, body, duplex: 'half' } as RequestInit);
    expect({ status: chunked.status, body: await chunked.json() }).toEqual({
      status: 415,
      body: { error: `body must be application/yaml or text/yaml or application/x-yaml or application/json (${sent})`, hint: 'send Content-Type: application/yaml' },
    });
  }
  expect((await owner.query('select 1 from connectors.connectors where name = $1', [name])).rowCount).toBe(0);
}

function manifest(name: string, spec: Json = {}, top: Json = {}): Json {
  return {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    scopes: ['crm'],
    spec: { base_url: 'http://localhost:8099', endpoints: [endpoint('partners')], ...spec },
    ...top,
  };
}

// Written as kubectl would read it back (a promoted column named `n` is quoted: plain, YAML 1.1 reads false).
const apply = (m: Json, tenant = 1) => call('POST', '/api/connectors/apply', { tenant, body: stringify(m, KUBECTL_YAML) });
const applyJson = (m: Json, tenant = 1) => call('POST', '/api/connectors/apply', { tenant, body: JSON.stringify(m), type: 'application/json' });

async function endpointRows(connectorId: string) {
  const { rows } = await owner.query<{ endpoint_id: string; uuid: string; position: number; enabled: boolean; tenant_id: number }>(
    'select endpoint_id, uuid, position, enabled, tenant_id from connectors.endpoints where connector_id = $1 order by position',
    [connectorId],
  );
  return rows;
}

const DEMO_YAML = `
apiVersion: connectors.svc.io/v1
kind: Connector
metadata:
  name: demo-partners
connector_type: rest-generic
scopes: [crm, sales]
spec:
  base_url: http://localhost:8099
  auth:
    kind: basic
    username: demo
    password_env: DEMO_PASSWORD
  default_rate_limit: 100/5m
  schedule: "*/15 * * * *"
  window: "22:00-06:00"
  headers:
    - name: X-Api-Version
      value: "2"
  endpoints:
    - id: spring-partners
      path: /spring/partners
      pagination: { kind: spring, size: 100 }
      incremental: { mode: watermark, param: updated_since, watermark_path: $.updated_at }
      target:
        kind: hybrid
        table: ext.partners
        unique_key: $.id
        promote:
          - { name: name, path: $.name, type: text }
          - { name: updated_at, path: $.updated_at, type: timestamptz, transform: parse_iso8601 }
    - id: graph
      query: |
        query Partners($after: String) {
          partners(first: 100, after: $after) { edges { node { id name } } pageInfo { endCursor hasNextPage } }
        }
      pagination: { kind: graphql-relay }
      target: { table: ext.graph_partners, unique_key: $.id }
`;

describe('POST /api/connectors/apply', () => {
  it('creates from YAML: 201 {name, id, warnings}, the manifest and the normalised spec stored in the tenant', async () => {
    const r = await call('POST', '/api/connectors/apply', { tenant: 3, body: DEMO_YAML });
    expect(r.status).toBe(201);
    expect(r.body).toEqual({ name: 'demo-partners', id: expect.stringMatching(/^[0-9a-f-]{36}$/), unchanged: false, warnings: [] });
    const id = (r.body as { id: string }).id;
    const { rows } = await owner.query('select tenant_id, name, connector_type, scopes, schedule, manifest, spec from connectors.connectors where id = $1', [id]);
    expect(rows).toHaveLength(1);
    const row = rows[0]!;
    expect(row).toMatchObject({ tenant_id: 3, name: 'demo-partners', connector_type: 'rest-generic', scopes: ['crm', 'sales'], schedule: '*/15 * * * *' });
    expect(row.manifest.spec.endpoints[0].pagination).toEqual({ kind: 'spring', size: 100 });
    const uuids = await endpointRows(id);
    expect(uuids.map((e) => [e.endpoint_id, e.position, e.enabled, e.tenant_id])).toEqual([
      ['spring-partners', 0, true, 3],
      ['graph', 1, true, 3],
    ]);
    expect(row.spec).toEqual({
      id,
      tenantId: 3,
      name: 'demo-partners',
      connectorType: 'rest-generic',
      scopes: ['crm', 'sales'],
      baseUrl: 'http://localhost:8099',
      auth: { kind: 'basic', username: 'demo', password_env: 'DEMO_PASSWORD' },
      rateLimit: { count: 100, windowMs: 300_000 },
      schedule: '*/15 * * * *',
      window: { start: 1320, end: 360 },
      graphqlPath: '/graphql',
      headers: [{ name: 'X-Api-Version', value: '2' }],
      endpoints: [
        {
          id: 'spring-partners',
          uuid: uuids[0]!.uuid,
          enabled: true,
          method: 'GET',
          path: '/spring/partners',
          graphql: false,
          pagination: { kind: 'page', page_param: 'page', size_param: 'size', start_page: 0, size: 100, total_pages_path: '$.totalPages', response_path: '$.content' },
          incremental: { mode: 'watermark', param: 'updated_since', watermark_path: '$.updated_at' },
          target: {
            kind: 'hybrid',
            table: 'ext.partners',
            unique_key: '$.id',
            promote: [
              { name: 'name', path: '$.name', type: 'text' },
              { name: 'updated_at', path: '$.updated_at', type: 'timestamptz', transform: 'parse_iso8601' },
            ],
          },
        },
        {
          id: 'graph',
          uuid: uuids[1]!.uuid,
          enabled: true,
          method: 'POST',
          path: '/graphql',
          graphql: true,
          query: 'query Partners($after: String) {\n  partners(first: 100, after: $after) { edges { node { id name } } pageInfo { endCursor hasNextPage } }\n}\n',
          pagination: {
            kind: 'relay', cursor_binding: 'variable', cursor_var: 'after',
            cursor_path: '$.data.*.pageInfo.endCursor', has_more_path: '$.data.*.pageInfo.hasNextPage', response_path: '$.data.*.edges[*].node',
          },
          incremental: { mode: 'full' },
          target: { kind: 'hybrid', table: 'ext.graph_partners', unique_key: '$.id', promote: [] },
        },
      ],
    });
  });

  it('re-applying the same name updates it: 200, same id, same endpoint UUIDs, updated_at moves', async () => {
    const name = fresh('again');
    const first = await apply(manifest(name));
    expect(first.status).toBe(201);
    const id = (first.body as { id: string }).id;
    const before = await owner.query('select created_at, updated_at from connectors.connectors where id = $1', [id]);
    const uuids = await endpointRows(id);
    const second = await apply(manifest(name, { base_url: 'https://api.example.com' }, { scopes: ['billing'] }));
    expect(second.status).toBe(200);
    expect(second.body).toEqual({ name, id, unchanged: false, warnings: [] });
    expect(await endpointRows(id)).toEqual(uuids);
    const after = await owner.query('select created_at, updated_at, scopes, spec from connectors.connectors where id = $1', [id]);
    expect(after.rows[0].created_at).toEqual(before.rows[0].created_at);
    expect(after.rows[0].updated_at.getTime()).toBeGreaterThan(before.rows[0].updated_at.getTime());
    expect(after.rows[0]).toMatchObject({ scopes: ['billing'], spec: { baseUrl: 'https://api.example.com', scopes: ['billing'] } });
  });

  it('takes JSON, text/yaml and application/x-yaml too', async () => {
    const json = await applyJson(manifest(fresh('json')));
    expect(json.status).toBe(201);
    const text = await call('POST', '/api/connectors/apply', { body: stringify(manifest(fresh('textyaml'))), type: 'text/yaml' });
    expect(text.status).toBe(201);
    // application/x-yaml, the older name of YAML some clients send, is taken as the others are (listed in /q/openapi: openapi.test.ts).
    const xyaml = await call('POST', '/api/connectors/apply', { body: stringify(manifest(fresh('xyaml'))), type: 'application/x-yaml' });
    expect(xyaml.status).toBe(201);
    // Another media type is a 415 naming the ones taken; nothing is stored.
    const name = fresh('plain');
    const plain = await call('POST', '/api/connectors/apply', { body: stringify(manifest(name)), type: 'text/plain' });
    expect(plain).toMatchObject({
      status: 415,
      body: { error: 'body must be application/yaml or text/yaml or application/x-yaml or application/json (not text/plain)', hint: 'send Content-Type: application/yaml' },
    });
    await expectUntypedRefused(name);
  });

  it('answers unknown spec keys as warnings and still applies', async () => {
    const name = fresh('warned');
    const r = await apply(manifest(name, { retries: 3 }));
    expect(r.status).toBe(201);
    expect(r.body).toEqual({ name, id: expect.any(String), unchanged: false, warnings: [{ field: 'spec.retries', message: 'unknown key — ignored by the runtime' }] });
    expect((await owner.query('select spec from connectors.connectors where name = $1', [name])).rows[0].spec).not.toHaveProperty('retries');
  });

  // The prod profile's outbound address policy warns of these (apiserver/egress.test.ts); in dev it is off.
  it('dev profile: a loopback, private or metadata base_url applies without an address warning', async () => {
    for (const baseUrl of ['http://127.0.0.1:8080', 'http://[::1]:8080', 'http://10.0.0.5', 'http://169.254.169.254']) {
      const name = fresh('dev-address');
      const r = await apply(manifest(name, { base_url: baseUrl }));
      expect(r.status).toBe(201);
      expect(r.body).toEqual({ name, id: expect.any(String), unchanged: false, warnings: [] });
    }
  });

  it('warns when no slot of the schedule falls in the window (every scheduled run would be skipped), and still applies', async () => {
    const name = fresh('never-in-window');
    const r = await apply(manifest(name, { schedule: '0 12 * * *', window: '00:00-06:00' }));
    expect(r.status).toBe(201);
    expect(r.body).toEqual({
      name,
      id: expect.any(String),
      unchanged: false,
      warnings: [
        { field: 'spec.window', message: 'no slot of spec.schedule falls in the window 00:00-06:00 (UTC): every scheduled run would be skipped; widen the window or change the schedule' },
      ],
    });
    expect((await apply(manifest(name, { schedule: '0 3 * * *', window: '00:00-06:00' }))).body).toMatchObject({ warnings: [] });
  });

  it('refuses a bad manifest with 400 {error, field} and stores nothing', async () => {
    const name = fresh('refused');
    const cases: Array<[Json, Json]> = [
      [
        manifest(name, { endpoints: [endpoint('a', { headers: [{ name: 'X', value: '1' }] })] }),
        { error: 'per-endpoint headers are not supported in this release; declare headers at spec.headers', field: 'spec.endpoints[0].headers' },
      ],
      [
        manifest(name, { endpoints: [endpoint('a'), endpoint('g', { path: undefined, query: 'query($after: String) { x }', pagination: { kind: 'cursor', cursor_param: 'a', cursor_path: '$.c' } })] }),
        { error: 'graphql endpoints require pagination.kind=relay with cursor_binding=variable', field: 'spec.endpoints[1].pagination.kind' },
      ],
      [
        manifest(name, { endpoints: [endpoint('a', { pagination: { kind: 'cursor', cursor_param: 'a', cursor_path: '$.c', cursor_binding: 'variable' } })] }),
        { error: 'cursor_binding=variable is valid only on GraphQL endpoints (kind graphql, or an endpoint carrying query)', field: 'spec.endpoints[0].pagination.cursor_binding' },
      ],
      [
        manifest(name, { endpoints: [endpoint('a', { target: { table: 'ext.x', unique_key: '$.id', promote: [{ name: 'n', path: '$.n', type: 'text', transform: 'rot13' }] } })] }),
        { error: 'unknown transform "rot13" at spec.endpoints[0].target.promote[0].transform; one of parse_iso8601, trim, lowercase, uppercase, to_string', field: 'spec.endpoints[0].target.promote[0].transform' },
      ],
      [manifest(name, { endpoints: [endpoint('a'), endpoint('b'), endpoint('c', { pagination: { kind: 'pages' } })] }), { field: 'spec.endpoints[2].pagination.kind' }],
      [manifest(name, {}, { apiVersion: 'apps.svc.io/v1' }), { error: 'apiVersion must be connectors.svc.io/v1', field: 'apiVersion' }],
    ];
    for (const [m, body] of cases) {
      const r = await apply(m);
      expect(r.status).toBe(400);
      expect(r.body).toEqual(body.error ? body : { error: expect.any(String), ...body });
      expect(Object.keys(r.body as Json).sort()).toEqual(['error', 'field']);
    }
    await expectUntypedRefused(name);
  });

  it('an update that fails leaves the stored connector as it was', async () => {
    const name = fresh('kept');
    const id = ((await apply(manifest(name))).body as { id: string }).id;
    const uuids = await endpointRows(id);
    const r = await apply(manifest(name, { endpoints: [endpoint('other', { target: { table: 'public.x', unique_key: '$.id' } })] }));
    expect(r.status).toBe(400);
    expect(await endpointRows(id)).toEqual(uuids);
  });

  it('refuses a body that is not a YAML or JSON object', async () => {
    const bad = await call('POST', '/api/connectors/apply', { body: 'spec: [unclosed' });
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ error: expect.stringMatching(/^body is not valid YAML: /), field: 'body' });
    // Two documents: one request applies one manifest, said in the API's words (not the YAML library's advice to call one of its functions).
    const two = await call('POST', '/api/connectors/apply', { body: `${stringify(manifest(fresh('first')))}---\n${stringify(manifest(fresh('second')))}` });
    expect(two).toMatchObject({
      status: 400,
      body: {
        error: `body holds more than one YAML document (the second begins at line ${stringify(manifest(fresh('first'))).split('\n').length}): a request takes one manifest`,
        field: 'body',
        hint: 'send each document in a request of its own (svc apply -f FILE sends the documents of a file one after the other)',
      },
    });
    const scalar = await call('POST', '/api/connectors/apply', { body: 'just text' });
    expect(scalar.status).toBe(400);
    expect(scalar.body).toEqual({ error: 'body must be an object' });
    // A form is not a manifest's media type: 415, as text/plain is.
    const form = await call('POST', '/api/connectors/apply', { body: 'a=b', type: 'application/x-www-form-urlencoded' });
    expect(form.status).toBe(415);
  });
});

describe('endpoint UUIDs', () => {
  it('stay while the id stays (order and fields may change); a removed id loses its row; a re-added id gets a new UUID', async () => {
    const name = fresh('uuids');
    const id = ((await apply(manifest(name, { endpoints: [endpoint('a'), endpoint('b')] }))).body as { id: string }).id;
    const [a, b] = await endpointRows(id);
    await owner.query(`update connectors.endpoints set watermark = '2026-01-01' where uuid = $1`, [a!.uuid]);

    await apply(manifest(name, { endpoints: [endpoint('c'), endpoint('b', { enabled: false, path: '/moved' }), endpoint('a')] }));
    const reordered = await endpointRows(id);
    expect(reordered.map((e) => [e.endpoint_id, e.position, e.enabled])).toEqual([
      ['c', 0, true],
      ['b', 1, false],
      ['a', 2, true],
    ]);
    expect(reordered.find((e) => e.endpoint_id === 'a')!.uuid).toBe(a!.uuid);
    expect(reordered.find((e) => e.endpoint_id === 'b')!.uuid).toBe(b!.uuid);
    expect((await owner.query('select watermark from connectors.endpoints where uuid = $1', [a!.uuid])).rows[0].watermark).toBe('2026-01-01');

    await apply(manifest(name, { endpoints: [endpoint('a')] }));
    expect((await endpointRows(id)).map((e) => e.endpoint_id)).toEqual(['a']);
    expect((await owner.query('select 1 from connectors.endpoints where uuid = $1', [b!.uuid])).rowCount).toBe(0);

    await apply(manifest(name, { endpoints: [endpoint('a'), endpoint('b')] }));
    const readded = await endpointRows(id);
    expect(readded[0]!.uuid).toBe(a!.uuid);
    expect(readded[1]!.uuid).not.toBe(b!.uuid);

    const stored = (await owner.query('select spec from connectors.connectors where id = $1', [id])).rows[0].spec;
    expect(stored.endpoints.map((e: { id: string; uuid: string }) => [e.id, e.uuid])).toEqual(readded.map((e) => [e.endpoint_id, e.uuid]));
  });
});

describe('POST /api/connectors/validate', () => {
  it('answers valid with the warnings and writes nothing', async () => {
    const name = fresh('checked');
    const r = await call('POST', '/api/connectors/validate', { body: stringify(manifest(name, { retries: 1, window: '01:00-02:00' })) });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      valid: true,
      errors: [],
      warnings: [
        { field: 'spec.retries', message: 'unknown key — ignored by the runtime' },
        { field: 'spec.window', message: 'the window fences scheduled runs only, and this connector has no schedule' },
      ],
    });
    await expectUntypedRefused(name);
  });

  it('answers every error with its field (JSON body)', async () => {
    const m = manifest('Bad Name', { default_rate_limit: 'fast', endpoints: [endpoint('a', { headers: [] }), endpoint('b', { target: { table: 'x', unique_key: '$.id' } })] });
    const r = await call('POST', '/api/connectors/validate', { body: JSON.stringify(m), type: 'application/json' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      valid: false,
      errors: [
        { field: 'spec.endpoints[0].headers', message: 'per-endpoint headers are not supported in this release; declare headers at spec.headers' },
        { field: 'metadata.name', message: 'metadata.name must be a DNS label: 1 to 63 lower-case letters, digits or dashes, starting and ending with a letter or digit' },
        { field: 'spec.default_rate_limit', message: 'spec.default_rate_limit must be count/window: a count, a slash, an optional integer and a unit s, m or h (100/s, 100/5m, 1000/h)' },
        { field: 'spec.endpoints[1].target.table', message: 'spec.endpoints[1].target.table must be ext.<name>, <name> a lower-case identifier (letters, digits, underscores; not starting with a digit; at most 63)' },
      ],
      warnings: [],
    });
  });
});

describe('GET /api/connectors[/{name}]', () => {
  it('lists the tenant\'s connectors by name with their endpoints', async () => {
    // demo-partners as the first case applies it (then the manifest stored: no change).
    expect([200, 201]).toContain((await call('POST', '/api/connectors/apply', { tenant: 3, body: DEMO_YAML })).status);
    await apply(manifest('zeta', { schedule: '0 * * * *', endpoints: [endpoint('rows', { enabled: false })] }), 3);
    const r = await call('GET', '/api/connectors', { tenant: 3 });
    expect(r.status).toBe(200);
    const list = r.body as Array<Json & { endpoints: Json[] }>;
    expect(list.map((c) => c.name)).toEqual(['demo-partners', 'zeta']);
    const demo = (await owner.query<{ id: string }>(`select id from connectors.connectors where tenant_id = 3 and name = 'demo-partners'`)).rows[0]!.id;
    const uuids = await endpointRows(demo);
    expect(list[0]).toEqual({
      id: demo,
      name: 'demo-partners',
      connectorType: 'rest-generic',
      scopes: ['crm', 'sales'],
      schedule: '*/15 * * * *',
      endpoints: [
        {
          id: 'spring-partners', uuid: uuids[0]!.uuid, enabled: true, kind: 'rest', method: 'GET', path: '/spring/partners', pagination: 'page',
          table: 'ext.partners', syncMode: 'watermark', watermark: null, watermarkUpdatedAt: null,
          resumeFrom: null, resumeRunId: null,
        },
        {
          id: 'graph', uuid: uuids[1]!.uuid, enabled: true, kind: 'graphql', method: 'POST', path: '/graphql', pagination: 'relay',
          table: 'ext.graph_partners', syncMode: 'full', watermark: null, watermarkUpdatedAt: null,
          resumeFrom: null, resumeRunId: null,
        },
      ],
      createdAt: expect.stringMatching(ISO),
      updatedAt: expect.stringMatching(ISO),
    });
    expect(list[1]).toMatchObject({ name: 'zeta', schedule: '0 * * * *', endpoints: [{ id: 'rows', enabled: false, pagination: 'none' }] });
    expect((await call('GET', '/api/connectors', { tenant: 2 })).body).toEqual(expect.not.arrayContaining([expect.objectContaining({ id: demo })]));
  });

  it('reads one with the manifest as applied and the normalised spec; 404 for an unknown name', async () => {
    const name = fresh('one');
    const m = manifest(name, { defaults: { page: { size: 10 } }, extra: true });
    const id = ((await apply(m)).body as { id: string }).id;
    await owner.query(`update connectors.endpoints set watermark = '42', watermark_updated_at = now() where connector_id = $1`, [id]);
    const r = await call('GET', `/api/connectors/${name}`);
    expect(r.status).toBe(200);
    const body = r.body as Json & { endpoints: Json[]; spec: Json };
    expect(body).toMatchObject({ id, name, connectorType: 'rest-generic', scopes: ['crm'], schedule: null, manifest: m });
    expect(body.endpoints).toEqual([expect.objectContaining({ id: 'partners', watermark: '42', watermarkUpdatedAt: expect.stringMatching(ISO) })]);
    // The list reads the watermarks in its one statement: the same endpoint, to the millisecond.
    const { rows: stored } = await owner.query(`select to_char(watermark_updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as at from connectors.endpoints where connector_id = $1`, [id]);
    expect(body.endpoints[0]!.watermarkUpdatedAt).toBe(stored[0].at);
    const listed = await call('GET', '/api/connectors');
    const inList = (listed.body as Array<Json & { endpoints: Json[] }>).find((c) => c.id === id)!;
    expect(inList.endpoints).toEqual(body.endpoints);
    expect(body.spec).toMatchObject({ id, tenantId: 1, name, defaults: { page: { size: 10 } } });
    expect(Object.keys(body).sort()).toEqual(['connectorType', 'createdAt', 'endpoints', 'id', 'manifest', 'name', 'schedule', 'scopes', 'spec', 'updatedAt']);

    const missing = await call('GET', '/api/connectors/nope');
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ error: 'connector nope not found' });
  });
});

describe('DELETE /api/connectors/{name}', () => {
  it('204: drops its data in the same tenant transaction, removes the connector and its endpoints; 404 afterwards', async () => {
    const name = fresh('gone');
    const id = ((await apply(manifest(name, { endpoints: [endpoint('a'), endpoint('b')] }))).body as { id: string }).id;
    const r = await call('DELETE', `/api/connectors/${name}`);
    expect(r.status).toBe(204);
    expect(r.text).toBe('');
    expect(dataCalls).toEqual([{ fn: 'dropConnectorData', tenant: 1, args: [id] }]);
    expect((await owner.query('select 1 from connectors.connectors where id = $1', [id])).rowCount).toBe(0);
    expect((await owner.query('select 1 from connectors.endpoints where connector_id = $1', [id])).rowCount).toBe(0);
    expect((await call('GET', `/api/connectors/${name}`)).status).toBe(404);

    const again = await call('DELETE', `/api/connectors/${name}`);
    expect(again.status).toBe(404);
    expect(again.body).toEqual({ error: `connector ${name} not found` });
    expect(dataCalls).toHaveLength(1);

    const recreated = await apply(manifest(name));
    expect(recreated.status).toBe(201);
    expect((recreated.body as { id: string }).id).not.toBe(id);
  });
});

describe('endpoint actions', () => {
  let name: string;
  let id: string;
  let uuid: string;

  beforeAll(async () => {
    name = fresh('actions');
    id = ((await apply(manifest(name, { endpoints: [endpoint('rows', { incremental: { mode: 'watermark', param: 'since', watermark_path: '$.updated_at' } })] }))).body as { id: string }).id;
    uuid = (await endpointRows(id))[0]!.uuid;
  });

  const mark = async () => (await owner.query('select watermark from connectors.endpoints where uuid = $1', [uuid])).rows[0].watermark;

  it('reset-cursor: 204 and the watermark is cleared', async () => {
    await owner.query(`update connectors.endpoints set watermark = '2026-03-01T00:00:00Z' where uuid = $1`, [uuid]);
    const r = await call('POST', `/api/connectors/${name}/endpoints/rows/reset-cursor`);
    expect(r.status).toBe(204);
    expect(r.text).toBe('');
    expect(await mark()).toBeNull();
    expect(dataCalls).toEqual([]);
  });

  it('purge: 204, purgeEndpointData with the connector id and the endpoint UUID; the watermark is cleared', async () => {
    await owner.query(`update connectors.endpoints set watermark = '7' where uuid = $1`, [uuid]);
    const r = await call('POST', `/api/connectors/${name}/endpoints/rows/purge`);
    expect(r.status).toBe(204);
    expect(dataCalls).toEqual([{ fn: 'purgeEndpointData', tenant: 1, args: [id, uuid] }]);
    expect(await mark()).toBeNull();
    expect((await call('GET', `/api/connectors/${name}`)).status).toBe(200);
  });

  it('404 naming the unknown connector or endpoint', async () => {
    for (const action of ['reset-cursor', 'purge']) {
      const noConnector = await call('POST', `/api/connectors/nope/endpoints/rows/${action}`);
      expect(noConnector.status).toBe(404);
      expect(noConnector.body).toEqual({ error: 'connector nope not found' });
      const noEndpoint = await call('POST', `/api/connectors/${name}/endpoints/other/${action}`);
      expect(noEndpoint.status).toBe(404);
      expect(noEndpoint.body).toEqual({ error: `connector ${name} has no endpoint other` });
    }
    expect(dataCalls).toEqual([]);
  });
});

describe('tenant isolation', () => {
  it('the same name in another tenant is an independent connector, invisible to the first', async () => {
    const name = fresh('shared');
    const ours = await apply(manifest(name, { endpoints: [endpoint('a')] }), 1);
    const theirs = await apply(manifest(name, { endpoints: [endpoint('a'), endpoint('b')] }, { scopes: ['theirs'] }), 2);
    expect(ours.status).toBe(201);
    expect(theirs.status).toBe(201);
    const ourId = (ours.body as { id: string }).id;
    const theirId = (theirs.body as { id: string }).id;
    expect(theirId).not.toBe(ourId);
    expect((await endpointRows(ourId))[0]!.uuid).not.toBe((await endpointRows(theirId))[0]!.uuid);

    expect(((await call('GET', `/api/connectors/${name}`, { tenant: 1 })).body as Json).id).toBe(ourId);
    expect(((await call('GET', `/api/connectors/${name}`, { tenant: 2 })).body as Json).scopes).toEqual(['theirs']);
    const ourList = (await call('GET', '/api/connectors', { tenant: 1 })).body as Json[];
    expect(ourList.map((c) => c.id)).toContain(ourId);
    expect(ourList.map((c) => c.id)).not.toContain(theirId);

    expect((await call('POST', `/api/connectors/${name}/endpoints/b/reset-cursor`, { tenant: 1 })).status).toBe(404);
    expect((await call('DELETE', `/api/connectors/${name}`, { tenant: 2 })).status).toBe(204);
    expect(dataCalls).toEqual([{ fn: 'dropConnectorData', tenant: 2, args: [theirId] }]);
    expect((await call('GET', `/api/connectors/${name}`, { tenant: 1 })).status).toBe(200);
    expect((await call('GET', `/api/connectors/${name}`, { tenant: 2 })).status).toBe(404);
  });

  it('row-level security: the application role sees one tenant\'s connectors and endpoints without any filter', async () => {
    for (const tenant of [1, 2, 3]) expect((await apply(manifest(fresh('rls')), tenant)).status).toBe(201);
    const all = await owner.query<{ tenant_id: number }>('select distinct tenant_id from connectors.endpoints order by 1');
    expect(all.rows.map((r) => r.tenant_id)).toEqual([1, 2, 3]);
    const seen = await hub.services.db.withTenant(2, async (tx) => ({
      connectors: (await tx.query<{ tenant_id: number }>('select tenant_id from connectors.connectors')).rows,
      endpoints: (await tx.query<{ tenant_id: number }>('select tenant_id from connectors.endpoints')).rows,
    }));
    expect(new Set(seen.connectors.map((r) => r.tenant_id))).toEqual(new Set([2]));
    expect(new Set(seen.endpoints.map((r) => r.tenant_id))).toEqual(new Set([2]));
  });
});

describe('the store below HTTP', () => {
  it('loads by name and id, reads and writes watermarks, in the tenant only', async () => {
    const name = fresh('store');
    const { connector, created } = await hub.services.db.withTenant(1, (tx) => store.applyConnector(tx, manifest(name), { actor: 'test' }));
    expect(created).toBe(true);
    const uuid = connector.endpoints[0]!.uuid;
    const db = hub.services.db;
    expect(await db.withTenant(1, (tx) => store.loadConnector(tx, name))).toEqual(connector);
    expect(await db.withTenant(1, (tx) => store.loadConnectorById(tx, connector.id))).toEqual(connector);
    expect(await db.withTenant(2, (tx) => store.loadConnector(tx, name))).toBeUndefined();
    expect(await db.withTenant(2, (tx) => store.loadConnectorById(tx, connector.id))).toBeUndefined();
    expect(await db.withTenant(1, (tx) => store.loadConnectorById(tx, 'not-a-uuid'))).toBeUndefined();

    expect(await db.withTenant(1, (tx) => store.getWatermark(tx, uuid))).toBeUndefined();
    await db.withTenant(1, (tx) => store.setWatermark(tx, uuid, '2026-05-01T00:00:00Z'));
    expect(await db.withTenant(1, (tx) => store.getWatermark(tx, uuid))).toBe('2026-05-01T00:00:00Z');
    expect(await db.withTenant(2, (tx) => store.getWatermark(tx, uuid))).toBeUndefined();
    await db.withTenant(2, (tx) => store.setWatermark(tx, uuid, 'foreign'));
    expect(await db.withTenant(1, (tx) => store.getWatermark(tx, uuid))).toBe('2026-05-01T00:00:00Z');
    await db.withTenant(1, (tx) => store.resetCursor(tx, name, 'partners'));
    expect(await db.withTenant(1, (tx) => store.getWatermark(tx, uuid))).toBeUndefined();

    expect((await owner.query('select created_by, updated_by from connectors.connectors where id = $1', [connector.id])).rows[0]).toEqual({ created_by: 'test', updated_by: 'test' });
    await expect(hub.services.db.crossTenant('test', (tx) => store.applyConnector(tx, manifest(name)))).rejects.toThrow(/use Database.withTenant/);
  });
});

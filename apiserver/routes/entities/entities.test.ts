import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { ISO, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';
import { EntityDefinitionError, entityRelation } from '../../../src/entities/relation.js';
import { loadEntity } from '../../../src/entities/store.js';

/**
 * Entity manifests through HTTP (docs/entities.md): apply (YAML and JSON, create and update,
 * warnings, errors naming their field, checks against the tenant's tables), list, read, delete,
 * names case-insensitive, tenants apart (tenants 1, 2 and a clean 3 for exact lists); then the role
 * gates with real tokens on a second hub over the same database.
 */

let hub: TestHub;
let owner: pg.Client;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other'), (3, 'clean', 'Clean')`);
  // Tenant 1 has ext.partners (the runner's own DDL) with a promoted country; ext.erp_partners does not exist yet.
  await hub.services.connectors.ext.ensureTable(1, 'ext.partners', [{ name: 'country', path: '$.country', type: 'text' }]);
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

interface Reply {
  status: number;
  text: string;
  body: unknown;
}

async function call(method: string, path: string, options: { tenant?: number; body?: string; type?: string } = {}): Promise<Reply> {
  const headers: Record<string, string> = { 'X-Tenant-ID': String(options.tenant ?? 1) };
  if (options.body !== undefined) headers['Content-Type'] = options.type ?? 'application/yaml';
  const res = await fetch(`${hub.url}${path}`, { method, headers, body: options.body });
  const text = await res.text();
  return { status: res.status, text, body: text && res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : undefined };
}

type Json = Record<string, unknown>;

function manifest(name: string, spec: Json = {}): Json {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name },
    spec: {
      scope: 'crm',
      key: 'partner_id',
      columns: [
        { name: 'partner_id', type: 'text', label: 'Partner id' },
        { name: 'email', type: 'text', label: 'E-mail', description: 'Where invoices go', examples: ['ann@example.com'] },
        { name: 'country', type: 'text', values: ['FR', 'DE', 'ES'] },
      ],
      sources: [
        { table: 'ext.partners', key: 'external_id', columns: { partner_id: 'external_id', email: '$.contact.email', country: 'country' } },
        { table: 'ext.erp_partners', key: '$.code', columns: { email: 'email' } },
      ],
      ...spec,
    },
  };
}

const apply = (m: Json, tenant = 1) => call('POST', '/api/entities/apply', { tenant, body: stringify(m) });
const NOT_YET = { field: 'spec.sources[1].table', message: 'ext.erp_partners does not exist yet (no connector has written it): its mapped columns are checked when the entity is read' };

describe('apply', () => {
  it('creates (201) from YAML, then updates (200) the same id from JSON; a missing source table is a warning', async () => {
    const created = await apply(manifest('partner'));
    expect(created.status).toBe(201);
    expect(created.body).toEqual({ name: 'partner', id: expect.stringMatching(/^[0-9a-f-]{36}$/), unchanged: false, warnings: [NOT_YET] });
    const again = await call('POST', '/api/entities/apply', { body: JSON.stringify(manifest('partner', { scope: ['crm', 'sales'] })), type: 'application/json' });
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ name: 'partner', id: (created.body as Json).id, unchanged: false, warnings: [NOT_YET] });
  });

  it('folds the name to lower case: Partner is partner', async () => {
    expect([200, 201]).toContain((await apply(manifest('partner'))).status); // new when the case runs alone
    const upper = await apply(manifest('Partner'));
    expect(upper.status).toBe(200);
    expect((upper.body as Json).name).toBe('partner');
  });

  it('refuses a manifest error with 400 {error, field}', async () => {
    const m = manifest('broken');
    (m.spec as Json).key = 'id';
    expect(await apply(m)).toEqual(expect.objectContaining({ status: 400, body: { error: expect.stringContaining('spec.key "id" must name one of spec.columns'), field: 'spec.key' } }));
    const reserved = manifest('broken');
    ((reserved.spec as Json).columns as Json[])[1]!.name = '_conflicts';
    expect((await apply(reserved)).body).toEqual({ error: expect.stringContaining('is reserved'), field: 'spec.columns[1].name' });
    expect((await call('GET', '/api/entities/broken')).status).toBe(404);
  });

  it('refuses a mapped column the existing table does not have, naming the mapping, and says what it has', async () => {
    const m = manifest('partner');
    ((m.spec as Json).sources as Json[])[0]!.columns = { email: 'email', country: 'country' };
    const r = await apply(m);
    expect(r.status).toBe(400);
    expect(r.body).toEqual({
      error: 'spec.sources[0].columns.email: column email of ext.partners does not exist (its columns: external_id, country; or use a JSONPath into data, $.email)',
      field: 'spec.sources[0].columns.email',
    });
    const key = manifest('partner');
    ((key.spec as Json).sources as Json[])[0]!.key = 'partner_no';
    ((key.spec as Json).sources as Json[])[0]!.columns = { email: '$.email', country: 'country' };
    expect((await apply(key)).body).toEqual(expect.objectContaining({ field: 'spec.sources[0].key' }));
  });

  it('refuses unknown keys, an unknown kind and bodies that are not manifests', async () => {
    expect((await apply({ ...manifest('x'), extra: 1 })).body).toEqual({ error: 'extra is not a known field', field: 'extra' });
    expect((await apply({ ...manifest('x'), kind: 'Connector' })).body).toEqual(expect.objectContaining({ field: 'kind' }));
    expect((await call('POST', '/api/entities/apply', { body: '[1, 2]', type: 'application/json' })).status).toBe(400);
    expect((await call('POST', '/api/entities/apply', { body: 'a: [', type: 'application/yaml' })).status).toBe(400);
  });
});

describe('list, read, delete', () => {
  beforeAll(async () => {
    // Applied by the cases before (200), or new when this block runs alone (201).
    expect([200, 201]).toContain((await apply(manifest('partner'))).status);
    expect((await apply(manifest('account', { scope: 'sales' }))).status).toBe(201);
  });

  it('lists the tenant\'s entities by name with their canonical columns and sources', async () => {
    const list = await call('GET', '/api/entities');
    expect(list.status).toBe(200);
    const partner = (list.body as Json[]).find((e) => e.name === 'partner');
    expect((list.body as Json[]).map((e) => e.name)).toEqual(['account', 'partner']);
    expect(partner).toEqual({
      id: expect.any(String),
      name: 'partner',
      scopes: ['crm'],
      key: 'partner_id',
      columns: [
        { name: 'partner_id', type: 'text', label: 'Partner id', description: null, examples: [], values: null },
        { name: 'email', type: 'text', label: 'E-mail', description: 'Where invoices go', examples: ['ann@example.com'], values: null },
        { name: 'country', type: 'text', label: null, description: null, examples: [], values: ['FR', 'DE', 'ES'] },
      ],
      sources: [{ table: 'ext.partners', key: 'external_id' }, { table: 'ext.erp_partners', key: '$.code' }],
      createdAt: expect.stringMatching(ISO),
      updatedAt: expect.stringMatching(ISO),
    });
  });

  it('reads one by name, case-insensitively, with the manifest as applied', async () => {
    const got = await call('GET', '/api/entities/PARTNER');
    expect(got.status).toBe(200);
    expect(got.body).toEqual(expect.objectContaining({ name: 'partner', key: 'partner_id', manifest: manifest('partner') }));
    expect((got.body as { spec: Json }).spec).toEqual(expect.objectContaining({ scopes: ['crm'], sources: ((manifest('partner').spec as Json).sources) }));
    expect(await call('GET', '/api/entities/NOPE')).toEqual(expect.objectContaining({ status: 404, body: { error: 'entity nope not found' } }));
  });

  it('deletes (204), then it is gone (404); the ext tables it read stay', async () => {
    expect((await call('DELETE', '/api/entities/Account')).status).toBe(204);
    expect((await call('GET', '/api/entities/account')).status).toBe(404);
    expect((await call('DELETE', '/api/entities/account')).status).toBe(404);
    expect((await owner.query(`select to_regclass('ext_t1.partners') is not null as t`)).rows[0]).toEqual({ t: true });
    expect((await apply(manifest('account'))).status).toBe(201);
  });
});

describe('tenants', () => {
  it('keep their entities apart: another tenant neither sees nor deletes mine, and has its own of the same name', async () => {
    expect((await call('GET', '/api/entities', { tenant: 3 })).body).toEqual([]);
    expect((await call('GET', '/api/entities/partner', { tenant: 2 })).status).toBe(404);
    expect((await call('DELETE', '/api/entities/partner', { tenant: 2 })).status).toBe(404);
    // Tenant 2 has no ext.partners: the same manifest is accepted with two warnings, a separate entity.
    const theirs = await apply(manifest('partner'), 2);
    expect(theirs.status).toBe(201);
    expect((theirs.body as { warnings: Json[] }).warnings.map((w) => w.field)).toEqual(['spec.sources[0].table', 'spec.sources[1].table']);
    const mine = (await call('GET', '/api/entities/partner')).body as Json;
    expect((theirs.body as Json).id).not.toBe(mine.id);
    expect(((await call('GET', '/api/entities', { tenant: 3 })).body as Json[]).length).toBe(0);
  });
});

describe('over a connector\'s real rows, and its delete', () => {
  const fusedRows = (name: string) =>
    hub.services.db.withTenant(1, async (tx) => {
      const sql = await entityRelation(tx, (await loadEntity(tx, name))!);
      return (await tx.query(`select * from (${sql}) e order by _entity_id`)).rows;
    });

  it('fuses what a run ingested; the connector delete still drops the table, and the entity then names it', async () => {
    const connector = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'csv-crm' },
      connector_type: 'rest-generic',
      spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'rows', path: '/rows', target: { table: 'ext.csv_partners', unique_key: '$.code' } }] },
    };
    expect((await call('POST', '/api/connectors/apply', { body: stringify(connector) })).status).toBe(201);
    const run = await call('POST', '/api/platform/sources/csv/ingest?connector=csv-crm&table=csv_partners&key=code', { body: 'code,email,country\nP1,a@x,FR\nP2,,DE\n', type: 'text/csv' });
    expect(run.status).toBe(200);
    const entity = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'csv-partner' },
      spec: { scope: 'crm', key: 'code', columns: [{ name: 'code', type: 'text' }, { name: 'email', type: 'text' }, { name: 'country', type: 'text' }], sources: [{ table: 'ext.csv_partners', key: 'external_id', columns: { email: 'email', country: '$.country' } }] },
    };
    expect(await apply(entity)).toMatchObject({ status: 201, body: { warnings: [] } });
    // The CSV's empty cell is stored as '': with one source it stays the empty text (an export writes it as "").
    expect(await fusedRows('csv-partner')).toEqual([
      { _entity_id: 'P1', code: 'P1', email: 'a@x', country: 'FR', _conflicts: {}, _resolution: 'none' },
      { _entity_id: 'P2', code: 'P2', email: '', country: 'DE', _conflicts: {}, _resolution: 'none' },
    ]);

    expect((await call('DELETE', '/api/connectors/csv-crm')).status).toBe(204);
    expect((await owner.query(`select to_regclass('ext_t1.csv_partners') is null as gone`)).rows[0]).toEqual({ gone: true });
    expect((await call('GET', '/api/entities/csv-partner')).status).toBe(200);
    await expect(fusedRows('csv-partner')).rejects.toEqual(new EntityDefinitionError('source table ext.csv_partners of entity csv-partner does not exist'));
  });
});

describe('role gates (real tokens)', () => {
  let issuer: TestIssuer;
  let oidc: TestHub;

  beforeAll(async () => {
    issuer = await startIssuer();
    oidc = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.datasource.url': hub.ownerUrl });
  });

  afterAll(async () => {
    await oidc?.stop();
    await issuer?.close();
  });

  const INTEGRATOR = ['svc_integrator'];
  const ADMIN = ['svc_admin'];
  const BOTH = ['svc_integrator', 'svc_admin'];
  const EMPTY_403 = { status: 403, text: '' };

  async function as(roles: string[] | null, method: string, path: string, body?: unknown) {
    const headers: Record<string, string> = {};
    if (roles) headers.Authorization = `Bearer ${await issuer.mint({ realm_access: { roles }, tenant_id: 1 }, { subject: 'roles-test' })}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(`${oidc.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, text: await res.text() };
  }

  // method, path, the roles that pass, roles that are refused, body
  const paths: Array<[string, string, string[], string[], unknown]> = [
    ['POST', '/api/entities/apply', BOTH, INTEGRATOR, manifest('gated')],
    ['GET', '/api/entities', INTEGRATOR, ADMIN, undefined],
    ['GET', '/api/entities/gated', INTEGRATOR, ADMIN, undefined],
    ['DELETE', '/api/entities/gated', BOTH, INTEGRATOR, undefined],
  ];

  it.each(paths)('%s %s: an empty 403 without its roles, 401 without a token', async (method, path, _ok, refused, body) => {
    expect(await as(refused, method, path, body)).toEqual(EMPTY_403);
    expect(await as(['svc_user'], method, path, body)).toEqual(EMPTY_403);
    expect((await as(null, method, path, body)).status).toBe(401);
  });

  it('apply and delete need svc_admin as well as svc_integrator', async () => {
    expect(await as(ADMIN, 'POST', '/api/entities/apply', manifest('gated'))).toEqual(EMPTY_403);
    expect(await as(ADMIN, 'DELETE', '/api/entities/gated')).toEqual(EMPTY_403);
  });

  it.each(paths)('%s %s: passes with its roles', async (method, path, ok, _refused, body) => {
    const r = await as(ok, method, path, body);
    expect({ status: r.status }).toEqual({ status: method === 'DELETE' ? 204 : path.endsWith('/apply') ? 201 : 200 });
  });
});

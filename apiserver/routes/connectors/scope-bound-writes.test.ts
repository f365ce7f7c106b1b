import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type Client, client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { deferred } from '../../../test/harness/deferred.js';
import { until } from '../../../test/harness/until.js';
import { applyConnector } from '../../../src/connectors/store.js';
import type { Tx } from '../../../src/db/database.js';
import { applyEntity } from '../../../src/entities/store.js';
import { boundUser, connector, entity, SCOPE_REFUSED, workflow } from '../../../test/harness/scope-manifests.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';

/**
 * A scope-bound caller (docs/admin.md, "Scopes") holding every role writes connectors and entities
 * only of scopes they hold, as stored and as applied: each write path refuses another domain's
 * definition with 403 `scope not granted` and leaves it as it was. Before, only exports were held
 * to the grants: a user bound to `crm` holding svc_admin re-scoped an `erp` entity into `crm` (then
 * read it through an export or the download), deleted, ran or purged `erp` connectors, and applied a
 * new `crm` entity over an `erp` connector's table; and, holding svc_admin, unbound themself (or any
 * user) through the scope list, which undid every check.
 */

const T = 1;
let hub: TestHub;
let api: Client;
let crm: Client;
/** The headers of the `crm`-bound caller (for the CSV ingest's text body). */
let crmHeaders: Record<string, string>;

const scopesOf = async (path: string) => ((await api.get(path)).body as { scopes: string[] }).scopes;
const runsOf = async (name: string) => ((await api.get(`/api/platform/runs?connector=${name}`)).body as unknown[]).length;

async function ingest(as: Record<string, string>, query: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${hub.url}/api/platform/sources/csv/ingest?${query}`, { method: 'POST', headers: { ...as, 'content-type': 'text/csv' }, body: 'id,name\n1,Ada\n' });
  return { status: res.status, body: await res.json() };
}

beforeAll(async () => {
  hub = await startTestHub();
  api = devClient(hub.url, T);
  crmHeaders = await boundUser(api, T, 'crm-only', ['crm']);
  crm = client(hub.url, crmHeaders);
  expect((await api.post('/api/connectors/apply', connector('erp', ['erp']))).status).toBe(201);
  expect((await api.post('/api/entities/apply', entity('erp-partner', 'erp', 'ext.erp_rows'))).status).toBe(201);
}, 60_000);

afterAll(async () => {
  await hub?.stop();
});

/**
 * `stored` applies a definition in scope erp and holds the tenant's turn, not yet committed, while the crm
 * caller applies `manifest` of the same new name: it read no definition of the name, waits for the turn,
 * and then replaces the erp one. Expects the 403.
 */
async function racingApply(path: string, stored: (tx: Tx) => Promise<unknown>, manifest: unknown): Promise<void> {
  const held = deferred();
  const inserted = deferred();
  const erp = hub.services.db.withTenant(T, async (tx) => {
    await stored(tx);
    inserted.resolve();
    await held.promise;
  });
  await inserted.promise;
  const crmApply = crm.post(path, manifest);
  const owner = await ownerClient(hub.ownerUrl);
  try {
    await until("the crm apply waiting for the tenant's turn", async () => (await owner.query("select 1 from pg_locks where locktype = 'advisory' and not granted")).rowCount);
  } finally {
    await owner.end();
  }
  held.resolve();
  await erp;
  expect(await crmApply).toMatchObject(SCOPE_REFUSED);
}

describe('a scope-bound caller writing connectors', () => {
  it('cannot re-scope another domain\'s connector into theirs', async () => {
    expect(await crm.post('/api/connectors/apply', connector('erp', ['crm']))).toMatchObject(SCOPE_REFUSED);
    expect(await scopesOf('/api/connectors/erp')).toEqual(['erp']);
  });

  it('cannot apply a connector of a scope they do not hold, nor one of no scope', async () => {
    expect(await crm.post('/api/connectors/apply', connector('crm-erp', ['erp']))).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post('/api/connectors/apply', connector('crm-none', []))).toMatchObject(SCOPE_REFUSED);
    expect((await api.get('/api/connectors/crm-erp')).status).toBe(404);
  });

  it('cannot point a connector of theirs at a table another domain\'s connector writes', async () => {
    expect(await crm.post('/api/connectors/apply', connector('crm-over', ['crm'], 'ext.erp_rows'))).toMatchObject(SCOPE_REFUSED);
    expect((await api.get('/api/connectors/crm-over')).status).toBe(404);
  });

  it('cannot delete another domain\'s connector', async () => {
    expect(await crm.del('/api/connectors/erp')).toMatchObject(SCOPE_REFUSED);
    expect((await api.get('/api/connectors/erp')).status).toBe(200);
  });

  it('cannot run another domain\'s connector', async () => {
    expect(await crm.post('/api/connectors/erp/runs', {})).toMatchObject(SCOPE_REFUSED);
    expect(await runsOf('erp')).toBe(0);
  });

  it('cannot cancel a run of another domain\'s connector', async () => {
    const id = await hub.services.db.withTenant(T, async (tx) => {
      const { rows } = await tx.query<{ id: string }>(
        "insert into connectors.runs (tenant_id, connector_id, connector_name, status, triggered_by) select tenant_id, id, name, 'Running', 'test' from connectors.connectors where name = 'erp' returning id",
      );
      return rows[0]!.id;
    });
    expect(await crm.post(`/api/platform/runs/${id}/cancel`)).toMatchObject(SCOPE_REFUSED);
    expect((await api.get(`/api/platform/runs/${id}`)).body).toMatchObject({ status: 'Running' });
    const asked = await hub.services.db.withTenant(T, (tx) => tx.query<{ cancel_requested: boolean }>('select cancel_requested from connectors.runs where id = $1', [id]));
    expect(asked.rows[0]!.cancel_requested).toBe(false);
    await hub.services.db.withTenant(T, (tx) => tx.query("delete from connectors.runs where id = $1", [id]));
  });

  it('cannot reset the cursor of, or purge, another domain\'s endpoint', async () => {
    expect(await crm.post('/api/connectors/erp/endpoints/rows/reset-cursor')).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post('/api/connectors/erp/endpoints/rows/purge')).toMatchObject(SCOPE_REFUSED);
  });

  it('cannot ingest CSV under another domain\'s connector, into its table, or as a source of no scope', async () => {
    const as = crmHeaders;
    expect(await ingest(as, 'connector=erp&table=erp_csv&key=id')).toMatchObject(SCOPE_REFUSED);
    expect(await ingest(as, 'connector=loose&table=loose_rows&key=id')).toMatchObject(SCOPE_REFUSED);
    expect((await api.post('/api/connectors/apply', connector('crm', ['crm']))).status).toBe(201);
    expect(await ingest(as, 'connector=crm&table=erp_rows&key=id')).toMatchObject(SCOPE_REFUSED);
    expect(await runsOf('erp')).toBe(0);
    expect(await runsOf('loose')).toBe(0);
    expect(await runsOf('crm')).toBe(0);
  });

  it("deleting a connector of theirs leaves a CSV source of its name, which has no scope, as it was", async () => {
    const unbound = { 'X-Tenant-ID': String(T) };
    expect((await ingest(unbound, 'connector=crm-twin&table=twin_loose&key=id')).status).toBe(200);
    expect((await api.post('/api/connectors/apply', connector('crm-twin', ['crm']))).status).toBe(201);
    const loose = async () => (await hub.services.db.withTenant(T, (tx) => tx.query<{ external_id: string }>(`select external_id from ext_t${T}.twin_loose`))).rows;
    expect((await crm.del('/api/connectors/crm-twin')).status).toBe(204);
    expect(await loose()).toEqual([{ external_id: '1' }]);
    // The name now names only the CSV source, of no scope.
    expect(await crm.del('/api/connectors/crm-twin')).toMatchObject(SCOPE_REFUSED);
    expect(await loose()).toEqual([{ external_id: '1' }]);
  });

  it('applying a new name is checked against the connector of that name committed while it waited its turn', async () => {
    await racingApply('/api/connectors/apply', (tx) => applyConnector(tx, connector('race-c', ['erp'], 'ext.race_c_rows')), connector('race-c', ['crm'], 'ext.race_c_rows'));
    expect(await scopesOf('/api/connectors/race-c')).toEqual(['erp']);
  });

  it('writes, runs and deletes connectors of their own scope', async () => {
    expect((await crm.post('/api/connectors/apply', connector('crm-own', ['crm']))).status).toBe(201);
    expect((await crm.post('/api/connectors/apply', connector('crm-own', ['crm'], 'ext.crm_own_other'))).status).toBe(200);
    expect((await crm.post('/api/connectors/crm-own/endpoints/rows/reset-cursor')).status).toBe(204);
    const as = crmHeaders;
    expect((await ingest(as, 'connector=crm-own&table=crm_own_csv&key=id')).status).toBe(200);
    expect((await crm.del('/api/connectors/crm-own')).status).toBe(204);
  });
});

describe('a scope-bound caller writing entities', () => {
  it('cannot re-scope another domain\'s entity into theirs, nor add theirs to it', async () => {
    expect(await crm.post('/api/entities/apply', entity('erp-partner', 'crm', 'ext.erp_rows'))).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post('/api/entities/apply', entity('erp-partner', ['erp', 'crm'], 'ext.erp_rows'))).toMatchObject(SCOPE_REFUSED);
    expect(await scopesOf('/api/entities/erp-partner')).toEqual(['erp']);
  });

  it('cannot apply an entity of their scope under another name over another domain\'s table', async () => {
    expect(await crm.post('/api/entities/apply', entity('my-partner', 'crm', 'ext.erp_rows'))).toMatchObject(SCOPE_REFUSED);
    // Nor over a table nothing writes yet (another domain's connector may write it later).
    expect(await crm.post('/api/entities/apply', entity('my-partner', 'crm', 'ext.nobody_rows'))).toMatchObject(SCOPE_REFUSED);
    expect((await api.get('/api/entities/my-partner')).status).toBe(404);
  });

  it('cannot delete another domain\'s entity', async () => {
    expect(await crm.del('/api/entities/erp-partner')).toMatchObject(SCOPE_REFUSED);
    expect((await api.get('/api/entities/erp-partner')).status).toBe(200);
  });

  it('applies and deletes entities of their own scope over their tables', async () => {
    expect((await crm.post('/api/connectors/apply', connector('crm-mine', ['crm']))).status).toBe(201);
    expect((await crm.post('/api/entities/apply', entity('crm-partner', 'crm', 'ext.crm_mine_rows'))).status).toBe(201);
    expect((await crm.del('/api/entities/crm-partner')).status).toBe(204);
  });

  it('applying a new name is checked against the entity of that name committed while it waited its turn', async () => {
    expect((await api.post('/api/connectors/apply', connector('crm-race', ['crm']))).status).toBe(201);
    await racingApply('/api/entities/apply', (tx) => applyEntity(tx, entity('race-x', 'erp', 'ext.erp_rows')), entity('race-x', 'crm', 'ext.crm_race_rows'));
    expect(await scopesOf('/api/entities/race-x')).toEqual(['erp']);
  });
});

describe('a scope-bound caller writing workflows', () => {
  /** The scopes of the lifecycle chunks of workflow `name` (one list per chunk). */
  const chunkScopes = async (name: string) =>
    (await hub.services.db.withTenant(T, (tx) => tx.query<{ scopes: string[] }>('select scopes from retrieval.chunks where corpus = $1', [`workflow:${name}`]))).rows.map((r) => r.scopes);

  beforeAll(async () => {
    expect((await api.post('/api/connectors/apply', connector('crm-wf', ['crm']))).status).toBe(201);
    expect((await crm.post('/api/entities/apply', entity('crm-wf-partner', 'crm', 'ext.crm_wf_rows'))).status).toBe(201);
    expect((await api.post('/api/workflows/apply', workflow('erp-flow', 'erp-partner'))).status).toBe(201);
    expect(await chunkScopes('erp-flow')).toContainEqual(['erp']);
  });

  it("cannot tag a workflow's lifecycle chunks with a scope they do not hold", async () => {
    expect(await crm.post('/api/workflows/apply', workflow('planted', 'crm-wf-partner', 'erp'))).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post('/api/workflows/apply', workflow('planted', 'erp-partner', 'erp'))).toMatchObject(SCOPE_REFUSED);
    expect(await chunkScopes('planted')).toEqual([]);
    expect((await api.get('/api/platform/workflows/planted')).status).toBe(404);
  });

  it("cannot apply a workflow over another domain's entity, under its scope or theirs", async () => {
    expect(await crm.post('/api/workflows/apply', workflow('over-erp', 'erp-partner'))).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post('/api/workflows/apply', workflow('over-erp', 'erp-partner', 'crm'))).toMatchObject(SCOPE_REFUSED);
    expect((await api.get('/api/platform/workflows/over-erp')).status).toBe(404);
  });

  it("cannot replace or delete another domain's workflow", async () => {
    expect(await crm.post('/api/workflows/apply', workflow('erp-flow', 'crm-wf-partner'))).toMatchObject(SCOPE_REFUSED);
    expect(await crm.del('/api/workflows/erp-flow')).toMatchObject(SCOPE_REFUSED);
    expect(((await api.get('/api/platform/workflows/erp-flow')).body as { scope: string }).scope).toBe('erp');
    expect(await chunkScopes('erp-flow')).toContainEqual(['erp']);
  });

  it('applies and deletes workflows of their own scope over their entities', async () => {
    expect((await crm.post('/api/workflows/apply', workflow('crm-flow', 'crm-wf-partner'))).status).toBe(201);
    expect((await crm.post('/api/workflows/apply', workflow('crm-flow', 'crm-wf-partner', 'crm'))).status).toBe(200);
    expect(await chunkScopes('crm-flow')).toContainEqual(['crm']);
    expect((await crm.del('/api/workflows/crm-flow')).status).toBe(204);
    expect(await chunkScopes('crm-flow')).toEqual([]);
  });
});

describe('a scope-bound caller setting scope lists', () => {
  const userOf = async (login: string, scopes: string[]) => {
    const id = ((await api.post(`/api/tenants/${T}/users`, { login, name: login })).body as { id: number }).id;
    if (scopes.length) expect((await api.put(`/api/tenants/${T}/users/${id}/scopes`, { scopes })).status).toBe(200);
    return id;
  };
  const scopesOfUser = async (id: string | number) => ((await api.get(`/api/tenants/${T}/users/${id}/scopes`)).body as { scopes: string[] }).scopes;

  it('cannot unbind or widen their own list', async () => {
    const self = crmHeaders['X-User-ID']!;
    expect(await crm.put(`/api/tenants/${T}/users/${self}/scopes`, { scopes: [] })).toMatchObject(SCOPE_REFUSED);
    expect(await crm.put(`/api/tenants/${T}/users/${self}/scopes`, { scopes: ['crm', 'erp'] })).toMatchObject(SCOPE_REFUSED);
    expect(await scopesOfUser(self)).toEqual(['crm']);
  });

  it("cannot move another domain's user, nor bind an unbound one, into their scopes", async () => {
    const erp = await userOf('erp-user', ['erp']);
    const free = await userOf('free-user', []);
    expect(await crm.put(`/api/tenants/${T}/users/${erp}/scopes`, { scopes: ['crm'] })).toMatchObject(SCOPE_REFUSED);
    expect(await crm.put(`/api/tenants/${T}/users/${free}/scopes`, { scopes: ['crm'] })).toMatchObject(SCOPE_REFUSED);
    expect(await scopesOfUser(erp)).toEqual(['erp']);
    expect(await scopesOfUser(free)).toEqual([]);
  });

  it('sets the list of a user of their scopes, within them', async () => {
    const mate = await userOf('crm-mate', ['crm']);
    expect(await crm.put(`/api/tenants/${T}/users/${mate}/scopes`, { scopes: ['crm'] })).toMatchObject({ status: 200, body: { scopes: ['crm'] } });
  });
});

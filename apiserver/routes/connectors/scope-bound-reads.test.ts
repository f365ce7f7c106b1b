import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type Client, client, devClient } from '../../../test/harness/api-client.js';
import { applyDomainWorkflows, boundUser, connector, entity, SCOPE_REFUSED } from '../../../test/harness/scope-manifests.js';
import { itemS3Export } from '../../../test/harness/export-manifests.js';
import { type ChatModel, startChatModel } from '../../../test/harness/chat-model.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';

/**
 * A scope-bound caller (docs/admin.md, "Scopes") holding every role reads, outside the retrieval
 * API, only what belongs to scopes they hold: another domain's dead-letter entries (with their
 * payloads), workflows, source rows by hash, and an entity of theirs whose source table another
 * domain's connector writes too are refused with 403 `scope not granted`, and lists leave them out.
 * Before, these surfaces were governed by roles alone: a user bound to `crm` holding svc_integrator
 * and svc_admin read and replayed `erp`'s dead letters, read its workflows and its rows, and read
 * erp's rows through a crm entity (download, export, analytic chat) once an erp connector wrote its table.
 */

const T = 1;
let hub: TestHub;
let api: Client;
let crm: Client;
let model: ChatModel;
/** What the stand-in model answers next (analytic chat's SQL). */
let nextAnswer = '';

/** An unbound CSV ingest of `body` under a stored connector into `ext.<table>`. */
async function ingest(query: string, body: string): Promise<void> {
  const res = await fetch(`${hub.url}/api/platform/sources/csv/ingest?${query}`, { method: 'POST', headers: { 'X-Tenant-ID': String(T), 'content-type': 'text/csv' }, body });
  expect(res.status).toBe(200);
}

/** The row hash of the row of `ext.<table>` whose key is `id`. */
const hashOf = async (table: string, id: string) =>
  (await hub.services.db.withTenant(T, (tx) => tx.query<{ row_hash: string }>(`select row_hash from ext_t${T}.${table} where external_id = $1`, [id]))).rows[0]!.row_hash;

beforeAll(async () => {
  model = await startChatModel({ script: () => nextAnswer });
  hub = await startTestHub({ 'svc.llm.base-url': model.url, 'svc.llm.model': 'stand-in' });
  api = devClient(hub.url, T);
  crm = client(hub.url, await boundUser(api, T, 'crm-only', ['crm']));
  expect((await api.post('/api/connectors/apply', connector('erp', ['erp']))).status).toBe(201);
  expect((await api.post('/api/connectors/apply', connector('crm', ['crm']))).status).toBe(201);
}, 60_000);

afterAll(async () => {
  await hub?.stop();
  await model?.close();
});

describe('a scope-bound caller reading dead letters', () => {
  /** A run of the stored connector `name` and one dead-letter entry of it; their ids. */
  const deadLetterOf = (name: string) =>
    hub.services.db.withTenant(T, async (tx) => {
      const run = await tx.query<{ id: string; connector_id: string }>(
        "insert into connectors.runs (tenant_id, connector_id, connector_name, status, triggered_by) select tenant_id, id, name, 'Completed', 'test' from connectors.connectors where name = $1 returning id, connector_id",
        [name],
      );
      const { id: runId, connector_id: connectorId } = run.rows[0]!;
      const entry = await tx.query<{ id: string }>(
        `insert into connectors.dead_letters (tenant_id, run_id, connector_id, skip_reason, error_message, payload)
         values (core.current_tenant(), $1, $2, 'mapping', 'bad row', $3) returning id::text`,
        [runId, connectorId, JSON.stringify({ secret: `${name} payload` })],
      );
      return { runId, entryId: entry.rows[0]!.id };
    });
  let erp: { runId: string; entryId: string };
  let own: { runId: string; entryId: string };
  const ids = (r: { body: unknown }) => (r.body as Array<{ id: number }>).map((e) => String(e.id));
  const resolution = async (id: string) => ((await api.get(`/api/platform/dlq/${id}`)).body as { resolution: string | null }).resolution;

  beforeAll(async () => {
    erp = await deadLetterOf('erp');
    own = await deadLetterOf('crm');
  });

  it("lists only the entries of connectors of their scopes, and refuses a filter naming another domain's", async () => {
    expect(ids(await api.get('/api/platform/dlq'))).toEqual(expect.arrayContaining([erp.entryId, own.entryId]));
    expect(ids(await crm.get('/api/platform/dlq'))).toEqual([own.entryId]);
    expect(await crm.get('/api/platform/dlq?connector=erp')).toMatchObject(SCOPE_REFUSED);
    expect(await crm.get(`/api/platform/dlq?run=${erp.runId}`)).toMatchObject(SCOPE_REFUSED);
    expect(ids(await crm.get('/api/platform/dlq?connector=crm'))).toEqual([own.entryId]);
    expect(ids(await crm.get(`/api/platform/dlq?run=${own.runId}`))).toEqual([own.entryId]);
  });

  it("cannot read, replay, discard or erase another domain's entry", async () => {
    expect(await crm.get(`/api/platform/dlq/${erp.entryId}`)).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post(`/api/platform/dlq/${erp.entryId}/replayed`)).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post(`/api/platform/dlq/${erp.entryId}/discard`)).toMatchObject(SCOPE_REFUSED);
    expect(await crm.del(`/api/platform/dlq/${erp.entryId}`)).toMatchObject(SCOPE_REFUSED);
    expect(await api.get(`/api/platform/dlq/${erp.entryId}`)).toMatchObject({ status: 200, body: { resolution: null, payload: { secret: 'erp payload' } } });
  });

  it('reads and resolves the entries of their own connectors; an unknown entry is still a 404', async () => {
    expect(await crm.get(`/api/platform/dlq/${own.entryId}`)).toMatchObject({ status: 200, body: { payload: { secret: 'crm payload' } } });
    expect((await crm.post(`/api/platform/dlq/${own.entryId}/replayed`)).status).toBe(204);
    expect(await resolution(own.entryId)).toBe('replayed');
    expect((await crm.get('/api/platform/dlq/999999999')).status).toBe(404);
  });
});

describe('a scope-bound caller reading workflows', () => {
  const names = (r: { body: unknown }) => (r.body as Array<{ name: string }>).map((w) => w.name);

  beforeAll(() => applyDomainWorkflows(api));

  it('lists only the workflows whose scope and whose entity\'s every scope they hold', async () => {
    expect(names(await api.get('/api/platform/workflows'))).toEqual(['crm-flow', 'erp-flow', 'shared-flow']);
    expect(names(await crm.get('/api/platform/workflows'))).toEqual(['crm-flow']);
  });

  it("cannot read another domain's workflow, nor one over an entity of another domain too", async () => {
    expect(await crm.get('/api/platform/workflows/erp-flow')).toMatchObject(SCOPE_REFUSED);
    expect(await crm.get('/api/platform/workflows/shared-flow')).toMatchObject(SCOPE_REFUSED);
    expect(await crm.get('/api/platform/workflows/crm-flow')).toMatchObject({ status: 200, body: { name: 'crm-flow', scope: 'crm' } });
    expect((await crm.get('/api/platform/workflows/no-such-flow')).status).toBe(404);
  });
});

describe('a scope-bound caller reading a row by its hash', () => {
  const row = (hash: string, as = crm) => as.get(`/api/platform/data/row/${hash}`);

  beforeAll(async () => {
    await ingest('connector=erp&table=erp_csv&key=id', 'id,name\n2,Bob\n');
    await ingest('connector=crm&table=crm_csv&key=id', 'id,name\n1,Ada\n');
    await ingest('connector=loose&table=loose_csv&key=id', 'id,name\n3,Cy\n');
  });

  it("reads a row of a table only connectors of their scopes write, not another domain's nor a CSV source's of no scope", async () => {
    const [erp, own, loose] = [await hashOf('erp_csv', '2'), await hashOf('crm_csv', '1'), await hashOf('loose_csv', '3')];
    expect(await row(erp, api)).toMatchObject({ status: 200, body: { id: '2', name: 'Bob' } });
    expect(await row(erp)).toMatchObject(SCOPE_REFUSED);
    expect(await row(loose)).toMatchObject(SCOPE_REFUSED);
    expect(await row(own)).toMatchObject({ status: 200, body: { id: '1', name: 'Ada' } });
    expect((await row('0'.repeat(64))).status).toBe(404);
  });

  it('cannot read a row of their table once another domain\'s connector writes it too', async () => {
    await ingest('connector=erp&table=crm_csv&key=id', 'id,name\n4,Dee\n');
    expect(await row(await hashOf('crm_csv', '4'))).toMatchObject(SCOPE_REFUSED);
    expect(await row(await hashOf('crm_csv', '1'))).toMatchObject(SCOPE_REFUSED);
  });
});

describe("a scope-bound caller reading an entity whose table another domain's connector starts writing", () => {
  /** An S3 export of scope crm, of column `id` of entity `entityName` (a run is refused before it would reach the endpoint). */
  const exportOf = (name: string, entityName: string) => {
    const manifest = itemS3Export(name, 'http://127.0.0.1:9');
    return { ...manifest, spec: { ...manifest.spec, source: { entity: entityName }, columns: ['id'] } };
  };
  const download = (as: Client) => as.get('/api/exports/entities/crm-shared/download');

  beforeAll(async () => {
    for (const name of ['S3_KEY', 'S3_SECRET']) expect((await api.post('/api/platform/secrets', { name, value: 'x' })).status).toBe(201);
    expect((await api.post('/api/connectors/apply', connector('crm-shared', ['crm']))).status).toBe(201);
    await ingest('connector=crm-shared&table=crm_shared_rows&key=id', 'id,name\n1,Ada\n');
    expect((await crm.post('/api/entities/apply', entity('crm-shared', 'crm', 'ext.crm_shared_rows'))).status).toBe(201);
    expect((await crm.post('/api/exports/apply', exportOf('crm-shared-drop', 'crm-shared'))).status).toBe(201);
    expect(await download(crm)).toMatchObject({ status: 200, text: '"id"\r\n"1"\r\n' });
    // An unbound administrator points an erp connector at the crm entity's table: its rows become erp's too.
    expect((await api.post('/api/connectors/apply', connector('erp-over', ['erp'], 'ext.crm_shared_rows'))).status).toBe(201);
    await ingest('connector=erp-over&table=crm_shared_rows&key=id', 'id,name\n9,Erp\n');
  });

  it('cannot download it any more; an unbound caller still can', async () => {
    expect(await download(crm)).toMatchObject(SCOPE_REFUSED);
    expect(await download(api)).toMatchObject({ status: 200, text: '"id"\r\n"1"\r\n"9"\r\n' });
  });

  it("neither sees nor queries it, nor the table, on their scope's schema card", async () => {
    await ingest('connector=crm-shared&table=crm_solo&key=id', 'id,name\n5,Eve\n');
    expect((await api.post('/api/platform/rag/rediscover?scope=crm')).status).toBe(200);
    const relations = async (as: Client) => ((await as.get('/api/platform/rag/schema?scope=crm')).body as { relations: Array<{ name: string }> }).relations.map((r) => r.name);
    expect(await relations(api)).toEqual(expect.arrayContaining(['ext.crm_shared_rows', 'ext.crm_solo', 'entity.crm-shared']));
    expect(await relations(crm)).toContain('ext.crm_solo');
    expect(await relations(crm)).not.toContain('ext.crm_shared_rows');
    expect(await relations(crm)).not.toContain('entity.crm-shared');
    const ask = (as: Client) => as.post('/api/platform/rag/chat', { question: 'how many?', mode: 'analytic', scope: 'crm' });
    nextAnswer = 'select count(*)::int as n from ext.crm_shared_rows';
    expect((await ask(api)).body).toMatchObject({ rowCount: 1, rows: [{ n: 2 }] });
    expect((await ask(crm)).body).toMatchObject({ rowCount: 0, answer: expect.stringMatching(/^Refused \(guard 2\)/) });
    nextAnswer = 'select count(*)::int as n from ext.crm_solo';
    expect((await ask(crm)).body).toMatchObject({ rowCount: 1, rows: [{ n: 1 }] });
  });

  it('cannot run an export of it any more', async () => {
    expect(await crm.post('/api/exports/crm-shared-drop/runs')).toMatchObject(SCOPE_REFUSED);
    expect((await api.get('/api/exports/crm-shared-drop/runs')).body).toEqual([]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { runnerOverHub } from '../../test/harness/connector-runner.js';
import { holdAfter, outcome, untilEndedOrWaiting } from '../../test/harness/held-transaction.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import type { Database, Tx } from '../db/database.js';
import { ingestCsv } from './csv-ingest.js';
import { csvSourceId } from './csv-source.js';
import { connectorHandler } from './manifest-handler.js';

/**
 * A CSV source needs no manifest (POST /api/platform/sources/csv/ingest?connector=NAME), and its rows,
 * table and chunks are erased by deleting it: DELETE /api/connectors/{name} erases what that name
 * ingested for the calling tenant only, where it used to answer 404 (no stored connector) and leave
 * them for good. A delete meets the source's runs as a connector's delete meets the connector's: it
 * waits for a run being recorded, then refuses while one is in flight.
 */

let hub: TestHub;
let owner: pg.Client;

const ONE = 51;
const TWO = 52;

function call(tenant: number, method: string, path: string, body?: string) {
  return fetch(`${hub.url}${path}`, { method, headers: { 'X-Tenant-ID': String(tenant), ...(body ? { 'Content-Type': 'text/csv' } : {}) }, body });
}

async function ingest(tenant: number, connector: string, table: string, csv: string) {
  const res = await call(tenant, 'POST', `/api/platform/sources/csv/ingest?connector=${connector}&table=${table}&key=id`, csv);
  const run = (await res.json()) as { status: string };
  expect([res.status, run.status]).toEqual([200, 'Completed']);
}

async function tableOf(tenant: number, table: string): Promise<string[] | undefined> {
  const exists = await owner.query('select 1 from information_schema.tables where table_schema = $1 and table_name = $2', [`ext_t${tenant}`, table]);
  if (exists.rowCount === 0) return undefined;
  return (await owner.query<{ external_id: string }>(`select external_id from ext_t${tenant}.${table} order by 1`)).rows.map((r) => r.external_id);
}

const count = async (sql: string, params: unknown[]) => Number((await owner.query<{ n: string }>(sql, params)).rows[0]!.n);

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values ($1, 'csv-one', 'One'), ($2, 'csv-two', 'Two') on conflict do nothing`, [ONE, TWO]);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('DELETE /api/connectors/{name} of a CSV source with no manifest', () => {
  it("erases its rows, its table and its chunks for the calling tenant only; another tenant's source of the name stays", async () => {
    for (const tenant of [ONE, TWO]) await ingest(tenant, 'leads', 'leads', 'id,city\nl1,Lyon\nl2,Oslo\n');
    await ingest(ONE, 'leads', 'lead_notes', 'id,note\nn1,call back\n');
    // A table the source shares with a connector of another name: its rows stay, and so does the table.
    await ingest(ONE, 'other', 'leads', 'id,city\no1,Rome\n');
    await hub.services.retrieval.indexPass();
    const mine = csvSourceId(ONE, 'leads');
    const theirs = csvSourceId(TWO, 'leads');
    const chunks = (id: string) => count('select count(*) as n from retrieval.chunks where connector_id = $1', [id]);
    expect(await chunks(mine)).toBeGreaterThan(0);
    expect(await chunks(theirs)).toBeGreaterThan(0);

    const deleted = await call(ONE, 'DELETE', '/api/connectors/leads');
    expect([deleted.status, await deleted.text()]).toEqual([204, '']);
    expect(await tableOf(ONE, 'leads')).toEqual(['o1']);
    expect(await tableOf(ONE, 'lead_notes')).toBeUndefined();
    expect(await chunks(mine)).toBe(0);
    expect(await count('select count(*) as n from connectors.ext_tables where connector_id = $1', [mine])).toBe(0);
    // Its run records stay, as a connector's do.
    expect(await count('select count(*) as n from connectors.runs where connector_id = $1', [mine])).toBe(2);

    // The other tenant's source of the same name is untouched.
    expect(await tableOf(TWO, 'leads')).toEqual(['l1', 'l2']);
    expect(await chunks(theirs)).toBeGreaterThan(0);

    // Nothing left of it: a second delete is a 404; the name ingests again as new.
    const again = await call(ONE, 'DELETE', '/api/connectors/leads');
    expect([again.status, await again.json()]).toEqual([404, expect.objectContaining({ error: 'connector leads not found' })]);
    await ingest(ONE, 'leads', 'leads', 'id,city\nl3,Rome\n');
    expect(await tableOf(ONE, 'leads')).toEqual(['l3', 'o1']);
  }, 60_000);
});

describe('a delete of a CSV source while an ingest of it records its run', () => {
  it('waits for the recording, then is a 409 naming the run in flight; once the run has ended, it erases the rows', async () => {
    // The ingest's transaction has recorded its run, uncommitted; later its end is held until `finish`, so the run stays in flight.
    const hold = holdAfter(/^insert into connectors\.runs/);
    let finish = () => {};
    const finished = new Promise<void>((resolve) => {
      finish = resolve;
    });
    const db = hub.services.db;
    const held: Database = Object.assign(Object.create(db) as Database, {
      withTenant: (<T>(tenantId: number, fn: (tx: Tx) => Promise<T>) =>
        db.withTenant(tenantId, (tx) => {
          const wrapped = hold.wrap(tx);
          const query = (async (sql: unknown, ...rest: unknown[]) => {
            if (typeof sql === 'string' && sql.startsWith('update connectors.runs set status')) await finished;
            return (wrapped.query as (...a: unknown[]) => unknown)(sql, ...rest);
          }) as Tx['query'];
          return fn({ tenantId: tx.tenantId, query });
        })) as Database['withTenant'],
    });
    const runner = runnerOverHub(hub, 1000, held);
    try {
      const ingested = outcome(
        ingestCsv(runner, ONE, async () => undefined, (fn) => db.withTenant(ONE, fn), { connector: 'racing', table: 'racing', key: 'id', csv: 'id\nr1\n', triggeredBy: 'csv:test' }).then((run) => run.status),
        true,
      );
      await hold.held;
      let ended = false;
      const deleting = call(ONE, 'DELETE', '/api/connectors/racing').then(async (res) => [res.status, await res.json()] as const).finally(() => {
        ended = true;
      });
      await untilEndedOrWaiting(owner, () => ended, 'the delete');
      hold.go();
      const [status, body] = await deleting;
      expect([status, body]).toEqual([409, expect.objectContaining({ error: 'connector racing has a run in flight', hint: expect.stringContaining('then delete the connector') })]);
      finish();
      expect(await ingested).toBe('committed: Completed');
      expect(await tableOf(ONE, 'racing')).toEqual(['r1']);
      const deleted = await call(ONE, 'DELETE', '/api/connectors/racing');
      expect(deleted.status).toBe(204);
      expect(await tableOf(ONE, 'racing')).toBeUndefined();
    } finally {
      finish();
      hold.go();
      await runner.close();
    }
  }, 60_000);
});

describe('a CSV source and a connector of the same name', () => {
  // The CSV source `twin` ingested before a connector `twin` was applied; what the connector then wrote carries its own id.
  async function twins(): Promise<void> {
    await ingest(ONE, 'twin', 'twin_early', 'id,city\ne1,Lyon\ne2,Oslo\n');
    const manifest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'twin' },
      connector_type: 'rest-generic',
      spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'rows', path: '/rows', target: { table: 'ext.twin_api', unique_key: '$.id' } }] },
    };
    const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': String(ONE), 'Content-Type': 'application/json' }, body: JSON.stringify(manifest) });
    expect(applied.status).toBe(201);
    await ingest(ONE, 'twin', 'twin_api', 'id,city\na1,Rome\n');
    expect(await tableOf(ONE, 'twin_api')).toEqual(['a1']);
  }
  const sourceChunks = () => count('select count(*) as n from retrieval.chunks where connector_id = $1', [csvSourceId(ONE, 'twin')]);

  it("DELETE /api/connectors/{name} deletes the connector and leaves the CSV source's rows; a second delete erases those", async () => {
    await twins();
    await hub.services.retrieval.indexPass();
    expect(await sourceChunks()).toBeGreaterThan(0);

    const deleted = await call(ONE, 'DELETE', '/api/connectors/twin');
    expect(deleted.status).toBe(204);
    expect(await tableOf(ONE, 'twin_api')).toBeUndefined();
    expect(await tableOf(ONE, 'twin_early')).toEqual(['e1', 'e2']);
    expect(await sourceChunks()).toBeGreaterThan(0);

    // No connector of the name any more: the delete is the CSV source's.
    const again = await call(ONE, 'DELETE', '/api/connectors/twin');
    expect(again.status).toBe(204);
    expect(await tableOf(ONE, 'twin_early')).toBeUndefined();
    expect(await sourceChunks()).toBe(0);
    expect((await call(ONE, 'DELETE', '/api/connectors/twin')).status).toBe(404);
  }, 60_000);

  it("the operator's delete of the Connector leaves the CSV source's rows", async () => {
    await twins();
    expect(await hub.services.db.withTenant(ONE, (tx) => connectorHandler.remove(tx, 'twin'))).toBe(true);
    expect(await tableOf(ONE, 'twin_api')).toBeUndefined();
    expect(await tableOf(ONE, 'twin_early')).toEqual(['e1', 'e2']);
    expect((await call(ONE, 'DELETE', '/api/connectors/twin')).status).toBe(204);
    expect(await tableOf(ONE, 'twin_early')).toBeUndefined();
  }, 60_000);
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../../test/harness/database.js';
import { captureLogs, type LogCapture } from '../../../test/harness/log-capture.js';
import { type Hold, holdAfter, outcome, untilEndedOrWaiting } from '../../../test/harness/held-transaction.js';
import type { Database, Tx } from '../../db/database.js';
import { expandPending, pendingIndexer } from '../../retrieval/indexer.js';
import type { Target } from '../types.js';
import { ExtSchema } from './ddl.js';
import { dropConnectorData, purgeEndpointData } from './drop.js';
import { prepareRow } from './rows.js';
import { upsertChunk } from './writer.js';

/**
 * A connector delete or an endpoint purge meeting an indexer pass, on the real PostgreSQL, in a
 * fixed interleaving: the pass is held at a chosen statement, the delete or purge sent meanwhile,
 * the pass let go once the delete has finished or waits on a lock. Both take retrieval.pending
 * entries before chunks (src/connectors/target/drop.ts, claimPending): neither ends in a deadlock
 * (40P01), and no chunk is left citing a removed row.
 */
describe('a connector delete or an endpoint purge during an indexer pass', () => {
  let t: MigratedDatabase;
  let ext: ExtSchema;
  let logs: LogCapture;

  const byId = (table: string): Target => ({ kind: 'hybrid', table, unique_key: '$.id', promote: [] });
  /** Tenant 2's connector, writing a table of the same name in its own schema. */
  const beta = { id: '00000000-0000-4000-8000-0000000000f1', name: 'crm', endpoint: '00000000-0000-4000-8000-0000000000f2' };

  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme', 2: 'beta' });
    ext = new ExtSchema(t.ownerUrl, TEST_ROLES);
    logs = captureLogs('warn');
  });
  afterAll(async () => {
    logs?.restore();
    await ext?.close();
    await t?.close();
  });

  /** A run's chunk: its rows written, its table registered, its pending entry recorded. */
  async function written(tenantId: number, connector: { id: string; name: string }, endpointUuid: string, table: string, items: unknown[]): Promise<void> {
    const target = byId(table);
    await ext.ensureTable(tenantId, table, []);
    const rows = items.map((item) => prepareRow(item, target));
    const ids = { tenantId, connectorId: connector.id, endpointUuid };
    await t.db.withTenant(tenantId, async (tx) => {
      await tx.query(
        'insert into connectors.ext_tables (tenant_id, connector_id, endpoint_uuid, table_name) values (core.current_tenant(), $1, $2, $3) on conflict do nothing',
        [connector.id, endpointUuid, table],
      );
      await upsertChunk(tx, target, rows, ids);
      await pendingIndexer.rowsWritten(tx, { ...ids, connectorName: connector.name, table, scopes: [connector.name], rows });
    });
  }

  /**
   * An indexer pass taking up to `limit` entries, held once its first statement matching `at` has
   * answered: `held` resolves then, `go` lets it on, `outcome` is how it ended.
   */
  function heldPass(at: RegExp, limit: number): Hold & { outcome: Promise<string> } {
    const hold = holdAfter(at);
    const db = { crossTenant: <T>(job: string, fn: (tx: Tx) => Promise<T>) => t.db.crossTenant(job, (tx) => fn(hold.wrap(tx))) } as unknown as Database;
    return { ...hold, outcome: outcome(expandPending(db, limit)) };
  }

  /** Sends `work` while a pass is held, then lets the pass go once `work` has ended or waits on a lock. */
  async function during(pass: ReturnType<typeof heldPass>, work: () => Promise<unknown>): Promise<{ work: string; pass: string; indexFailures: unknown[] }> {
    await pass.held;
    let ended = false;
    const done = outcome(work()).finally(() => {
      ended = true;
    });
    await untilEndedOrWaiting(t.owner, () => ended, 'the delete or purge');
    pass.go();
    const [workOutcome, passOutcome] = await Promise.all([done, pass.outcome]);
    // An entry that failed (a deadlock the server broke on the pass's side) is logged, not thrown.
    const indexFailures = logs.lines().filter((l) => String(l.msg).startsWith('retrieval index: pending entry'));
    return { work: workOutcome, pass: passOutcome, indexFailures };
  }

  type Chunk = { connector: string; key: string; content: string };
  async function chunks(tenantId: number, table: string): Promise<Chunk[]> {
    const { rows } = await t.owner.query<Chunk>(
      `select connector_id::text as connector, external_id as key, content from retrieval.chunks
        where tenant_id = $1 and table_name = $2 order by content`,
      [tenantId, table],
    );
    return rows;
  }

  /** The tenant's row chunks whose row (key and hash) is not in the tenant's table. */
  async function miscited(tenantId: number): Promise<string[]> {
    const { rows } = await t.owner.query<{ table_name: string; external_id: string; row_hash: string }>(
      'select table_name, external_id, row_hash from retrieval.chunks where tenant_id = $1 and row_hash is not null order by id',
      [tenantId],
    );
    const wrong: string[] = [];
    for (const c of rows) {
      const found = await t.owner.query(`select 1 from ext_t${tenantId}.${c.table_name.slice(4)} where external_id = $1 and row_hash = $2`, [c.external_id, c.row_hash]);
      if (found.rows.length === 0) wrong.push(`${c.table_name} ${c.external_id}: no such row`);
    }
    return wrong;
  }

  async function pending(tenantId: number): Promise<Array<{ connector: string; table: string; attempts: number }>> {
    const { rows } = await t.owner.query<{ connector: string; table: string; attempts: number }>(
      'select connector_id::text as connector, table_name as "table", attempts from retrieval.pending where tenant_id = $1 order by id',
      [tenantId],
    );
    return rows;
  }

  /** Tenant 2's Ada in a table of the same name, indexed, with every entry pending so far: what comes first in each case. */
  async function otherTenantIndexed(table: string): Promise<void> {
    await written(2, beta, beta.endpoint, table, [{ id: 'a1', name: 'Ada', of: table }]);
    while ((await expandPending(t.db)) > 0);
  }

  it.each([
    {
      what: 'a connector delete',
      table: 'ext.deleted',
      crm: { id: '00000000-0000-4000-8000-0000000000a1', name: 'crm', endpoint: '00000000-0000-4000-8000-0000000000a2' },
      remove: (tx: Tx, crm: { id: string; endpoint: string }): Promise<unknown> => dropConnectorData(tx, crm.id),
    },
    {
      what: 'an endpoint purge',
      table: 'ext.purged',
      crm: { id: '00000000-0000-4000-8000-0000000000b1', name: 'books', endpoint: '00000000-0000-4000-8000-0000000000b2' },
      remove: (tx: Tx, crm: { id: string; endpoint: string }): Promise<unknown> => purgeEndpointData(tx, crm.id, crm.endpoint),
    },
  ])('$what while a pass holds an entry of its rewritten row: the pass commits first, then the delete, with no deadlock', async ({ table, crm, remove }) => {
    const erp = { id: '00000000-0000-4000-8000-0000000000e1', name: 'erp', endpoint: '00000000-0000-4000-8000-0000000000e2' };
    // Every case's rows name their table: a corpus holds one chunk per content (row hash), whatever the table.
    await written(1, erp, erp.endpoint, table, [{ id: 'b2', name: 'Bob', of: table }]);
    await written(1, crm, crm.endpoint, table, [{ id: 'a1', name: 'Ada', of: table }]);
    await otherTenantIndexed(table);
    // crm rewrites Ada: its entry's pass settles the chunk of the earlier Ada, the chunk the delete removes.
    await written(1, crm, crm.endpoint, table, [{ id: 'a1', name: 'Ada Lovelace', of: table }]);
    // Tenant 2's entry on a table of the same name, newer: the pass does not take it, the delete must leave it.
    await written(2, beta, beta.endpoint, table, [{ id: 'c3', name: 'Cy', of: table }]);
    const beforeOther = { chunks: await chunks(2, table), pending: await pending(2) };

    // The pass holds crm's entry (the oldest), no chunk yet.
    const pass = heldPass(/for update skip locked/, 1);
    const ended = await during(pass, () => t.db.withTenant(1, (tx) => remove(tx, crm)));

    expect(ended).toEqual({ work: 'committed', pass: 'committed', indexFailures: [] });
    expect(await chunks(1, table)).toEqual([{ connector: erp.id, key: 'b2', content: `${table} b2: id: b2; of: ${table}; name: Bob` }]);
    expect(await miscited(1)).toEqual([]);
    expect(await pending(1)).toEqual([]);
    expect({ chunks: await chunks(2, table), pending: await pending(2) }).toEqual(beforeOther);
    expect(beforeOther.pending).toEqual([{ connector: beta.id, table, attempts: 0 }]);
  });

  it("a connector delete while a pass has read rows of it for another connector's entry: the chunk the pass writes is settled by the delete", async () => {
    const table = 'ext.shared';
    const crm = { id: '00000000-0000-4000-8000-0000000000c1', name: 'crm', endpoint: '00000000-0000-4000-8000-0000000000c2' };
    const erp = { id: '00000000-0000-4000-8000-0000000000d1', name: 'erp', endpoint: '00000000-0000-4000-8000-0000000000d2' };
    await otherTenantIndexed(table);
    // erp writes Bob, then crm the same row under the same key: the row is crm's (its last writer).
    await written(1, erp, erp.endpoint, table, [{ id: 'b2', name: 'Bob', of: table }]);
    await written(1, crm, crm.endpoint, table, [{ id: 'b2', name: 'Bob', of: table }]);
    await written(2, beta, beta.endpoint, table, [{ id: 'c3', name: 'Cy', of: table }]);
    const beforeOther = await chunks(2, table);

    // The pass holds erp's entry (the oldest) and has read its rows: crm's Bob, which the delete removes.
    const pass = heldPass(/^select external_id, row_hash/, 1);
    const ended = await during(pass, () => t.db.withTenant(1, (tx) => dropConnectorData(tx, crm.id)));

    expect(ended).toEqual({ work: 'committed', pass: 'committed', indexFailures: [] });
    // erp holds no row of Bob any more: its chunk of crm's row went with that row (erp's next run stores it back).
    expect(await miscited(1)).toEqual([]);
    expect(await chunks(1, table)).toEqual([]);
    expect(await pending(1)).toEqual([]);
    expect(await chunks(2, table)).toEqual(beforeOther);
    expect(await pending(2)).toEqual([{ connector: beta.id, table, attempts: 0 }]);
  });
});

import type { Tx } from '../../db/database.js';
import { logger } from '../../observability/logger.js';
import { settleRowChunks } from '../../retrieval/row-chunks.js';
import { ddlLockName, tableRegclassSql, tenantSchema, tenantTableSql, tenantTableText } from './ddl.js';
import { KEY_ORDER_SQL } from './writer.js';
import { CLEAR_RESUME } from '../resume.js';

/**
 * What deleting a connector or purging an endpoint does to the data it ingested, inside the
 * caller's tenant transaction (as the application role). Every tenant has its own ext tables
 * (schema `ext_t<id>`, src/connectors/target/ddl.ts): a delete removes this connector's rows and its
 * registrations, then drops the tenant's tables that nothing of the tenant registers any more and
 * that are empty, and the tenant's schema with its last table (connectors.drop_unused_ext_tables(),
 * an owner function acting on the current tenant's schema only). All of it commits or none of it.
 * The connector's retrieval chunks and pending index entries go too. Returns the `ext.<name>` tables dropped.
 * A row is the last writer's (its `connector_id`), so the rows removed may include rows other
 * endpoints read too: their watermarks are cleared (clearSharers). Other connectors' chunks that
 * cited a removed row (one of identical rows under several keys, or a row they wrote before this
 * connector did) name a surviving identical row of their own connector instead, or go
 * (settleRowChunks). The tenant's DDL lock and the tables it touches are locked first (lockTables: the
 * lock order that keeps a delete or purge of another connector sharing them, or a run adding a
 * column to one, from deadlocking with it), then its pending
 * entries and every entry of the tenant on a table it registers (claimPending: the order that keeps
 * it from deadlocking with an indexer pass), after the connector's row, which the caller has locked
 * (deleteConnector; for a CSV source with no manifest, the source's lock: deleteCsvSource).
 */
export async function dropConnectorData(tx: Tx, connectorId: string): Promise<string[]> {
  const { rows } = await tx.query<{ table_name: string }>('select distinct table_name from connectors.ext_tables where connector_id = $1 order by 1', [connectorId]);
  // The tenant's DDL lock, which drop_unused_ext_tables takes again at the end: before any table's.
  if (tx.tenantId !== undefined) await tx.query('select pg_advisory_xact_lock(hashtext($1))', [ddlLockName(tenantSchema(tx.tenantId))]);
  await lockTables(tx, rows.map((r) => r.table_name), 'connector_id', connectorId);
  await claimPending(tx, 'connector_id = $1', [connectorId], rows.map((r) => r.table_name));
  const emptied: string[] = [];
  for (const { table_name } of rows) {
    if ((await deleteRows(tx, table_name, 'connector_id = $1', [connectorId])) > 0) {
      await clearSharers(tx, table_name, 'connector_id <> $2', [connectorId], 'a connector delete');
      emptied.push(table_name);
    }
  }
  await tx.query('delete from connectors.ext_tables where connector_id = $1', [connectorId]);
  await tx.query('delete from retrieval.chunks where connector_id = $1', [connectorId]);
  const tenantId = tx.tenantId;
  if (tenantId !== undefined) for (const table of emptied) await settleRowChunks(tx, tenantId, table);
  const dropped = await tx.query<{ name: string }>('select connectors.drop_unused_ext_tables() as name');
  return dropped.rows.map((r) => r.name);
}

/**
 * Empties one endpoint's rows and their retrieval chunks (its registration stays: the next run writes
 * the same table). A chunk the endpoint carried, or that cited one of the removed rows, names a
 * surviving identical row of its connector (another endpoint's, or one the endpoint wrote under
 * another key) with that row's endpoint, or goes (settleRowChunks). The tables it touches are locked
 * first (lockTables), then its pending entries and every entry of the tenant on a table it registers
 * (claimPending), after the connector's row, which the caller has locked (purgeEndpoint).
 */
export async function purgeEndpointData(tx: Tx, connectorId: string, endpointUuid: string): Promise<void> {
  const { rows } = await tx.query<{ table_name: string }>(
    'select distinct table_name from connectors.ext_tables where connector_id = $1 and endpoint_uuid = $2 order by 1',
    [connectorId, endpointUuid],
  );
  await lockTables(tx, rows.map((r) => r.table_name), 'uuid', endpointUuid);
  await claimPending(tx, 'connector_id = $1 and endpoint_uuid = $2', [connectorId, endpointUuid], rows.map((r) => r.table_name));
  const tenantId = tx.tenantId;
  for (const { table_name } of rows) {
    if ((await deleteRows(tx, table_name, 'endpoint_id = $1', [endpointUuid])) > 0) await clearSharers(tx, table_name, 'uuid <> $2', [endpointUuid], 'an endpoint purge');
    if (tenantId !== undefined) await settleRowChunks(tx, tenantId, table_name, { endpoint: { connectorId, endpointUuid } });
  }
  // What is left of its chunks: those of a table that is no more.
  await tx.query('delete from retrieval.chunks where connector_id = $1 and endpoint_uuid = $2', [connectorId, endpointUuid]);
}

/**
 * The lock order of a delete or purge, the same as an indexer pass's (src/retrieval/indexer.ts,
 * expandPending), so that neither waits for the other while holding what the other waits for.
 * An indexer pass:
 *   1. locks its retrieval.pending entries, `for update skip locked` in id order (never waiting),
 *      then an advisory lock per tenant and table of its entries, in the order of the keys, waiting
 *      only for another pass holding one (a delete or purge never takes them);
 *   2. per entry, reads the entry's ext table (its rows are read, not locked), then locks the chunks
 *      it settles, replaces or upserts (settleRowChunks with the entry's keys: chunks of any
 *      connector of the tenant naming them in that table; its delete, its insert … on conflict),
 *      waiting on a chunk another transaction locked or removed;
 *   3. last, deletes the entries it holds (or updates one that failed).
 * A delete or purge:
 *   0. before this, its caller (deleteConnector, purgeEndpoint in src/connectors/store.ts) has
 *      locked the connector's row `for update`, so a delete and a purge of one connector (or two
 *      purges of it) never interleave the steps below: the second waits there, holding nothing. They
 *      did, the purge taking no such lock: a purge deleting rows of a table (holding its lock on the
 *      table) while waiting on a row the delete had removed, and the delete then dropping that table
 *      (step 5, waiting for the purge's table lock), was a deadlock (40P01, the purge a 503); two
 *      purges of endpoints sharing a table each cleared the other's watermark (step 3), then waited
 *      to clear its own. An indexer pass locks a connector's row only shared and `skip locked`
 *      (src/retrieval/indexer.ts, expandEntry: never waiting for it, leaving the entry for later);
 *      a delete or purge waiting here for a pass's lock holds nothing the pass waits for;
 *   1. then locks the tenant's tables it touches (lockTables): a transaction-scoped advisory lock
 *      per table, in the order of the keys, waiting for a delete or purge that holds one to commit.
 *      It touches the tables it deletes rows of (those the connector, the endpoint, registers) and
 *      every table registered or targeted by an endpoint whose row it writes: its own (the endpoints
 *      a delete removes, the one a purge clears the watermark of) and those whose watermarks step 3
 *      may clear (clearSharers: the endpoints registering or targeting one of its tables). This is
 *      what orders operations on different connectors, which step 0 leaves apart. Two that share a
 *      table, or write the row of one endpoint, hold a key in common: the later waits here, holding
 *      only its connector's row (and keys before that one), until the earlier commits. Two that hold
 *      no key in common meet nowhere below: no row (a row is in one table), no pending entry nor
 *      chunk (each names one table, and an entry or chunk of the connector, the endpoint, names one it
 *      registers), no endpoint row, and step 5 only drops tables that neither registers. Before, they
 *      met in a deadlock (40P01, the one chosen a 503): two purges of endpoints of different
 *      connectors sharing a table each cleared the other's watermark (step 3), then waited to clear
 *      its own; a delete of C and a purge of D's endpoint sharing a table cleared each other's
 *      watermarks, then the purge waited to clear its own and the delete to remove C's endpoints;
 *      two purges of tables they did not share, each clearing the watermarks of two endpoints that
 *      had written a table of both (an endpoint whose table changed registers both), each locked
 *      one of them and waited for the other. The tables are read once, here: an endpoint that
 *      registers one of them later (its first run into it, in flight) is not counted.
 *      A delete takes the tenant's DDL lock before these (ddlLockName in ./ddl.ts: what a run takes
 *      to create a table or add a column, ExtSchema.ensureTable, and step 5 takes again), so deletes
 *      of one tenant run one after the other, and a run's DDL waits for a delete, holding nothing.
 *      Before, a delete holding its rows of a shared table (a lock on the table) waited at step 5
 *      for the DDL lock, held by a run adding a column to that table, which waited for the delete's
 *      lock on it: a deadlock (40P01), the run's DDL failing (and the run). A run's registration of
 *      its table takes the DDL lock shared (registerTargetTable in ./register.ts), so step 5 sees
 *      every registration of a run that could have found the table still there (it waits for the
 *      delete otherwise). A re-apply counting the rows of an endpoint's old table takes it shared too
 *      (storedRows in ../store.ts, after its connector's row): step 5 never drops a table it reads. A purge takes no DDL lock and never waits for one, and drops no table: a
 *      run's DDL of a table waits for a purge of it as for any writer;
 *   2. in id order, locks the tenant's pending entries a pass could be expanding into chunks this
 *      transaction then settles or removes, waiting for a pass that holds one to commit: the
 *      connector's (the endpoint's) own, `own`, deleted at once, and every entry of the tenant on one
 *      of `tables`, the tables it registers (another connector's entry on a shared table makes
 *      chunks of rows this removes);
 *   3. deletes its rows (deleteRows) and clears other endpoints' watermarks (clearSharers), table by
 *      table in name order;
 *   4. locks chunks: deletes its own, settles those citing a removed row (settleRowChunks);
 *   5. last, drops the ext tables nothing registers any more (drop_unused_ext_tables, exclusive).
 * A pass that starts later skips the entries locked in 2. Before, the pending entries were deleted
 * after the chunks: a pass holding an entry of the connector (the endpoint) and then waiting on one
 * of the chunks the delete had removed or settled was a deadlock (40P01, the delete or purge failing
 * with a 503), and a pass that had read rows the delete then removed wrote a chunk citing them after
 * the delete had settled the table's chunks. An indexer pass never waits for the connector's row
 * and takes none of the locks of step 1: a delete or purge waiting at step 0 or 1 holds no entry, chunk or table a pass
 * could wait for, so the pass's order against steps 2 to 4 is as above. Nor does a run: its chunk
 * transactions (rows of its table, dead letters, events, a new pending entry, its run's counters)
 * wait only on rows of that table (a delete or purge at step 3 removing them) and on DDL of it, and
 * no foreign key leads from what they write to a connector's row (only endpoints have one, to their
 * connector); its end waits on its endpoint's row (the watermark) before it holds anything; a
 * trigger waits on the connector's row (`for share`) likewise. So a transaction waiting at step
 * 0 or 1 is never waited for by a run's, and none closes a cycle through these locks. Entries
 * committed after step 2 are not waited for (a run writing one of the tables meanwhile:
 * deleteConnector refuses a delete while a run of the connector itself is in flight, purgeEndpoint a
 * purge while a run of the endpoint is).
 */
async function claimPending(tx: Tx, own: string, values: unknown[], tables: string[]): Promise<void> {
  await tx.query(
    `select id from retrieval.pending
      where (${own}) or (tenant_id = $${values.length + 1} and table_name = any($${values.length + 2}::text[]))
      order by id for update`,
    [...values, tx.tenantId, tables],
  );
  await tx.query(`delete from retrieval.pending where ${own}`, values);
}

/**
 * Step 1 of the lock order above: a transaction-scoped advisory lock (pg_advisory_xact_lock) on
 * every table of the tenant this delete or purge touches, taken one statement each in the order of
 * the keys (so two transactions wanting several lock them in one order, and tables whose keys
 * collide are one lock). `tables` are those it deletes rows of; `own` picks its own endpoints (`uuid`
 * the purged one, `connector_id` the deleted connector's); the tables registered or targeted by them
 * and by every endpoint registering or targeting one of `tables` (those clearSharers may clear) are
 * locked too. A key is hashtextextended('svc-hub:ext-table:<tenant>:ext.<name>', 0), 64 bits in the
 * space of single-key advisory locks (beside the `svc-hub:…` keys of src/db/migrations.ts,
 * src/dispatch/leader.ts, the DDL lock of src/connectors/target/ddl.ts and others, each its own prefix).
 */
async function lockTables(tx: Tx, tables: string[], own: 'uuid' | 'connector_id', id: string): Promise<void> {
  const { rows } = await tx.query<{ key: string }>(
    `with touched as (
       select w.uuid, w.target_table from connectors.endpoints w
        where w.tenant_id = $3 and (w.${own} = $1 or w.target_table = any($2::text[])
           or exists (select 1 from connectors.ext_tables r where r.endpoint_uuid = w.uuid and r.tenant_id = $3 and r.table_name = any($2::text[]))))
     select key::text as key from (
       select distinct hashtextextended('svc-hub:ext-table:' || $3::bigint::text || ':' || name, 0) as key
         from (select unnest($2::text[]) as name
               union select target_table from touched
               union select r.table_name from connectors.ext_tables r join touched w on w.uuid = r.endpoint_uuid where r.tenant_id = $3) n
     ) k order by k.key`,
    [id, tables, tx.tenantId],
  );
  for (const { key } of rows) await tx.query('select pg_advisory_xact_lock($1::bigint)', [key]);
}

/**
 * A table's rows belong to whichever endpoint wrote them last, so rows another endpoint (of this or
 * another connector) ingested may be among those a delete or purge removed: every other endpoint of
 * the tenant that targets or registers `table` and holds a watermark or a stored position (resume.ts) has them cleared, in the same
 * transaction, so its next run reads everything again and stores the rows back instead of asking
 * only for what changed since (probe 31 H2). `others` picks the other endpoints (`$2` its value).
 * Logged, naming the endpoints. Returns them as `connector/endpoint`.
 */
async function clearSharers(tx: Tx, table: string, others: string, values: unknown[], what: string): Promise<string[]> {
  const { rows } = await tx.query<{ name: string }>(
    `update connectors.endpoints w set watermark = null, watermark_updated_at = now(), ${CLEAR_RESUME}
       from connectors.connectors c
      where c.id = w.connector_id and (w.watermark is not null or w.resume is not null) and w.${others} and w.tenant_id = $3
        and (w.target_table = $1 or exists (select 1 from connectors.ext_tables t where t.endpoint_uuid = w.uuid and t.table_name = $1 and t.tenant_id = $3))
      returning c.name || '/' || w.endpoint_id as name`,
    // The tenant named as well as enforced by row-level security: whatever role the transaction has,
    // another tenant's endpoint on a table of the same name is never touched.
    [table, ...values, tx.tenantId],
  );
  const cleared = rows.map((r) => r.name).sort();
  if (cleared.length > 0) {
    logger().warn(
      { table, endpoints: cleared },
      `${what} removed rows of ${table}, which other endpoints also write: their watermarks are cleared, so that their next runs read everything again and store those rows back: ${cleared.join(', ')}`,
    );
  }
  return cleared;
}

/**
 * Deletes the rows of `table` matching `where`; answers how many went. They are locked first in
 * KEY_ORDER, the order a run's chunk writes them in: a run of another connector writing the table
 * meanwhile waits for the delete or the delete for it. (Deleted in the table's physical order, a
 * delete holding rows at one end of the keys and a chunk holding them at the other each waited
 * for the other: a deadlock, the delete a 503 or the run failed on `deadlock detected`.)
 */
async function deleteRows(tx: Tx, table: string, where: string, values: unknown[]): Promise<number> {
  let sql: string;
  try {
    sql = tenantTableSql(tx.tenantId, table);
  } catch {
    return 0; // a registration that names no usable table (never written by the runner)
  }
  const exists = await tx.query<{ t: string | null }>(`select ${tableRegclassSql('$1')} as t`, [tenantTableText(tx.tenantId, table)]);
  if (!exists.rows[0]?.t) return 0;
  return (await tx.query(`delete from ${sql} where id in (select id from ${sql} where ${where} order by ${KEY_ORDER_SQL} for update)`, values)).rowCount ?? 0;
}

import type { Tx } from '../../db/database.js';
import { logger } from '../../observability/logger.js';
import { settleRowChunks } from '../../retrieval/row-chunks.js';
import { tenantTableSql, tenantTableText } from './ddl.js';

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
 * (settleRowChunks). Its pending entries, and every entry of the tenant on a table it registers,
 * are locked first (claimPending: the lock order that keeps it from deadlocking with an indexer pass),
 * after the connector's row, which the caller has locked (deleteConnector).
 */
export async function dropConnectorData(tx: Tx, connectorId: string): Promise<string[]> {
  const { rows } = await tx.query<{ table_name: string }>('select distinct table_name from connectors.ext_tables where connector_id = $1', [connectorId]);
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
 * another key) with that row's endpoint, or goes (settleRowChunks). Its pending entries, and every
 * entry of the tenant on a table it registers, are locked first (claimPending), after the connector's
 * row, which the caller has locked (purgeEndpoint).
 */
export async function purgeEndpointData(tx: Tx, connectorId: string, endpointUuid: string): Promise<void> {
  const { rows } = await tx.query<{ table_name: string }>('select distinct table_name from connectors.ext_tables where connector_id = $1 and endpoint_uuid = $2', [
    connectorId,
    endpointUuid,
  ]);
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
 *   1. locks its retrieval.pending entries, `for update skip locked` in id order (never waiting);
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
 *      (step 4, waiting for the purge's table lock), was a deadlock (40P01, the purge a 503); two
 *      purges of endpoints sharing a table each cleared the other's watermark (step 2), then waited
 *      to clear its own. An indexer pass never locks the connector's row;
 *   1. here, first, in id order, locks the tenant's pending entries a pass could be expanding into
 *      chunks this transaction then settles or removes, waiting for a pass that holds one to commit:
 *      the connector's (the endpoint's) own, `own`, deleted at once, and every entry of the tenant on
 *      one of `tables`, the tables it registers (another connector's entry on a shared table makes
 *      chunks of rows this removes);
 *   2. deletes its rows (deleteRows) and clears other endpoints' watermarks (clearSharers);
 *   3. locks chunks: deletes its own, settles those citing a removed row (settleRowChunks);
 *   4. last, drops the ext tables nothing registers any more (drop_unused_ext_tables, exclusive).
 * A pass that starts later skips the entries locked in 1. Before, the pending entries were deleted
 * after the chunks: a pass holding an entry of the connector (the endpoint) and then waiting on one
 * of the chunks the delete had removed or settled was a deadlock (40P01, the delete or purge failing
 * with a 503), and a pass that had read rows the delete then removed wrote a chunk citing them after
 * the delete had settled the table's chunks. Entries committed after step 1 are not waited for (a
 * run writing one of the tables meanwhile: deleteConnector refuses a delete while a run of the
 * connector itself is in flight, purgeEndpoint a purge while a run of the endpoint is).
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
 * A table's rows belong to whichever endpoint wrote them last, so rows another endpoint (of this or
 * another connector) ingested may be among those a delete or purge removed: every other endpoint of
 * the tenant that targets or registers `table` and holds a watermark has it cleared, in the same
 * transaction, so its next run reads everything again and stores the rows back instead of asking
 * only for what changed since (probe 31 H2). `others` picks the other endpoints (`$2` its value).
 * Logged, naming the endpoints. Returns them as `connector/endpoint`.
 */
async function clearSharers(tx: Tx, table: string, others: string, values: unknown[], what: string): Promise<string[]> {
  const { rows } = await tx.query<{ name: string }>(
    `update connectors.endpoints w set watermark = null, watermark_updated_at = now()
       from connectors.connectors c
      where c.id = w.connector_id and w.watermark is not null and w.${others} and w.tenant_id = $3
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

/** Deletes the rows of `table` matching `where`; answers how many went. */
async function deleteRows(tx: Tx, table: string, where: string, values: unknown[]): Promise<number> {
  let sql: string;
  try {
    sql = tenantTableSql(tx.tenantId, table);
  } catch {
    return 0; // a registration that names no usable table (never written by the runner)
  }
  const exists = await tx.query<{ t: string | null }>('select to_regclass($1) as t', [tenantTableText(tx.tenantId, table)]);
  if (!exists.rows[0]?.t) return 0;
  return (await tx.query(`delete from ${sql} where ${where}`, values)).rowCount ?? 0;
}

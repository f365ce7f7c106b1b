import type { Tx } from '../../db/database.js';
import { tenantTableSql, tenantTableText } from './ddl.js';

/**
 * What deleting a connector or purging an endpoint does to the data it ingested, inside the
 * caller's tenant transaction (as the application role). Every tenant has its own ext tables
 * (schema `ext_t<id>`, src/connectors/target/ddl.ts): a delete removes this connector's rows and its
 * registrations, then drops the tenant's tables that nothing of the tenant registers any more and
 * that are empty, and the tenant's schema with its last table (connectors.drop_unused_ext_tables(),
 * an owner function acting on the current tenant's schema only). All of it commits or none of it.
 * The connector's retrieval chunks and pending index entries go too. Returns the `ext.<name>` tables dropped.
 */
export async function dropConnectorData(tx: Tx, connectorId: string): Promise<string[]> {
  const { rows } = await tx.query<{ table_name: string }>('select distinct table_name from connectors.ext_tables where connector_id = $1', [connectorId]);
  for (const { table_name } of rows) await deleteRows(tx, table_name, 'connector_id = $1', [connectorId]);
  await tx.query('delete from connectors.ext_tables where connector_id = $1', [connectorId]);
  await tx.query('delete from retrieval.chunks where connector_id = $1', [connectorId]);
  await tx.query('delete from retrieval.pending where connector_id = $1', [connectorId]);
  const dropped = await tx.query<{ name: string }>('select connectors.drop_unused_ext_tables() as name');
  return dropped.rows.map((r) => r.name);
}

/** Empties one endpoint's rows and their retrieval chunks (its registration stays: the next run writes the same table). */
export async function purgeEndpointData(tx: Tx, connectorId: string, endpointUuid: string): Promise<void> {
  const { rows } = await tx.query<{ table_name: string }>('select distinct table_name from connectors.ext_tables where connector_id = $1 and endpoint_uuid = $2', [
    connectorId,
    endpointUuid,
  ]);
  for (const { table_name } of rows) await deleteRows(tx, table_name, 'endpoint_id = $1', [endpointUuid]);
  await tx.query('delete from retrieval.chunks where connector_id = $1 and endpoint_uuid = $2', [connectorId, endpointUuid]);
  await tx.query('delete from retrieval.pending where connector_id = $1 and endpoint_uuid = $2', [connectorId, endpointUuid]);
}

async function deleteRows(tx: Tx, table: string, where: string, values: unknown[]): Promise<void> {
  let sql: string;
  try {
    sql = tenantTableSql(tx.tenantId, table);
  } catch {
    return; // a registration that names no usable table (never written by the runner)
  }
  const exists = await tx.query<{ t: string | null }>('select to_regclass($1) as t', [tenantTableText(tx.tenantId, table)]);
  if (!exists.rows[0]?.t) return;
  await tx.query(`delete from ${sql} where ${where}`, values);
}

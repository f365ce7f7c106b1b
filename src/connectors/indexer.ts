import type { Tx } from '../db/database.js';
import type { PreparedRow } from './target/rows.js';

/**
 * The hand-off where retrieval will index written rows (chunks deduplicated by row_hash per tenant
 * and corpus). Called inside the ingestion transaction, after the rows are written. No-op until the
 * retrieval area plugs in.
 */
export interface RowIndexer {
  rowsWritten(tx: Tx, batch: { tenantId: number; connectorId: string; endpointUuid: string; table: string; scopes: string[]; rows: PreparedRow[] }): Promise<void>;
}

export const noIndexer: RowIndexer = {
  async rowsWritten() {},
};

import type { Tx } from '../db/database.js';
import type { PreparedRow } from './target/rows.js';

/**
 * The hand-off where retrieval indexes written rows (chunks deduplicated by row_hash per tenant and
 * corpus, the corpus being the connector's name). Called inside the ingestion transaction, after the
 * rows are written (src/retrieval/indexer.ts).
 */
export interface RowIndexer {
  rowsWritten(
    tx: Tx,
    batch: { tenantId: number; connectorId: string; connectorName: string; endpointUuid: string; table: string; scopes: string[]; rows: PreparedRow[] },
  ): Promise<void>;
}

export const noIndexer: RowIndexer = {
  async rowsWritten() {},
};

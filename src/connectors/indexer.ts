import type { Statement, Tx } from '../db/database.js';
import type { PreparedRow } from './target/rows.js';

/**
 * The hand-off where retrieval indexes written rows (chunks deduplicated by row_hash per tenant and
 * corpus, the corpus being the connector's name). Called inside the ingestion transaction, after the
 * rows are written (src/retrieval/indexer.ts).
 */
export interface RowIndexer {
  rowsWritten(tx: Tx, batch: WrittenBatch): Promise<void>;
  /**
   * The one statement `rowsWritten` sends for `batch` (null: none), for a caller that sends it in one
   * message with the chunk's other statements (ConnectorRunner: one round trip fewer per chunk). An
   * indexer without it is called through `rowsWritten`.
   */
  rowsWrittenStatement?(batch: WrittenBatch): Statement | null;
}

/** The rows a chunk wrote, and where (RowIndexer). */
export interface WrittenBatch {
  tenantId: number;
  connectorId: string;
  connectorName: string;
  endpointUuid: string;
  table: string;
  scopes: string[];
  rows: PreparedRow[];
}

/** A RowIndexer whose hand-off is one statement (or none): `statement` makes it, rowsWritten sends it. */
export function oneStatementIndexer(statement: (batch: WrittenBatch) => Statement | null): RowIndexer {
  return {
    async rowsWritten(tx, batch) {
      const made = statement(batch);
      if (made) await tx.query(made.text, made.values, { prepare: made.prepare });
    },
    rowsWrittenStatement: statement,
  };
}

export const noIndexer: RowIndexer = oneStatementIndexer(() => null);

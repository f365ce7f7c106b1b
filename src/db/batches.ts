import type { Database } from './database.js';

/** Rows a purge deletes per transaction (`deleteInBatches`). */
export const PURGE_BATCH = 10_000;

/**
 * Runs `statement`, a delete of at most `$n` rows (n: the number of `values` plus one, the batch
 * size), as the worker role in autocommit, again and again until it deletes fewer than `batch`:
 * a purge of any size in short transactions. One transaction over the whole purge would hold a
 * transaction id for as long as it ran, and every outbox consumer of the server reads nothing
 * committed after that id was taken until it ends (docs/operations.md). Returns how many rows went.
 */
export async function deleteInBatches(db: Database, job: string, statement: string, values: unknown[], batch = PURGE_BATCH): Promise<number> {
  let total = 0;
  for (;;) {
    const deleted = (await db.crossTenantQuery(job, statement, [...values, batch])).rowCount ?? 0;
    total += deleted;
    if (deleted < batch) return total;
  }
}

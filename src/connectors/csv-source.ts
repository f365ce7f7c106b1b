import { createHash } from 'node:crypto';
import type { Tx } from '../db/database.js';

/**
 * What names a CSV source with no manifest, and the lock it has instead of a connector row: in a
 * module of their own, as the ingest (csv-ingest.ts), the runner and the connector store all use
 * them and the runner is what the ingest drives.
 */

/** A UUID derived from a text (stable ids for sources that have no manifest). */
export function stableUuid(text: string): string {
  const h = createHash('sha256').update(text).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${((Number.parseInt(h[16]!, 16) & 3) | 8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/**
 * The connector id a CSV source with no manifest stores its runs, rows, table registrations and
 * chunks under: derived from the tenant and the name, so every ingest of the name finds the same one
 * (and another tenant's source of the same name has another).
 */
export function csvSourceId(tenantId: number, name: string): string {
  return stableUuid(`csv:${tenantId}:${name}`);
}

/**
 * The lock a CSV source with no manifest has instead of a connector row: the recording of its runs
 * takes it shared (ConnectorRunner.trigger), its delete exclusive (deleteCsvSource), so a delete
 * waits for runs being recorded and then finds them in flight, and an ingest sent during a delete
 * waits for it to commit.
 */
export async function lockCsvSource(tx: Tx, id: string, mode: 'shared' | 'exclusive'): Promise<void> {
  await tx.query(`select ${mode === 'shared' ? 'pg_advisory_xact_lock_shared' : 'pg_advisory_xact_lock'}(hashtext($1))`, [`csv-source:${id}`]);
}

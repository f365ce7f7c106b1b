import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { prepareRow } from '../connectors/target/rows.js';
import type { Target } from '../connectors/types.js';
import { pendingIndexer } from './indexer.js';

/**
 * Ingestion's hand-off as stored: a written chunk's pending entry carries its rows' hashes (1,000
 * by default, ≈ 68 kB of hex text), out of line and uncompressed. SHA-256 hex does not compress;
 * the attempt (pglz over the whole array) cost every chunk transaction more than a millisecond.
 */
describe('retrieval.pending: the hand-off of a written chunk', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme' });
  });
  afterAll(async () => {
    await t.close();
  });

  const target: Target = { kind: 'hybrid', table: 'partners', unique_key: '$.id', promote: [] };

  it('stores a chunk of 1,000 row hashes whole and uncompressed', async () => {
    const rows = Array.from({ length: 1000 }, (_, i) => prepareRow({ id: i }, target));
    await t.db.withTenant(1, (tx) =>
      pendingIndexer.rowsWritten(tx, {
        tenantId: 1,
        connectorId: '00000000-0000-4000-8000-000000000001',
        connectorName: 'crm',
        endpointUuid: '00000000-0000-4000-8000-000000000002',
        table: 'partners',
        scopes: [],
        rows,
      }),
    );
    const { rows: stored } = await t.owner.query<{ hashes: string[]; compression: string | null; storage: string; fullSize: boolean }>(
      `select p.row_hashes as hashes, pg_column_compression(p.row_hashes) as compression, a.attstorage as storage,
              pg_column_size(p.row_hashes) >= octet_length(array_to_string(p.row_hashes, '')) as "fullSize"
         from retrieval.pending p
         join pg_attribute a on a.attrelid = 'retrieval.pending'::regclass and a.attname = 'row_hashes'`,
    );
    expect(stored).toHaveLength(1);
    expect(stored[0]!.hashes).toEqual(rows.map((r) => r.rowHash));
    expect(stored[0]!.storage).toBe('e');
    expect(stored[0]!.compression).toBeNull();
    expect(stored[0]!.fullSize).toBe(true); // its stored size at least the hashes' own bytes
  });
});

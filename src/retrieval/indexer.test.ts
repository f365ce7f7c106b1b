import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { prepareRow } from '../connectors/target/rows.js';
import type { Target } from '../connectors/types.js';
import type { EmbeddingPort } from './embedding/port.js';
import { embedPending, pendingIndexer } from './indexer.js';

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

/**
 * A stop does not wait for the model: a batch being embedded when the clocks stop (seconds on a busy
 * machine, once the whole of a clean stop) is dropped, its chunks left pending for the next start.
 */
describe('embedPending under a stop', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme' });
    await t.owner.query(
      `insert into retrieval.chunks (tenant_id, corpus, scopes, row_hash, table_name, external_id, content)
       select 1, 'crm', '{}'::text[], md5(i::text), 'ext.rows', i::text, 'chunk ' || i from generate_series(1, 3) as i`,
    );
  });
  afterAll(async () => {
    await t.close();
  });

  /** A model that answers only when told to (a slow local model), with unit vectors of 4 dimensions. */
  function heldModel() {
    let answer: () => void = () => {};
    const calls: string[][] = [];
    const port: EmbeddingPort = {
      provider: 'local',
      model: 'held',
      dimensions: 4,
      embed: (texts) => {
        calls.push(texts);
        return new Promise((resolve) => {
          answer = () => resolve(texts.map(() => Float32Array.from([1, 0, 0, 0])));
        });
      },
    };
    return { port, calls, answer: () => answer() };
  }
  const embedded = async () => (await t.owner.query<{ n: number }>('select count(embedding)::int as n from retrieval.chunks')).rows[0]!.n;

  it('returns at once on the abort, writes nothing, and ignores the answer that comes later', async () => {
    const model = heldModel();
    const stop = new AbortController();
    const pass = embedPending(t.db, model.port, 10, undefined, stop.signal);
    while (model.calls.length === 0) await new Promise((r) => setTimeout(r, 5));
    const began = Date.now();
    stop.abort();
    expect(await pass).toBe(0);
    expect(Date.now() - began).toBeLessThan(1_000);
    model.answer();
    await new Promise((r) => setTimeout(r, 50));
    expect(await embedded()).toBe(0);
  });

  it('without a stop, the answer is written (the same model, so the test above can tell)', async () => {
    const model = heldModel();
    const pass = embedPending(t.db, model.port, 10, undefined, new AbortController().signal);
    while (model.calls.length === 0) await new Promise((r) => setTimeout(r, 5));
    model.answer();
    expect(await pass).toBe(3);
    expect(await embedded()).toBe(3);
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { type Hold, holdAfter, untilEndedOrWaiting } from '../../test/harness/held-transaction.js';
import { demoPartnersConnector } from '../../test/harness/retrieval.js';
import { applyConnector } from '../connectors/store.js';
import { ExtSchema } from '../connectors/target/ddl.js';
import { prepareRow } from '../connectors/target/rows.js';
import { upsertChunk } from '../connectors/target/writer.js';
import type { Target } from '../connectors/types.js';
import type { Database, Tx } from '../db/database.js';
import { EmbeddingUnavailable } from './embedding/errors.js';
import type { EmbeddingPort } from './embedding/port.js';
import { embedPending, expandPending, pendingIndexer, REASON_CHARS, SPLIT_BUDGET_MS, settlingIndexer } from './indexer.js';
import { settleRowChunks } from './row-chunks.js';
import { OpenAiEmbedding } from './embedding/openai.js';
import { createRetrievalServices } from './services.js';
import { EgressPolicy } from '../egress/policy.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { startReceiver } from '../../test/harness/receiver.js';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { until } from '../../test/harness/until.js';

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
    // The database as the pass sees it, each transaction it opens recorded.
    const opened: string[] = [];
    const db = new Proxy(t.db, {
      get(target, prop, receiver) {
        if (prop === 'crossTenant') {
          return (job: string, fn: (tx: Tx) => Promise<unknown>) => {
            opened.push(job);
            return target.crossTenant(job, fn);
          };
        }
        const value = Reflect.get(target, prop, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const pass = embedPending(db, model.port, 10, undefined, stop.signal);
    await until('the model called', () => model.calls.length > 0, { everyMs: 5 });
    const began = Date.now();
    stop.abort();
    expect(await pass).toBe(0);
    // Not relative to a baseline: without the abort the pass waits for an answer that never comes.
    // 10 s, not 1: a loaded machine (a worker's full collection) may hold it a second, never for ever.
    expect(Date.now() - began).toBeLessThan(10_000);
    const before = opened.length;
    model.answer();
    // The marker: a macrotask after the answer; whatever would write it has asked for its transaction by then
    // (the answer's continuations are promise callbacks, which all run before it).
    await new Promise((r) => setImmediate(r));
    expect(opened.slice(before)).toEqual([]);
    expect(await embedded()).toBe(0);
  });

  it('without a stop, the answer is written (the same model, so the test above can tell)', async () => {
    const model = heldModel();
    const pass = embedPending(t.db, model.port, 10, undefined, new AbortController().signal);
    await until('the model called', () => model.calls.length > 0, { everyMs: 5 });
    model.answer();
    expect(await pass).toBe(3);
    expect(await embedded()).toBe(3);
  });
});

/**
 * Entries of every tenant are expanded in one pass. Rows of one table with identical content (one
 * row hash under two keys: after a unique_key changed) used to make the chunk insert fail (`ON
 * CONFLICT DO UPDATE command cannot affect row a second time`), and with it the pass's transaction:
 * no tenant's rows were indexed again, at every tick. Now they are one chunk naming the smallest
 * key, and an entry that fails for whatever reason is set aside (under a savepoint) with a backoff.
 * The same content in two tables of a connector is one chunk too, naming the table written last: its
 * text used to keep naming the other.
 */
describe('expandPending: identical rows, and an entry that fails', () => {
  let t: MigratedDatabase;
  let ext: ExtSchema;
  const connectorId = '00000000-0000-4000-8000-0000000000c1';
  const endpointUuid = '00000000-0000-4000-8000-0000000000e1';
  const byId: Target = { kind: 'hybrid', table: 'ext.twins', unique_key: '$.id', promote: [] };
  const byN: Target = { ...byId, unique_key: '$.n' };

  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme', 2: 'beta' });
    ext = new ExtSchema(t.ownerUrl, TEST_ROLES);
    await ext.ensureTable(1, 'ext.twins', []);
    await ext.ensureTable(2, 'ext.others', []);
  });
  afterAll(async () => {
    await ext?.close();
    await t?.close();
  });

  /** Writes the items under `target`'s key and records their pending entry, as a run's chunk does. */
  async function written(tenantId: number, target: Target, items: unknown[], corpus = 'crm') {
    const rows = items.map((item) => prepareRow(item, target));
    const ids = { tenantId, connectorId, endpointUuid };
    await t.db.withTenant(tenantId, async (tx) => {
      await upsertChunk(tx, target, rows, ids);
      await pendingIndexer.rowsWritten(tx, { ...ids, connectorName: corpus, table: target.table, scopes: [], rows });
    });
    return rows;
  }
  const chunks = async (tenantId: number) =>
    (await t.owner.query<{ row_hash: string; external_id: string; content: string }>('select row_hash, external_id, content from retrieval.chunks where tenant_id = $1 order by content', [tenantId])).rows;
  const pending = async () =>
    (await t.owner.query<{ id: number; tenant_id: string; attempts: number; last_error: string | null; waits: boolean }>(
      'select id, tenant_id::text, attempts, last_error, retry_at > now() as waits from retrieval.pending order by id',
    )).rows;

  it('indexes rows of identical content once, naming the smallest key, and the other tenant\'s rows in the same pass', async () => {
    const [first] = await written(1, byId, [{ id: 'r10', n: 10 }, { id: 'r11', n: 11 }]);
    const [twin] = await written(1, byN, [{ id: 'r10', n: 10 }]); // the same record under its new key: two rows, one hash
    expect(twin!.rowHash).toBe(first!.rowHash);
    await written(2, { ...byId, table: 'ext.others' }, [{ id: 'b1', name: 'Beta' }], 'other');

    // Every entry of the pass is taken, none fails: nothing stays pending.
    expect(await expandPending(t.db)).toBe(3);
    expect(await pending()).toEqual([]);
    expect((await chunks(1)).map((c) => [c.external_id, c.content])).toEqual([
      ['10', 'ext.twins 10: n: 10; id: r10'],
      ['r11', 'ext.twins r11: n: 11; id: r11'],
    ]);
    expect((await chunks(2)).map((c) => c.content)).toEqual(['ext.others b1: id: b1; name: Beta']);

    // Written again under its first key (a later entry reading both rows): still one chunk, the same.
    await written(1, byId, [{ id: 'r10', n: 10 }]);
    expect(await expandPending(t.db)).toBe(1);
    expect((await chunks(1)).map((c) => [c.external_id, c.content])).toEqual([
      ['10', 'ext.twins 10: n: 10; id: r10'],
      ['r11', 'ext.twins r11: n: 11; id: r11'],
    ]);

    // The row a chunk named is rewritten while the other still holds that content: the chunk names the other.
    const [changed] = await written(1, byN, [{ id: 'r10', n: 10, v: 2 }]);
    expect(await expandPending(t.db)).toBe(1);
    expect((await chunks(1)).map((c) => [c.row_hash, c.content])).toEqual([
      [changed!.rowHash, 'ext.twins 10: n: 10; v: 2; id: r10'],
      [first!.rowHash, 'ext.twins r10: n: 10; id: r10'],
      [expect.any(String), 'ext.twins r11: n: 11; id: r11'],
    ]);
  });

  it('sets an entry that fails aside with its error and a backoff; the other entries are indexed, and it is once it can be', async () => {
    // A fault injected into the chunk insert of one corpus.
    await t.owner.query(`create function retrieval.test_poison() returns trigger language plpgsql as $$
      begin if new.corpus = 'poison' then raise exception 'poisoned entry'; end if; return new; end $$`);
    await t.owner.query('create trigger test_poison before insert on retrieval.chunks for each row execute function retrieval.test_poison()');
    await written(1, byId, [{ id: 'p1', n: 1 }], 'poison');
    await written(2, { ...byId, table: 'ext.others' }, [{ id: 'b2', name: 'Beta two' }], 'other');

    expect(await expandPending(t.db)).toBe(2);
    expect((await chunks(2)).map((c) => c.content)).toEqual(['ext.others b1: id: b1; name: Beta', 'ext.others b2: id: b2; name: Beta two']);
    const [failed, ...others] = await pending();
    expect(others).toEqual([]);
    expect(failed).toMatchObject({ tenant_id: '1', attempts: 1, last_error: 'poisoned entry', waits: true });
    // Not tried again before its time: the next pass passes it over.
    expect(await expandPending(t.db)).toBe(0);
    expect(await pending()).toMatchObject([{ id: failed!.id, attempts: 1 }]);
    // Its time come, failing again: the wait doubles.
    await t.owner.query('update retrieval.pending set retry_at = now() where id = $1', [failed!.id]);
    expect(await expandPending(t.db)).toBe(1);
    const { rows: waits } = await t.owner.query<{ attempts: number; seconds: number }>(
      'select attempts, extract(epoch from retry_at - now())::float as seconds from retrieval.pending where id = $1',
      [failed!.id],
    );
    expect(waits[0]!.attempts).toBe(2);
    expect(waits[0]!.seconds).toBeGreaterThan(1);
    expect(waits[0]!.seconds).toBeLessThanOrEqual(2);

    // The fault gone and the time come, the entry is indexed and leaves.
    await t.owner.query('drop trigger test_poison on retrieval.chunks');
    await t.owner.query('update retrieval.pending set retry_at = now() where id = $1', [failed!.id]);
    expect(await expandPending(t.db)).toBe(1);
    expect(await pending()).toEqual([]);
    const { rows: poisoned } = await t.owner.query('select content from retrieval.chunks where corpus = $1', ['poison']);
    expect(poisoned).toEqual([{ content: 'ext.twins p1: n: 1; id: p1' }]);
  });

  it('an entry failing for weeks (past 1,024 failures) is set aside for an hour again, and the pass goes on; before, 2^attempts overflowed and failed every pass', async () => {
    await t.owner.query(`create function retrieval.test_poison_long() returns trigger language plpgsql as $$
      begin if new.corpus = 'poison-long' then raise exception 'poisoned entry'; end if; return new; end $$`);
    await t.owner.query('create trigger test_poison_long before insert on retrieval.chunks for each row execute function retrieval.test_poison_long()');
    try {
      await written(1, byId, [{ id: 'pl1', n: 1 }], 'poison-long');
      await t.owner.query("update retrieval.pending set attempts = 1100 where corpus = 'poison-long'");
      await written(2, { ...byId, table: 'ext.others' }, [{ id: 'b3', name: 'Beta three' }], 'other');
      expect(await expandPending(t.db)).toBe(2);
      expect((await chunks(2)).map((c) => c.content)).toContain('ext.others b3: id: b3; name: Beta three');
      const { rows } = await t.owner.query<{ attempts: number; seconds: number }>(
        "select attempts, extract(epoch from retry_at - now())::float as seconds from retrieval.pending where corpus = 'poison-long'",
      );
      expect(rows[0]!.attempts).toBe(1101);
      expect(rows[0]!.seconds).toBeGreaterThan(3590);
      expect(rows[0]!.seconds).toBeLessThanOrEqual(3600);
    } finally {
      await t.owner.query('drop trigger test_poison_long on retrieval.chunks');
      await t.owner.query("delete from retrieval.pending where corpus = 'poison-long'");
    }
  });

  it('one row that cannot be indexed does not hold back the rows written with it: the entry keeps that row alone, the others get their chunks', async () => {
    // A row whose chunk the database refuses (here a trigger; before V9, a key too long for chunks_table_key). Its chunk insert
    // fails, and with it the entry's: before, none of the entry's rows (a run's chunk of up to 1,000) became searchable, for ever.
    await t.owner.query(`create function retrieval.test_poison_row() returns trigger language plpgsql as $$
      begin if new.external_id = 'bad-row' then raise exception 'poisoned row'; end if; return new; end $$`);
    await t.owner.query('create trigger test_poison_row before insert on retrieval.chunks for each row execute function retrieval.test_poison_row()');
    try {
      const [bad, ...fine] = await written(1, byId, [{ id: 'bad-row', n: 1 }, { id: 'fine1', n: 2 }, { id: 'fine2', n: 3 }], 'poisoned-rows');
      expect(await expandPending(t.db)).toBe(1);
      const { rows: indexed } = await t.owner.query<{ external_id: string }>("select external_id from retrieval.chunks where corpus = 'poisoned-rows' order by external_id");
      expect(indexed.map((c) => c.external_id)).toEqual(['fine1', 'fine2']);
      expect(fine.map((r) => r.rowHash)).toHaveLength(2);
      const { rows: left } = await t.owner.query<{ row_hashes: string[]; attempts: number; last_error: string }>("select row_hashes, attempts, last_error from retrieval.pending where corpus = 'poisoned-rows'");
      expect(left).toEqual([{ row_hashes: [bad!.rowHash], attempts: 1, last_error: expect.stringContaining('poisoned row') }]);
    } finally {
      await t.owner.query('drop trigger test_poison_row on retrieval.chunks');
      await t.owner.query("delete from retrieval.pending where corpus = 'poisoned-rows'");
    }
  });

  it('a row whose key is too long for a btree entry of (tenant, table, key) gets its chunk, settled by key through chunks_table_key when rewritten', async () => {
    // 2,680 characters that do not compress: the table's unique index takes the key, (tenant, table, key) could not (about
    // 2,700 bytes an entry), so the row never got a chunk. The index holds the key's md5 now.
    let long = '';
    for (let i = 0; long.length < 2680; i++) long += createHash('sha256').update(`k${i}`).digest('base64');
    long = long.slice(0, 2680);
    await written(1, byId, [{ id: long, v: 1 }], 'long-keys');
    expect((await t.owner.query('select 1 from ext_t1.twins where external_id = $1', [long])).rows).toHaveLength(1);
    expect(await expandPending(t.db)).toBe(1);
    expect(await pending()).toEqual([]);
    const [latest] = await written(1, byId, [{ id: long, v: 2 }], 'long-keys');
    expect(await expandPending(t.db)).toBe(1);
    const { rows } = await t.owner.query<{ row_hash: string; external_id: string }>("select row_hash, external_id from retrieval.chunks where corpus = 'long-keys'");
    expect(rows).toEqual([{ row_hash: latest!.rowHash, external_id: long }]);

    // The lookups by key use the index (the planner told not to scan the table where it can do otherwise).
    const plans: string[] = [];
    await t.db.withTenant(1, async (tx) => {
      await tx.query('set local enable_seqscan = off');
      const planning = {
        tenantId: tx.tenantId,
        query: async (text: string, values?: unknown[]) => {
          if (/retrieval\.chunks c\b/.test(text) && /^\s*(select|insert)/i.test(text)) {
            const { rows: plan } = await tx.query<{ 'QUERY PLAN': string }>(`explain ${text}`, values);
            plans.push(plan.map((r) => r['QUERY PLAN']).join('\n'));
          }
          return tx.query(text, values);
        },
      } as Tx;
      await settleRowChunks(planning, 1, 'ext.twins', { keys: [long, 'fine1'] });
      await settlingIndexer.rowsWritten(planning, { tenantId: 1, connectorId, connectorName: 'long-keys', endpointUuid, table: 'ext.twins', scopes: [], rows: [latest!] });
    });
    expect(plans).toHaveLength(2);
    for (const plan of plans) expect(plan).toMatch(/Index Scan using chunks_table_key on chunks c .*\n\s+Index Cond: \(.*\(md5\(external_id\) = ANY /);
  });

  it('two passes at once, a row rewritten between them: the index ends with the latest version only', async () => {
    // Pass A (another process) has read the row's first version when the rewrite commits; pass B takes the rewrite's entry.
    await written(1, byId, [{ id: 'twice', name: 'first' }]);
    const hold = holdAfter(/^select external_id, row_hash/);
    const held = { crossTenant: (name: string, fn: (tx: Tx) => Promise<unknown>) => t.db.crossTenant(name, (tx) => fn(hold.wrap(tx))) } as unknown as Database;
    const a = expandPending(held);
    await hold.held;
    const [latest] = await written(1, byId, [{ id: 'twice', name: 'second' }]);
    let bEnded = false;
    const b = expandPending(t.db).finally(() => {
      bEnded = true;
    });
    // B waits for A (the same tenant and table); before, it indexed the rewrite at once.
    await untilEndedOrWaiting(t.owner, () => bEnded, 'the second pass');
    hold.go();
    expect([await a, await b]).toEqual([1, 1]);
    const { rows } = await t.owner.query<{ row_hash: string; content: string }>("select row_hash, content from retrieval.chunks where tenant_id = 1 and external_id = 'twice'");
    expect(rows).toEqual([{ row_hash: latest!.rowHash, content: 'ext.twins twice: id: twice; name: second' }]);
  });

  it('a chunk taken over by the connector\'s identical row in another table names that table in its text too, and is embedded again', async () => {
    await ext.ensureTable(1, 'ext.alpha', []);
    await ext.ensureTable(1, 'ext.beta', []);
    const port: EmbeddingPort = { provider: 'test', model: 'constant', dimensions: 4, embed: async (texts) => texts.map(() => Float32Array.from([1, 0, 0, 0])) };
    const copy = async () =>
      (await t.owner.query<{ table_name: string; external_id: string; content: string; embedded: boolean; model: string | null }>(
        "select table_name, external_id, content, embedding is not null as embedded, model from retrieval.chunks where tenant_id = 1 and corpus = 'copies'",
      )).rows;
    const generation = async () => (await t.owner.query<{ g: string }>('select generation::text as g from retrieval.generations where tenant_id = 1')).rows[0]?.g ?? '0';

    await written(1, { ...byId, table: 'ext.alpha' }, [{ id: 'c1', name: 'Ada' }], 'copies');
    while ((await expandPending(t.db)) > 0);
    while ((await embedPending(t.db, port, 100)) > 0);
    expect(await copy()).toEqual([{ table_name: 'ext.alpha', external_id: 'c1', content: 'ext.alpha c1: id: c1; name: Ada', embedded: true, model: 'test:constant' }]);
    const before = await generation();

    // The same row written into ext.beta: one chunk of that content in the corpus, naming ext.beta now, text and all.
    await written(1, { ...byId, table: 'ext.beta' }, [{ id: 'c1', name: 'Ada' }], 'copies');
    while ((await expandPending(t.db)) > 0);
    expect(await copy()).toEqual([{ table_name: 'ext.beta', external_id: 'c1', content: 'ext.beta c1: id: c1; name: Ada', embedded: false, model: null }]);
    expect(BigInt(await generation())).toBeGreaterThan(BigInt(before));
    while ((await embedPending(t.db, port, 100)) > 0);
    expect((await copy()).map((c) => c.embedded)).toEqual([true]);

    // The row it names is rewritten: ext.alpha's row still holds that content, and is searchable again (it had no chunk any more).
    await t.owner.query(
      `insert into connectors.ext_tables (tenant_id, connector_id, endpoint_uuid, table_name) values (1, $1, $2, 'ext.alpha'), (1, $1, $2, 'ext.beta') on conflict do nothing`,
      [connectorId, endpointUuid],
    );
    await written(1, { ...byId, table: 'ext.beta' }, [{ id: 'c1', name: 'Bob' }], 'copies');
    while ((await expandPending(t.db)) > 0);
    expect((await copy()).map((c) => [c.table_name, c.external_id, c.content]).sort()).toEqual([
      ['ext.alpha', 'c1', 'ext.alpha c1: id: c1; name: Ada'],
      ['ext.beta', 'c1', 'ext.beta c1: id: c1; name: Bob'],
    ]);
    expect(await pending()).toEqual([]);
  });
});

/**
 * One text the model refuses (a self-hosted model's context too short for it, say) used to fail the
 * call of every pass: the indexer always embeds the oldest chunks without a vector, so no chunk of any
 * tenant got a vector again. A batch failed for its texts' sake is now split until the chunk that
 * fails alone is found, which is set aside with a backoff; a failure that says nothing about the
 * texts (no answer, a 429) leaves the batch as it was for the next pass. And a vector is stored only
 * on a chunk whose text is still the one the model embedded.
 */
describe('embedPending: a text the model refuses, failures of the endpoint, a text changed meanwhile', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme', 2: 'beta' });
  });
  afterAll(async () => {
    await t.close();
  });

  /** Chunks of `tenantId` with these texts, in this order (ids ascending). */
  async function chunksOf(tenantId: number, texts: string[]): Promise<void> {
    await t.owner.query(
      `insert into retrieval.chunks (tenant_id, corpus, row_hash, table_name, external_id, content)
       select $1::bigint, 'crm', md5($1::bigint::text || t.text), 'ext.rows', t.n::text, t.text from unnest($2::text[]) with ordinality as t(text, n)`,
      [tenantId, texts],
    );
  }
  type State = { tenant: number; content: string; embedded: boolean; attempts: number; error: string | null; waits: boolean };
  const state = async () =>
    (await t.owner.query<State>(
      `select tenant_id::int as tenant, content, embedding is not null as embedded, embed_attempts as attempts, embed_error as error,
              coalesce(embed_retry_at > now(), false) as waits from retrieval.chunks order by id`,
    )).rows;

  /** As the OpenAI-compatible port fails: an HTTP 400 for a text it refuses, whatever else the call holds. */
  function refusing(word: string, fail?: () => EmbeddingUnavailable) {
    const calls: number[] = [];
    const port: EmbeddingPort = {
      provider: 'test', model: 'refusing', dimensions: 4,
      embed: async (texts) => {
        calls.push(texts.length);
        const failure = fail?.();
        if (failure) throw failure;
        if (texts.some((x) => x.includes(word))) throw new EmbeddingUnavailable('status', 'the embedding endpoint answered HTTP 400: input is too long', { httpStatus: 400 });
        return texts.map(() => Float32Array.from([1, 0, 0, 0]));
      },
    };
    return { port, calls };
  }

  it('sets aside the chunk the model refuses alone, with its error and a backoff; every other chunk, of every tenant, gets its vector', async () => {
    await chunksOf(1, ['a TOO-LONG text', 'a1', 'a2']);
    await chunksOf(2, ['b1', 'b2', 'b3', 'b4', 'b5']);
    const model = refusing('TOO-LONG');
    expect(await embedPending(t.db, model.port, 8)).toBe(7);
    // Halves down to the one text: a bounded number of calls (at most 2n - 1).
    expect(model.calls.length).toBeLessThanOrEqual(15);
    expect(await state()).toEqual([
      { tenant: 1, content: 'a TOO-LONG text', embedded: false, attempts: 1, error: 'the embedding endpoint answered HTTP 400: input is too long', waits: true },
      ...['a1', 'a2'].map((content) => ({ tenant: 1, content, embedded: true, attempts: 0, error: null, waits: false })),
      ...['b1', 'b2', 'b3', 'b4', 'b5'].map((content) => ({ tenant: 2, content, embedded: true, attempts: 0, error: null, waits: false })),
    ]);
    // GET …/rag/status counts the chunk set aside, of its tenant only: not one merely waiting for the indexer.
    const retrieval = createRetrievalServices({
      db: t.db, embedding: model.port, chat: undefined, statementTimeoutMs: 5000, platformDocuments: () => [], memoryBudgetBytes: 1 << 20, embedBatch: 8, vectorSearch: 'memory',
    });
    expect(await retrieval.status(1)).toMatchObject({ chunks: 3, embedded: 2, setAside: 1 });
    expect(await retrieval.status(2)).toMatchObject({ chunks: 5, embedded: 5, setAside: 0 });
    // Not tried again before its time; a chunk written since is embedded meanwhile.
    await chunksOf(2, ['b6']);
    model.calls.length = 0;
    expect(await embedPending(t.db, model.port, 8)).toBe(1);
    expect(model.calls).toEqual([1]);
    // Its time come, failing again: the wait doubles.
    await t.owner.query("update retrieval.chunks set embed_retry_at = now() where content = 'a TOO-LONG text'");
    expect(await embedPending(t.db, model.port, 8)).toBe(0);
    const { rows } = await t.owner.query<{ attempts: number; seconds: number }>(
      "select embed_attempts as attempts, extract(epoch from embed_retry_at - now())::float as seconds from retrieval.chunks where content = 'a TOO-LONG text'",
    );
    expect(rows[0]!.attempts).toBe(2);
    expect(rows[0]!.seconds).toBeGreaterThan(1);
    expect(rows[0]!.seconds).toBeLessThanOrEqual(2);
    // Its text changed (rewritten by the indexer), it is a new text: embedded at the next call, its failures forgotten.
    await t.owner.query("update retrieval.chunks set content = 'a shorter text' where content = 'a TOO-LONG text'");
    expect(await embedPending(t.db, model.port, 8)).toBe(1);
    expect((await state())[0]).toEqual({ tenant: 1, content: 'a shorter text', embedded: true, attempts: 0, error: null, waits: false });
    expect(await retrieval.status(1)).toMatchObject({ chunks: 3, embedded: 3, setAside: 0 });
    await retrieval.close();
  });

  it('a chunk the model has refused for weeks (past 1,024 failures) is set aside for an hour again; before, 2^attempts overflowed and no chunk of any tenant got a vector', async () => {
    await t.owner.query('delete from retrieval.chunks');
    await chunksOf(1, ['a TOO-LONG text', 'a1']);
    await chunksOf(2, ['b1']);
    // About 42 days of a refused text, tried once an hour after the first dozen tries.
    await t.owner.query("update retrieval.chunks set embed_attempts = 1100, embed_retry_at = now() where content = 'a TOO-LONG text'");
    expect(await embedPending(t.db, refusing('TOO-LONG').port, 8)).toBe(2);
    const { rows } = await t.owner.query<{ attempts: number; seconds: number }>(
      "select embed_attempts as attempts, extract(epoch from embed_retry_at - now())::float as seconds from retrieval.chunks where content = 'a TOO-LONG text'",
    );
    expect(rows[0]!.attempts).toBe(1101);
    expect(rows[0]!.seconds).toBeGreaterThan(3590);
    expect(rows[0]!.seconds).toBeLessThanOrEqual(3600);
  });

  it('leaves the batch as it was when the failure is the endpoint\'s (no answer, a rate limit, a bad key, another length): the same chunks are tried at the next pass', async () => {
    await t.owner.query('delete from retrieval.chunks');
    await chunksOf(1, ['c1', 'c2', 'c3']);
    for (const failure of [
      new EmbeddingUnavailable('unreachable', 'the embedding endpoint did not answer within 40000 ms'),
      new EmbeddingUnavailable('status', 'the embedding endpoint answered HTTP 429: slow down', { httpStatus: 429 }),
      new EmbeddingUnavailable('status', 'the embedding endpoint answered HTTP 401: invalid key', { httpStatus: 401 }),
      new EmbeddingUnavailable('dimensions', 'the embedding model m answered 8 dimensions, 4 are configured'),
    ]) {
      const model = refusing('never', () => failure);
      await expect(embedPending(t.db, model.port, 8)).rejects.toBe(failure);
      expect(model.calls).toEqual([3]);
      expect((await state()).map((s) => [s.content, s.embedded, s.attempts, s.waits])).toEqual([['c1', false, 0, false], ['c2', false, 0, false], ['c3', false, 0, false]]);
    }
    expect(await embedPending(t.db, refusing('never').port, 8)).toBe(3);
  });

  it('splits a failing call for a bounded time: an endpoint failing every call with a 500 is not called 2n - 1 times a pass', async () => {
    await t.owner.query('delete from retrieval.chunks');
    await chunksOf(1, Array.from({ length: 64 }, (_, i) => `d${i}`));
    let calls = 0;
    const outage = new EmbeddingUnavailable('status', 'the embedding endpoint answered HTTP 500: overloaded', { httpStatus: 500 });
    const port: EmbeddingPort = {
      provider: 'test', model: 'down', dimensions: 4,
      // An answer takes 50 ms, as the client's own retries of a 5xx at least do.
      embed: () => {
        calls += 1;
        return new Promise((_, reject) => setTimeout(() => reject(outage), 50));
      },
    };
    const began = Date.now();
    await embedPending(t.db, port, 64).catch(() => 0);
    // Splitting all the way down is 127 calls (6 s and more); the budget allows about 40.
    expect(calls).toBeLessThanOrEqual(SPLIT_BUDGET_MS / 50 + 20);
    expect(Date.now() - began).toBeLessThan(SPLIT_BUDGET_MS + 2_000);
    // What was tried alone in that time is set aside; nothing got a vector, nothing is lost.
    const after = await state();
    expect(after).toHaveLength(64);
    expect(after.filter((s) => s.embedded)).toEqual([]);
  });

  it('an endpoint quoting the input in its error: the warning and the stored error mask the text sent and are cut short', async () => {
    await t.owner.query('delete from retrieval.chunks');
    const secret = 'Jane Roe, IBAN FR76 3000 6000 0112 3456 7890 189, owes 1,200 EUR';
    await chunksOf(1, [secret]);
    // As some servers answer: the input quoted in the error (one refused alone; a 401 about the endpoint, the whole batch).
    let status = 400;
    const standIn = await startReceiver((_path, received) => {
      const input = (JSON.parse(received.body) as { input: string[] }).input;
      return { status, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error: { message: `Input '${input.join("', '")}' is rejected: ${'x'.repeat(500)}`, type: 'invalid_request_error' } }) };
    });
    const port = new OpenAiEmbedding({ baseUrl: `${standIn.url}/v1`, model: 'stand-in-embed', apiKey: 'sk-test', dimensions: 4, egress: EgressPolicy.open(), maxRetries: 0 });
    const logs = captureLogs('warn');
    try {
      expect(await embedPending(t.db, port, 8)).toBe(0);
      const [chunk] = await state();
      expect(chunk!.error).toMatch(/^the embedding endpoint answered HTTP 400: .*Input '\[text sent\]' is rejected: x+…$/);
      expect(chunk!.error!.length).toBeLessThanOrEqual(REASON_CHARS);
      const warning = logs.lines().find((l) => String(l.msg).startsWith('retrieval embed: chunk'));
      expect(warning).toMatchObject({ err: chunk!.error });
      expect(String(warning!.msg)).toContain("Input '[text sent]' is rejected");
      // The pass's own failure (logged by its clock job): the same masking.
      status = 401;
      await t.owner.query('update retrieval.chunks set embed_retry_at = null');
      const failed = (await embedPending(t.db, port, 8).catch((e: unknown) => e)) as EmbeddingUnavailable;
      expect(failed).toBeInstanceOf(EmbeddingUnavailable);
      expect(failed).toMatchObject({ failure: 'status', httpStatus: 401, aboutTheEndpoint: true });
      expect(failed.message).toMatch(/^the embedding endpoint answered HTTP 401: .*Input '\[text sent\]' is rejected: x+…$/);
      expect(logs.raw()).not.toContain('FR76 3000');
      expect(logs.raw()).not.toContain('Jane Roe');
    } finally {
      logs.restore();
      await port.close();
      await standIn.close();
    }
  });

  it('an endpoint whose error text holds a NUL or half a surrogate pair: the chunk set aside with it as U+FFFD, the other chunks embedded (before, every pass failed)', async () => {
    await t.owner.query('delete from retrieval.chunks');
    await chunksOf(1, ['a REFUSED text', 'a1']);
    const standIn = await startReceiver((_path, received) => {
      const input = (JSON.parse(received.body) as { input: string[] }).input;
      if (input.some((x) => x.includes('REFUSED'))) return { status: 400, headers: { 'content-type': 'application/json' }, body: '{"error": {"message": "bad\\u0000in\\ud800put", "type": "invalid_request_error"}}' };
      return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ data: input.map((_, index) => ({ index, embedding: [1, 0, 0, 0] })), model: 'stand-in-embed' }) };
    });
    const port = new OpenAiEmbedding({ baseUrl: `${standIn.url}/v1`, model: 'stand-in-embed', apiKey: 'sk-test', dimensions: 4, egress: EgressPolicy.open(), maxRetries: 0 });
    try {
      expect(await embedPending(t.db, port, 8)).toBe(1);
      expect((await state()).map(({ content, embedded, error }) => ({ content, embedded, error }))).toEqual([
        { content: 'a REFUSED text', embedded: false, error: 'the embedding endpoint answered HTTP 400: 400 bad\ufffdin\ufffdput' },
        { content: 'a1', embedded: true, error: null },
      ]);
    } finally {
      await port.close();
      await standIn.close();
    }
  });

  it('stores no vector on a chunk whose text changed while the model embedded it; the next call embeds the new text', async () => {
    await t.owner.query('delete from retrieval.chunks');
    await chunksOf(1, ['ext.alpha c1: name: Ada']);
    let answer: () => void = () => {};
    const seen: string[] = [];
    const port: EmbeddingPort = {
      provider: 'test', model: 'held', dimensions: 4,
      embed: (texts) => {
        seen.push(...texts);
        return new Promise((resolve) => {
          answer = () => resolve(texts.map(() => Float32Array.from([1, 0, 0, 0])));
        });
      },
    };
    const pass = embedPending(t.db, port, 8);
    await until('the model called', () => seen.length > 0, { everyMs: 5 });
    // The indexer names another table's row of that content meanwhile: the text changes, the vector is of the old one.
    await t.owner.query("update retrieval.chunks set content = 'ext.beta c1: name: Ada', table_name = 'ext.beta'");
    answer();
    expect(await pass).toBe(0);
    expect((await state()).map((s) => [s.content, s.embedded])).toEqual([['ext.beta c1: name: Ada', false]]);
    const next = embedPending(t.db, port, 8);
    await until('the model called again', () => seen.length > 1, { everyMs: 5 });
    answer();
    expect(await next).toBe(1);
    expect(seen).toEqual(['ext.alpha c1: name: Ada', 'ext.beta c1: name: Ada']);
  });

  it('an unreachable endpoint: the indexer logs the outage once, then at most once a minute with a count, then once when it answers; no error a pass', async () => {
    await t.owner.query('delete from retrieval.chunks');
    await chunksOf(1, ['ext.rows 1: name: Ada', 'ext.rows 2: name: Grace']);
    // A loopback port nothing listens on (taken, then let go): connections are refused, as an endpoint away.
    let up = false;
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => {
        body += c.toString();
      });
      req.on('end', () => {
        const input = (JSON.parse(body) as { input: string[] }).input;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', model: 'stand-in-embed', data: input.map((_, index) => ({ object: 'embedding', index, embedding: [1, 0, 0, 0] })) }));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port: free } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const port = new OpenAiEmbedding({ baseUrl: `http://127.0.0.1:${free}/v1`, model: 'stand-in-embed', apiKey: 'sk-test', dimensions: 4, egress: EgressPolicy.open(), maxRetries: 0 });
    // The time the outage log reads: moved by hand, never slept.
    let now = Date.parse('2026-12-06T00:00:00Z');
    const retrieval = createRetrievalServices({
      db: t.db, embedding: port, chat: undefined, statementTimeoutMs: 5000, platformDocuments: () => [], memoryBudgetBytes: 1 << 20, embedBatch: 8, vectorSearch: 'memory',
      outageLogEveryMs: 60_000, now: () => now,
    });
    const logs = captureLogs('debug');
    const outageLines = () => logs.lines().filter((l) => String(l.msg).startsWith('retrieval embed: the embedding endpoint'));
    try {
      // 30 passes 2 s apart (a minute less 2 s): each fails, none throws, one line.
      for (let i = 0; i < 30; i++) {
        expect(await retrieval.indexPass()).toMatchObject({ embedded: 0 });
        now += 2_000;
      }
      expect(outageLines()).toHaveLength(1);
      expect(outageLines()[0]).toMatchObject({ level: 'error', failure: 'unreachable', failures: 1 });
      expect(String(outageLines()[0]!.msg)).toMatch(/^retrieval embed: the embedding endpoint is unavailable: .*logged again at most every 60 s while it lasts/);
      // A minute after the first line: one more, counting the passes since; then none for the next minute.
      for (let i = 0; i < 30; i++) {
        await retrieval.indexPass();
        now += 2_000;
        expect(outageLines()).toHaveLength(2);
      }
      expect(outageLines()[1]).toMatchObject({ level: 'error', failure: 'unreachable', failures: 30, failuresInAll: 31, downMs: 60_000 });
      expect(String(outageLines()[1]!.msg)).toMatch(/^retrieval embed: the embedding endpoint is still unavailable after 60 s \(30 failed pass\(es\) since the last line, 31 in all\): /);
      // The endpoint back: one line, the chunks embedded; later passes log nothing more.
      up = true;
      await new Promise<void>((resolve) => server.listen(free, '127.0.0.1', resolve));
      expect(await retrieval.indexPass()).toMatchObject({ embedded: 2 });
      for (let i = 0; i < 3; i++) await retrieval.indexPass();
      expect(outageLines()).toHaveLength(3);
      expect(outageLines()[2]).toMatchObject({ level: 'info', failuresInAll: 60, downMs: 120_000 });
      expect(String(outageLines()[2]!.msg)).toBe('retrieval embed: the embedding endpoint answers again after 120 s (60 failed pass(es)); indexing resumes');
      expect(logs.lines().filter((l) => l.level === 'error' || l.level === 'fatal')).toHaveLength(2);
      expect(logs.raw()).not.toContain('sk-test');
    } finally {
      logs.restore();
      await retrieval.close();
      if (up) await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

/**
 * A chunk carries its connector's tags, and a re-apply that changes them re-tags the connector's
 * chunks in its transaction. A pass that had read the tags before the re-apply committed wrote its
 * chunks after it with the old tags (and took the re-tag back from a chunk it updated): a scope the
 * connector no longer declared went on showing them. The pass now holds the connector's row (shared)
 * from that read to its commit, or leaves the entry for later while the row is being written.
 */
describe('expandPending and a re-apply changing the connector\'s scopes', () => {
  let t: MigratedDatabase;
  let ext: ExtSchema;
  const target: Target = { kind: 'hybrid', table: 'ext.pay', unique_key: '$.id', promote: [] };
  const manifest = (scopes: string[]) => demoPartnersConnector('payroll', scopes, 'ext.pay', 'http://127.0.0.1:9');

  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme' });
    ext = new ExtSchema(t.ownerUrl, TEST_ROLES);
    await ext.ensureTable(1, 'ext.pay', []);
  });
  afterAll(async () => {
    await ext?.close();
    await t?.close();
  });

  /** The connector applied with `scopes` (stored, its chunks re-tagged), in a transaction held after its first statement when `hold` is given. */
  const apply = (scopes: string[], hold?: Hold) =>
    t.db.withTenant(1, (tx) => applyConnector(hold ? hold.wrap(tx) : tx, manifest(scopes))).then((r) => r.connector);
  /** A run's chunk of the connector: a row written and its pending entry. */
  async function written(connector: { id: string; endpoints: Array<{ uuid?: string }> }, item: Record<string, unknown>, scopes: string[]) {
    const rows = [prepareRow(item, target)];
    const ids = { tenantId: 1, connectorId: connector.id, endpointUuid: connector.endpoints[0]!.uuid! };
    await t.db.withTenant(1, async (tx) => {
      await upsertChunk(tx, target, rows, ids);
      await pendingIndexer.rowsWritten(tx, { ...ids, connectorName: 'payroll', table: target.table, scopes, rows });
    });
  }
  const tags = async () => (await t.owner.query<{ key: string; scopes: string[] }>('select external_id as key, scopes from retrieval.chunks order by external_id')).rows;

  it('a re-apply committing while a pass expands the connector\'s entry waits for the pass, then re-tags what it made', async () => {
    const connector = await apply(['hr']);
    await written(connector, { id: 'e1', salary: 100 }, ['hr']);
    const hold = holdAfter(/from connectors\.connectors where id = \$1/);
    const held = { crossTenant: (name: string, fn: (tx: Tx) => Promise<unknown>) => t.db.crossTenant(name, (tx) => fn(hold.wrap(tx))) } as unknown as Database;
    const pass = expandPending(held);
    await hold.held;
    let ended = false;
    const reapplied = apply(['public']).finally(() => {
      ended = true;
    });
    await untilEndedOrWaiting(t.owner, () => ended, 'the re-apply');
    hold.go();
    expect(await pass).toBe(1);
    await reapplied;
    expect(await tags()).toEqual([{ key: 'e1', scopes: ['public'] }]);
  });

  it('a pass meeting a re-apply in progress leaves the entry for the next pass, which tags it as re-applied', async () => {
    await written(await apply(['public']), { id: 'e2', salary: 200 }, ['public']);
    const hold = holdAfter(/^update connectors\.connectors set spec/);
    const reapplied = apply(['finance'], hold);
    await hold.held;
    try {
      expect(await expandPending(t.db)).toBe(0);
      expect((await t.owner.query('select 1 from retrieval.pending')).rows).toHaveLength(1);
    } finally {
      hold.go();
      await reapplied;
    }
    expect(await expandPending(t.db)).toBe(1);
    expect(await tags()).toEqual([{ key: 'e1', scopes: ['finance'] }, { key: 'e2', scopes: ['finance'] }]);
  });
});

/**
 * A deactivated tenant's rows leave the hub no more (docs/admin.md): the indexer neither expands its
 * pending entries nor sends its chunks to the embedding model; an active tenant's, in the same pass,
 * are.
 */
describe('the indexer and a deactivated tenant', () => {
  let t: MigratedDatabase;
  let ext: ExtSchema;
  const ids = { connectorId: '00000000-0000-4000-8000-0000000000c2', endpointUuid: '00000000-0000-4000-8000-0000000000e2' };
  const target: Target = { kind: 'hybrid', table: 'ext.items', unique_key: '$.id', promote: [] };

  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme', 2: 'gone' });
    ext = new ExtSchema(t.ownerUrl, TEST_ROLES);
    for (const tenantId of [1, 2]) await ext.ensureTable(tenantId, 'ext.items', []);
  });
  afterAll(async () => {
    await ext?.close();
    await t?.close();
  });

  async function written(tenantId: number, items: unknown[]) {
    const rows = items.map((item) => prepareRow(item, target));
    await t.db.withTenant(tenantId, async (tx) => {
      await upsertChunk(tx, target, rows, { tenantId, ...ids });
      await pendingIndexer.rowsWritten(tx, { tenantId, ...ids, connectorName: 'crm', table: target.table, scopes: [], rows });
    });
  }

  it('leaves its pending entries and its chunks as they are', async () => {
    await written(1, [{ id: 'a1' }]);
    await written(2, [{ id: 'g1' }]);
    // A chunk the tenant had before it was deactivated, not embedded yet.
    await t.owner.query(
      `insert into retrieval.chunks (tenant_id, corpus, row_hash, table_name, external_id, content) values (2, 'crm', md5('g0'), 'ext.items', 'g0', 'ext.items g0: id: g0')`,
    );
    await t.owner.query('update core.tenants set active = false where id = 2');

    expect(await expandPending(t.db)).toBe(1);
    const pending = await t.owner.query<{ tenant_id: string }>('select tenant_id::text from retrieval.pending');
    expect(pending.rows).toEqual([{ tenant_id: '2' }]);

    const sent: string[] = [];
    const port: EmbeddingPort = {
      provider: 'test',
      model: 'recording',
      dimensions: 4,
      embed: async (texts) => {
        sent.push(...texts);
        return texts.map(() => Float32Array.from([1, 0, 0, 0]));
      },
    };
    expect(await embedPending(t.db, port, 10)).toBe(1);
    expect(sent).toEqual(['ext.items a1: id: a1']);
    const { rows } = await t.owner.query<{ tenant_id: string; content: string; embedded: boolean }>(
      'select tenant_id::text, content, embedding is not null as embedded from retrieval.chunks order by tenant_id, id',
    );
    expect(rows).toEqual([
      { tenant_id: '1', content: 'ext.items a1: id: a1', embedded: true },
      { tenant_id: '2', content: 'ext.items g0: id: g0', embedded: false },
    ]);
    // Nothing more for a later pass either.
    expect(await expandPending(t.db)).toBe(0);
    expect(await embedPending(t.db, port, 10)).toBe(0);
  });
});

import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { createHash } from 'node:crypto';
import { Database, type Tx } from '../db/database.js';
import { roleUrl } from '../db/roles.js';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { indexAll } from '../../test/harness/retrieval.js';
import { type EmbeddingPort, unitVector } from './embedding/port.js';
import { embedPending } from './indexer.js';
import { createRetrievalServices, type RetrievalServices } from './services.js';
import { until } from '../../test/harness/until.js';

/**
 * A change of the embedding model while processes of both models run on one database (a rolling
 * update: old and new pods overlap): each hub here has its own pools and its own retrieval services,
 * as two processes do. Search of a model never answers another model's vectors, and once the old
 * model's processes are gone every chunk is embedded by the new one, without a restart.
 */

const D = 16;
const CHUNKS = 12;

/** A scripted model: a fixed unit vector per (model, text), different for two models. */
function port(model: string): EmbeddingPort & { calls: number } {
  return {
    provider: 'test',
    model,
    dimensions: D,
    calls: 0,
    async embed(texts) {
      this.calls++;
      return texts.map((t) => {
        const bytes = createHash('sha512').update(`${model}\n${t}`).digest();
        return unitVector(Array.from(bytes.subarray(0, D), (b) => b - 127.5))!;
      });
    },
  };
}

let t: MigratedDatabase;
const pools: Database[] = [];
const hubs: RetrievalServices[] = [];

/** One hub's retrieval (pools of its own), embedding with `embedding`. */
function hub(embedding: EmbeddingPort, options: { modelLeaseMs?: number; passBudgetMs?: number; embedBatch?: number } = {}): RetrievalServices {
  const db = new Database({ appUrl: roleUrl(t.ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(t.ownerUrl, TEST_ROLES.worker), poolSize: 2 });
  pools.push(db);
  const retrieval = createRetrievalServices({
    db, embedding, chat: undefined, statementTimeoutMs: 5000, platformDocuments: () => [], memoryBudgetBytes: 1 << 20, embedBatch: 4, vectorSearch: 'memory', ...options,
  });
  hubs.push(retrieval);
  return retrieval;
}

const models = async () =>
  (await t.owner.query<{ model: string | null; n: number }>('select model, count(*)::int as n from retrieval.chunks group by model order by model nulls last')).rows;

/** Whether `retrieval` finds every chunk by its own text, as its nearest (similarity 1). */
async function findsEvery(retrieval: RetrievalServices): Promise<number> {
  let found = 0;
  for (let i = 0; i < CHUNKS; i++) {
    const [hit] = await retrieval.search(1, { query: `chunk ${i}`, topK: 1 });
    if (hit?.content === `chunk ${i}` && hit.similarity > 0.999) found++;
  }
  return found;
}

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
});

afterAll(async () => {
  for (const h of hubs) await h.close();
  for (const p of pools) await p.close();
  await t?.close();
});

describe('a model change while processes of the old and the new model run at once', () => {
  beforeEach(async () => {
    await t.owner.query('delete from retrieval.chunks');
    await t.owner.query('delete from retrieval.embedding_model');
    await t.owner.query(
      `insert into retrieval.chunks (tenant_id, corpus, row_hash, table_name, external_id, content)
       select 1, 'crm', md5(i::text), 'ext.rows', i::text, 'chunk ' || i from generate_series(0, $1 - 1) as i`,
      [CHUNKS],
    );
  });

  it('the new process takes over; the old one, still running, stores no vector of its model: after the new one\'s passes every chunk is of the new model', async () => {
    const a = port('model-a');
    const b = port('model-b');
    const oldHub = hub(a);
    await indexAll(oldHub);
    expect(await models()).toEqual([{ model: 'test:model-a', n: CHUNKS }]);
    expect(await findsEvery(oldHub)).toBe(CHUNKS);
    // The new pod starts; its first pass records its model and clears the old vectors (its time is up before it embeds).
    const newHub = hub(b, { passBudgetMs: 0 });
    await newHub.indexPass();
    expect(await models()).toEqual([{ model: null, n: CHUNKS }]);
    // The old pod, still running, passes again: before, it embedded every cleared chunk again with its
    // model, and the new pod never embedded them (they had a vector) nor searched them (another model's).
    a.calls = 0;
    expect(await oldHub.indexPass()).toMatchObject({ embedded: 0 });
    expect(a.calls).toBe(0);
    // A process that does not check (a hub of an earlier version): its vectors are not stored either.
    expect(await embedPending(pools[0]!, a, 100)).toBe(0);
    expect(await models()).toEqual([{ model: null, n: CHUNKS }]);
    const newHub2 = hub(b);
    await indexAll(newHub2);
    expect(await models()).toEqual([{ model: 'test:model-b', n: CHUNKS }]);
    expect(await findsEvery(newHub2)).toBe(CHUNKS);
    expect(await findsEvery(newHub)).toBe(CHUNKS);
    // The old pod's search never compares its query with the new model's vectors: it finds nothing.
    expect(await oldHub.search(1, { query: 'chunk 0', topK: 3 })).toEqual([]);
  });

  it('an old process restarting during the rollout takes over again; once it is gone, the new process takes over within the lease and embeds every chunk, without a restart', async () => {
    const a = port('model-a');
    const b = port('model-b');
    const newHub = hub(b, { modelLeaseMs: 500 });
    await indexAll(newHub);
    expect(await models()).toEqual([{ model: 'test:model-b', n: CHUNKS }]);
    // An old pod (re)starts while the new one runs: it is the newest start, it takes over.
    const oldHub = hub(a, { modelLeaseMs: 500 });
    await indexAll(oldHub);
    expect(await models()).toEqual([{ model: 'test:model-a', n: CHUNKS }]);
    // The new pod defers while the old one confirms its model (each pass), saying so once…
    b.calls = 0;
    const logs = captureLogs('info');
    try {
      await indexAll(newHub);
      await indexAll(oldHub);
      await indexAll(newHub);
    } finally {
      logs.restore();
    }
    expect(b.calls).toBe(0);
    expect(logs.lines().filter((l) => String(l.msg).startsWith('embedding deferred')).map((l) => l.msg)).toEqual([
      `embedding deferred: the model in use is test:model-a (${D} dimensions), recorded by another process; this process embeds nothing while that model's processes run`,
    ]);
    expect(await models()).toEqual([{ model: 'test:model-a', n: CHUNKS }]);
    // …and the old pod stops. Before, the chunks kept the old model's vectors, out of the new pod's search, until its restart.
    // Its lease (500 ms, modelLeaseMs) lapsed by the database's clock, which the check reads it by.
    await until('the old model\'s lease to lapse', async () => (await t.owner.query<{ stale: boolean }>("select seen_at < now() - interval '500 milliseconds' as stale from retrieval.embedding_model")).rows[0]?.stale, { everyMs: 50 });
    const taking = captureLogs('info');
    try {
      await indexAll(newHub);
    } finally {
      taking.restore();
    }
    expect(taking.lines().filter((l) => String(l.msg).startsWith('embedding model')).map((l) => l.msg)).toEqual([
      `embedding model test:model-b (${D} dimensions) recorded in use in place of test:model-a (${D} dimensions): ${CHUNKS} chunk(s) of other models will be embedded again`,
    ]);
    expect(await models()).toEqual([{ model: 'test:model-b', n: CHUNKS }]);
    expect(await findsEvery(newHub)).toBe(CHUNKS);
  });

  it('a pass longer than the lease keeps it: a process of another model, deferring, does not take over while that pass embeds', async () => {
    const a = port('model-a');
    const oldHub = hub(a, { modelLeaseMs: 500 });
    await indexAll(oldHub);
    // The new pod takes over with a slow model: one chunk a call, 100 ms each, its pass some 1.2 s, past the 500 ms lease.
    // At its 8th call (700 ms and more after its pass confirmed the model), the old pod passes.
    const b = port('model-b');
    let calls = 0;
    let oldPass: Promise<unknown> | undefined;
    const slow: EmbeddingPort = {
      ...b,
      async embed(texts) {
        if (++calls === 8) oldPass = oldHub.indexPass();
        await oldPass;
        await new Promise((r) => setTimeout(r, 100)); // kept: a slow model, so the pass outlasts the lease (modelLeaseMs, 500 ms)
        return b.embed(texts);
      },
    };
    const newHub = hub(slow, { modelLeaseMs: 500, embedBatch: 1, passBudgetMs: 60_000 });
    a.calls = 0;
    const logs = captureLogs('info');
    let pass: Awaited<ReturnType<RetrievalServices['indexPass']>>;
    try {
      pass = await newHub.indexPass();
    } finally {
      logs.restore();
    }
    // Before, the old pod saw no confirmation for the lease and took over mid-pass, clearing the new model's
    // vectors; the rest of the new pod's were dropped (another model recorded), and it deferred from then on.
    expect(oldPass).toBeDefined();
    expect(await oldPass).toMatchObject({ embedded: 0 });
    expect(a.calls).toBe(0);
    expect(pass).toMatchObject({ embedded: CHUNKS });
    expect(logs.lines().filter((l) => String(l.msg).startsWith('embedding')).map((l) => l.msg)).toEqual([
      `embedding model test:model-b (${D} dimensions) recorded in use in place of test:model-a (${D} dimensions): ${CHUNKS} chunk(s) of other models will be embedded again`,
      `embedding deferred: the model in use is test:model-b (${D} dimensions), recorded by another process; this process embeds nothing while that model's processes run`,
    ]);
    expect(await models()).toEqual([{ model: 'test:model-b', n: CHUNKS }]);
  });

  /**
   * A stand-in model that fails any call of more than three texts at once (for the texts' sake: the
   * batch is split) and answers three or fewer after `slowMs`; `onSlow(n)` runs at the n-th slow call, before it answers.
   */
  function failingThenSlow(b: EmbeddingPort, slowMs: number, onSlow: (n: number) => Promise<unknown> | undefined): EmbeddingPort & { slowCalls: () => number } {
    let slow = 0;
    return {
      ...b,
      slowCalls: () => slow,
      async embed(texts) {
        if (texts.length > 3) throw new Error('stand-in: this batch is refused');
        await onSlow(++slow);
        await new Promise((r) => setTimeout(r, slowMs));
        return b.embed(texts);
      },
    };
  }

  it('and while a failed batch is split into slow calls for longer than the lease: each call of the splitting keeps it', async () => {
    const a = port('model-a');
    const oldHub = hub(a, { modelLeaseMs: 500 });
    await indexAll(oldHub);
    // The new pod takes over; its one batch of 12 fails, then is embedded by threes, 250 ms a call (some 1 s
    // of splitting, past the 500 ms lease). At its 4th slow call (750 ms and more after its pass confirmed the model), the old pod passes.
    let oldPass: Promise<unknown> | undefined;
    const model = failingThenSlow(port('model-b'), 250, (n) => {
      if (n === 4) oldPass = oldHub.indexPass();
      return oldPass;
    });
    const newHub = hub(model, { modelLeaseMs: 500, embedBatch: CHUNKS, passBudgetMs: 60_000 });
    a.calls = 0;
    const pass = await newHub.indexPass();
    // Before, the lease was renewed between batches only: the old pod took over mid-split, embedded with
    // its model, and the new pod's vectors were dropped (another model recorded).
    expect(model.slowCalls()).toBe(4);
    expect(await oldPass).toMatchObject({ embedded: 0 });
    expect(a.calls).toBe(0);
    expect(pass).toMatchObject({ embedded: CHUNKS });
    expect(await models()).toEqual([{ model: 'test:model-b', n: CHUNKS }]);
  });

  it('a splitting that finds another model recorded calls its model no more and stores nothing', async () => {
    const b = port('model-b');
    await indexAll(hub(b, { modelLeaseMs: 500 }));
    // The old pod's batch of 12 fails and is split; at its 2nd slow call a pod of another model starts (its first
    // check takes over; its time is up before it embeds).
    const c = port('model-c');
    let taken: Promise<unknown> | undefined;
    await t.owner.query('update retrieval.chunks set embedding = null, model = null, embedded_seq = null, embedded_at = null');
    const model = failingThenSlow(b, 100, (n) => {
      if (n === 2) taken = hub(c, { modelLeaseMs: 500, passBudgetMs: 0 }).indexPass();
      return taken;
    });
    const oldHub = hub(model, { modelLeaseMs: 500, embedBatch: CHUNKS, passBudgetMs: 60_000 });
    // Its first pass confirms model-b (recorded by the first pod) without embedding anything else.
    expect(await oldHub.indexPass()).toMatchObject({ embedded: 0 });
    expect(await models()).toEqual([{ model: null, n: CHUNKS }]);
    // Before, the splitting went on calling the model (4 calls of three texts) for vectors that would be dropped.
    expect(model.slowCalls()).toBe(2);
    expect(c.calls).toBe(0);
    expect((await t.owner.query('select model from retrieval.embedding_model')).rows).toEqual([{ model: 'test:model-c' }]);
  });

  it('so does a pass turning a backlog of pending entries into chunks for longer than the lease, before it embeds', async () => {
    const a = port('model-a');
    const b = port('model-b');
    const oldHub = hub(a, { modelLeaseMs: 500 });
    await indexAll(oldHub);
    const newHub = hub(b, { modelLeaseMs: 500 });
    const slow = pools.at(-1)!;
    await indexAll(newHub);
    expect(await oldHub.indexPass()).toMatchObject({ embedded: 0 });
    // A backlog of 60 entries (of a table that is gone: each is taken and dropped), 20 a step, each step
    // 400 ms late (a busy database); at the 3rd step, 800 ms and more after the new pod confirmed its model, the old pod passes.
    await t.owner.query(
      `insert into retrieval.pending (tenant_id, connector_id, corpus, endpoint_uuid, table_name, row_hashes)
       select 1, gen_random_uuid(), 'crm', gen_random_uuid(), 'ext.gone', array[md5(i::text)] from generate_series(1, 60) as i`,
    );
    const crossTenant = slow.crossTenant.bind(slow);
    let steps = 0;
    let oldPass: Promise<unknown> | undefined;
    slow.crossTenant = (async (job: string, fn: (tx: Tx) => Promise<unknown>) => {
      if (job === 'retrieval-index') {
        if (++steps === 3) oldPass = oldHub.indexPass();
        await oldPass;
        await new Promise((r) => setTimeout(r, 400)); // kept: a busy database, so the expansion outlasts the lease (modelLeaseMs, 500 ms)
      }
      return crossTenant(job, fn);
    }) as typeof slow.crossTenant;
    a.calls = 0;
    const logs = captureLogs('info');
    try {
      expect(await newHub.indexPass()).toMatchObject({ expanded: expect.any(Number) });
    } finally {
      logs.restore();
      slow.crossTenant = crossTenant;
    }
    expect(steps).toBeGreaterThanOrEqual(3);
    expect(await oldPass).toMatchObject({ embedded: 0 });
    expect(a.calls).toBe(0);
    expect(logs.lines().filter((l) => String(l.msg).startsWith('embedding model')).map((l) => l.msg)).toEqual([]);
    expect(await models()).toEqual([{ model: 'test:model-b', n: CHUNKS }]);
    expect((await t.owner.query('select count(*)::int as n from retrieval.pending')).rows).toEqual([{ n: 0 }]);
  });

  it('the same model name with other dimensions is another model', async () => {
    const a = port('model-a');
    const longer: EmbeddingPort = { ...port('model-a'), dimensions: 2 * D, embed: async (texts) => texts.map(() => unitVector(Array.from({ length: 2 * D }, (_, i) => i + 1))!) };
    await indexAll(hub(a));
    await indexAll(hub(longer));
    expect((await t.owner.query('select octet_length(embedding) as bytes, count(*)::int as n from retrieval.chunks group by 1')).rows).toEqual([{ bytes: 8 * D, n: CHUNKS }]);
    // A chunk waiting for a vector again (its text changed, say): the shorter vectors of that name are not stored.
    await t.owner.query(`update retrieval.chunks set embedding = null, model = null, embedded_seq = null, embedded_at = null where external_id = '0'`);
    expect(await embedPending(pools[0]!, a, 100)).toBe(0);
    expect((await t.owner.query(`select embedding is null as waiting from retrieval.chunks where external_id = '0'`)).rows).toEqual([{ waiting: true }]);
  });
});

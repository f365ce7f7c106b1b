import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { createHash } from 'node:crypto';
import { Database } from '../db/database.js';
import { roleUrl } from '../db/roles.js';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { EmbeddingUnavailable } from './embedding/errors.js';
import { type EmbeddingPort, unitVector } from './embedding/port.js';
import { encodeVector } from './vectors-codec.js';
import { createRetrievalServices, indexedAnything, type RetrievalServices } from './services.js';
import { until } from '../../test/harness/until.js';

/**
 * Indexer processes of one model share the embedding work: each batch a pass sends to the model is
 * claimed (`embed_claimed_until`), so another process's pass takes other chunks. Each hub here has
 * its own pools and retrieval services, as two processes do, over one real PostgreSQL database.
 * Before, every process took the oldest chunks without a vector: two processes sent about the same
 * texts twice (tenants pay the model per token) and stored each vector once.
 */

const D = 16;

/**
 * A scripted stand-in for an embedding model (not a real one): a unit vector per text (derived from
 * its hash), one per text in order, of `D` dimensions, as the port's contract wants; it counts the
 * texts it is sent and takes `delayMs` a call (a model at work, during which the other process passes).
 * `behaviour` scripts a call: answer (the default), fail as an unreachable endpoint, or never answer
 * (a process killed mid-call).
 */
function standInModel(sent: string[], delayMs: number, behaviour: () => 'answer' | 'fail' | 'hang' = () => 'answer', model = 'stand-in'): EmbeddingPort & { calls: number } {
  return {
    provider: 'test',
    model,
    dimensions: D,
    calls: 0,
    async embed(texts) {
      this.calls++;
      sent.push(...texts);
      const what = behaviour();
      if (what === 'hang') return new Promise<Float32Array[]>(() => {});
      await new Promise((r) => setTimeout(r, delayMs));
      if (what === 'fail') throw new EmbeddingUnavailable('unreachable', 'the stand-in model does not answer');
      return texts.map((t) => unitVector(Array.from(createHash('sha512').update(t).digest().subarray(0, D), (b) => b - 127.5))!);
    },
  };
}

let t: MigratedDatabase;
const pools: Database[] = [];
const hubs: RetrievalServices[] = [];

/** One hub's retrieval (pools of its own), embedding with `embedding`. */
function hub(embedding: EmbeddingPort, options: { embedClaimMs?: number } = {}): RetrievalServices {
  const db = new Database({ appUrl: roleUrl(t.ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(t.ownerUrl, TEST_ROLES.worker), poolSize: 2 });
  pools.push(db);
  const retrieval = createRetrievalServices({
    db, embedding, chat: undefined, statementTimeoutMs: 5000, platformDocuments: () => [], memoryBudgetBytes: 1 << 20, embedBatch: 10, vectorSearch: 'memory', ...options,
  });
  hubs.push(retrieval);
  return retrieval;
}

async function chunks(n: number): Promise<void> {
  await t.owner.query('delete from retrieval.chunks');
  await t.owner.query(
    `insert into retrieval.chunks (tenant_id, corpus, row_hash, table_name, external_id, content)
     select 1, 'crm', md5(i::text), 'ext.rows', i::text, 'chunk ' || i from generate_series(0, $1 - 1) as i`,
    [n],
  );
}

const embedded = async () => (await t.owner.query<{ n: number }>('select count(embedding)::int as n from retrieval.chunks')).rows[0]!.n;
const claimed = async () => (await t.owner.query<{ n: number }>('select count(embed_claimed_until)::int as n from retrieval.chunks')).rows[0]!.n;

/** Passes of `retrieval` until one finds nothing to do. */
async function passes(retrieval: RetrievalServices): Promise<void> {
  while (indexedAnything(await retrieval.indexPass()));
}

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
});

afterAll(async () => {
  for (const h of hubs) await h.close();
  for (const p of pools) await p.close();
  await t?.close();
});

beforeEach(async () => {
  await t.owner.query('delete from retrieval.embedding_model');
});

describe('two indexer processes of one model', () => {
  it('200 chunks: exactly 200 texts sent to the model in all, each chunk once, every chunk gets its vector', async () => {
    await chunks(200);
    const sent: string[] = [];
    const modelA = standInModel(sent, 20);
    const modelB = standInModel(sent, 20);
    const a = hub(modelA);
    const b = hub(modelB);
    await Promise.all([passes(a), passes(b)]);
    expect(await embedded()).toBe(200);
    expect(sent).toHaveLength(200);
    expect(new Set(sent).size).toBe(200);
    // Both worked (the work was shared, not one waiting for the other), and no claim is left behind.
    expect(modelA.calls).toBeGreaterThan(0);
    expect(modelB.calls).toBeGreaterThan(0);
    expect(await claimed()).toBe(0);
  });

  it('a process killed mid-call: its chunks are embedded by the other once its claim lapses, not before', async () => {
    await chunks(10);
    const sent: string[] = [];
    // The first process's model never answers its call (the process is gone: nothing releases the claim).
    // A claim of 2 s (svc.retrieval.embed-claim shortened): the other process's first pass comes well within it.
    const dying = hub(standInModel(sent, 5, () => 'hang'), { embedClaimMs: 2000 });
    void dying.indexPass();
    await until('the ten texts sent', () => sent.length >= 10, { everyMs: 5 });
    const claimedAt = Date.now();
    expect(await claimed()).toBe(10);
    const otherSent: string[] = [];
    const other = hub(standInModel(otherSent, 5));
    // While the claim holds, the other process sends none of those texts.
    expect(await other.indexPass()).toMatchObject({ embedded: 0 });
    expect(otherSent).toEqual([]);
    if (Date.now() - claimedAt < 2000) expect(await embedded()).toBe(0);
    // Lapsed by the database's clock (the one the claim is taken and checked by).
    await until('the claims to lapse', async () => (await t.owner.query<{ n: number }>('select count(*)::int as n from retrieval.chunks where embed_claimed_until > now()')).rows[0]!.n === 0, { everyMs: 50 });
    await passes(other);
    expect(await embedded()).toBe(10);
    expect(otherSent).toHaveLength(10);
    expect(await claimed()).toBe(0);
  });

  it('a call that fails gives its claim back at once: the other process embeds the chunks at its next pass', async () => {
    await chunks(10);
    const sent: string[] = [];
    const failing = hub(standInModel(sent, 5, () => 'fail'));
    expect(await failing.indexPass()).toMatchObject({ embedded: 0 });
    expect(sent).toHaveLength(10);
    expect(await claimed()).toBe(0);
    const otherSent: string[] = [];
    const other = hub(standInModel(otherSent, 5));
    await passes(other);
    expect(await embedded()).toBe(10);
    expect(otherSent).toHaveLength(10);
  });

  it('a hub of the version before, running beside, ignores the claims and still embeds and stores (nothing breaks)', async () => {
    await chunks(10);
    // 9bb2ea79 src/retrieval/indexer.ts, embedPending: its pick (tenant 1 active) and its store (without pgvector), as text.
    const PICK_9BB2EA79 = `select id, tenant_id, content from retrieval.chunks p
      where embedding is null and (embed_retry_at is null or embed_retry_at <= now()) and exists (select 1 from core.tenants active_tenant where active_tenant.id = p.tenant_id and active_tenant.active) order by id limit $1`;
    const STORE_9BB2EA79 = `update retrieval.chunks c set embedding = v.embedding, model = $4, embedded_seq = nextval('retrieval.embedded_seq'), embedded_at = now(),
              embed_attempts = 0, embed_error = null, embed_retry_at = null
         from unnest($1::bigint[], $2::text[], $3::bytea[]) as v(id, content, embedding)
        where c.id = v.id and c.embedding is null and c.content = v.content`;
    const sent: string[] = [];
    const model = standInModel(sent, 5, () => 'hang');
    const claimer = hub(model);
    void claimer.indexPass();
    await until('the ten texts sent', () => sent.length >= 10, { everyMs: 5 });
    expect(await claimed()).toBe(10);
    const db = pools.at(-1)!;
    const { rows } = await db.crossTenantQuery<{ id: number; content: string }>('retrieval-embed', PICK_9BB2EA79, [100]);
    expect(rows).toHaveLength(10);
    const answer = await standInModel([], 0).embed(rows.map((r) => r.content));
    const stored = await db.crossTenant('retrieval-embed', (tx) =>
      tx.query(STORE_9BB2EA79, [rows.map((r) => r.id), rows.map((r) => r.content), answer.map((v) => encodeVector(v)), 'test:stand-in']),
    );
    expect(stored.rowCount).toBe(10);
    expect(await embedded()).toBe(10);
  });

  it('a process of another model taking over gives up the replaced model\'s claims: it embeds those chunks at once', async () => {
    await chunks(10);
    const sent: string[] = [];
    const old = hub(standInModel(sent, 5, () => 'hang', 'old-model'));
    void old.indexPass();
    await until('the ten texts sent', () => sent.length >= 10, { everyMs: 5 });
    expect(await claimed()).toBe(10);
    const newSent: string[] = [];
    // A new process (its first check: it takes over) of another model.
    await passes(hub(standInModel(newSent, 5, () => 'answer', 'new-model')));
    expect(newSent).toHaveLength(10);
    expect((await t.owner.query<{ n: number }>(`select count(*)::int as n from retrieval.chunks where model = 'test:new-model'`)).rows[0]!.n).toBe(10);
  });
});

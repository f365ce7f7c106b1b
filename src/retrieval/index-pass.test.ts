import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { createHash } from 'node:crypto';
import { Database, type Tx } from '../db/database.js';
import { roleUrl } from '../db/roles.js';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { indexAll } from '../../test/harness/retrieval.js';
import { type EmbeddingPort, unitVector } from './embedding/port.js';
import { createRetrievalServices } from './services.js';

/**
 * One indexer pass while rows keep being written (a large load, several runs at once): pending
 * entries arrive as fast as the pass expands them. Real PostgreSQL; a scripted embedding model.
 */

const D = 16;
const CHUNKS = 12;
/** Steps of expansion during which the stand-in ingestion writes 20 more entries. */
const WRITING_STEPS = 40;

const model: EmbeddingPort & { calls: number } = {
  provider: 'test',
  model: 'scripted',
  dimensions: D,
  calls: 0,
  async embed(texts) {
    this.calls++;
    return texts.map((t) => unitVector(Array.from(createHash('sha512').update(t).digest().subarray(0, D), (b) => b - 127.5))!);
  },
};

let t: MigratedDatabase;
let db: Database;

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
  db = new Database({ appUrl: roleUrl(t.ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(t.ownerUrl, TEST_ROLES.worker), poolSize: 2 });
});

afterAll(async () => {
  await db?.close();
  await t?.close();
});

it('expanding pending entries written as fast as they are expanded takes a pass\'s budget, then the pass embeds; the backlog drains once the writing stops', async () => {
  await t.owner.query(
    `insert into retrieval.chunks (tenant_id, corpus, row_hash, table_name, external_id, content)
     select 1, 'crm', md5(i::text), 'ext.rows', i::text, 'chunk ' || i from generate_series(0, $1 - 1) as i`,
    [CHUNKS],
  );
  const retrieval = createRetrievalServices({
    db, embedding: model, chat: undefined, statementTimeoutMs: 5000, platformDocuments: () => [], memoryBudgetBytes: 1 << 20, embedBatch: CHUNKS, vectorSearch: 'memory', passBudgetMs: 500,
  });
  // One batch of the model (its first is sent however long the expansion took: a busy machine cannot fail this).
  // Before each step of expansion (20 entries), 20 more entries are written (of a table that is gone: each is
  // taken and dropped), the step held 50 ms: for WRITING_STEPS steps, some 2 s and more, the backlog never empties.
  const crossTenant = db.crossTenant.bind(db);
  let steps = 0;
  db.crossTenant = (async (job: string, fn: (tx: Tx) => Promise<unknown>) => {
    if (job === 'retrieval-index' && ++steps <= WRITING_STEPS) {
      await t.owner.query(
        `insert into retrieval.pending (tenant_id, connector_id, corpus, endpoint_uuid, table_name, row_hashes)
         select 1, gen_random_uuid(), 'crm', gen_random_uuid(), 'ext.gone', array[md5(i::text)] from generate_series(1, 20) as i`,
      );
      await new Promise((r) => setTimeout(r, 50)); // kept: a slow step, so the pass outlasts its budget (passBudgetMs, shortened to 500 ms)
    }
    return crossTenant(job, fn);
  }) as typeof db.crossTenant;
  try {
    const pass = await retrieval.indexPass();
    // Before, the pass expanded for as long as entries came (all 40 steps), and no chunk of any tenant got
    // a vector meanwhile; it then said it had run out of work.
    expect(steps).toBeLessThan(WRITING_STEPS);
    expect(pass).toMatchObject({ embedded: CHUNKS, more: true });
    expect((await t.owner.query('select count(*)::int as n from retrieval.chunks where embedding is not null')).rows).toEqual([{ n: CHUNKS }]);
    // The next passes go on with the backlog, which drains once the writing stops.
    await indexAll(retrieval);
    expect(steps).toBeGreaterThan(WRITING_STEPS);
    expect((await t.owner.query('select count(*)::int as n from retrieval.pending')).rows).toEqual([{ n: 0 }]);
  } finally {
    db.crossTenant = crossTenant;
    await retrieval.close();
  }
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { type Hold, holdAfter } from '../../test/harness/held-transaction.js';
import type { Database, Tx } from '../db/database.js';
import type { EmbeddingPort } from './embedding/port.js';
import { embedPending } from './indexer.js';
import { createRetrievalServices, type RetrievalServices } from './services.js';

/**
 * A search answers only chunks that pass its corpus and scope filters as they are when it reads
 * them. The index (in process, or pgvector's statement) ranks by the tags it saw; a connector
 * re-applied with other scopes between that and the read of the hits' text went on answering a
 * chunk now tagged with a scope the caller had not asked for, or may not read.
 */
describe('search: the filters hold for the hits as read', () => {
  let t: MigratedDatabase;
  let retrieval: RetrievalServices;
  let hold: Hold | undefined;
  /** A constant model: every chunk is as near as any other. */
  const port: EmbeddingPort = { provider: 'test', model: 'constant', dimensions: 4, embed: async (texts) => texts.map(() => Float32Array.from([1, 0, 0, 0])) };

  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme' });
    // The database as search sees it, a transaction held where a test asks (`hold`).
    const held = new Proxy(t.db, {
      get(target, prop) {
        if (prop === 'withTenant') return <T>(id: number, fn: (tx: Tx) => Promise<T>) => target.withTenant(id, (tx) => fn(hold ? hold.wrap(tx) : tx));
        const value = Reflect.get(target, prop, target) as unknown;
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as Database;
    retrieval = createRetrievalServices({
      db: held, embedding: port, chat: undefined, statementTimeoutMs: 5000, platformDocuments: () => [], memoryBudgetBytes: 1 << 20, embedBatch: 8, vectorSearch: 'memory',
    });
    await t.owner.query(
      `insert into retrieval.chunks (tenant_id, corpus, scopes, row_hash, table_name, external_id, content)
       values (1, 'crm', '{sales}', md5('1'), 'ext.rows', '1', 'ext.rows 1: name: Ada'), (1, 'hr', '{people}', md5('2'), 'ext.staff', '2', 'ext.staff 2: name: Bob')`,
    );
    while ((await embedPending(t.db, port, 10)) > 0);
  });
  afterAll(async () => {
    await retrieval?.close();
    await t?.close();
  });

  it('a chunk re-tagged while a search ranks it is not answered to a search of its former tag', async () => {
    const search = () => retrieval.search(1, { query: 'name', topK: 10, scopes: ['sales'] });
    expect((await search()).map((h) => h.content)).toEqual(['ext.rows 1: name: Ada']);
    // The next search has read the tenant's generation (its index as it was) when the re-tag commits.
    hold = holdAfter(/retrieval\.generations/);
    const found = search();
    await hold.held;
    await t.owner.query("update retrieval.chunks set scopes = '{people}' where corpus = 'crm'");
    hold.go();
    expect(await found).toEqual([]);
    hold = undefined;
    expect(await search()).toEqual([]);
    expect((await retrieval.search(1, { query: 'name', topK: 10, scopes: ['people'] })).map((h) => h.content).sort()).toEqual(['ext.rows 1: name: Ada', 'ext.staff 2: name: Bob']);
  });
});

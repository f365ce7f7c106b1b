import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { captureLogs, type LogCapture } from '../../test/harness/log-capture.js';
import type { PlatformDocument } from './platform-corpus.js';
import { createRetrievalServices, type RetrievalServices } from './services.js';

/**
 * A platform corpus rebuild that PostgreSQL refuses over a document's text logs why without the
 * text: the database's message quotes the value it refused (`invalid input syntax for type
 * integer: "<the document>"`), and the line holds it masked, as every other line with a database
 * error does (src/observability/database-errors.ts).
 */
describe('a platform corpus rebuild the database refuses', () => {
  const SECRET = 'corpus-text-R7w2';
  let t: MigratedDatabase;
  let retrieval: RetrievalServices;
  let logs: LogCapture;
  let documents: PlatformDocument[] = [];

  beforeAll(async () => {
    t = await migratedDatabase();
    // A refusal that quotes the row's text: a trigger reading one document's content as a number (a
    // stand-in for any check over a value; the error is PostgreSQL's own).
    await t.owner.query(`
      create function retrieval.test_refuse_document() returns trigger language plpgsql as $$
      begin
        if new.key = 'refused' then perform new.content::int; end if;
        return new;
      end $$;
      create trigger test_refuse_document before insert or update on retrieval.chunks for each row execute function retrieval.test_refuse_document();`);
    retrieval = createRetrievalServices({
      db: t.db,
      embedding: undefined,
      chat: undefined,
      statementTimeoutMs: 5000,
      platformDocuments: () => documents,
      memoryBudgetBytes: 16 * 1024 * 1024,
      embedBatch: 100,
      vectorSearch: 'memory',
    });
    logs = captureLogs('debug');
  });

  afterAll(async () => {
    logs?.restore();
    await retrieval?.close();
    await t?.close();
  });

  it('logs the failure with the value masked', async () => {
    documents = [
      { key: 'ok', content: 'an endpoint of the API' },
      { key: 'refused', content: `the document ${SECRET}` },
    ];
    retrieval.reindex();
    await retrieval.idle();
    const failed = logs.lines().filter((l) => l.msg === 'platform corpus rebuild failed');
    // Was: {"err":"invalid input syntax for type integer: \"the document corpus-text-R7w2\"",…}
    expect(failed).toHaveLength(1);
    expect(failed[0]!.err).toBe('invalid input syntax for type integer: "…"');
    expect(logs.raw()).not.toContain(SECRET);
    // Nothing of the corpus was written: one transaction.
    const { rows } = await t.owner.query('select count(*)::int as n from retrieval.chunks');
    expect(rows[0].n).toBe(0);
  });

  it('a rebuild the database takes is logged as before', async () => {
    documents = [{ key: 'ok', content: 'an endpoint of the API' }];
    retrieval.reindex();
    await retrieval.idle();
    expect(logs.lines().filter((l) => l.msg === 'platform corpus rebuilt')).toMatchObject([{ chunks: 1, changed: 1, removed: 0 }]);
  });
});

/**
 * A tenant's connector may be named `system`, the platform corpus's name: the corpora list counts the two apart (the
 * tenant's chunks were added to the platform's in one entry, and a scope-bound user granted the connector's tag was
 * told the platform's count with its own).
 */
describe('the corpora list with a tenant corpus named system', () => {
  const T = 5;
  let t: MigratedDatabase;
  let retrieval: RetrievalServices;

  beforeAll(async () => {
    t = await migratedDatabase({ [T]: 'five' });
    retrieval = createRetrievalServices({
      db: t.db,
      embedding: undefined,
      chat: undefined,
      statementTimeoutMs: 5000,
      platformDocuments: () => [1, 2, 3].map((i) => ({ key: `doc:${i}`, content: `an endpoint of the API ${i}` })),
      memoryBudgetBytes: 16 * 1024 * 1024,
      embedBatch: 100,
      vectorSearch: 'memory',
    });
    retrieval.reindex();
    await retrieval.idle();
    // Two chunks of the tenant's connector `system` (tag ops), one of its connector `crm` (no tag).
    await t.owner.query(
      `insert into retrieval.chunks (tenant_id, corpus, scopes, row_hash, table_name, external_id, content) values
         (${T}, 'system', '{ops}', md5('a'), 'ext.hosts', 'a', 'ext.hosts a'), (${T}, 'system', '{ops}', md5('b'), 'ext.hosts', 'b', 'ext.hosts b'),
         (${T}, 'crm', '{}', md5('c'), 'ext.partners', 'c', 'ext.partners c')`,
    );
  });

  afterAll(async () => {
    await retrieval?.close();
    await t?.close();
  });

  it("lists the tenant's corpus system and the platform corpus apart, each with its own chunks", async () => {
    expect(await retrieval.corpora(T, undefined)).toEqual([
      { name: 'crm', chunkCount: 1 },
      { name: 'system', chunkCount: 2 },
      { name: 'system', chunkCount: 3 },
    ]);
    // The platform corpus carries no tag: a user granted ops sees the tenant's corpus alone, with its own count.
    expect(await retrieval.corpora(T, ['ops'])).toEqual([{ name: 'system', chunkCount: 2 }]);
    // Another tenant sees the platform corpus alone.
    await t.owner.query(`insert into core.tenants (id, code, name) values (${T + 1}, 'six', 'six')`);
    expect(await retrieval.corpora(T + 1, undefined)).toEqual([{ name: 'system', chunkCount: 3 }]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { MAX_CHUNK_CHARS } from './content.js';
import { writeKeyedCorpus } from './keyed-corpus.js';

/**
 * A keyed document (a workflow's lifecycle: up to 200 states of 200 characters and 1,000
 * transitions, some 480,000 characters in its overview) is written as chunks of at most
 * MAX_CHUNK_CHARS, as a row's text is: one chunk of it was sent whole to the embedding model, and,
 * retrieved, whole to the chat model, ten of them megabytes in one request.
 */
describe('writeKeyedCorpus', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme' });
  });
  afterAll(async () => {
    await t?.close();
  });

  const chunks = async () =>
    (await t.owner.query<{ key: string; content: string }>("select key, content from retrieval.chunks where tenant_id = 1 and corpus = 'workflow:big' order by id")).rows;

  it('writes a document longer than a chunk as parts of at most MAX_CHUNK_CHARS, each naming its document; a shorter one again leaves one chunk', async () => {
    const states = Array.from({ length: 200 }, (_, i) => `state-${String(i).padStart(3, '0')}-${'x'.repeat(40)}`);
    const long = `Workflow big: States: ${states.join(', ')}.`;
    await t.db.withTenant(1, (tx) => writeKeyedCorpus(tx, 'workflow:big', ['ops'], [{ key: 'lifecycle', content: long }, { key: 'state:a', content: 'State a.' }]));
    const written = await chunks();
    expect(written.length).toBeGreaterThan(5);
    for (const c of written) expect(c.content.length).toBeLessThanOrEqual(MAX_CHUNK_CHARS);
    expect(written.map((c) => c.key)).toContain('state:a');
    const parts = written.filter((c) => c.key !== 'state:a');
    expect(parts[0]!.key).toBe('lifecycle');
    // Every state is in one part, whole: the parts are cut between words.
    for (const s of states) expect(parts.filter((p) => p.content.includes(s))).toHaveLength(1);
    for (const p of parts.slice(1)) expect(p.content.startsWith('workflow:big lifecycle (continued): ')).toBe(true);

    await t.db.withTenant(1, (tx) => writeKeyedCorpus(tx, 'workflow:big', ['ops'], [{ key: 'lifecycle', content: 'Workflow big: short now.' }, { key: 'state:a', content: 'State a.' }]));
    expect((await chunks()).map((c) => [c.key, c.content])).toEqual([
      ['lifecycle', 'Workflow big: short now.'],
      ['state:a', 'State a.'],
    ]);
  });
});

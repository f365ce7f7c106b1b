import { cpSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { createTestDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { MIGRATION_SETS, migrate } from '../db/migrations.js';
import { packageRoot } from '../package-root.js';

/**
 * The upgrade to V9 (chunks_table_key on the md5 of the key) of a database that holds chunks: the
 * migrations up to V8 applied, chunks stored, then the hub's own migrations applied as at a start.
 */

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('V9__chunks_table_key_hash', () => {
  it('rebuilds chunks_table_key on the md5 of the key over the chunks stored, which stay as they were', async () => {
    const url = await createTestDatabase();
    const before = mkdtempSync(join(tmpdir(), 'retrieval-v8-'));
    dirs.push(before);
    // V9 and the versions after it (which a start applies with it).
    const later = (src: string) => /\/V(9|[1-9]\d+)__[^/]*$/.test(src);
    cpSync(join(packageRoot(), 'src/retrieval/migrations/retrieval'), before, { recursive: true, filter: (src) => !later(src) });
    await migrate(url, TEST_ROLES, MIGRATION_SETS.map((s) => (s.schema === 'retrieval' ? { ...s, dir: before } : s)));
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    try {
      const definition = async () =>
        (await owner.query<{ def: string }>("select pg_get_indexdef('retrieval.chunks_table_key'::regclass) as def")).rows[0]!.def;
      expect(await definition()).toContain('(tenant_id, table_name, external_id)');
      await owner.query("insert into core.tenants (id, code, name) values (1, 'acme', 'Acme') on conflict do nothing");
      await owner.query(
        `insert into retrieval.chunks (tenant_id, corpus, scopes, row_hash, table_name, external_id, content)
         select 1, 'crm', '{}'::text[], md5(i::text), 'ext.rows', 'k' || i, 'chunk ' || i from generate_series(1, 50) as i`,
      );
      expect(await migrate(url, TEST_ROLES)).toBe(readdirSync(join(packageRoot(), 'src/retrieval/migrations/retrieval')).filter((f) => later(`/${f}`)).length);
      expect(await definition()).toContain('(tenant_id, table_name, md5(external_id))');
      expect((await owner.query("select count(*)::int as n from retrieval.chunks where tenant_id = 1 and table_name = 'ext.rows'")).rows[0].n).toBe(50);
      await owner.query('set enable_seqscan = off');
      const plan = (await owner.query<{ 'QUERY PLAN': string }>(
        "explain select id from retrieval.chunks where tenant_id = 1 and table_name = 'ext.rows' and md5(external_id) = md5('k7') and external_id = 'k7' and row_hash is not null",
      )).rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan).toContain('chunks_table_key');
    } finally {
      await owner.end();
    }
  });
});

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { migrate, readMigrations } from '../../src/db/migrations.js';
import { packageRoot } from '../../src/package-root.js';
import { createTestDatabase } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * kill -9 during migrations (docs/development.md, its migration rules). A file without the marker runs in
 * one transaction with its history row: a kill inside it leaves neither its changes nor its row, and
 * the next start applies it once. A `-- svc:no-transaction` file builds its index `concurrently`,
 * outside a transaction: a kill mid build leaves the index invalid, and the next start either finds
 * it made valid (the killed process's database session finished the build: PostgreSQL does not see
 * the client gone while the session waits, and the session holds the migrations' advisory lock until
 * then, so the next start waits for it) or drops it and builds it again (the session gone too).
 */

const owners: pg.Client[] = [];
const folders: string[] = [];
const children = new Set<ChildProcess>();

afterAll(async () => {
  await killAll();
  for (const child of children) child.kill('SIGKILL');
  for (const owner of owners) await owner.end().catch(() => undefined);
  for (const f of folders) rmSync(f, { recursive: true, force: true });
});

async function client(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  owners.push(c);
  return c;
}

/** The session of another client waiting for a lock `kind` ('relation', 'virtualxid') on `table` (any with virtualxid), in a transaction begun by `text`. */
async function waitingOn(owner: pg.Client, kind: 'relation' | 'virtualxid', table: string | null, text: string): Promise<number | undefined> {
  // pg_stat_activity keeps the first 1 kB of a statement: a migration file's own text starts with its comments.
  const { rows } = await owner.query<{ pid: number }>(
    `select a.pid from pg_stat_activity a join pg_locks l on l.pid = a.pid
      where a.datname = current_database() and a.pid <> pg_backend_pid() and not l.granted and l.locktype = $1
        and ($2::text is null or l.relation = $2::regclass) and position($3 in a.query) > 0`,
    [kind, table, text],
  );
  return rows[0]?.pid;
}

describe('kill -9 during migrations', () => {
  it('inside a transactional file (connectors V12, its trigger waiting for a lock the test holds): nothing of it is left; the next start applies it once', async () => {
    const url = await createTestDatabase('fault');
    const owner = await client(url);
    // A database migrated up to the version before connectors V12 (an upgrade to come): V12 and every
    // connectors version after it undone (the runner refuses a version missing below an applied one;
    // a new connectors migration is undone here too).
    const migrated = await startHubProcess('all', url);
    expect(await migrated.stop()).toBe(0);
    await owner.query(`drop trigger runs_chunk_counts_folded on connectors.runs;
      drop function connectors.run_chunk_counts_folded();
      drop table connectors.run_chunk_counts;
      drop function connectors.ingest_stage(integer, boolean);
      drop trigger endpoints_watermark_written on connectors.endpoints;
      drop function connectors.resume_cleared_with_watermark();
      drop function connectors.run_open(uuid, text);
      drop index connectors.dead_letters_tenant_unresolved;
      drop index connectors.runs_connector_completed;
      delete from public.svc_schema_history where schema = 'connectors' and version >= 12`);
    expect(readMigrations().filter((f) => f.schema === 'connectors').map((f) => f.version).filter((v) => v >= 12)).toEqual([12, 13, 14, 15, 16, 17]);

    // The file's first statement (the function) runs, its second (the trigger) waits for the table.
    const locker = await client(url);
    await locker.query('begin');
    await locker.query('lock table connectors.endpoints in access exclusive mode');
    const upgrading = await startHubProcess('all', url, {}, false);
    const session = await until('the migration to wait inside V12', () => waitingOn(owner, 'relation', 'connectors.endpoints', 'A stored position (V11, resume) goes'), { timeoutMs: 30_000, everyMs: 20, detail: () => upgrading.output().slice(-2000) });
    await upgrading.crash();
    expect((await owner.query(`select count(*)::int as n from public.svc_schema_history where schema = 'connectors' and version = 12`)).rows[0].n).toBe(0);
    await locker.query('commit');
    // The killed hub's session, left waiting: its statement runs, its answer finds no client, so the
    // transaction never commits and the session ends.
    await until('the killed session to end', async () => (await owner.query('select 1 from pg_stat_activity where pid = $1', [session])).rowCount === 0, { timeoutMs: 20_000 });
    expect((await owner.query(`select count(*)::int as n from pg_proc where proname = 'resume_cleared_with_watermark'`)).rows[0].n).toBe(0);

    const next = await startHubProcess('all', url);
    const history = await owner.query<{ schema: string; version: number }>('select schema, version from public.svc_schema_history order by schema, version');
    const files = readMigrations();
    expect(history.rows).toEqual(files.map((f) => ({ schema: f.schema, version: f.version })).sort((a, b) => (a.schema < b.schema ? -1 : a.schema > b.schema ? 1 : a.version - b.version)));
    const made = await owner.query(`select (select count(*)::int from pg_trigger where tgname = 'endpoints_watermark_written') as triggers,
                                           (select count(*)::int from pg_proc where proname = 'resume_cleared_with_watermark') as functions`);
    expect(made.rows[0]).toEqual({ triggers: 1, functions: 1 });
    expect(next.output()).toContain('applied migration V12__resume_cleared_with_watermark.sql');
    expect(await next.stop()).toBe(0);
  }, 90_000);

  describe('mid `-- svc:no-transaction` index build (the runner in a process of its own, on a test set)', () => {
    const SCRIPT = join(packageRoot(), 'e2e', 'faults', 'migrate-child.ts');

    function runner(url: string, dir: string): { child: ChildProcess; output: () => string; exited: Promise<number> } {
      const child = spawn(process.execPath, ['--import', 'tsx', SCRIPT, url, 'faultdemo', dir], {
        env: { PATH: process.env.PATH, HOME: process.env.HOME, SVC_LOG_LEVEL: 'info' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.add(child);
      let output = '';
      child.stdout!.on('data', (d) => (output += d));
      child.stderr!.on('data', (d) => (output += d));
      const exited = new Promise<number>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : -1))));
      return { child, output: () => output, exited };
    }

    /** A table migrated with V1, then V2 (the concurrent build) killed while it waits for a writer the test holds open. */
    async function killedMidBuild(): Promise<{ url: string; dir: string; owner: pg.Client; writer: pg.Client; session: number }> {
      const url = await createTestDatabase('fault');
      const owner = await client(url);
      const dir = mkdtempSync(join(tmpdir(), 'fault-migrations-'));
      folders.push(dir);
      writeFileSync(join(dir, 'V1__big.sql'), 'create table faultdemo.big (id int primary key, x int not null); insert into faultdemo.big select i, i % 97 from generate_series(1, 20000) as i;');
      await migrate(url, null, [{ schema: 'faultdemo', dir }]);
      writeFileSync(join(dir, 'V2__big_x.sql'), '-- svc:no-transaction\ncreate index concurrently if not exists big_x on faultdemo.big (x);\n');
      const writer = await client(url);
      await writer.query('begin');
      await writer.query('insert into faultdemo.big values (0, 0)');
      const killed = runner(url, dir);
      const session = await until('the build to wait for the writer, its index recorded invalid', async () => {
        const pid = await waitingOn(owner, 'virtualxid', null, 'create index concurrently if not exists big_x');
        const invalid = await owner.query(`select 1 from pg_index where indexrelid = 'faultdemo.big_x'::regclass and not indisvalid`).catch(() => ({ rowCount: 0 }));
        return invalid.rowCount === 1 && pid;
      }, { timeoutMs: 30_000, everyMs: 20, detail: killed.output });
      killed.child.kill('SIGKILL');
      await killed.exited;
      expect((await owner.query(`select count(*)::int as n from public.svc_schema_history where schema = 'faultdemo' and version = 2`)).rows[0].n).toBe(0);
      return { url, dir, owner, writer, session };
    }

    async function builtOnce(owner: pg.Client): Promise<void> {
      const index = await owner.query(`select i.indisvalid as valid, i.indisready as ready from pg_index i join pg_class c on c.oid = i.indexrelid where c.relname like 'big_x%'`);
      expect(index.rows).toEqual([{ valid: true, ready: true }]);
      const history = await owner.query(`select version from public.svc_schema_history where schema = 'faultdemo' order by version`);
      expect(history.rows).toEqual([{ version: 1 }, { version: 2 }]);
      // Every row is in it: 206 of the file's rows and the writer's.
    await owner.query('set enable_seqscan = off');
    expect((await owner.query('select count(*)::int as n from faultdemo.big where x = 0')).rows[0].n).toBe(207);
    await owner.query('reset enable_seqscan');
    }

    it('its session still building: the next start waits for that session, finds the index valid, records the file once', async () => {
      const { url, dir, owner, writer, session } = await killedMidBuild();
      const next = runner(url, dir);
      await until('the next start to wait for the killed session', () => next.output().includes(`another process is applying the migrations (database session pid ${session})`), { timeoutMs: 30_000, detail: next.output });
      await writer.query('commit');
      const code = await next.exited;
      expect({ code, output: next.output() }).toEqual({ code: 0, output: expect.not.stringContaining('left invalid') });
      await builtOnce(owner);
    }, 60_000);

    it('its session gone too: the next start drops the invalid index, builds it again (logged) and records the file once', async () => {
      const { url, dir, owner, writer, session } = await killedMidBuild();
      // As when the database sees the connection cut (or restarts): the build ends unfinished.
      await owner.query('select pg_terminate_backend($1)', [session]);
      await until('the session to end', async () => (await owner.query('select 1 from pg_stat_activity where pid = $1', [session])).rowCount === 0, { timeoutMs: 10_000 });
      await writer.query('commit');
      expect((await owner.query(`select indisvalid as valid from pg_index where indexrelid = 'faultdemo.big_x'::regclass`)).rows).toEqual([{ valid: false }]);
      const next = runner(url, dir);
      expect(await next.exited).toBe(0);
      expect(next.output()).toContain('migration V2__big_x.sql: index faultdemo.big_x was left invalid by a build cut short; dropped and built again');
      await builtOnce(owner);
    }, 60_000);
  });
});

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { createTestDatabase } from '../../test/harness/database.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { StartRefused } from '../errors.js';
import { migrate, migrationStatus, readMigrations, type MigrationSet } from './migrations.js';
import { interruptibleStart } from './pool.js';

const roles = { app: 'svc_app', worker: 'svc_worker', analytic: 'svc_analytic' };

const folders: string[] = [];
afterAll(() => {
  for (const dir of folders) rmSync(dir, { recursive: true, force: true });
});

function folder(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-migrations-'));
  folders.push(dir);
  for (const [name, sql] of Object.entries(files)) writeFileSync(join(dir, name), sql);
  return dir;
}

async function query(url: string, sql: string) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await client.query(sql);
  } finally {
    await client.end();
  }
}

describe('migrations', () => {
  it('several replicas starting at once apply each file exactly once', async () => {
    const url = await createTestDatabase();
    const counter = folder({
      'V1__counter.sql': 'create table demo.applied (n int); insert into demo.applied values (1);',
      'V2__slow.sql': 'select pg_sleep(0.2); insert into demo.applied values (2);',
    });
    const sets: MigrationSet[] = [{ schema: 'core', dir: 'src/db/migrations/core' }, { schema: 'demo', dir: counter }];
    const applied = await Promise.all([1, 2, 3, 4].map(() => migrate(url, roles, sets)));
    const files = readMigrations(sets);
    expect(applied.reduce((a, b) => a + b, 0)).toBe(files.length);
    const rows = await query(url, 'select n from demo.applied order by n');
    expect(rows.rows).toEqual([{ n: 1 }, { n: 2 }]);
    const history = await query(url, 'select schema, version from public.svc_schema_history order by schema, version');
    expect(history.rows).toEqual(files.map((f) => ({ schema: f.schema, version: f.version })));
    const status = await migrationStatus((sql) => query(url, sql), sets);
    const coreVersion = String(Math.max(...files.filter((f) => f.schema === 'core').map((f) => f.version)));
    expect(status.map((s) => [s.schema, s.currentVersion, s.pending])).toEqual([
      ['core', coreVersion, 0],
      ['demo', '2', 0],
    ]);
  });

  it('a replica that finds another applying the migrations says so, names its session, and waits for it', async () => {
    const url = await createTestDatabase();
    const dir = folder({ 'V1__a.sql': 'create table demo.a (x int);' });
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    const logs = captureLogs('info');
    try {
      const pid = (await holder.query("select pg_backend_pid() as pid, pg_advisory_lock(hashtext('svc-hub:migrations'))")).rows[0].pid as number;
      const waiting = migrate(url, roles, [{ schema: 'demo', dir }]);
      // Was: a start that waited without a word.
      await until('the waiting line', () => logs.lines().some((l) => l.msg === `another process is applying the migrations (database session pid ${pid}): waiting for it to finish`), 30_000);
      await holder.query("select pg_advisory_unlock(hashtext('svc-hub:migrations'))");
      expect(await waiting).toBe(1);
    } finally {
      logs.restore();
      await holder.end();
    }
  });

  it('a migration waiting for a lock that a long transaction holds gives way (lock_timeout), so the live statements queued behind it run on, and is applied once that transaction has ended', async () => {
    const url = await createTestDatabase();
    const first = { 'V1__t.sql': 'create table demo.t (x int); insert into demo.t values (1);' };
    await migrate(url, roles, [{ schema: 'demo', dir: folder(first) }]);
    const dir = folder({ ...first, 'V2__column.sql': 'alter table demo.t add column y int;' });
    // A long reader (an export's snapshot, a report): its lock conflicts with the alter table's.
    const reader = new pg.Client({ connectionString: url });
    const live = new pg.Client({ connectionString: url });
    await reader.connect();
    await live.connect();
    const logs = captureLogs('warn');
    try {
      await reader.query('begin');
      await reader.query('select count(*) from demo.t');
      const migrating = migrate(url, roles, [{ schema: 'demo', dir }], { lockTimeoutMs: 1_000 });
      // The alter table waiting for its lock, with the live pods' statements to queue behind it.
      await until('the migration to wait for its lock', async () => {
        const { rows } = await live.query(`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like 'alter table demo.t%'`);
        return rows.length > 0;
      }, 30_000);
      // A live pod's write: was held behind the waiting alter table until the reader ended (here: cut
      // by its statement_timeout); now it waits a second at most, while the migration gives way.
      await live.query("set statement_timeout = '5s'");
      for (let i = 0; i < 3; i++) await live.query('insert into demo.t values (2)');
      await until('the migration to give way', () => logs.lines().some((l) => String(l.msg).startsWith('migration V2__column.sql gave way')), 30_000);
      expect(logs.lines().find((l) => String(l.msg).startsWith('migration V2__column.sql gave way'))?.msg).toBe(
        'migration V2__column.sql gave way to a transaction holding a lock it needs (waited 1000 ms, so as not to hold up the statements queued behind it): trying again in 1000 ms',
      );
      await reader.query('commit');
      expect(await migrating).toBe(1);
      const columns = await query(url, "select column_name from information_schema.columns where table_schema = 'demo' and table_name = 't' order by ordinal_position");
      expect(columns.rows.map((r) => r.column_name)).toEqual(['x', 'y']);
    } finally {
      logs.restore();
      await reader.end();
      await live.end();
    }
  }, 60_000);

  it('a signal during a start cuts the pause between a migration\'s tries too (interruptibleStart), not only its connection', async () => {
    const url = await createTestDatabase();
    const first = { 'V1__t.sql': 'create table demo.t (x int);' };
    await migrate(url, roles, [{ schema: 'demo', dir: folder(first) }]);
    const dir = folder({ ...first, 'V2__column.sql': 'alter table demo.t add column y int;' });
    const reader = new pg.Client({ connectionString: url });
    await reader.connect();
    const logs = captureLogs('warn');
    const stop = new AbortController();
    try {
      await reader.query('begin');
      await reader.query('select count(*) from demo.t');
      // A pause longer than the test (10 min): only the signal can end it.
      const migrating = interruptibleStart(stop.signal, () => migrate(url, roles, [{ schema: 'demo', dir }], { lockTimeoutMs: 300, firstPauseMs: 600_000 }));
      migrating.catch(() => undefined);
      await until('the migration to give way', () => logs.lines().some((l) => String(l.msg).startsWith('migration V2__column.sql gave way')), 30_000);
      expect(logs.lines().find((l) => String(l.msg).startsWith('migration V2__column.sql gave way'))?.msg).toContain('trying again in 600000 ms');
      stop.abort();
      // Was: the pause slept on (here 10 min), then its next statement failed on the cut connection.
      const outcome = await Promise.race([
        migrating.then(
          () => 'applied',
          () => 'cut',
        ),
        new Promise((resolve) => setTimeout(() => resolve('still pausing 30 s after the signal'), 30_000).unref()),
      ]);
      expect(outcome).toBe('cut');
      const columns = await query(url, "select column_name from information_schema.columns where table_schema = 'demo' and table_name = 't' order by ordinal_position");
      expect(columns.rows.map((r) => r.column_name)).toEqual(['x']);
    } finally {
      logs.restore();
      await reader.query('rollback').catch(() => undefined);
      await reader.end();
    }
  }, 60_000);

  it('a file marked svc:no-transaction builds its index concurrently: the table\'s writes go on during the build; a build cut short leaves an invalid index, dropped and built again by the next start', async () => {
    const url = await createTestDatabase();
    const first = { 'V1__t.sql': 'create table demo.t (x int); insert into demo.t values (1), (1);' };
    await migrate(url, roles, [{ schema: 'demo', dir: folder(first) }]);
    const build = '-- svc:no-transaction\n-- One index, built without holding the writes.\ncreate unique index concurrently if not exists t_x on demo.t (x);\n';
    const dir = folder({ ...first, 'V2__t_x.sql': build });
    const valid = async () => (await query(url, "select i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid where c.relname = 't_x'")).rows;
    // The duplicate rows fail the unique build: what a build cut short leaves, an invalid index.
    await expect(migrate(url, roles, [{ schema: 'demo', dir }])).rejects.toThrow(/demo V2 \(V2__t_x.sql\) failed: could not create unique index "t_x"/);
    expect(await valid()).toEqual([{ valid: false }]);
    await query(url, 'delete from demo.t');

    // A writer's open transaction: the build waits for it, while other writers go on.
    const writer = new pg.Client({ connectionString: url });
    const live = new pg.Client({ connectionString: url });
    await writer.connect();
    await live.connect();
    const logs = captureLogs('warn');
    try {
      await writer.query('begin');
      await writer.query('insert into demo.t values (10)');
      const migrating = migrate(url, roles, [{ schema: 'demo', dir }]);
      let seen = '';
      await until('the build to wait for the open transaction', async () => {
        const { rows } = await live.query(`select wait_event_type, wait_event, state, left(query, 80) as q from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()`);
        seen = JSON.stringify(rows);
        return rows.some((r) => r.wait_event_type === 'Lock' && String(r.q).includes('index concurrently'));
      }, { timeoutMs: 30_000, detail: () => seen });
      // Was (every file in a transaction): 'CREATE INDEX CONCURRENTLY cannot run inside a transaction block'; a plain build holds these writes.
      await live.query("set statement_timeout = '5s'");
      for (let i = 0; i < 3; i++) await live.query(`insert into demo.t values (${20 + i})`);
      await writer.query('commit');
      expect(await migrating).toBe(1);
      expect(await valid()).toEqual([{ valid: true }]);
      expect(logs.lines().map((l) => l.msg)).toContain('migration V2__t_x.sql: index demo.t_x was left invalid by a build cut short; dropped and built again');
      const history = await query(url, "select version from public.svc_schema_history where schema = 'demo' order by version");
      expect(history.rows).toEqual([{ version: 1 }, { version: 2 }]);
    } finally {
      logs.restore();
      await writer.end();
      await live.end();
    }
  }, 60_000);

  it('a replica waiting for another that builds an index concurrently waits without a snapshot the build waits for: both start, the file applied once', async () => {
    const url = await createTestDatabase();
    const dir = folder({ 'V1__t.sql': 'create table demo.t (x int);' });
    await migrate(url, roles, [{ schema: 'demo', dir }]);
    writeFileSync(join(dir, 'V2__t_x.sql'), '-- svc:no-transaction\ncreate index concurrently if not exists t_x on demo.t (x);\n');
    const writer = new pg.Client({ connectionString: url });
    await writer.connect();
    const logs = captureLogs('info');
    try {
      await writer.query('begin');
      await writer.query('insert into demo.t values (1)');
      const first = migrate(url, roles, [{ schema: 'demo', dir }]);
      await until('the build to wait for the open transaction', async () => {
        // A session of this database (a virtualxid lock names none: its session's lock on a relation does;
        // pg_stat_activity would not do, read once per transaction and the writer's is open).
        const { rowCount } = await writer.query(
          `select 1 from pg_locks w where w.locktype = 'virtualxid' and not w.granted and w.pid <> pg_backend_pid()
              and exists (select 1 from pg_locks r where r.pid = w.pid and r.database = (select oid from pg_database where datname = current_database()))`,
        );
        return rowCount === 1;
      }, { timeoutMs: 30_000 });
      const second = migrate(url, roles, [{ schema: 'demo', dir }]);
      await until('the second replica to wait', () => logs.lines().some((l) => String(l.msg).startsWith('another process is applying the migrations')), 30_000);
      // No statement of it waits for the lock. Was: it waited in one (pg_advisory_lock), the build waited for
      // that statement's snapshot, and PostgreSQL failed one of the two after deadlock_timeout ('deadlock detected').
      const waits = await writer.query(`select 1 from pg_locks where database = (select oid from pg_database where datname = current_database()) and locktype = 'advisory' and not granted`);
      expect(waits.rowCount).toBe(0);
      await writer.query('commit');
      expect(await Promise.all([first, second])).toEqual([1, 0]);
      const history = await query(url, "select version from public.svc_schema_history where schema = 'demo' order by version");
      expect(history.rows).toEqual([{ version: 1 }, { version: 2 }]);
    } finally {
      logs.restore();
      await writer.end();
    }
  }, 60_000);

  it('a file marked svc:no-transaction dropping an index gives way to a long transaction using its table (lock_timeout), and is applied once that transaction has ended', async () => {
    const url = await createTestDatabase();
    const first = { 'V1__t.sql': 'create table demo.t (x int); create index t_x on demo.t (x); insert into demo.t values (1);' };
    await migrate(url, roles, [{ schema: 'demo', dir: folder(first) }]);
    const dir = folder({ ...first, 'V2__drop_t_x.sql': '-- svc:no-transaction\ndrop index concurrently if exists demo.t_x;\n' });
    const reader = new pg.Client({ connectionString: url });
    const live = new pg.Client({ connectionString: url });
    await reader.connect();
    await live.connect();
    const logs = captureLogs('warn');
    try {
      // A long reader (an export's snapshot, a report) holding the table and its index.
      await reader.query('begin');
      await reader.query('select count(*) from demo.t where x = 1');
      const migrating = migrate(url, roles, [{ schema: 'demo', dir }], { lockTimeoutMs: 500 });
      // Was: waited for the reader without a bound, and then took the index exclusively, which every
      // statement on the table planned meanwhile (each locks the table's indexes) queued behind.
      await until('the drop to give way', () => logs.lines().some((l) => String(l.msg).startsWith('migration V2__drop_t_x.sql gave way')), 30_000);
      expect(logs.lines().find((l) => String(l.msg).startsWith('migration V2__drop_t_x.sql gave way'))?.msg).toBe(
        'migration V2__drop_t_x.sql gave way to a transaction holding a lock it needs (waited 500 ms, so as not to hold up the statements queued behind it): trying again in 1000 ms',
      );
      await live.query("set statement_timeout = '5s'");
      for (let i = 0; i < 3; i++) await live.query('insert into demo.t values (2)');
      expect((await live.query('select count(*)::int as n from demo.t where x = 2')).rows).toEqual([{ n: 3 }]);
      await reader.query('commit');
      expect(await migrating).toBe(1);
      expect((await query(url, "select indexname from pg_indexes where schemaname = 'demo'")).rows).toEqual([]);
    } finally {
      logs.restore();
      await reader.query('rollback').catch(() => undefined);
      await reader.end();
      await live.end();
    }
  }, 60_000);

  it('refuses a file marked svc:no-transaction that is not one concurrent index statement', () => {
    for (const sql of ['create index t_x on demo.t (x);', 'create index concurrently if not exists a on demo.t (x); create index concurrently if not exists b on demo.t (x);', 'alter table demo.t add column y int;']) {
      const dir = folder({ 'V1__x.sql': `-- svc:no-transaction\n${sql}\n` });
      expect(() => readMigrations([{ schema: 'demo', dir }])).toThrow(`migration ${dir}/V1__x.sql is marked svc:no-transaction but is not one statement`);
    }
  });

  it('reports pending files before they are applied', async () => {
    const url = await createTestDatabase();
    const dir = folder({ 'V1__a.sql': 'create table demo.a (x int);' });
    const sets: MigrationSet[] = [{ schema: 'demo', dir }];
    await migrate(url, roles, sets);
    writeFileSync(join(dir, 'V2__b.sql'), 'create table demo.b (x int);');
    writeFileSync(join(dir, 'V3__c.sql'), 'create table demo.c (x int);');
    const status = await migrationStatus((sql) => query(url, sql), sets);
    expect(status).toEqual([{ schema: 'demo', currentVersion: '1', pending: 2, lastApplied: expect.any(String) }]);
    expect(await migrate(url, roles, sets)).toBe(2);
  });

  it('refuses to start when an applied file was changed', async () => {
    const url = await createTestDatabase();
    const dir = folder({ 'V1__a.sql': 'create table demo.a (x int);' });
    await migrate(url, roles, [{ schema: 'demo', dir }]);
    writeFileSync(join(dir, 'V1__a.sql'), 'create table demo.a (x int, y int);');
    await expect(migrate(url, roles, [{ schema: 'demo', dir }])).rejects.toThrow(/demo V1 \(V1__a.sql\) was changed after it was applied/);
  });

  it('refuses to start, naming it, a file added below the version its schema has applied, and applies nothing', async () => {
    const url = await createTestDatabase();
    const dir = folder({ 'V1__a.sql': 'create table demo.a (x int);', 'V3__c.sql': 'create table demo.c (x int);' });
    await migrate(url, roles, [{ schema: 'demo', dir }]);
    // A merge brought a V2 (and a V4) after V3 was applied.
    writeFileSync(join(dir, 'V2__b.sql'), 'create table demo.b (x int);');
    writeFileSync(join(dir, 'V4__d.sql'), 'create table demo.d (x int);');
    // Was: V2 applied after V3 without a word (and V4 with it).
    const refusal = migrate(url, roles, [{ schema: 'demo', dir }]);
    await expect(refusal).rejects.toThrow(
      'migration demo V2 (V2__b.sql) is not applied, but the database has schema demo at V3: it would run after versions meant to follow it; give it a version above V3 (rename it V4__b.sql)',
    );
    await expect(refusal).rejects.toBeInstanceOf(StartRefused);
    const history = await query(url, "select version from public.svc_schema_history where schema = 'demo' order by 1");
    expect(history.rows.map((r) => r.version)).toEqual([1, 3]);
    // Renumbered above V3 (and V4 moved up), it is applied; the applied ones below are never concerned.
    rmSync(join(dir, 'V2__b.sql'));
    rmSync(join(dir, 'V4__d.sql'));
    writeFileSync(join(dir, 'V4__b.sql'), 'create table demo.b (x int);');
    writeFileSync(join(dir, 'V5__d.sql'), 'create table demo.d (x int);');
    expect(await migrate(url, roles, [{ schema: 'demo', dir }])).toBe(2);
  });

  it('on a database a newer hub migrated, says which versions it does not have and runs on it', async () => {
    const url = await createTestDatabase();
    const dir = folder({ 'V1__a.sql': 'create table demo.a (x int);', 'V2__b.sql': 'create table demo.b (x int);' });
    await migrate(url, roles, [{ schema: 'demo', dir }]);
    // The older hub: its build ends at V1.
    rmSync(join(dir, 'V2__b.sql'));
    const logs = captureLogs('warn');
    try {
      expect(await migrate(url, roles, [{ schema: 'demo', dir }])).toBe(0);
    } finally {
      logs.restore();
    }
    // Was: nothing said at all.
    expect(logs.lines().map((l) => l.msg)).toEqual([
      'the database has migrations this hub does not have (demo V2 b): it was migrated by a newer hub; this one (demo up to V1) runs on it as it is, without undoing them',
    ]);
  });

  it('a failing file leaves nothing half-applied and names itself', async () => {
    const url = await createTestDatabase();
    const dir = folder({ 'V1__ok.sql': 'create table demo.ok (x int);', 'V2__bad.sql': 'create table demo.half (x int); select * from demo.missing;' });
    await expect(migrate(url, roles, [{ schema: 'demo', dir }])).rejects.toThrow(/demo V2 \(V2__bad.sql\) failed: relation "demo.missing" does not exist/);
    const tables = await query(url, "select table_name from information_schema.tables where table_schema = 'demo' order by 1");
    expect(tables.rows.map((r) => r.table_name)).toEqual(['ok']);
  });

  it('a data migration that cannot convert a value names itself and the error, never the value', async () => {
    const url = await createTestDatabase();
    const value = 'row-value-Zq81';
    const dir = folder({ 'V1__t.sql': `create table demo.t (v text); insert into demo.t values ('${value}');`, 'V2__convert.sql': 'alter table demo.t alter column v type int using v::int;' });
    const err = await migrate(url, roles, [{ schema: 'demo', dir }]).then(
      () => new Error('migrated'),
      (e: unknown) => e as Error,
    );
    expect(err).toBeInstanceOf(StartRefused);
    // Printed and logged as the start's failure: the database's words, the value masked.
    expect(err.message).toBe('migration demo V2 (V2__convert.sql) failed: invalid input syntax for type integer: "…"');
  });

  it('grants the application and worker roles what they need on migrated schemas', async () => {
    const url = await createTestDatabase();
    const dir = folder({ 'V1__t.sql': 'create table demo.t (id bigint generated always as identity, x int);' });
    await migrate(url, roles, [{ schema: 'demo', dir }]);
    const rights = await query(
      url,
      `select has_table_privilege('svc_app', 'demo.t', 'insert') as app_insert,
              has_table_privilege('svc_worker', 'demo.t', 'delete') as worker_delete,
              pg_has_role('svc_app', (select tableowner from pg_tables where schemaname = 'demo' and tablename = 't'), 'member') as app_owns`,
    );
    expect(rights.rows[0]).toEqual({ app_insert: true, worker_delete: true, app_owns: false });
  });

  it('makes the analytic role (NOLOGIN, taken by the application role) and grants it the ext schemas an older hub made, nothing of the hub\'s own', async () => {
    const url = await createTestDatabase();
    const dir = folder({ 'V1__t.sql': 'create table demo.t (id bigint generated always as identity, x int);' });
    await migrate(url, roles, [{ schema: 'demo', dir }]);
    // An ext schema and table as a hub before the analytic role left them: grants to the two login roles only.
    await query(url, 'create schema ext_t5; create table ext_t5.partners (id bigint, tenant_id bigint); grant usage on schema ext_t5 to svc_app; grant select on ext_t5.partners to svc_app');
    await query(url, 'revoke all on schema ext_t5 from svc_analytic; revoke all on ext_t5.partners from svc_analytic');
    await migrate(url, roles, [{ schema: 'demo', dir }]);
    await query(url, 'create table ext_t5.later (id bigint)');
    const rights = await query(
      url,
      `select r.rolcanlogin as login, r.rolbypassrls as bypass, pg_has_role('svc_app', 'svc_analytic', 'member') as app_member,
              has_schema_privilege('svc_analytic', 'ext_t5', 'usage') as ext_usage,
              has_table_privilege('svc_analytic', 'ext_t5.partners', 'select') as ext_select,
              has_table_privilege('svc_analytic', 'ext_t5.later', 'select') as later_select,
              has_table_privilege('svc_analytic', 'ext_t5.partners', 'insert') as ext_insert,
              has_schema_privilege('svc_analytic', 'demo', 'usage') as hub_usage
         from pg_roles r where r.rolname = 'svc_analytic'`,
    );
    expect(rights.rows).toEqual([
      { login: false, bypass: false, app_member: true, ext_usage: true, ext_select: true, later_select: true, ext_insert: false, hub_usage: false },
    ]);
  });

  it('refuses badly named files and duplicate versions', () => {
    expect(() => readMigrations([{ schema: 'demo', dir: folder({ '001_init.sql': 'select 1' }) }])).toThrow(/V<version>__<description>\.sql/);
    expect(() => readMigrations([{ schema: 'demo', dir: folder({ 'V1__a.sql': 'select 1', 'V01__b.sql': 'select 1' }) }])).toThrow(/two migrations with version 1/);
  });
});

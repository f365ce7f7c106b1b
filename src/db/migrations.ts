import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { StartRefused } from '../errors.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';
import { buildIndexConcurrently, dropIndexGivingWay, type GiveWay, inTransactionGivingWay, untilDone } from './give-way.js';
import { packageRoot } from '../package-root.js';
import { ownClient, startInterrupt } from './pool.js';
import { ensureRoles, grantAnalyticExt, grantSchema, keepSetConfigFromAnalytic, letAppSetTempFileLimit, type RoleNames } from './roles.js';

/**
 * Versioned SQL migrations, one folder per schema, applied in the order of MIGRATION_SETS under a
 * PostgreSQL advisory lock so replicas that start together apply each file exactly once. Files are
 * named `V<version>__<description>.sql`; an applied file whose content changed, or a file not
 * applied below its schema's applied version, stops the start.
 */

export interface MigrationSet {
  schema: string;
  /** Folder relative to the package root (or absolute). */
  dir: string;
}

/** Every schema the hub owns, in dependency order. Areas add theirs here. */
export const MIGRATION_SETS: MigrationSet[] = [
  { schema: 'core', dir: 'src/db/migrations/core' },
  { schema: 'events', dir: 'src/events/migrations/events' },
  { schema: 'platform', dir: 'src/platform/migrations/platform' },
  { schema: 'connectors', dir: 'src/connectors/migrations/connectors' },
  { schema: 'audit', dir: 'src/audit/migrations/audit' },
  { schema: 'email', dir: 'src/email/migrations/email' },
  { schema: 'hub', dir: 'src/webhooks/migrations/hub' },
  { schema: 'retrieval', dir: 'src/retrieval/migrations/retrieval' },
  { schema: 'entities', dir: 'src/entities/migrations/entities' },
  { schema: 'exports', dir: 'src/exports/migrations/exports' },
  { schema: 'processes', dir: 'src/processes/migrations/processes' },
  { schema: 'workflows', dir: 'src/workflows/migrations/workflows' },
  // After every kind's table: its triggers drop an owner record with its hub object.
  { schema: 'manifests', dir: 'src/manifests/migrations/manifests' },
];

export interface MigrationFile {
  schema: string;
  version: number;
  description: string;
  file: string;
  sql: string;
  checksum: string;
  /** A file marked `-- svc:no-transaction`: one index built or dropped (`drop`) `concurrently`, outside a transaction (CONCURRENT_FILE). */
  concurrent?: { schema: string; index: string; drop?: true };
}

/**
 * The first line that marks a file to be applied outside a transaction (the file's very first). Such a file holds one
 * statement, `create [unique] index concurrently if not exists <name> on <schema>.<table> …` or
 * `drop index concurrently if exists <schema>.<name>`, names unquoted: an index built so holds
 * none of its table's writes (a plain `create index` holds them for the whole build), and a build
 * cut short (the hub stopped, a unique index meeting duplicates) leaves an invalid index, which the
 * next try drops first.
 */
const NO_TRANSACTION = /^--[ \t]*svc:no-transaction[ \t]*(?:\r?\n|$)/;
const CONCURRENT_FILE =
  /^\s*(?:create\s+(?:unique\s+)?index\s+concurrently\s+if\s+not\s+exists\s+([a-z_][a-z0-9_]*)\s+on\s+(?:only\s+)?([a-z_][a-z0-9_]*)\.[a-z_][a-z0-9_]*\b|drop\s+index\s+concurrently\s+if\s+exists\s+([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)\b)[^;]*;?\s*$/i;

/** What a `-- svc:no-transaction` file builds or drops; throws naming the file when it is not one such statement. */
function concurrentStatement(sql: string, where: string): { schema: string; index: string; drop?: true } {
  const statement = sql
    .split('\n')
    .filter((line) => !/^\s*--/.test(line))
    .join('\n');
  const match = CONCURRENT_FILE.exec(statement);
  if (!match) {
    throw new Error(
      `migration ${where} is marked svc:no-transaction but is not one statement 'create [unique] index concurrently if not exists <name> on <schema>.<table> …' or 'drop index concurrently if exists <schema>.<name>' (names unquoted)`,
    );
  }
  return match[1] ? { index: match[1].toLowerCase(), schema: match[2]!.toLowerCase() } : { schema: match[3]!.toLowerCase(), index: match[4]!.toLowerCase(), drop: true };
}

export interface SchemaStatus {
  schema: string;
  currentVersion: string;
  pending: number;
  lastApplied: string | null;
}

const LOCK_KEY = 'svc-hub:migrations';
/**
 * How long a migration waits for a lock on a table a live hub uses (`lock_timeout`) before it
 * gives way and tries again (src/db/give-way.ts, `inTransactionGivingWay`). PostgreSQL queues every later request for that
 * table behind a lock requested and not yet granted: an `alter table` waiting for a long transaction
 * (an export's snapshot, a slow report) stalled every statement of the live pods on that table for
 * as long. Given way, they run on; the migration's wait is the sum of its tries.
 */
export const MIGRATION_LOCK_TIMEOUT_MS = 2_000;
/** The longest pause between two tries of a start waiting for another process's migrations. */
const LOCK_POLL_MAX_MS = 500;
const FILE = /^V(\d+)__([\w-]+)\.sql$/;

export function readMigrations(sets: MigrationSet[] = MIGRATION_SETS): MigrationFile[] {
  const out: MigrationFile[] = [];
  for (const set of sets) {
    const dir = resolve(packageRoot(), set.dir);
    if (!existsSync(dir)) throw new Error(`migration folder ${set.dir} of schema ${set.schema} is missing`);
    const files = readdirSync(dir).filter((f) => f.endsWith('.sql')).sort();
    const seen = new Set<number>();
    for (const file of files) {
      const match = FILE.exec(file);
      if (!match) throw new Error(`migration ${set.dir}/${file} is not named V<version>__<description>.sql`);
      const version = Number(match[1]);
      if (seen.has(version)) throw new Error(`schema ${set.schema} has two migrations with version ${version}`);
      seen.add(version);
      const sql = readFileSync(join(dir, file), 'utf8');
      const concurrent = NO_TRANSACTION.test(sql) ? concurrentStatement(sql, `${set.dir}/${file}`) : undefined;
      out.push({ schema: set.schema, version, description: match[2]!, file, sql, checksum: createHash('sha256').update(sql).digest('hex'), ...(concurrent ? { concurrent } : {}) });
    }
  }
  return out.sort((a, b) => sets.findIndex((s) => s.schema === a.schema) - sets.findIndex((s) => s.schema === b.schema) || a.version - b.version);
}

const HISTORY_DDL = `
create table if not exists public.svc_schema_history (
  schema      text not null,
  version     integer not null,
  description text not null,
  checksum    text not null,
  applied_at  timestamptz not null default now(),
  duration_ms integer not null,
  primary key (schema, version)
)`;

/**
 * Applies what is pending. `roles` null means the roles are managed outside the hub (explicit
 * role URLs): grants are then the operator's business too.
 */
export async function migrate(
  ownerUrl: string,
  roles: RoleNames | null,
  sets: MigrationSet[] = MIGRATION_SETS,
  /**
   * outOfOrder: apply a file below its schema's applied version too (tests that apply one migration
   * again; never configuration). lockTimeoutMs and firstPauseMs (the pause after a first giving way,
   * default 1 s): tests too. Within an interruptible start (src/db/pool.ts `interruptibleStart`)
   * a signal cuts the connection, the wait for the lock included; a file being applied is rolled back.
   */
  options: { outOfOrder?: boolean; lockTimeoutMs?: number; firstPauseMs?: number } = {},
): Promise<number> {
  const lockTimeoutMs = options.lockTimeoutMs ?? MIGRATION_LOCK_TIMEOUT_MS;
  const interrupt = startInterrupt();
  const files = readMigrations(sets);
  const client = ownClient({ connectionString: ownerUrl });
  await client.connect();
  let applied = 0;
  try {
    // Another process applying them (a replica starting at the same time, or one stuck): said, then waited for.
    const free = await client.query<{ locked: boolean }>('select pg_try_advisory_lock(hashtext($1)) as locked', [LOCK_KEY]);
    if (!free.rows[0]!.locked) {
      const holder = await client.query<{ pid: number }>(
        `select pid from pg_locks where locktype = 'advisory' and granted and objid = hashtext($1)::oid and database = (select oid from pg_database where datname = current_database())`,
        [LOCK_KEY],
      );
      const pid = holder.rows[0]?.pid;
      logger().info(`another process is applying the migrations${pid ? ` (database session pid ${pid})` : ''}: waiting for it to finish`);
      // Tried again and again, not waited for in one statement: a statement waiting holds a snapshot,
      // and an index build `concurrently` (a `-- svc:no-transaction` file) of the holder waits for every
      // snapshot older than its own to end, so the two waited for each other and PostgreSQL failed one
      // ('deadlock detected': this start, or the build, left invalid). Each try ends at once.
      await untilDone(async () => (await client.query<{ locked: boolean }>('select pg_try_advisory_lock(hashtext($1)) as locked', [LOCK_KEY])).rows[0]!.locked, {
        firstMs: 50,
        maxMs: LOCK_POLL_MAX_MS,
        signal: interrupt,
      });
    }
    await client.query(HISTORY_DDL);
    if (roles) await ensureRoles(client, ownerUrl, roles);
    const done = await client.query<{ schema: string; version: number; description: string; checksum: string }>(
      'select schema, version, description, checksum from public.svc_schema_history order by schema, version',
    );
    const key = (s: string, v: number) => `${s}:${v}`;
    const history = new Map(done.rows.map((r) => [key(r.schema, r.version), r.checksum]));
    const unknown = unknownApplied(files, done.rows);
    if (unknown) logger().warn(unknown);
    // Before anything is applied: a start refused here has changed nothing.
    const late = options.outOfOrder ? undefined : outOfOrder(files, done.rows);
    if (late) throw new StartRefused(late);
    for (const file of files) {
      const recorded = history.get(key(file.schema, file.version));
      if (recorded !== undefined) {
        if (recorded !== file.checksum) {
          throw new StartRefused(`migration ${file.schema} V${file.version} (${file.file}) was changed after it was applied; restore it and add a new version instead`);
        }
        continue;
      }
      const started = Date.now();
      // Each lock the file asks for is waited for lockTimeoutMs at most (see MIGRATION_LOCK_TIMEOUT_MS).
      const giveWay: GiveWay = {
        lockTimeoutMs,
        firstPauseMs: options.firstPauseMs,
        signal: interrupt,
        gaveWay: (err, pause) =>
          logger().warn(
            { schema: file.schema, version: file.version, err: loggableMessage(err) },
            `migration ${file.file} gave way to a transaction holding a lock it needs (waited ${lockTimeoutMs} ms, so as not to hold up the statements queued behind it): trying again in ${pause} ms`,
          ),
      };
      try {
        if (file.concurrent) {
          await applyConcurrently(client, file, started, giveWay);
        } else {
          await inTransactionGivingWay(
            client,
            async () => {
              await client.query(`create schema if not exists ${pg.escapeIdentifier(file.schema)}`);
              await client.query(file.sql);
              await recordApplied(client, file, started);
            },
            giveWay,
          );
        }
      } catch (err) {
        // Printed and logged as it is: a value the database quotes (a row a data migration cannot convert) is masked.
        throw new StartRefused(`migration ${file.schema} V${file.version} (${file.file}) failed: ${loggableMessage(err)}`, { cause: err });
      }
      applied++;
      logger().info({ schema: file.schema, version: file.version, ms: Date.now() - started }, `applied migration ${file.file}`);
    }
    if (roles) {
      for (const set of sets) await grantSchema(client, set.schema, roles);
      // The tenants' ext schemas (ext_t<id>, src/connectors/target/ddl.ts) are created at run time
      // with their grants; granting them here again covers schemas a migration split or an older
      // hub created.
      const tenantSchemas = await client.query<{ nspname: string }>(`select nspname from pg_namespace where nspname ~ '^ext_t[0-9]+$' order by 1`);
      for (const { nspname } of tenantSchemas.rows) {
        await grantSchema(client, nspname, roles);
        // The analytic role reads them (and nothing of the hub's own schemas above).
        await grantAnalyticExt(client, nspname, roles);
      }
      await client.query(`grant select on public.svc_schema_history to ${pg.escapeIdentifier(roles.app)}, ${pg.escapeIdentifier(roles.worker)}`);
      // Under the lock: replicas starting at once would otherwise update set_config's rights together.
      await keepSetConfigFromAnalytic(client, roles);
      await letAppSetTempFileLimit(client, roles);
    }
  } finally {
    await client.query('select pg_advisory_unlock(hashtext($1))', [LOCK_KEY]).catch(() => undefined);
    await client.end();
  }
  return applied;
}

/** The history's row of an applied file. */
async function recordApplied(client: pg.ClientBase, file: MigrationFile, started: number): Promise<void> {
  await client.query('insert into public.svc_schema_history (schema, version, description, checksum, duration_ms) values ($1, $2, $3, $4, $5)', [
    file.schema,
    file.version,
    file.description,
    file.checksum,
    Date.now() - started,
  ]);
}

/**
 * A `-- svc:no-transaction` file (CONCURRENT_FILE), outside a transaction: a build (src/db/give-way.ts
 * `buildIndexConcurrently`: an invalid index of its name, left by a build cut short before, dropped
 * first; no lock_timeout, as a concurrent build holds none of the table's reads or writes) or a drop
 * (`dropIndexGivingWay`: its waits bounded, given way to), then the history records it. A stop
 * between the two leaves a valid index (or none), which the next start's `if [not] exists` finds.
 */
async function applyConcurrently(client: pg.ClientBase, file: MigrationFile, started: number, giveWay: GiveWay): Promise<void> {
  const { schema, index, drop } = file.concurrent!;
  await client.query(`create schema if not exists ${pg.escapeIdentifier(file.schema)}`);
  if (drop) {
    await dropIndexGivingWay(client, schema, index, giveWay);
  } else {
    await buildIndexConcurrently(client, schema, index, file.sql, {
      ...giveWay,
      leftInvalid: () => logger().warn({ schema, index }, `migration ${file.file}: index ${schema}.${index} was left invalid by a build cut short; dropped and built again`),
    });
  }
  await recordApplied(client, file, started);
}

/**
 * What to say when a file that is not applied has a version below one its schema has applied (a
 * branch merged with a migration numbered before the other branch's, applied meanwhile): applying
 * it now would run it after the versions that were meant to follow it, against a schema it was not
 * written for, so the start is refused, as Flyway refuses an out-of-order migration by default. The
 * file is given a version above the schema's applied one. An applied file is never concerned.
 */
function outOfOrder(files: MigrationFile[], applied: Array<{ schema: string; version: number }>): string | undefined {
  const highest = new Map<string, number>();
  for (const r of applied) highest.set(r.schema, Math.max(highest.get(r.schema) ?? 0, r.version));
  const late = files.filter((f) => f.version < (highest.get(f.schema) ?? 0) && !applied.some((r) => r.schema === f.schema && r.version === f.version));
  if (!late.length) return undefined;
  return late
    .map((f) => {
      const top = highest.get(f.schema)!;
      return `migration ${f.schema} V${f.version} (${f.file}) is not applied, but the database has schema ${f.schema} at V${top}: it would run after versions meant to follow it; give it a version above V${top} (rename it V${top + 1}__${f.description}.sql)`;
    })
    .join('; ');
}

/**
 * What to say when the history holds migrations this build has no file for (a newer hub migrated
 * the database, and this older one was started on it: a rollback): it runs on the database as it
 * is, naming the versions, since a newer schema is meant to keep serving the hub before it.
 */
function unknownApplied(files: MigrationFile[], applied: Array<{ schema: string; version: number; description: string }>): string | undefined {
  const extra = applied.filter((r) => !files.some((f) => f.schema === r.schema && f.version === r.version));
  if (!extra.length) return undefined;
  const schemas = [...new Set(extra.map((r) => r.schema))];
  const latest = schemas.map((schema) => {
    const versions = files.filter((f) => f.schema === schema).map((f) => f.version);
    return versions.length ? `${schema} up to V${Math.max(...versions)}` : `none of schema ${schema}`;
  });
  return `the database has migrations this hub does not have (${extra.map((r) => `${r.schema} V${r.version} ${r.description}`).join(', ')}): it was migrated by a newer hub; this one (${latest.join(', ')}) runs on it as it is, without undoing them`;
}

/**
 * `[{schema, currentVersion, pending, lastApplied}]`, read with any role that may see the history.
 * `files`: the migrations to compare it with (read from `sets` when not given); a running hub passes
 * those it read as it started, so that a status (every readiness probe asks for one) reads no file.
 */
export async function migrationStatus(query: (sql: string) => Promise<pg.QueryResult>, sets: MigrationSet[] = MIGRATION_SETS, files: MigrationFile[] = readMigrations(sets)): Promise<SchemaStatus[]> {
  const result = await query(
    'select schema, version, applied_at from public.svc_schema_history order by schema, version',
  ).catch((err: { code?: string }) => {
    if (err.code === '42P01') return { rows: [] as Array<{ schema: string; version: number; applied_at: Date }> };
    throw err;
  });
  const rows = result.rows as Array<{ schema: string; version: number; applied_at: Date }>;
  return sets.map((set) => {
    const mine = rows.filter((r) => r.schema === set.schema);
    const appliedVersions = new Set(mine.map((r) => r.version));
    const last = mine.reduce<{ version: number; applied_at: Date } | undefined>((acc, r) => (!acc || r.version > acc.version ? r : acc), undefined);
    return {
      schema: set.schema,
      currentVersion: last ? String(last.version) : '0',
      pending: files.filter((f) => f.schema === set.schema && !appliedVersions.has(f.version)).length,
      lastApplied: last ? new Date(last.applied_at).toISOString() : null,
    };
  });
}

import type pg from 'pg';
import type { Config } from '../config/config.js';
import { StartRefused } from '../errors.js';
import { Database } from '../db/database.js';
import { startEmbedded, type EmbeddedDatabase } from '../db/embedded.js';
import { migrate, migrationStatus } from '../db/migrations.js';
import { ownClient } from '../db/pool.js';
import { roleUrl, type RoleNames, setConfigCheck, tempFileLimitCheck, WORKER_PLAN_CACHE_MODE } from '../db/roles.js';
import { logger, registerSecret } from '../observability/logger.js';
import { embeddingDimensions } from '../retrieval/embedding/from-config.js';
import { preparePgvector, type VectorSearchMode } from '../retrieval/pgvector.js';

export interface DatabaseSetup {
  ownerUrl: string;
  /** The worker role's connection (cross-tenant listeners). */
  workerUrl: string;
  /** The role names configured (`svc.datasource.*-role`). */
  roles: RoleNames;
  /**
   * Whether the application role may set temp_file_limit, so that analytic chat statements are held to
   * `svc.analytic.temp-file-limit` (src/db/roles.ts, tempFileLimitCheck; the start warned when not).
   */
  tempFileLimitSettable: boolean;
  db: Database;
  embedded?: EmbeddedDatabase;
  /** Closes the pools, then stops the embedded server if there is one. */
  close(): Promise<void>;
}

/**
 * Reaches PostgreSQL (the external one of `svc.datasource.url`, else the embedded one under the data
 * directory), applies pending migrations when asked, and opens the application and worker pools.
 * `interrupt` (a signal during the start, cmd/stop.ts) fails it promptly: the embedded server's own
 * start is stopped (the wait for the data directory's lock or for an orphan's stop, initdb, the
 * server's launch: startEmbedded), no further step is begun, and an
 * embedded PostgreSQL it started is stopped (its data directory freed). Its callers run it within
 * `interruptibleStart` (src/db/pool.ts) on the same signal, which cuts its connections (a wait for
 * the migrations' lock or for a database that does not answer ends).
 */
export async function setupDatabase(config: Config, options: { migrate: boolean; ownProcessGroup?: boolean; interrupt?: AbortSignal }): Promise<DatabaseSetup> {
  const { interrupt } = options;
  const external = config.optional('svc.datasource.url');
  let embedded: EmbeddedDatabase | undefined;
  let ownerUrl: string;
  if (external) {
    ownerUrl = external;
  } else {
    const port = config.int('svc.embedded.port');
    embedded = await startEmbedded({ dataDir: config.string('svc.data-dir'), ownProcessGroup: options.ownProcessGroup, interrupt, ...(port > 0 ? { port } : {}) });
    ownerUrl = embedded.url;
  }
  registerSecret(new URL(ownerUrl).password ? decodeURIComponent(new URL(ownerUrl).password) : undefined);
  try {
    interrupt?.throwIfAborted();
    const explicitApp = config.optional('svc.datasource.app-url');
    const explicitWorker = config.optional('svc.datasource.worker-url');
    const roles: RoleNames = {
      app: config.string('svc.datasource.app-role'),
      worker: config.string('svc.datasource.worker-role'),
      analytic: config.string('svc.datasource.analytic-role'),
    };
    const managed = !explicitApp || !explicitWorker;
    if (options.migrate) {
      const applied = await migrate(ownerUrl, managed ? roles : null);
      if (applied > 0) logger().info({ applied }, 'migrations applied');
      await bootstrap(ownerUrl, config);
    } else {
      if (managed) {
        // The roles the hub connects as are made by the migrations: without them every connection
        // would fail as "password authentication failed", which points the wrong way.
        const missing = await withOwner(ownerUrl, (client) => missingRoles(client, [...(explicitApp ? [] : [roles.app]), ...(explicitWorker ? [] : [roles.worker])]));
        if (missing.length) {
          throw new StartRefused(`the database has not been set up for the hub (no role ${missing.join(', no role ')}; svc.migrate.on-start is false): run svc-hub migrate first, or start with svc.migrate.on-start=true`);
        }
      }
      // Said at start, not only by readiness: the hub serves, out of service until they are applied.
      // Advisory: a database that does not answer now fails no start here (readiness says so).
      const pending = await withOwner(ownerUrl, (client) => migrationStatus((sql) => client.query(sql))).catch(() => []);
      const waiting = pending.filter((s) => s.pending > 0);
      if (waiting.length) {
        logger().warn(
          `svc.migrate.on-start is false and migrations are pending (${waiting.map((s) => `${s.schema}: ${s.pending}`).join(', ')}): readiness answers 503, and requests that need them fail, until svc-hub migrate applies them`,
        );
      }
    }
    const { refusal, warning, tempFiles } = await withOwner(ownerUrl, async (client): Promise<{ refusal?: string; warning?: string; tempFiles?: { settable: boolean; warning?: string } }> => {
      // Roles an administrator made: the analytic chat's role must be there, and the application role able to
      // take it (docs/operations.md); without it every new ext table's grants, and every analytic query, would fail.
      const problem = managed ? undefined : await analyticRoleProblem(client, roles);
      if (problem) return { refusal: problem };
      return { ...(await setConfigCheck(client, roles)), tempFiles: await tempFileLimitCheck(client, roles) };
    });
    if (refusal) throw new StartRefused(refusal);
    // Not refused: a hub whose owner is no superuser (or whose roles an administrator made) cannot take the right
    // itself, and guard 2 still refuses set_config; an upgrade keeps starting.
    if (warning) logger().warn(warning);
    // Not refused either: the analytic statements then run without the hub's bound on temporary files (one warning).
    if (tempFiles?.warning) logger().warn(tempFiles.warning);
    interrupt?.throwIfAborted();
    const appUrl = explicitApp ?? roleUrl(ownerUrl, roles.app);
    const workerUrl = explicitWorker ?? roleUrl(ownerUrl, roles.worker);
    for (const url of [appUrl, workerUrl]) registerSecret(decodeURIComponent(new URL(url).password) || undefined);
    const db = new Database({
      appUrl,
      workerUrl,
      analyticRole: roles.analytic,
      poolSize: config.int('svc.datasource.pool-size'),
      connectTimeoutMs: config.duration('svc.datasource.connect-timeout'),
      closeTimeoutMs: config.duration('svc.datasource.close-timeout'),
      idleTimeoutMs: config.duration('svc.datasource.idle-timeout'),
    });
    // Not waited for: a start neither waits on the check nor fails with it (the database may be down at start).
    workerPlanCacheWarning(db).then(
      (warning) => warning && logger().warn(warning),
      () => undefined,
    );
    return {
      ownerUrl,
      workerUrl,
      roles,
      tempFileLimitSettable: tempFiles?.settable === true,
      db,
      embedded,
      async close() {
        await db.close();
        await embedded?.stop();
      },
    };
  } catch (err) {
    await embedded?.stop();
    throw err;
  }
}

async function withOwner<T>(ownerUrl: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = ownClient({ connectionString: ownerUrl });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** Which of `names` no role of the server has. */
async function missingRoles(client: pg.Client, names: string[]): Promise<string[]> {
  const { rows } = await client.query<{ rolname: string }>('select rolname from pg_roles where rolname = any($1)', [names]);
  return names.filter((name) => !rows.some((r) => r.rolname === name));
}

/** Why the analytic role (roles managed outside the hub) cannot serve, or undefined. */
async function analyticRoleProblem(client: pg.Client, roles: RoleNames): Promise<string | undefined> {
  const { rows } = await client.query<{ exists: boolean; member: boolean | null }>(
    `select exists (select 1 from pg_roles where rolname = $1) as exists,
            case when exists (select 1 from pg_roles where rolname = $1) and exists (select 1 from pg_roles where rolname = $2)
                 then pg_has_role($2, $1, 'member') end as member`,
    [roles.analytic, roles.app],
  );
  const create = `create role ${roles.analytic} nologin; grant ${roles.analytic} to ${roles.app}`;
  if (!rows[0]!.exists) return `the database has no role ${roles.analytic} (svc.datasource.analytic-role), which the analytic chat's SQL runs as: run "${create}" as an administrator (docs/operations.md, "Starting and stopping")`;
  if (!rows[0]!.member) return `the application role ${roles.app} may not take the role ${roles.analytic} (svc.datasource.analytic-role): run "grant ${roles.analytic} to ${roles.app}" as an administrator (docs/operations.md, "Starting and stopping")`;
  return undefined;
}

/**
 * What is wrong with the worker role's plan cache mode (src/db/roles.ts, `WORKER_PLAN_CACHE_MODE`),
 * or undefined: the hub sets it on the roles it manages; roles managed outside the hub may lack it.
 */
export async function workerPlanCacheWarning(db: Database): Promise<string | undefined> {
  const { rows } = await db.crossTenantQuery<{ mode: string; role: string }>('startup', `select current_setting('plan_cache_mode') as mode, current_user as role`);
  const { mode, role } = rows[0]!;
  if (mode === WORKER_PLAN_CACHE_MODE) return undefined;
  return `the worker role ${role} plans with plan_cache_mode = ${mode}: run "alter role ${role} set plan_cache_mode = ${WORKER_PLAN_CACHE_MODE}" as an administrator (docs/operations.md, "Starting and stopping"); without it an outbox consumer's read may keep scanning the outbox after a burst`;
}

/**
 * After the migrations, as the owner: pgvector's column and index where the database has the
 * extension (src/retrieval/pgvector.ts), and, in an empty database, tenant 1, code `default`, so a
 * first `npm start` has a tenant to use.
 */
async function bootstrap(ownerUrl: string, config: Config): Promise<void> {
  await withOwner(ownerUrl, async (client) => {
    const pgvector = await preparePgvector(client, config.string('svc.retrieval.vector-search') as VectorSearchMode, embeddingDimensions(config));
    if (pgvector.reason) logger().info({ reason: pgvector.reason }, 'vector search: in-process index');
    // Outside the migration lock: a hub starting at the same time may be inserting it too, and the
    // one that finds its row (code default) once the other commits has nothing to create.
    const created = await client.query(
      `insert into core.tenants (code, name, description)
       select 'default', 'Default tenant', 'Created at first start'
       where not exists (select 1 from core.tenants where id <> 0)
       on conflict (code) do nothing
       returning id`,
    );
    if (created.rowCount) logger().info({ tenantId: created.rows[0].id }, 'created tenant default');
  });
}

import { createHmac } from 'node:crypto';
import pg from 'pg';
import { StartRefused } from '../errors.js';

/**
 * The database roles: the owner (whoever the datasource URL names; runs migrations and owns
 * every table), the application role (subject to row-level security, cannot bypass it, owns
 * nothing), the cross-tenant worker role (BYPASSRLS, for background work that must see every
 * tenant), and the analytic role (NOLOGIN, granted to the application role, which takes it with
 * `SET LOCAL ROLE` for the analytic chat's model-written SELECT: it may read the tenants' ext
 * tables, under row-level security, and nothing of the hub's own schemas). When no explicit URLs
 * are configured the hub creates the roles itself, the two login roles with passwords derived
 * from the owner's credentials so every replica and every database on the same server agrees on
 * them without storing anything.
 */

export interface RoleNames {
  app: string;
  worker: string;
  /** The role the analytic chat's SQL runs as (src/retrieval/analytic/run.ts). */
  analytic: string;
}

/** The analytic role's name when none is configured (`svc.datasource.analytic-role`). */
export const DEFAULT_ANALYTIC_ROLE = 'svc_analytic';

/**
 * The owner's password as node-postgres takes it from `ownerUrl`: a `password` query parameter
 * overrides the one in the address's user part. Empty when the URL holds none (the password then
 * comes from PGPASSWORD or a password file, or the server asks none).
 */
function ownerPassword(url: URL): string {
  return url.searchParams.get('password') ?? decodeURIComponent(url.password);
}

/**
 * Roles are server-wide, so the password depends on the server and the owner, not the database;
 * its secret is the owner's password. An owner URL without one leaves nothing secret to derive from
 * (the role passwords would follow from the user, host and port alone, the worker role's with it,
 * which bypasses row-level security): the start is refused instead.
 */
export function derivePassword(ownerUrl: string, role: string): string {
  const url = new URL(ownerUrl);
  const secret = ownerPassword(url);
  if (!secret) {
    throw new StartRefused(
      `svc.datasource.url holds no password, from which the passwords of the roles ${role} and the others the hub creates are derived: put the owner's password in it, or create the roles yourself and set svc.datasource.app-url and svc.datasource.worker-url (docs/operations.md, "Starting and stopping")`,
    );
  }
  const server = `${decodeURIComponent(url.username)}:${secret}@${url.hostname}:${url.port || '5432'}`;
  return createHmac('sha256', `svc-hub/role-password/${server}`).update(role).digest('base64url');
}

/**
 * A connection string for `role` on the same server and database as `ownerUrl`, with its derived
 * password: the owner's `user` and `password` query parameters, which node-postgres would take over
 * the address's user part, are left out.
 */
export function roleUrl(ownerUrl: string, role: string): string {
  const url = new URL(ownerUrl);
  url.username = encodeURIComponent(role);
  url.password = encodeURIComponent(derivePassword(ownerUrl, role));
  url.searchParams.delete('password');
  url.searchParams.delete('user');
  return url.toString();
}

/**
 * The worker role's sessions plan every statement for the values and table sizes of the moment,
 * named statements included (which then save their parsing and analysis only). The worker runs the
 * outbox consumers and the delivery journal, whose tables go from empty to hundreds of thousands of
 * rows in a burst: a generic plan PostgreSQL built and kept while a table was small scans it whole
 * on every execution until the table's next analyse (a consumer's read 40 ms instead of 0.4 ms
 * with 200,000 events; src/db/plan-cache.test.ts). A role setting, so it holds through a pooler
 * too; with roles managed outside the hub, the operator sets it (docs/operations.md) and the hub
 * warns at start when it is missing.
 */
export const WORKER_PLAN_CACHE_MODE = 'force_custom_plan';

export async function ensureRoles(owner: pg.ClientBase, ownerUrl: string, roles: RoleNames): Promise<void> {
  const spec: Array<[string, string, string[]]> = [
    [roles.app, 'NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT LOGIN', []],
    [roles.worker, 'NOSUPERUSER BYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT LOGIN', [`set plan_cache_mode = ${WORKER_PLAN_CACHE_MODE}`]],
    // No password: nobody logs in as it; the application role takes it with SET LOCAL ROLE.
    [roles.analytic, 'NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT NOLOGIN', []],
  ];
  // An owner may name an attribute (even to deny it: NOSUPERUSER, NOCREATEDB) only if it holds the
  // attribute itself. One that is no superuser (CREATEROLE and BYPASSRLS, as a managed PostgreSQL's
  // administrator) leaves those words out: a role it makes starts without them, and it could not
  // have given them since.
  const { rows: me } = await owner.query<{ rolsuper: boolean; rolcreatedb: boolean }>('select rolsuper, rolcreatedb from pg_roles where rolname = current_user');
  const held = { NOSUPERUSER: me[0]?.rolsuper === true, NOCREATEDB: me[0]?.rolcreatedb === true };
  for (const [role, all, settings] of spec) {
    const attributes = all
      .split(' ')
      .filter((word) => held[word as keyof typeof held] !== false)
      .join(' ');
    const ident = pg.escapeIdentifier(role);
    const login = role !== roles.analytic;
    const password = login ? ` password ${pg.escapeLiteral(derivePassword(ownerUrl, role))}` : ' password null';
    const exists = await owner.query('select 1 from pg_roles where rolname = $1', [role]);
    if (exists.rowCount === 0) {
      try {
        await owner.query(`create role ${ident} ${attributes}${password}`);
      } catch (err) {
        // Another replica or database created it in the meantime.
        if ((err as { code?: string }).code !== '42710' && (err as { code?: string }).code !== '23505') throw err;
      }
    }
    // Several hubs (or test databases) on one server may do this at once; PostgreSQL then answers
    // "tuple concurrently updated" to all but one. The value is the same for all: try again.
    for (let attempt = 1; ; attempt++) {
      try {
        await owner.query(`alter role ${ident} ${attributes}${password}`);
        for (const setting of settings) await owner.query(`alter role ${ident} ${setting}`);
        break;
      } catch (err) {
        if (attempt >= 5 || !/concurrently updated/.test((err as Error).message)) throw err;
        await new Promise((resolve) => setTimeout(resolve, 20 * attempt));
      }
    }
  }
  await grantAnalyticToApp(owner, roles);
}

/**
 * The application role's right to take the analytic role (`SET LOCAL ROLE`). Granted by the owner,
 * which made both roles; run after ensureRoles.
 */
async function grantAnalyticToApp(owner: pg.ClientBase, roles: RoleNames): Promise<void> {
  const member = await owner.query('select 1 from pg_auth_members m join pg_roles r on r.oid = m.roleid join pg_roles a on a.oid = m.member where r.rolname = $1 and a.rolname = $2', [
    roles.analytic,
    roles.app,
  ]);
  if (member.rowCount !== 0) return;
  try {
    await owner.query(`grant ${pg.escapeIdentifier(roles.analytic)} to ${pg.escapeIdentifier(roles.app)}`);
  } catch (err) {
    // Another hub on the same server granted it in the meantime.
    if ((err as { code?: string }).code !== '23505' && !/concurrently updated/.test((err as Error).message)) throw err;
  }
}

/** PostgreSQL's function that changes a setting, `role` and the tenant (`svc.tenant_id`) included; EXECUTE is PUBLIC's by default. */
const SET_CONFIG = 'pg_catalog.set_config(text, text, boolean)';

/** Who of the hub's roles may call set_config (roles the server lacks are left out), and whether `client`'s role is a superuser. */
async function setConfigRights(client: pg.ClientBase, roles: RoleNames): Promise<{ owner: string; superuser: boolean; may: Map<string, boolean> }> {
  const { rows } = await client.query<{ rolname: string; may: boolean }>(
    `select rolname, has_function_privilege(oid, '${SET_CONFIG}', 'execute') as may from pg_roles where rolname = any($1)`,
    [[roles.app, roles.worker, roles.analytic]],
  );
  const me = await client.query<{ owner: string; superuser: boolean }>(`select current_user as owner, current_setting('is_superuser') = 'on' as superuser`);
  return { ...me.rows[0]!, may: new Map(rows.map((r) => [r.rolname, r.may])) };
}

/**
 * What the hub's database must say about set_config: the application and worker roles call it
 * (every tenant transaction sets `svc.tenant_id` with it; exports and vector search set their
 * settings), the analytic role must not. The analytic chat's statement runs after `SET LOCAL ROLE`
 * to the analytic role, and PostgreSQL checks a function's EXECUTE against that role: without the
 * right, `set_config('role', …)` (back to the application role, the session's) and
 * `set_config('svc.tenant_id', …)` (another tenant under row-level security) are refused (42501),
 * in any spelling and from any depth (inside query_to_xml's statement, through pg_settings' update
 * rule), so a statement past guard 2 (docs/analytic-guards.md) can undo neither. `owner` is granted
 * too: the owner's own tools (pg_dump sets search_path with it) keep working. Only set_config's owner (the bootstrap superuser)
 * or another superuser may change its rights.
 */
function setConfigStatements(owner: string, roles: RoleNames): string {
  return `begin; grant execute on function ${SET_CONFIG} to ${[...new Set([owner, roles.app, roles.worker])].join(', ')}; revoke execute on function ${SET_CONFIG} from public, ${roles.analytic}; commit`;
}

/**
 * Keeps set_config from the analytic role (setConfigStatements) where `owner` is a superuser and
 * it is not done yet: granted to the application and worker roles, then revoked from PUBLIC in the
 * same transaction, so no hub's transaction finds it missing. Idempotent; a non-superuser changes
 * nothing (the start then warns: setConfigCheck).
 */
export async function keepSetConfigFromAnalytic(owner: pg.ClientBase, roles: RoleNames): Promise<void> {
  const { superuser, may } = await setConfigRights(owner, roles);
  if (!superuser || (may.get(roles.analytic) === false && may.get(roles.app) && may.get(roles.worker))) return;
  const fn = `function ${SET_CONFIG}`;
  await owner.query('begin');
  try {
    await owner.query(`grant execute on ${fn} to ${pg.escapeIdentifier(roles.app)}, ${pg.escapeIdentifier(roles.worker)}`);
    await owner.query(`revoke execute on ${fn} from public, ${pg.escapeIdentifier(roles.analytic)}`);
    await owner.query('commit');
  } catch (err) {
    await owner.query('rollback').catch(() => undefined);
    throw err;
  }
}

/**
 * At start, as the owner: a refusal when the application or worker role may not call set_config
 * (every request would fail), a warning when the analytic role may (the hub could not take the
 * right away: no superuser; or roles made by an administrator). Roles the server lacks are
 * another check's business.
 */
export async function setConfigCheck(owner: pg.ClientBase, roles: RoleNames): Promise<{ refusal?: string; warning?: string }> {
  const rights = await setConfigRights(owner, roles);
  const lacking = [roles.app, roles.worker].filter((role) => rights.may.get(role) === false);
  if (lacking.length) {
    return {
      refusal: `the role${lacking.length > 1 ? 's' : ''} ${lacking.join(' and ')} may not call set_config, with which the hub sets each transaction's tenant: run "grant execute on function ${SET_CONFIG} to ${lacking.join(', ')}" in the hub's database as a superuser (docs/operations.md, "Starting and stopping")`,
    };
  }
  if (rights.may.get(roles.analytic)) {
    return {
      warning: `the analytic role ${roles.analytic} may call set_config, with which SQL of the analytic chat that got past its guards could take another tenant's rows or the application role back: run "${setConfigStatements(rights.owner, roles)}" in the hub's database as a superuser (docs/operations.md, "Starting and stopping")`,
    };
  }
  return {};
}

/** The setting that bounds the temporary files of one session; PostgreSQL lets only a superuser, or a role granted SET on it (PostgreSQL 15+), set it. */
const TEMP_FILE_LIMIT = 'temp_file_limit';

/** Whether `role` may set temp_file_limit (a superuser, or SET granted on it); false before PostgreSQL 15, which has no such grant. */
async function maySetTempFileLimit(client: pg.ClientBase, role: string): Promise<boolean> {
  const { rows } = await client.query<{ may: boolean | null }>(
    `select case when current_setting('server_version_num')::int < 150000 then (select rolsuper from pg_roles where rolname = $1)
            else (select has_parameter_privilege(oid, '${TEMP_FILE_LIMIT}', 'set') from pg_roles where rolname = $1) end as may`,
    [role],
  );
  return rows[0]?.may === true;
}

/**
 * Lets the application role set temp_file_limit (`grant set on parameter`, PostgreSQL 15+), so that
 * the analytic chat's read-only transaction bounds its statement's temporary files
 * (`svc.analytic.temp-file-limit`, src/retrieval/analytic/run.ts) before it takes the analytic role,
 * which may not set it. Only a superuser may grant it: an owner that is none, or an older server,
 * changes nothing (the start then warns: tempFileLimitCheck). Idempotent.
 */
export async function letAppSetTempFileLimit(owner: pg.ClientBase, roles: RoleNames): Promise<void> {
  const { rows } = await owner.query<{ superuser: boolean; version: number }>(
    `select current_setting('is_superuser') = 'on' as superuser, current_setting('server_version_num')::int as version`,
  );
  if (!rows[0]?.superuser || rows[0].version < 150000 || (await maySetTempFileLimit(owner, roles.app))) return;
  try {
    await owner.query(`grant set on parameter ${TEMP_FILE_LIMIT} to ${pg.escapeIdentifier(roles.app)}`);
  } catch (err) {
    // The grant is the server's, not the database's: another hub (or test database) on the same server granted it meanwhile.
    if ((err as { code?: string }).code !== '23505' && !/concurrently updated/.test((err as Error).message)) throw err;
  }
}

/**
 * At start, as the owner: whether the application role may set temp_file_limit for the analytic
 * chat's statements, and, when it may not, the one warning to log (the statements then run without
 * the hub's bound on their temporary files; the server's own temp_file_limit, if any, still holds).
 */
export async function tempFileLimitCheck(owner: pg.ClientBase, roles: RoleNames): Promise<{ settable: boolean; warning?: string }> {
  if (await maySetTempFileLimit(owner, roles.app)) return { settable: true };
  return {
    settable: false,
    warning: `the application role ${roles.app} may not set temp_file_limit, so analytic chat queries run without svc.analytic.temp-file-limit: a sort or hash of one query may fill the database server's disk with temporary files up to the server's own temp_file_limit (none by default). On PostgreSQL 15 or later run "grant set on parameter temp_file_limit to ${roles.app}" in the hub's database as a superuser (docs/analytic-guards.md, "Resources of one statement")`,
  };
}

/**
 * The analytic role's rights on one tenant's ext schema (`ext_t<id>`): USAGE on the schema and
 * SELECT on its tables, those made later included (default privileges of the owner, who makes
 * them: src/connectors/target/ddl.ts). Nothing else: no sequence, no write.
 */
export async function grantAnalyticExt(owner: pg.ClientBase, schema: string, roles: RoleNames): Promise<void> {
  const s = pg.escapeIdentifier(schema);
  const analytic = pg.escapeIdentifier(roles.analytic);
  await owner.query(`grant usage on schema ${s} to ${analytic}`);
  await owner.query(`alter default privileges in schema ${s} grant select on tables to ${analytic}`);
  await owner.query(`grant select on all tables in schema ${s} to ${analytic}`);
}

/** Table, sequence and function rights of the two roles on one migrated schema. */
export async function grantSchema(owner: pg.ClientBase, schema: string, roles: RoleNames): Promise<void> {
  const s = pg.escapeIdentifier(schema);
  const both = `${pg.escapeIdentifier(roles.app)}, ${pg.escapeIdentifier(roles.worker)}`;
  await owner.query(`grant usage on schema ${s} to ${both}`);
  await owner.query(`grant select, insert, update, delete on all tables in schema ${s} to ${both}`);
  await owner.query(`grant usage, select on all sequences in schema ${s} to ${both}`);
  await owner.query(`grant execute on all functions in schema ${s} to ${both}`);
}

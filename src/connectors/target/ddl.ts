import pg from 'pg';
import { CLOSE_WAIT_MS, endPool, resilientPool } from '../../db/pool.js';
import { grantAnalyticExt, type RoleNames } from '../../db/roles.js';
import type { Tx } from '../../db/database.js';
import { ValidationError } from '../../errors.js';
import type { Promote, PromoteType } from '../types.js';

/** `ext.<name>` -> `name`, or undefined when the name is not a safe identifier. */
export function extTableName(table: string): string | undefined {
  const match = /^ext\.([a-z_][a-z0-9_]{0,62})$/.exec(table);
  return match?.[1];
}

/**
 * The schema that holds one tenant's `ext.*` tables: `ext_t<tenantId>`. Manifests, events, API
 * answers and the connector registry keep naming a table `ext.<name>`; only SQL reaches it here, so
 * no tenant can add columns to, or fix the column types of, another tenant's table.
 */
export function tenantSchema(tenantId: number | undefined): string {
  if (tenantId === undefined || !Number.isSafeInteger(tenantId) || tenantId < 0) throw new Error(`no tenant schema for tenant ${String(tenantId)}`);
  return `ext_t${tenantId}`;
}

/**
 * The name of the advisory lock serialising a tenant's DDL (`pg_advisory_xact_lock(hashtext(name))`),
 * taken by ExtSchema.ensureTable, by a connector delete before it touches a table (src/connectors/target/drop.ts)
 * and by connectors.drop_unused_ext_tables(); a run's registration of its table takes it shared
 * (registerTargetTable in src/connectors/target/register.ts), and so does a re-apply before it counts
 * the rows of an endpoint's old table (storedRows in src/connectors/store.ts).
 */
export function ddlLockName(schema: string): string {
  return `svc-hub:ext:${schema}`;
}

/** The quoted SQL name of a tenant's `ext.<name>` table, e.g. `"ext_t7"."partners"`; throws on an unsafe name. */
export function tenantTableSql(tenantId: number | undefined, table: string): string {
  const name = extTableName(table);
  if (!name) throw new Error(`target table ${table} is not ext.<name> with a lower-case identifier`);
  return `${pg.escapeIdentifier(tenantSchema(tenantId))}.${pg.escapeIdentifier(name)}`;
}

/** The same name unquoted (`ext_t7.partners`), for to_regclass and messages. */
export function tenantTableText(tenantId: number | undefined, table: string): string {
  const name = extTableName(table);
  if (!name) throw new Error(`target table ${table} is not ext.<name> with a lower-case identifier`);
  return `${tenantSchema(tenantId)}.${name}`;
}

/**
 * `message` with the tenant's schema named as the tenant knows its tables: `ext_t5.s1`, `"ext_t5"."s1"`
 * become `ext.s1`, `ext."s1"`, and the schema alone `ext` (a PostgreSQL error quoting the SQL name, in
 * what a run's record or event says). Other text is left as it is.
 */
export function publicTableMessage(tenantId: number, message: string): string {
  if (typeof message !== 'string') return message;
  const schema = tenantSchema(tenantId);
  return message.replace(new RegExp(`"${schema}"\\.`, 'g'), 'ext.').replace(new RegExp(`\\b${schema}\\b`, 'g'), 'ext');
}

/**
 * The name PostgreSQL gives the GIN index on the `data` of table `name` (dataIndexSql) when nothing else
 * has it and the two fit in 63 characters (the benchmark's tables; tables made before the hub let
 * PostgreSQL name their indexes have theirs named `<name>_data`).
 */
export function dataIndexName(name: string): string {
  return `${name}_data_idx`;
}

/**
 * The GIN index on the `data` of a table (`tableSql`: its quoted, qualified name), jsonb_path_ops
 * with PostgreSQL's default pending list, as the hub creates it; the ingest benchmark's COPY ceiling
 * builds its table's index with it too. PostgreSQL names it (as it names the table's other indexes):
 * a name the hub made of the table's (`<name>_data`) was cut to 63 characters, so that of a table of
 * 62 or 63 clashed with another index or the table itself, and it could be an `ext.<name>` another
 * table of the tenant already had, or was to take.
 */
export function dataIndexSql(tableSql: string): string {
  return `create index on ${tableSql} using gin (data jsonb_path_ops)`;
}

/**
 * SQL of the table that the text `param` (a placeholder, `$1`, of a name as tenantTableText writes it) names, as
 * a regclass, or null when no relation rows are read from has that name (a table, or a view an operator made
 * there). to_regclass alone finds any relation, and the names PostgreSQL gives a table's indexes and identity
 * sequence (`orders_pkey`, `orders_id_seq`) are valid `ext.<name>`s: such a name read as a table failed (an
 * entity over it answered 500).
 */
export function tableRegclassSql(param: string): string {
  return `(select c.oid::regclass from pg_class c where c.oid = to_regclass(${param}) and c.relkind in (${READ_KINDS}))`;
}

/** The kinds of relation (pg_class.relkind) rows are read from as from a table: tables, views, materialized views, foreign tables. */
const READ_KINDS = `'r', 'p', 'v', 'm', 'f'`;

/** The columns every ext table has. */
export const EXT_COLUMNS = ['id', 'tenant_id', 'external_id', 'row_hash', 'data', 'indexed_at', 'connector_id', 'endpoint_id'] as const;

/**
 * Most columns of a PostgreSQL table (MaxHeapAttributeNumber): an `add column` past it fails (`tables can have at most
 * 1600 columns`). Every column ever added has taken a number, a dropped one included (its number is never reused).
 */
export const MAX_TABLE_COLUMNS = 1600;

/** A table as the catalog has it: name -> type (format_type) of each column, and how many numbers its columns took. */
export interface TableColumns {
  types: Map<string, string>;
  /** Columns the table has numbered, dropped ones included (pg_class.relnatts): what PostgreSQL's limit counts. */
  numbered: number;
}

const RELATION_KINDS: Record<string, string> = { i: 'an index', I: 'an index', S: 'a sequence', v: 'a view', m: 'a materialized view', f: 'a foreign table' };

/**
 * The joins (after `pg_class c`, the relation of oid `oid`) that give `owner`: the table an index is on, or the one
 * whose column a sequence belongs to (an identity or serial column's).
 */
function ownerJoinsSql(oid: string): string {
  return `left join pg_index i on i.indexrelid = ${oid}
       left join pg_depend d on c.relkind = 'S' and d.classid = 'pg_class'::regclass and d.objid = ${oid}
                            and d.refclassid = 'pg_class'::regclass and d.deptype in ('a', 'i')`;
}
const OWNER_SQL = 'coalesce(i.indrelid, d.refobjid)::regclass::text as owner';

/** What has a name that is no table's: `an index of ext.orders`, `a sequence of ext.orders`, `a view`. */
function relationText(r: { kind: string; owner: string | null }): string {
  return `${RELATION_KINDS[r.kind] ?? 'a relation'}${r.owner ? ` of ${r.owner.replace(/^[^.]*\./, 'ext.')}` : ''}`;
}

/**
 * Why `table` (`ext.<name>`) cannot be a table where `what` (relationText) has that name:
 * `ext.orders_pkey cannot be made a table: the name is taken by an index of ext.orders …`. A run's refusal
 * (tableColumns) and a connector apply's (takenTableNames) say the same; an entity's apply, whose sources are read, `cannot be read as a table`.
 */
export function takenRefusal(table: string, what: string, be: 'made' | 'read as' = 'made'): string {
  return `${table} cannot be ${be} a table: the name is taken by ${what} (PostgreSQL names a table's indexes and sequence after it); choose another table name`;
}

/**
 * The columns of table `text` (`ext_t7.partners`, quoted or not), or undefined when it does not exist. A
 * ValidationError (field `table`) when another relation has the name: one of another table's indexes or
 * its sequence, which PostgreSQL names after the table (`orders_pkey`, `orders_id_seq`).
 */
export async function tableColumns(q: { query: Tx['query'] }, text: string): Promise<TableColumns | undefined> {
  const { rows } = await q.query<{ kind: string; name: string; owner: string | null; numbered: number | null; column: string | null; type: string | null }>(
    `select c.relkind::text as kind, c.relname as name, ${OWNER_SQL},
            c.relnatts::int as numbered, a.attname as column, format_type(a.atttypid, a.atttypmod) as type
       from (select to_regclass($1) as oid) t
       join pg_class c on c.oid = t.oid
       left join pg_attribute a on c.relkind in ('r', 'p') and a.attrelid = t.oid and a.attnum > 0 and not a.attisdropped
       ${ownerJoinsSql('t.oid')}`,
    [text],
  );
  if (rows.length === 0) return undefined;
  const first = rows[0]!;
  if (first.kind !== 'r' && first.kind !== 'p') throw new ValidationError(takenRefusal(`ext.${first.name}`, relationText(first)), 'table');
  return { types: new Map(rows.filter((r) => r.column).map((r) => [r.column!, r.type!])), numbered: first.numbered! };
}

/**
 * Of `tables` (`ext.<name>`s, of the caller's tenant), those another relation than a table has the name of, each with
 * what has it (`an index of ext.orders`, `a sequence of ext.orders`, `a view`): one of a table's indexes or its
 * sequence, which PostgreSQL names after it, or what someone else made there. `read`: a view (or materialized view,
 * foreign table) is read as a table (tableRegclassSql) and is not in it. A name of no relation yet, or of a table, is
 * not in it, nor one that is no `ext.<name>`.
 */
export async function takenTableNames(tx: Tx, tables: string[], options: { read?: boolean } = {}): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  for (const table of tables) if (extTableName(table) && tx.tenantId !== undefined) names.set(tenantTableText(tx.tenantId, table), table);
  const taken = new Map<string, string>();
  if (names.size === 0) return taken;
  const { rows } = await tx.query<{ text: string; kind: string; owner: string | null }>(
    `select distinct on (n.text) n.text, c.relkind::text as kind, ${OWNER_SQL}
       from unnest($1::text[]) as n(text)
       join pg_class c on c.oid = to_regclass(n.text) and c.relkind not in (${options.read ? READ_KINDS : `'r', 'p'`})
       ${ownerJoinsSql('c.oid')}`,
    [[...names.keys()]],
  );
  for (const row of rows) taken.set(names.get(row.text)!, relationText(row));
  return taken;
}

/**
 * The refusal of `adding` new columns to `table` (`ext.<name>`) whose columns took `numbered` numbers
 * (TableColumns.numbered; a table not made yet: EXT_COLUMNS.length) when PostgreSQL's limit leaves no room for them,
 * naming the limit and how many more fit; else undefined. `what` says who adds them (`the CSV header names`).
 */
export function columnRoomRefusal(table: string, numbered: number, adding: number, what: string): string | undefined {
  if (numbered + adding <= MAX_TABLE_COLUMNS) return undefined;
  const n = (x: number) => x.toLocaleString('en-US');
  const own = EXT_COLUMNS.length;
  return (
    `${what} ${n(adding)} column${adding === 1 ? '' : 's'} ${table} does not have: at most ${n(Math.max(0, MAX_TABLE_COLUMNS - numbered))} more fit ` +
    `(a table holds at most ${n(MAX_TABLE_COLUMNS)} columns, PostgreSQL's limit, and ${table} takes ${n(numbered)}: ` +
    `${numbered > own ? `the ${own} every ext table has, its promoted columns and any dropped since, which still count` : `the ${own} every ext table has`})`
  );
}

/** PostgreSQL's system columns: every table has them too, and no column may take their names. */
export const SYSTEM_COLUMNS = ['tableoid', 'xmin', 'cmin', 'xmax', 'cmax', 'ctid'] as const;
const RESERVED = new Set<string>([...EXT_COLUMNS, ...SYSTEM_COLUMNS]);

export function promoteColumnName(name: string): string | undefined {
  return /^[a-z_][a-z0-9_]{0,62}$/.test(name) && !RESERVED.has(name) ? name : undefined;
}

const SQL_TYPES: Record<PromoteType, string> = { text: 'text', bigint: 'bigint', timestamptz: 'timestamptz', numeric: 'numeric', boolean: 'boolean' };
/** How PostgreSQL's format_type names each promote type. */
const CATALOG_TYPES: Record<PromoteType, string> = { text: 'text', bigint: 'bigint', timestamptz: 'timestamp with time zone', numeric: 'numeric', boolean: 'boolean' };

export function sqlType(type: PromoteType): string {
  return SQL_TYPES[type];
}

/** How PostgreSQL's format_type names a promote type (what a column of the table made for it reads as). */
export function catalogType(type: PromoteType): string {
  return CATALOG_TYPES[type];
}

/**
 * DDL for the tenants' ext tables through the owner connection: the application role may write
 * rows but never create or alter tables (and so can never turn their row-level security off).
 * Each tenant has its own schema `ext_t<id>` (created with its first table, grants included); a
 * table is created on the first run that names it, and a promote added later becomes a new empty
 * column on the next run. Row-level security stays on every table as a second wall, and a check
 * constraint pins `tenant_id` to the schema's tenant as a third. DDL of one tenant is serialised
 * by an advisory lock on its schema (taken too by connectors.drop_unused_ext_tables(), which a
 * connector delete calls: src/connectors/target/drop.ts); other tenants are never touched.
 */
export class ExtSchema {
  private readonly pool: pg.Pool;

  constructor(
    ownerUrl: string,
    private readonly roles: RoleNames,
    /** How long its close waits for its connections before cutting them (`svc.datasource.close-timeout`). */
    private readonly closeTimeoutMs = CLOSE_WAIT_MS,
  ) {
    this.pool = resilientPool({ connectionString: ownerUrl, max: 2, application_name: 'svc-hub ddl' });
  }

  /**
   * Makes sure the tenant's table exists with every promoted column. A column the table already
   * has with another type is an error naming both (the tenant's own manifests disagree), unless
   * `typesFromTable`: then a promote naming a column the table has takes that column's type (a CSV
   * ingest, whose columns are all text, into a table a connector made with typed columns).
   * Returns the promotes as the writer is to write them and the table's other promoted columns.
   */
  async ensureTable(tenantId: number, table: string, promote: Promote[], options: { typesFromTable?: boolean } = {}): Promise<EnsuredTable> {
    const schema = tenantSchema(tenantId);
    const name = extTableName(table);
    if (!name) throw new Error(`target table ${table} is not ext.<name> with a lower-case identifier`);
    for (const p of promote) if (!promoteColumnName(p.name)) throw new Error(`promote name ${p.name} is not a usable column name`);
    const wanted = (have: Map<string, string>) => (options.typesFromTable ? asTable(promote, have) : promote);
    const columnsOf = (list: Promote[]) => list.map((p) => ({ column: p.name, type: p.type }));
    // The catalog first: a run of an existing table takes no lock and sends no DDL. A run reads it
    // after its registration committed under the DDL lock (registerTargetTable): no delete that
    // could still drop the table is in flight then, and none after it drops a registered table.
    const ident = `${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(name)}`;
    const existing = (await tableColumns(this.pool, ident))?.types;
    if (existing) {
      const list = wanted(existing);
      if (this.satisfied(table, existing, columnsOf(list))) return ensured(list, existing.keys());
    }

    const both = `${pg.escapeIdentifier(this.roles.app)}, ${pg.escapeIdentifier(this.roles.worker)}`;
    return this.inTenantLock(schema, async (client) => {
      await client.query(`create schema if not exists ${pg.escapeIdentifier(schema)}`);
      await client.query(`grant usage on schema ${pg.escapeIdentifier(schema)} to ${both}`);
      await client.query(`alter default privileges in schema ${pg.escapeIdentifier(schema)} grant select, insert, update, delete on tables to ${both}`);
      // The analytic chat's role (src/retrieval/analytic/run.ts) reads the tenants' tables, nothing else.
      await grantAnalyticExt(client, schema, this.roles);
      const now = await tableColumns(client, ident);
      const have = now?.types ?? new Map<string, string>();
      const list = wanted(have);
      const columns = columnsOf(list);
      this.satisfied(table, have, columns.filter((c) => have.has(c.column)));
      const adding = columns.filter((c) => !have.has(c.column));
      // Refused before the table is made or altered (this transaction then rolls back), naming PostgreSQL's limit and what is left (the table's own columns and those dropped
      // count): the `alter table` past it failed with PostgreSQL's bare `tables can have at most 1600 columns`.
      const refusal = columnRoomRefusal(table, now?.numbered ?? EXT_COLUMNS.length, adding.length, 'the run promotes');
      if (refusal) throw new Error(refusal);
      if (!now) {
        await client.query(`
          create table ${ident} (
            id           bigint generated always as identity primary key,
            tenant_id    bigint not null check (tenant_id = ${tenantId}),
            external_id  text not null,
            row_hash     text not null,
            data         jsonb not null,
            indexed_at   timestamptz not null default now(),
            connector_id uuid not null,
            endpoint_id  uuid not null,
            unique (tenant_id, external_id)
          )`);
        await client.query(dataIndexSql(ident));
        await client.query(`create index on ${ident} (tenant_id, row_hash)`);
        await client.query(`create index on ${ident} (endpoint_id)`);
        await client.query(`alter table ${ident} enable row level security`);
        await client.query(`create policy tenant_isolation on ${ident} using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant())`);
      }
      // One statement for every new column: a table's first run of a wide source adds hundreds, and a
      // statement each kept this transaction (its lock, and an xid holding back what the outbox may
      // read cluster-wide) open for seconds.
      const added = adding.map((c) => `add column ${pg.escapeIdentifier(c.column)} ${sqlType(c.type)}`);
      if (added.length > 0) await client.query(`alter table ${ident} ${added.join(', ')}`);
      await client.query(`grant select, insert, update, delete on ${ident} to ${both}`);
      return ensured(list, [...have.keys(), ...columns.map((c) => c.column)]);
    });
  }

  async close(): Promise<void> {
    await endPool(this.pool, this.closeTimeoutMs);
  }

  /** true when every column is there with its type; throws on a type that differs. */
  private satisfied(table: string, existing: Map<string, string>, columns: Array<{ column: string; type: PromoteType }>): boolean {
    let all = true;
    for (const c of columns) {
      const type = existing.get(c.column);
      if (type === undefined) all = false;
      else if (type !== catalogType(c.type)) {
        throw new Error(`column ${c.column} of ${table} is ${type}, but this endpoint promotes it as ${c.type}: rename the promote or keep its type`);
      }
    }
    return all;
  }

  private async inTenantLock<T>(schema: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    try {
      await client.query('begin');
      await client.query('select pg_advisory_xact_lock(hashtext($1))', [ddlLockName(schema)]);
      const result = await fn(client);
      await client.query('commit');
      return result;
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }
}

/** What ExtSchema.ensureTable made sure of, for the writer of one run. */
export interface EnsuredTable {
  /** The promotes to write: those given, or with `typesFromTable` each column the table has with its type. */
  promote: Promote[];
  /**
   * The table's promoted columns these promotes do not name (another writer's, or a promote a re-apply
   * dropped): the writer sets them to NULL on every row it writes, so that no row keeps a value its
   * `data` no longer holds.
   */
  unpromoted: string[];
}

const EXT_COLUMN_SET = new Set<string>(EXT_COLUMNS);

function ensured(promote: Promote[], columns: Iterable<string>): EnsuredTable {
  const named = new Set(promote.map((p) => p.name));
  const unpromoted = new Set<string>();
  for (const column of columns) if (!EXT_COLUMN_SET.has(column) && !named.has(column)) unpromoted.add(column);
  return { promote, unpromoted: [...unpromoted] };
}

/** The promote type whose column PostgreSQL names `type` (format_type), if any. */
const PROMOTE_TYPE_OF = new Map<string, PromoteType>(Object.entries(CATALOG_TYPES).map(([promoteType, catalog]) => [catalog, promoteType as PromoteType]));

/** `promote` with each column `have` holds (name -> format_type) typed as it is there; the same list when none changes. */
function asTable(promote: Promote[], have: Map<string, string>): Promote[] {
  let changed = false;
  const list = promote.map((p) => {
    const type = PROMOTE_TYPE_OF.get(have.get(p.name) ?? '');
    if (type === undefined || type === p.type) return p;
    changed = true;
    return { ...p, type };
  });
  return changed ? list : promote;
}

import pg from 'pg';
import type { RoleNames } from '../../db/roles.js';
import type { Promote, PromoteType } from '../types.js';

/** `ext.<name>` -> `name`, or undefined when the name is not a safe identifier. */
export function extTableName(table: string): string | undefined {
  const match = /^ext\.([a-z_][a-z0-9_]{0,62})$/.exec(table);
  return match?.[1];
}

const RESERVED = new Set(['id', 'tenant_id', 'external_id', 'row_hash', 'data', 'indexed_at', 'connector_id', 'endpoint_id']);

export function promoteColumnName(name: string): string | undefined {
  return /^[a-z_][a-z0-9_]{0,62}$/.test(name) && !RESERVED.has(name) ? name : undefined;
}

const SQL_TYPES: Record<PromoteType, string> = { text: 'text', bigint: 'bigint', timestamptz: 'timestamptz', numeric: 'numeric', boolean: 'boolean' };

export function sqlType(type: PromoteType): string {
  return SQL_TYPES[type];
}

/**
 * DDL for ext.* tables through the owner connection: the application role may write rows but never
 * create or alter tables (and so can never turn their row-level security off). A table is created
 * on the first run that names it; a promote added later becomes a new empty column on the next run.
 */
export class ExtSchema {
  private readonly pool: pg.Pool;
  private readonly known = new Map<string, Set<string>>();

  constructor(
    ownerUrl: string,
    private readonly roles: RoleNames,
  ) {
    this.pool = new pg.Pool({ connectionString: ownerUrl, max: 2, application_name: 'svc-hub ddl' });
    this.pool.on('error', () => undefined);
  }

  async ensureTable(table: string, promote: Promote[]): Promise<void> {
    const name = extTableName(table);
    if (!name) throw new Error(`target table ${table} is not ext.<name> with a lower-case identifier`);
    const columns = promote.map((p) => {
      const column = promoteColumnName(p.name);
      if (!column) throw new Error(`promote name ${p.name} is not a usable column name`);
      return { column, type: sqlType(p.type) };
    });
    const cached = this.known.get(name);
    if (cached && columns.every((c) => cached.has(c.column))) return;

    const ident = `ext.${pg.escapeIdentifier(name)}`;
    const client = await this.pool.connect();
    try {
      await client.query('begin');
      await client.query('select pg_advisory_xact_lock(hashtext($1))', [`svc-hub:ext:${name}`]);
      await client.query(`
        create table if not exists ${ident} (
          id           bigint generated always as identity primary key,
          tenant_id    bigint not null,
          external_id  text not null,
          row_hash     text not null,
          data         jsonb not null,
          indexed_at   timestamptz not null default now(),
          connector_id uuid not null,
          endpoint_id  uuid not null,
          unique (tenant_id, external_id)
        )`);
      await client.query(`create index if not exists ${pg.escapeIdentifier(`${name}_data`)} on ${ident} using gin (data jsonb_path_ops)`);
      await client.query(`create index if not exists ${pg.escapeIdentifier(`${name}_row_hash`)} on ${ident} (tenant_id, row_hash)`);
      await client.query(`create index if not exists ${pg.escapeIdentifier(`${name}_endpoint`)} on ${ident} (endpoint_id)`);
      await client.query(`alter table ${ident} enable row level security`);
      const policy = await client.query('select 1 from pg_policies where schemaname = $1 and tablename = $2 and policyname = $3', ['ext', name, 'tenant_isolation']);
      if (policy.rowCount === 0) {
        await client.query(
          `create policy tenant_isolation on ${ident} using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant())`,
        );
      }
      for (const c of columns) await client.query(`alter table ${ident} add column if not exists ${pg.escapeIdentifier(c.column)} ${c.type}`);
      const both = `${pg.escapeIdentifier(this.roles.app)}, ${pg.escapeIdentifier(this.roles.worker)}`;
      await client.query(`grant usage on schema ext to ${both}`);
      await client.query(`grant select, insert, update, delete on ${ident} to ${both}`);
      await client.query('commit');
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
    this.known.set(name, new Set(columns.map((c) => c.column)));
  }

  /** Drops a table nobody writes any more (owner only). */
  async dropIfUnused(table: string): Promise<boolean> {
    const name = extTableName(table);
    if (!name) return false;
    const client = await this.pool.connect();
    try {
      await client.query('begin');
      await client.query('select pg_advisory_xact_lock(hashtext($1))', [`svc-hub:ext:${name}`]);
      const used = await client.query('select 1 from connectors.ext_tables where table_name = $1 limit 1', [table]);
      const exists = await client.query('select to_regclass($1) as t', [`ext.${name}`]);
      let dropped = false;
      if (used.rowCount === 0 && exists.rows[0].t) {
        const rows = await client.query(`select 1 from ext.${pg.escapeIdentifier(name)} limit 1`);
        if (rows.rowCount === 0) {
          await client.query(`drop table ext.${pg.escapeIdentifier(name)}`);
          dropped = true;
        }
      }
      await client.query('commit');
      this.known.delete(name);
      return dropped;
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  /** Drops every ext.* table that no connector registers and that holds no row. Returns their names. */
  async dropUnused(): Promise<string[]> {
    const { rows } = await this.pool.query<{ name: string }>(
      `select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'ext' and c.relkind = 'r'
          and not exists (select 1 from connectors.ext_tables t where t.table_name = 'ext.' || c.relname)`,
    );
    const dropped: string[] = [];
    for (const { name } of rows) if (await this.dropIfUnused(`ext.${name}`)) dropped.push(`ext.${name}`);
    return dropped;
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

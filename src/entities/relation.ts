import pg from 'pg';
import { tableRegclassSql, tenantTableSql } from '../connectors/target/ddl.js';
import type { Tx } from '../db/database.js';
import { parseMapping } from './mapping.js';
import type { EntityDef, EntitySource } from './types.js';

/**
 * The fused relation of an Entity, computed at read time: a subquery built from the stored
 * definition, after the catalog says every source table and mapped column is there. No view is
 * kept in the database, so nothing there depends on the ext tables (a connector delete may drop an
 * empty one: src/connectors/target/drop.ts); docs/entities.md says why, with the measurement.
 *
 * Semantics (docs/entities.md, "Fusion"):
 * - every source is read as `(_k, v…)`: its key and its mapped columns, all as text (a promoted
 *   column cast `::text`, PostgreSQL's own text form; a JSONPath through
 *   `jsonb_path_query_first(data, path) #>> '{}'`), an empty text read as NULL (a CSV's empty cell
 *   is no value); rows whose key is NULL or '' are left out;
 * - a source whose key is not `external_id` (unique per table) may hold a key twice: the row with
 *   the smallest `id` (the first ingested) is the one kept;
 * - the sources are joined on the key text by a chain of FULL OUTER JOINs, in declared order;
 *   `_entity_id` is the key;
 * - a canonical column is the first non-null value in declared source order (precedence); the key
 *   column is `_entity_id`;
 * - `_conflicts` is `{"<column>": {"<source table>": "<value>", …}, …}` for every column on which
 *   two sources give different non-null values (every source with a non-null value listed, the one
 *   that won among them), `{}` when none; `_resolution` is `precedence` when there is a conflict,
 *   else `none`.
 */

/** A definition the database cannot serve (a source table or a mapped column is missing); the message says which. */
export class EntityDefinitionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EntityDefinitionError';
  }
}

/** Columns of each `ext.<name>` table of the caller's tenant; undefined for a table that does not exist. */
export async function sourceColumns(tx: Tx, tables: string[]): Promise<Map<string, Set<string> | undefined>> {
  const unique = [...new Set(tables)];
  const { rows } = await tx.query<{ table_name: string; exists: boolean; column: string | null }>(
    `select s.table_name, ${tableRegclassSql('s.regclass')} is not null as exists, a.attname as column
       from unnest($1::text[], $2::text[]) as s(table_name, regclass)
       left join pg_attribute a on a.attrelid = ${tableRegclassSql('s.regclass')} and a.attnum > 0 and not a.attisdropped`,
    [unique, unique.map((t) => tenantTableSql(tx.tenantId, t))],
  );
  const out = new Map<string, Set<string> | undefined>(unique.map((t) => [t, undefined]));
  for (const r of rows) {
    if (!r.exists) continue;
    const columns = out.get(r.table_name) ?? new Set<string>();
    if (r.column) columns.add(r.column);
    out.set(r.table_name, columns);
  }
  return out;
}

/** How much of the fused relation to build. */
export interface RelationOptions {
  /**
   * Whether to build `_conflicts` and `_resolution` (default true). Their SQL compares every pair of
   * sources on every column, most of the relation's text (with 5 sources and 30 JSONPath-mapped
   * columns, 80 KB with them, 17 KB without): a reader that never reads them (analytic chat) leaves
   * them out.
   */
  conflicts?: boolean;
  /**
   * Only the records whose key sorts after this text (PostgreSQL's text order, as `order by
   * _entity_id`): the bound is put in every source (a record's key is each of its sources' key), so
   * that a source keyed by `external_id` is read from its index and no source's rows before it are
   * joined or sorted. How the workflow sweep goes on with a pass (docs/workflows.md).
   */
  after?: string;
}

/**
 * SQL of a subquery (no trailing semicolon, no parameters) whose columns are `_entity_id` text,
 * every canonical column as text named exactly as declared (in declared order), `_conflicts`
 * jsonb, `_resolution` text (these two not with `conflicts: false`); checks the catalog first and
 * throws EntityDefinitionError when a source table or mapped column is missing. Run it in the
 * caller's tenant transaction.
 */
export async function entityRelation(tx: Tx, entity: EntityDef, options: RelationOptions = {}): Promise<string> {
  const catalog = await sourceColumns(tx, entity.sources.map((s) => s.table));
  for (const source of entity.sources) {
    const columns = catalog.get(source.table);
    if (!columns) throw new EntityDefinitionError(`source table ${source.table} of entity ${entity.name} does not exist`);
    const missing = (mapping: string, what: string) => {
      const parsed = parseMapping(mapping);
      if ('problem' in parsed) throw new EntityDefinitionError(`mapping ${JSON.stringify(mapping)} of ${source.table} (entity ${entity.name}, ${what}) ${parsed.problem}`);
      if (parsed.kind === 'column' && !columns.has(parsed.column)) throw new EntityDefinitionError(`column ${parsed.column} of ${source.table} (entity ${entity.name}, ${what}) does not exist`);
    };
    missing(source.key, 'key');
    for (const [column, mapping] of Object.entries(source.columns)) missing(mapping, `column ${column}`);
  }
  // A connector delete committed after this check may still drop a table: the query then fails
  // with 42P01 (undefined table) like any query on a table that went away.
  return fusedRelationSql(tx.tenantId, entity, options);
}

const ident = (name: string) => pg.escapeIdentifier(name);
const literal = (text: string) => pg.escapeLiteral(text);

/** The SQL of one mapping over the table aliased `t`, as text. */
function mappingSql(mapping: string): string {
  const parsed = parseMapping(mapping);
  if ('problem' in parsed) throw new EntityDefinitionError(`mapping ${JSON.stringify(mapping)} ${parsed.problem}`);
  return parsed.kind === 'column' ? `t.${ident(parsed.column)}::text` : `jsonb_path_query_first(t.data, ${literal(parsed.pgPath)}::jsonpath) #>> '{}'`;
}

/** The value column of canonical column number `j` in a source subquery. */
export const valueColumn = (j: number): string => `_v${j}`;

/**
 * One source as a subquery with columns `_k` (the key, never NULL or '') and `_v<j>` for every
 * canonical column `j` it maps (not the key column, which is `_k`). A key that is not `external_id`
 * may repeat: the row with the smallest `id` is kept.
 */
export function sourceSubquerySql(tenantId: number | undefined, entity: EntityDef, source: EntitySource, after?: string): string {
  const values = entity.columns.flatMap((c, j) => {
    const mapping = c.name === entity.key ? undefined : source.columns[c.name];
    return mapping === undefined ? [] : [{ name: valueColumn(j), sql: mappingSql(mapping) }];
  });
  const table = tenantTableSql(tenantId, source.table);
  const key = mappingSql(source.key);
  const select = [`${key} as _k`, ...values.map((v) => `${v.sql} as ${v.name}`)].join(', ');
  if (source.key === 'external_id') return `select ${select} from ${table} t where t.external_id <> ''${after === undefined ? '' : ` and ${key} > ${literal(after)}`}`;
  const outputs = ['_k', ...values.map((v) => v.name)].join(', ');
  return `select distinct on (_k) ${outputs} from (select ${select}, t.id as _id from ${table} t) d where _k <> ''${after === undefined ? '' : ` and _k > ${literal(after)}`} order by _k, _id`;
}

/** The fused relation's SQL without the catalog check (entityRelation does the check first). */
export function fusedRelationSql(tenantId: number | undefined, entity: EntityDef, options: RelationOptions = {}): string {
  const conflicts = options.conflicts ?? true;
  const n = entity.sources.length;
  const alias = (i: number) => `s${i}`;
  const keyOf = (upTo: number) => (upTo === 1 ? `${alias(0)}._k` : `coalesce(${Array.from({ length: upTo }, (_, i) => `${alias(i)}._k`).join(', ')})`);

  let from = `(${sourceSubquerySql(tenantId, entity, entity.sources[0]!, options.after)}) ${alias(0)}`;
  for (let i = 1; i < n; i++) {
    from += ` full join (${sourceSubquerySql(tenantId, entity, entity.sources[i]!, options.after)}) ${alias(i)} on ${alias(i)}._k = ${keyOf(i)}`;
  }
  const entityId = keyOf(n);

  const outputs: string[] = [`${entityId} as _entity_id`];
  const differs: Array<{ column: string; test: string; values: string }> = [];
  entity.columns.forEach((c, j) => {
    if (c.name === entity.key) {
      outputs.push(`${entityId} as ${ident(c.name)}`);
      return;
    }
    const givers = entity.sources.flatMap((s, i) => (s.columns[c.name] !== undefined ? [{ table: s.table, value: `${alias(i)}.${valueColumn(j)}`, given: `nullif(${alias(i)}.${valueColumn(j)}, '')` }] : []));
    // The first value given, in source order; an empty text only when no source gives more.
    outputs.push(`${givers.length === 1 ? givers[0]!.value : `coalesce(${[...givers.map((g) => g.given), ...givers.map((g) => g.value)].join(', ')})`} as ${ident(c.name)}`);
    if (!conflicts || givers.length < 2) return;
    const pairs: string[] = [];
    for (let a = 0; a < givers.length; a++) for (let b = a + 1; b < givers.length; b++) pairs.push(`coalesce(${givers[a]!.given} <> ${givers[b]!.given}, false)`);
    differs.push({
      column: c.name,
      test: pairs.length === 1 ? pairs[0]! : `(${pairs.join(' or ')})`,
      values: `jsonb_strip_nulls(jsonb_build_object(${givers.map((g) => `${literal(g.table)}::text, ${g.given}`).join(', ')}))`,
    });
  });

  if (!conflicts) return `select ${outputs.join(', ')} from ${from}`;
  if (differs.length === 0) {
    outputs.push(`'{}'::jsonb as _conflicts`, `'none'::text as _resolution`);
  } else {
    const any = differs.map((d) => d.test).join(' or ');
    const ledger = differs.map((d) => `case when ${d.test} then jsonb_build_object(${literal(d.column)}::text, ${d.values}) else '{}'::jsonb end`).join(' || ');
    outputs.push(`case when ${any} then ${ledger} else '{}'::jsonb end as _conflicts`, `case when ${any} then 'precedence' else 'none' end::text as _resolution`);
  }
  return `select ${outputs.join(', ')} from ${from}`;
}

/** How analytic chat reads a canonical column of each declared type. */
const SQL_TYPES: Record<EntityDef['columns'][number]['type'], string> = { text: 'text', bigint: 'bigint', numeric: 'numeric', timestamptz: 'timestamptz', boolean: 'boolean' };

/**
 * A canonical column's text `value` as its declared type, NULL when it does not read as one (never an
 * error). A bigint also reads an integral numeric within range (`5.0`, as Python writes a float,
 * `1.5e3`); a timestamptz never reads PostgreSQL's special words (`now`, `today`, `tomorrow`,
 * `yesterday`, which would be the query's time, nor `epoch`, `infinity`), alone or with a time.
 * Nested CASEs: PostgreSQL does not promise to evaluate an AND's operands in order.
 */
function typedValue(value: string, type: Exclude<EntityDef['columns'][number]['type'], 'text'>): string {
  if (type === 'bigint') {
    const n = `${value}::numeric`;
    return `case when pg_input_is_valid(${value}, 'numeric') then case when ${n} % 1 = 0 and ${n} between -9223372036854775808 and 9223372036854775807 then ${n}::bigint end end`;
  }
  const valid = `pg_input_is_valid(${value}, ${literal(SQL_TYPES[type])})`;
  if (type !== 'timestamptz') return `case when ${valid} then ${value}::${SQL_TYPES[type]} end`;
  return `case when ${valid} and ${value} !~* '\\m(now|today|tomorrow|yesterday|epoch|infinity)\\M' then ${value}::timestamptz end`;
}

/**
 * The entity as analytic chat queries it (the schema card's relation `entity.<name>`): the canonical
 * columns in declared order, each typed as declared (a value that does not read as its type is
 * NULL, never an error), without `_entity_id`, `_conflicts` and `_resolution` (the conflict ledger
 * is outside the card, so its SQL is not built: `conflicts: false`, which keeps an entity's SQL
 * within what one analytic query may name). Checks the catalog first, as entityRelation does.
 */
export async function typedEntityRelation(tx: Tx, entity: EntityDef): Promise<string> {
  const fused = await entityRelation(tx, entity, { conflicts: false });
  const columns = entity.columns.map((c) => {
    const value = `e.${ident(c.name)}`;
    if (c.type === 'text') return `${value} as ${ident(c.name)}`;
    return `${typedValue(value, c.type)} as ${ident(c.name)}`;
  });
  return `select ${columns.join(', ')} from (${fused}) e`;
}

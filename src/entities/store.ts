import { takenRefusal, takenTableNames } from '../connectors/target/ddl.js';
import type { Tx } from '../db/database.js';
import { ValidationError } from '../errors.js';
import { unchangedApply } from '../manifests/canonical.js';
import { takeApplyLocks, takeObjectTurn, takeTenantPlace } from '../manifests/tenant-cap.js';
import { type EntityDraft, checkEntityManifest, type Issue, mappingField } from './manifest/validate.js';
import { BOOKKEEPING_COLUMNS, parseMapping } from './mapping.js';
import { sourceColumns } from './relation.js';
import type { EntityColumn, EntityDef, EntitySource } from './types.js';

export type { EntityColumn, EntityDef, EntitySource };

/**
 * Entities as stored (schema `entities`, migrations/entities/V1__entities.sql). Every function runs
 * inside the caller's tenant transaction (`Database.withTenant`): row-level security keeps tenants
 * apart, and a name (stored lower-case, looked up case-insensitively) is unique within its tenant.
 */

export interface ApplyResult {
  entity: EntityDef;
  /** true for a new name, false when an existing entity was updated. */
  created: boolean;
  /** The manifest was the one stored, normalised as stored: nothing was written (unchangedApply). */
  unchanged: boolean;
  warnings: Issue[];
  /** The scopes of the entity this apply replaced (undefined for a new name). */
  replacedScopes?: string[];
}

/** One entity as the list shows it. */
export interface EntityRecord {
  id: string;
  name: string;
  scopes: string[];
  key: string;
  columns: Array<Required<Pick<EntityColumn, 'name' | 'type'>> & { label: string | null; description: string | null; examples: string[]; values: string[] | null }>;
  sources: Array<{ table: string; key: string }>;
  createdAt: Date;
  updatedAt: Date;
}

export interface EntityDetail extends EntityRecord {
  /** The manifest as applied. */
  manifest: unknown;
  /** The sources with their column mappings. */
  spec: Omit<EntityDef, 'id'>;
}

/**
 * Entities one tenant may have: the database is shared, so the count is bounded (well past what a
 * tenant's model needs); applying a new name past it is refused (an update is not).
 */
export const MAX_ENTITIES_PER_TENANT = 500;

function tenantOf(tx: Tx): number {
  if (tx.tenantId === undefined) throw new Error('entities are stored per tenant: use Database.withTenant');
  return tx.tenantId;
}

/** The locks applyEntity takes before it writes the entity of that name, in its order (the object's turn, its row, then the tenant's turn): ManifestHandler.lockForApply. */
export const lockForApply = (tx: Tx, name: string): Promise<void> =>
  takeApplyLocks(tx, { table: 'entities.entities', plural: 'entities', mode: 'for no key update', order: 'row-then-turn' }, name);

/**
 * Validates, normalises and stores a manifest in the caller's transaction: a 400 (ValidationError
 * naming the field) on the first error, otherwise an insert or an update of the same name. Source
 * tables are checked against the tenant's catalog: a mapped column an existing table lacks is a
 * 400; a table that does not exist yet (its connector has not run) is a warning. The manifest stored
 * normalised as stored (unchangedApply) is checked and writes nothing: `unchanged`, its warnings answered.
 * A new name past MAX_ENTITIES_PER_TENANT is a 400 naming `metadata.name`.
 */
export async function applyEntity(tx: Tx, manifest: unknown, opts: { actor?: string } = {}): Promise<ApplyResult> {
  tenantOf(tx);
  const check = checkEntityManifest(manifest);
  const first = check.errors[0];
  if (first || !check.entity) throw new ValidationError(first?.message ?? 'invalid manifest', first?.field || undefined);
  const draft = check.entity;
  // The object's turn first (takeObjectTurn): before its row, the tenant's turn and its owner record.
  await takeObjectTurn(tx, 'entities', draft.name);
  const warnings = [...check.warnings, ...(await checkSources(tx, draft))];
  // Locked as the upsert below would lock it: the entity replaced is the one read (replacedScopes).
  const held = async () =>
    (
      await tx.query<{ id: string; manifest: unknown; spec: unknown; scopes: string[] }>(
        'select id, manifest, spec, scopes from entities.entities where name = lower($1) for no key update',
        [draft.name],
      )
    ).rows[0];
  const unchanged = (stored: { id: string; manifest: unknown; spec: unknown; scopes: string[] } | undefined): ApplyResult | undefined =>
    stored && unchangedApply({ manifest: stored.manifest, normalised: stored.spec }, manifest, draft)
      ? { entity: { id: stored.id, ...draft }, created: false, unchanged: true, warnings, replacedScopes: stored.scopes }
      : undefined;
  const before = unchanged(await held());
  if (before) return before;
  await takeTenantPlace(tx, { table: 'entities.entities', noun: 'entity', plural: 'entities', max: MAX_ENTITIES_PER_TENANT }, draft.name);
  // Read again once the tenant's turn is taken: an apply of the name that committed since the read above (it
  // held the turn) is the entity this one replaces, or stored this very manifest already (unchanged).
  const now = await held();
  const same = unchanged(now);
  if (same) return same;
  const replacedScopes = now?.scopes;

  const { rows } = await tx.query<{ id: string; created: boolean }>(
    `insert into entities.entities (tenant_id, name, scopes, key, manifest, spec, created_by, updated_by)
     values (core.current_tenant(), $1, $2, $3, $4, $5, $6, $6)
     on conflict (tenant_id, name) do update
       set scopes = excluded.scopes, key = excluded.key, manifest = excluded.manifest, spec = excluded.spec,
           updated_by = excluded.updated_by, updated_at = now()
     returning id, (xmax = 0) as created`,
    [draft.name, draft.scopes, draft.key, JSON.stringify(manifest), JSON.stringify(draft), opts.actor ?? null],
  );
  const { id, created } = rows[0]!;
  return { entity: { id, ...draft }, created, unchanged: false, warnings, replacedScopes };
}

/**
 * The sources against the tenant's catalog: every JSONPath through PostgreSQL's own jsonpath
 * parser, and every mapped column name of a table that exists among its columns (400 naming the
 * field otherwise). A table that does not exist yet is a warning: its mappings are checked again
 * each time the entity is read (relation.ts).
 */
async function checkSources(tx: Tx, draft: EntityDraft): Promise<Issue[]> {
  const warnings: Issue[] = [];
  const catalog = await sourceColumns(tx, draft.sources.map((s) => s.table));
  // A name no table has may be another relation's: one of a table's indexes or its sequence (`ext.orders_pkey`), never read as a table.
  const missing = draft.sources.filter((s) => !catalog.get(s.table)).map((s) => s.table);
  const taken = missing.length ? await takenTableNames(tx, missing, { read: true }) : undefined;
  const paths: Array<{ field: string; path: string; text: string }> = [];
  for (const [i, source] of draft.sources.entries()) {
    const columns = catalog.get(source.table);
    const what = taken?.get(source.table);
    if (what) {
      const field = `spec.sources[${i}].table`;
      throw new ValidationError(`${field}: ${takenRefusal(source.table, what, 'read as')}`, field);
    }
    if (!columns) {
      warnings.push({
        field: `spec.sources[${i}].table`,
        message: `${source.table} does not exist yet (no connector has written it): its mapped columns are checked when the entity is read`,
      });
    }
    const mappings: Array<[string, string]> = [[`spec.sources[${i}].key`, source.key], ...Object.entries(source.columns).map(([c, m]): [string, string] => [mappingField(i, c), m])];
    for (const [field, mapping] of mappings) {
      const parsed = parseMapping(mapping);
      if ('problem' in parsed) throw new ValidationError(`${field} ${JSON.stringify(mapping)} ${parsed.problem}`, field);
      if (parsed.kind === 'path') paths.push({ field, path: parsed.pgPath, text: mapping });
      else if (columns && !columns.has(parsed.column)) {
        const have = [...columns].filter((c) => !BOOKKEEPING_COLUMNS.has(c));
        throw new ValidationError(`${field}: column ${parsed.column} of ${source.table} does not exist (its columns: ${have.join(', ')}; or use a JSONPath into data, $.${parsed.column})`, field);
      }
    }
  }
  if (paths.length) {
    const { rows } = await tx.query<{ ok: boolean }>(`select pg_input_is_valid(p, 'jsonpath') as ok from unnest($1::text[]) with ordinality as x(p, n) order by n`, [paths.map((p) => p.path)]);
    rows.forEach((r, k) => {
      if (!r.ok) throw new ValidationError(`${paths[k]!.field} ${JSON.stringify(paths[k]!.text)} is not a JSONPath PostgreSQL reads`, paths[k]!.field);
    });
  }
  return warnings;
}

interface EntityRow {
  id: string;
  name: string;
  scopes: string[];
  key: string;
  manifest: unknown;
  spec: Omit<EntityDef, 'id'>;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = 'id, name, scopes, key, manifest, spec, created_at, updated_at';

const defOf = (row: EntityRow): EntityDef => ({ id: row.id, name: row.name, scopes: row.scopes, key: row.spec.key, columns: row.spec.columns, sources: row.spec.sources });

function recordOf(row: EntityRow): EntityRecord {
  return {
    id: row.id,
    name: row.name,
    scopes: row.scopes,
    key: row.key,
    columns: row.spec.columns.map((c) => ({ name: c.name, type: c.type, label: c.label ?? null, description: c.description ?? null, examples: c.examples ?? [], values: c.values ?? null })),
    sources: row.spec.sources.map((s) => ({ table: s.table, key: s.key })),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** The entity of that name (case-insensitive) in the caller's tenant transaction. */
export async function loadEntity(tx: Tx, name: string): Promise<EntityDef | undefined> {
  const { rows } = await tx.query<EntityRow>(`select ${COLUMNS} from entities.entities where name = lower($1)`, [name]);
  return rows[0] ? defOf(rows[0]) : undefined;
}

/** Every entity of the caller's tenant declaring that scope, by name. */
export async function entitiesOfScope(tx: Tx, scope: string): Promise<EntityDef[]> {
  const { rows } = await tx.query<EntityRow>(`select ${COLUMNS} from entities.entities where scopes @> array[$1]::text[] order by name`, [scope]);
  return rows.map(defOf);
}

/** Every entity of the caller's tenant, by name. */
export async function listEntities(tx: Tx): Promise<EntityRecord[]> {
  const { rows } = await tx.query<EntityRow>(`select ${COLUMNS} from entities.entities order by name`);
  return rows.map(recordOf);
}

/** One entity (case-insensitive name) with its manifest as applied and its normalised definition. */
export async function getEntity(tx: Tx, name: string): Promise<EntityDetail | undefined> {
  const { rows } = await tx.query<EntityRow>(`select ${COLUMNS} from entities.entities where name = lower($1)`, [name]);
  const row = rows[0];
  return row && { ...recordOf(row), manifest: row.manifest, spec: row.spec };
}

/** The manifest as last applied (the operator compares it with the resource's); entities have no schedule. */
export async function storedManifest(tx: Tx, name: string): Promise<{ id: string; manifest: unknown; schedule: null; appliedBy: string | null } | undefined> {
  const { rows } = await tx.query<{ id: string; manifest: unknown; appliedBy: string | null }>('select id, manifest, updated_by as "appliedBy" from entities.entities where name = lower($1)', [name]);
  return rows[0] && { id: rows[0].id, manifest: rows[0].manifest, schedule: null, appliedBy: rows[0].appliedBy };
}

/** Deletes an entity (nothing else depends on it in the database); false when there is no such name. */
/** The scopes of the stored entity of that name, its row locked for the delete; undefined when there is none. */
export async function lockedEntityScopes(tx: Tx, name: string): Promise<string[] | undefined> {
  const { rows } = await tx.query<{ scopes: string[] }>('select scopes from entities.entities where name = lower($1) for update', [name]);
  return rows[0]?.scopes;
}

export async function deleteEntity(tx: Tx, name: string): Promise<boolean> {
  const { rowCount } = await tx.query('delete from entities.entities where name = lower($1)', [name]);
  return (rowCount ?? 0) > 0;
}

import type { Tx } from '../db/database.js';
import type { EgressPolicy } from '../egress/policy.js';
import { ValidationError } from '../errors.js';
import { unchangedApply } from '../manifests/canonical.js';
import { takeApplyLocks, takeObjectTurn, takeTenantPlace } from '../manifests/tenant-cap.js';
import { checkAgainstEntity, checkExportManifest, type EntityShape, type Issue } from './manifest/validate.js';
import type { ExportSpec } from './types.js';
import { type DeadRunRule, deadRunStop, EXPORT_DELETED, endIfDead, requestStop } from './runs/ledger.js';

/**
 * Exports as stored (schema `exports`, migrations/exports/V1__exports.sql), in the caller's tenant
 * transaction: row-level security keeps tenants apart, and a name is unique within its tenant.
 */

export interface ExportRecord {
  id: string;
  name: string;
  entity: string;
  scope: string;
  destination: 'sftp' | 's3';
  schedule: string | null;
  columns: string[];
  createdAt: Date;
  updatedAt: Date;
}

export interface ExportDetail extends ExportRecord {
  /** The manifest as applied (it never holds a credential: apply refuses them). */
  manifest: unknown;
  /** The normalised export the runner reads: defaults filled, names lower-cased. */
  spec: ExportSpec;
}

export interface StoredExport {
  id: string;
  spec: ExportSpec;
  updatedAt: Date;
}

/**
 * Exports one tenant may have: each may run on a schedule of its own and keeps its runs in the shared
 * database, so the count is bounded; applying a new name past it is refused (an update is not).
 */
export const MAX_EXPORTS_PER_TENANT = 500;

/** How the apply path learns about the entity an export names. */
export type EntityLookup = (tx: Tx, name: string) => Promise<EntityShape | undefined>;

/** The locks applyExport takes before it writes the export of that name, in its order (the object's turn, its row, then the tenant's turn): ManifestHandler.lockForApply. */
export const lockForApply = (tx: Tx, name: string): Promise<void> =>
  takeApplyLocks(tx, { table: 'exports.exports', plural: 'exports', mode: 'for update', order: 'row-then-turn' }, name);

/**
 * Validates and stores a manifest: a ValidationError (400 naming the field) on the first error,
 * else an insert or an update of the same (lower-cased) name. With `egress`, a destination address
 * the outbound address policy refuses is a warning (checkExportManifest). The manifest stored
 * normalised as stored (unchangedApply) is checked and writes nothing: `unchanged`. A new name past
 * MAX_EXPORTS_PER_TENANT is a 400 naming `metadata.name`.
 */
export async function applyExport(
  tx: Tx,
  manifest: unknown,
  opts: { actor?: string; entity: EntityLookup; egress?: EgressPolicy },
): Promise<{ id: string; spec: ExportSpec; created: boolean; unchanged: boolean; warnings: Issue[]; replacedScope?: string }> {
  const check = checkExportManifest(manifest, { egress: opts.egress });
  const first = check.errors[0];
  if (first || !check.spec) throw new ValidationError(first?.message ?? 'invalid manifest', first?.field || undefined);
  const spec = check.spec;
  // The object's turn first (takeObjectTurn): before its row, the tenant's turn and its owner record.
  await takeObjectTurn(tx, 'exports', spec.name);
  const problem = checkAgainstEntity(spec, await opts.entity(tx, spec.entity))[0];
  if (problem) throw new ValidationError(problem.message, problem.field);
  // The export this apply replaces, its row held until the transaction ends: replacing an export
  // changes (or ends) what it publishes, which needs its scope as a delete does (`replacedScope`).
  // The manifest stored already is written again not at all (`unchanged`).
  const held = async () =>
    (await tx.query<{ id: string; scope: string; manifest: unknown; spec: unknown }>('select id, scope, manifest, spec from exports.exports where name = $1 for update', [spec.name])).rows[0];
  const unchanged = (stored: { id: string; scope: string; manifest: unknown; spec: unknown } | undefined) =>
    stored && unchangedApply({ manifest: stored.manifest, normalised: stored.spec }, manifest, spec)
      ? { id: stored.id, spec, created: false, unchanged: true, warnings: check.warnings, replacedScope: stored.scope }
      : undefined;
  const before = unchanged(await held());
  if (before) return before;
  await takeTenantPlace(tx, { table: 'exports.exports', noun: 'export', plural: 'exports', max: MAX_EXPORTS_PER_TENANT }, spec.name);
  // Read again once the tenant's turn is taken: an apply of the name that committed since the read above (it
  // held the turn) is the export this one replaces (its scope needed as a delete needs it), or stored this
  // very manifest already (unchanged).
  const prior = await held();
  const same = unchanged(prior);
  if (same) return same;
  const { rows } = await tx.query<{ id: string; created: boolean }>(
    `insert into exports.exports (tenant_id, name, entity, scope, schedule, manifest, spec, created_by, updated_by)
     values (core.current_tenant(), $1, $2, $3, $4, $5, $6, $7, $7)
     on conflict (tenant_id, name) do update
       set entity = excluded.entity, scope = excluded.scope, schedule = excluded.schedule, manifest = excluded.manifest,
           spec = excluded.spec, updated_by = excluded.updated_by, updated_at = now()
     returning id, (xmax = 0) as created`,
    [spec.name, spec.entity, spec.scope, spec.schedule ?? null, JSON.stringify(manifest), JSON.stringify(spec), opts.actor ?? null],
  );
  return { id: rows[0]!.id, spec, created: rows[0]!.created, unchanged: false, warnings: check.warnings, ...(prior !== undefined ? { replacedScope: prior.scope } : {}) };
}

interface ExportRow {
  id: string;
  name: string;
  entity: string;
  scope: string;
  schedule: string | null;
  manifest: unknown;
  spec: ExportSpec;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = 'id, name, entity, scope, schedule, manifest, spec, created_at, updated_at';

function detail(row: ExportRow): ExportDetail {
  return {
    id: row.id,
    name: row.name,
    entity: row.entity,
    scope: row.scope,
    destination: row.spec.destination.kind,
    schedule: row.schedule,
    columns: row.spec.columns,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    manifest: row.manifest,
    spec: row.spec,
  };
}

/**
 * The export of that name (case-insensitive) in the caller's tenant. `lock`: its row held until the
 * transaction ends (a re-apply or delete sent meanwhile waits; one under way is waited for, and what
 * it left is read): `share` for a run's claim, `update` for a delete (two deletes holding `share`
 * would deadlock).
 */
export async function getExport(tx: Tx, name: string, lock?: 'share' | 'update'): Promise<ExportDetail | undefined> {
  const { rows } = await tx.query<ExportRow>(`select ${COLUMNS} from exports.exports where name = lower($1)${lock ? ` for ${lock}` : ''}`, [name]);
  return rows[0] && detail(rows[0]);
}

/** By id (the scheduler's lookups). */
export async function getExportById(tx: Tx, id: string): Promise<ExportDetail | undefined> {
  const { rows } = await tx.query<ExportRow>(`select ${COLUMNS} from exports.exports where id = $1`, [id]);
  return rows[0] && detail(rows[0]);
}

/** Every export of the caller's tenant, by name. */
export async function listExports(tx: Tx): Promise<ExportDetail[]> {
  const { rows } = await tx.query<ExportRow>(`select ${COLUMNS} from exports.exports order by name`);
  return rows.map(detail);
}

/** The manifest as applied and its schedule (the operator compares it with the resource's). */
export async function storedManifest(tx: Tx, name: string): Promise<{ id: string; manifest: unknown; schedule: string | null; appliedBy: string | null } | undefined> {
  const { rows } = await tx.query<{ id: string; manifest: unknown; schedule: string | null; appliedBy: string | null }>('select id, manifest, schedule, updated_by as "appliedBy" from exports.exports where name = lower($1)', [name]);
  return rows[0];
}

/**
 * Deletes by name; its runs stay as history, and a run in flight is asked to stop (EXPORT_DELETED:
 * its process reads it with its next heartbeat; `stopped` are their ids, for a process that runs
 * them to stop them at once). With `dead`, each of them no live process holds (its process died:
 * nothing would read the request, and the name's next run would wait for the interrupted-run sweep)
 * ends now, Failed `interrupted` (`endIfDead`): `ended`, to be logged once the transaction committed
 * (`warnEndedDead`). `deleted` false when there was none.
 */
export async function deleteExport(tx: Tx, name: string, dead?: DeadRunRule): Promise<{ deleted: boolean; stopped: string[]; ended: string[] }> {
  const { rows } = await tx.query<{ id: string }>('delete from exports.exports where name = lower($1) returning id', [name]);
  if (!rows[0]) return { deleted: false, stopped: [], ended: [] };
  const stopped = await requestStop(tx, { exportId: rows[0].id }, EXPORT_DELETED);
  const ended: string[] = [];
  if (dead) {
    const end = deadRunStop('the export was deleted', dead.staleAfterMs);
    for (const id of stopped) if (await endIfDead(tx, id, dead, end)) ended.push(id);
  }
  return { deleted: true, stopped, ended };
}

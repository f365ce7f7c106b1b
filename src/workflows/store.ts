import type { Tx } from '../db/database.js';
import { loadEntity } from '../entities/store.js';
import { ValidationError } from '../errors.js';
import { unchangedApply } from '../manifests/canonical.js';
import { takeApplyLocks, takeObjectTurn, takeTenantPlace } from '../manifests/tenant-cap.js';
import { dropKeyedCorpus, writeKeyedCorpus } from '../retrieval/keyed-corpus.js';
import { lifecycleCorpus, lifecycleDocuments } from './lifecycle.js';
import { checkWorkflowManifest, type Issue } from './manifest/validate.js';
import type { WorkflowSpec } from './types.js';

/**
 * Workflows as stored (schema `workflows`, migrations/workflows/V1__workflows.sql). Every function
 * runs inside the caller's tenant transaction (`Database.withTenant`): row-level security keeps
 * tenants apart, and a name (stored lower-case, looked up case-insensitively) is unique per tenant.
 */

export type { WorkflowSpec };

export interface WorkflowRecord extends WorkflowSpec {
  name: string;
  createdAt: Date;
  updatedAt: Date;
}

export interface WorkflowDetail extends WorkflowRecord {
  manifest: unknown;
}

export interface ApplyResult {
  name: string;
  created: boolean;
  /** The manifest was the one stored, and what it means now (the entity's name, the default scope) too: nothing was written. */
  unchanged: boolean;
  warnings: Issue[];
  /** What the workflow writes and reads, for the scope check of its caller (workflowScopes): as applied, and as stored before (undefined for a new name). */
  scopes: string[];
  replacedScopes?: string[];
}

/**
 * The scopes a workflow is of, for the scope check of a write (docs/admin.md, "Scopes"): the scope
 * its lifecycle chunks are tagged with (none: untagged) and every scope of the entity whose records
 * it reads (its sweep announces their keys and states).
 */
const scopesOf = (scope: string | null, entityScopes: readonly string[]): string[] => [...new Set([...(scope ? [scope] : []), ...entityScopes])];

/** The scopes of the stored workflow of that name (scopesOf, its entity's scopes as stored now), its row locked; undefined when there is none. */
export async function lockedWorkflowScopes(tx: Tx, name: string): Promise<string[] | undefined> {
  const { rows } = await tx.query<{ scope: string | null; entityScopes: string[] | null }>(
    `select w.scope, e.scopes as "entityScopes" from workflows.workflows w left join entities.entities e on e.name = w.entity
      where w.name = lower($1) for no key update of w`,
    [name],
  );
  return rows[0] && scopesOf(rows[0].scope, rows[0].entityScopes ?? []);
}

/**
 * Workflows one tenant may have. Each costs a full read of its entity at every sweep tick, so the
 * count is bounded; applying a new name past it is refused (an update is not).
 */
export const MAX_WORKFLOWS_PER_TENANT = 100;

/** The locks applyWorkflow takes before it writes the workflow of that name, in its order (the object's turn, the tenant's turn, then its row): ManifestHandler.lockForApply. */
export const lockForApply = (tx: Tx, name: string): Promise<void> =>
  takeApplyLocks(tx, { table: 'workflows.workflows', plural: 'workflows', mode: 'for no key update', order: 'turn-then-row' }, name);

/**
 * Validates and stores a manifest in the caller's transaction: a 400 naming the field on the first
 * error (the entity must be applied in the tenant and the state column one of its canonical
 * columns; a new name past MAX_WORKFLOWS_PER_TENANT), otherwise an insert or an update. Re-applying keeps the spells unless the entity or the
 * state column changed; the lifecycle is written as corpus `workflow:<name>`. The manifest stored
 * normalised as stored, the entity's default scope included (unchangedApply), is checked and writes nothing: `unchanged`.
 */
export async function applyWorkflow(tx: Tx, manifest: unknown, opts: { actor?: string } = {}): Promise<ApplyResult> {
  if (tx.tenantId === undefined) throw new Error('workflows are stored per tenant: use Database.withTenant');
  const check = checkWorkflowManifest(manifest);
  const first = check.errors[0];
  if (first || !check.workflow) throw new ValidationError(first?.message ?? 'invalid manifest', first?.field || undefined);
  const draft = check.workflow;
  const warnings = [...check.warnings];
  // The object's turn first (takeObjectTurn): before its row, the tenant's turn and its owner record.
  await takeObjectTurn(tx, 'workflows', draft.name);

  await takeTenantPlace(tx, { table: 'workflows.workflows', noun: 'workflow', plural: 'workflows', max: MAX_WORKFLOWS_PER_TENANT }, draft.name);

  const entity = await loadEntity(tx, draft.entity);
  if (!entity) throw new ValidationError(`spec.entity ${JSON.stringify(draft.entity)} is not an applied Entity of this tenant`, 'spec.entity');
  const columns = entity.columns.map((c) => c.name);
  if (!columns.includes(draft.stateColumn)) {
    throw new ValidationError(`spec.stateColumn ${JSON.stringify(draft.stateColumn)} is not a canonical column of entity ${entity.name} (${columns.join(', ')})`, 'spec.stateColumn');
  }
  if (draft.stateColumn === entity.key) warnings.push({ field: 'spec.stateColumn', message: `${draft.stateColumn} is the key of entity ${entity.name}: a record never changes state` });
  const declared = entity.columns.find((c) => c.name === draft.stateColumn)?.values;
  if (declared) {
    draft.states.forEach((s, i) => {
      if (!declared.includes(s)) warnings.push({ field: `spec.states[${i}]`, message: `${JSON.stringify(s)} is not one of the declared values of ${entity.name}.${draft.stateColumn}` });
    });
  }
  const scope = draft.scope ?? entity.scopes[0] ?? null;
  if (draft.scope !== undefined && !entity.scopes.includes(draft.scope)) {
    warnings.push({ field: 'spec.scope', message: `${draft.scope} is not a scope of entity ${entity.name} (${entity.scopes.join(', ')})` });
  }
  const spec: WorkflowSpec = { entity: entity.name, scope, stateColumn: draft.stateColumn, states: draft.states, transitions: draft.transitions, dormancy: draft.dormancy };
  const scopes = scopesOf(scope, entity.scopes);
  // Read once the tenant's turn is taken: the workflow this apply replaces (replacedScopes).
  const replacedScopes = await lockedWorkflowScopes(tx, draft.name);
  // The spec too: the same manifest over an entity whose scopes changed moves the default scope.
  const stored = await tx.query<{ manifest: unknown; spec: unknown }>('select manifest, spec from workflows.workflows where name = lower($1)', [draft.name]);
  if (stored.rows[0] && unchangedApply({ manifest: stored.rows[0].manifest, normalised: stored.rows[0].spec }, manifest, spec)) {
    return { name: draft.name, created: false, unchanged: true, warnings, scopes, replacedScopes };
  }

  const { rows } = await tx.query<{ id: string; created: boolean; reset: boolean }>(
    `insert into workflows.workflows (tenant_id, name, entity, scope, state_column, manifest, spec, created_by, updated_by)
     values (core.current_tenant(), $1, $2, $3, $4, $5, $6, $7, $7)
     on conflict (tenant_id, name) do update
       set entity = excluded.entity, scope = excluded.scope, state_column = excluded.state_column,
           manifest = excluded.manifest, spec = excluded.spec, updated_by = excluded.updated_by, updated_at = now(),
           tracked_since = case when (workflows.entity, workflows.state_column) = (excluded.entity, excluded.state_column) then workflows.tracked_since else now() end,
           baseline_done = case when (workflows.entity, workflows.state_column) = (excluded.entity, excluded.state_column) then workflows.baseline_done else false end,
           baseline_upto = case when (workflows.entity, workflows.state_column) = (excluded.entity, excluded.state_column) then workflows.baseline_upto end
     returning id, (xmax = 0) as created, tracked_since = now() as reset`,
    [draft.name, spec.entity, scope, spec.stateColumn, JSON.stringify(manifest), JSON.stringify(spec), opts.actor ?? null],
  );
  // Another entity or state column: the spells watched something else.
  if (!rows[0]!.created && rows[0]!.reset) await tx.query('delete from workflows.spells where workflow_id = $1', [rows[0]!.id]);
  await writeKeyedCorpus(tx, lifecycleCorpus(draft.name), scope ? [scope] : [], lifecycleDocuments(draft.name, spec));
  return { name: draft.name, created: rows[0]!.created, unchanged: false, warnings, scopes, replacedScopes };
}

interface Row {
  name: string;
  manifest: unknown;
  spec: WorkflowSpec;
  created_at: Date;
  updated_at: Date;
}

const recordOf = (r: Row): WorkflowRecord => ({
  name: r.name,
  entity: r.spec.entity,
  scope: r.spec.scope,
  stateColumn: r.spec.stateColumn,
  states: r.spec.states,
  transitions: r.spec.transitions,
  dormancy: r.spec.dormancy,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

/** A workflow's scopes in SQL (scopesOf: its own and its entity's as stored now), over `w` joined with its entity `e`. */
const SCOPES_SQL = `array_remove(array[w.scope], null) || coalesce(e.scopes, '{}')`;
const READ_SQL = `select w.name, w.manifest, w.spec, w.created_at, w.updated_at, ${SCOPES_SQL} as scopes
  from workflows.workflows w left join entities.entities e on e.name = w.entity`;

/**
 * The workflows, by name. `held`: a scope-bound caller's scopes; only the workflows every scope of
 * which (scopesOf) they hold are listed, none of no scope.
 */
export async function listWorkflows(tx: Tx, held?: readonly string[]): Promise<WorkflowRecord[]> {
  const { rows } = await tx.query<Row>(
    `${READ_SQL} where $1::text[] is null or (cardinality(${SCOPES_SQL}) > 0 and ${SCOPES_SQL} <@ $1::text[]) order by w.name`,
    [held ?? null],
  );
  return rows.map(recordOf);
}

/** The workflow of that name with the scopes it is of (scopesOf), for the scope check of a read. */
export async function getWorkflow(tx: Tx, name: string): Promise<(WorkflowDetail & { scopes: string[] }) | undefined> {
  const { rows } = await tx.query<Row & { scopes: string[] }>(`${READ_SQL} where w.name = lower($1)`, [name]);
  return rows[0] && { ...recordOf(rows[0]), manifest: rows[0].manifest, scopes: [...new Set(rows[0].scopes)] };
}

/** The scopes (scopesOf) of the workflows of these names as stored (exact, lower-case), by name; a name of none is absent. */
export async function workflowScopesByName(tx: Tx, names: readonly string[]): Promise<Map<string, string[]>> {
  const { rows } = await tx.query<{ name: string; scopes: string[] }>(
    `select w.name, ${SCOPES_SQL} as scopes from workflows.workflows w left join entities.entities e on e.name = w.entity where w.name = any($1::text[])`,
    [names],
  );
  return new Map(rows.map((r) => [r.name, [...new Set(r.scopes)]]));
}

/** The manifest as last applied (the operator compares it with the resource's); workflows have no schedule. */
export async function storedManifest(tx: Tx, name: string): Promise<{ manifest: unknown; schedule: null; appliedBy: string | null } | undefined> {
  const { rows } = await tx.query<{ manifest: unknown; appliedBy: string | null }>('select manifest, updated_by as "appliedBy" from workflows.workflows where name = lower($1)', [name]);
  return rows[0] && { manifest: rows[0].manifest, schedule: null, appliedBy: rows[0].appliedBy };
}

/** Whether a workflow of the caller's tenant declares that scope (analytic chat's `lifecycle` door). */
export async function scopeHasWorkflow(tx: Tx, scope: string): Promise<boolean> {
  const { rows } = await tx.query<{ found: boolean }>('select exists (select 1 from workflows.workflows where scope = $1) as found', [scope]);
  return rows[0]!.found;
}

/** Deletes a workflow with its spells and its lifecycle corpus; false when there is no such name. */
export async function deleteWorkflow(tx: Tx, name: string): Promise<boolean> {
  const { rows } = await tx.query<{ name: string }>('delete from workflows.workflows where name = lower($1) returning name', [name]);
  if (!rows[0]) return false;
  await dropKeyedCorpus(tx, lifecycleCorpus(rows[0].name));
  return true;
}

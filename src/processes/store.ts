import { activeTenant } from '../db/active-tenant.js';
import type { Tx } from '../db/database.js';
import { ValidationError } from '../errors.js';
import { unchangedApply } from '../manifests/canonical.js';
import { takeApplyLocks, takeObjectTurn, takeTenantPlace } from '../manifests/tenant-cap.js';
import type { Issue } from '../validation/schema-errors.js';
import { checkProcessManifest, type ProcessDraft } from './manifest/validate.js';

/**
 * Processes as stored (schema `processes`, migrations/processes/V1__processes.sql). Every function
 * runs in the caller's tenant transaction (row-level security); a name is stored lower-case and
 * looked up case-insensitively.
 */

export interface ProcessRecord {
  name: string;
  event: string;
  when: string | null;
  decision: string;
  message: string;
  createdAt: Date;
  updatedAt: Date;
}

export interface ProcessDetail extends ProcessRecord {
  manifest: unknown;
}

export interface ApplyResult {
  name: string;
  created: boolean;
  /** The manifest was the one stored, normalised as stored (unchangedApply): nothing was written. */
  unchanged: boolean;
  warnings: Issue[];
}

interface Row {
  name: string;
  event: string;
  when_expr: string | null;
  decision: string;
  message: string;
  manifest: unknown;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = 'name, event, when_expr, decision, message, manifest, created_at, updated_at';

const recordOf = (r: Row): ProcessRecord => ({ name: r.name, event: r.event, when: r.when_expr, decision: r.decision, message: r.message, createdAt: r.created_at, updatedAt: r.updated_at });

/**
 * Processes one tenant may have. Each matching event costs an evaluation of each of its processes'
 * conditions, so the count is bounded; applying a new name past it is refused (an update is not).
 */
export const MAX_PROCESSES_PER_TENANT = 100;

/** What a process stores of its manifest besides the manifest: the columns the consumer reads. */
const storedForm = (p: Pick<ProcessRecord, 'event' | 'when' | 'decision' | 'message'>) => ({ event: p.event, when: p.when, decision: p.decision, message: p.message });

export function checkedProcess(manifest: unknown): ProcessDraft {
  const check = checkProcessManifest(manifest);
  const first = check.errors[0];
  if (first || !check.process) throw new ValidationError(first?.message ?? 'invalid manifest', first?.field || undefined);
  return check.process;
}

/** The locks applyProcess takes before it writes the process of that name, in its order (the object's turn, the tenant's turn, then the row its upsert locks): ManifestHandler.lockForApply. */
export const lockForApply = (tx: Tx, name: string): Promise<void> =>
  takeApplyLocks(tx, { table: 'processes.processes', plural: 'processes', mode: 'for no key update', order: 'turn-then-row' }, name);

export async function applyProcess(tx: Tx, manifest: unknown, opts: { actor?: string } = {}): Promise<ApplyResult> {
  if (tx.tenantId === undefined) throw new Error('processes are stored per tenant: use Database.withTenant');
  const p = checkedProcess(manifest);
  // The object's turn first (takeObjectTurn): before its row, the tenant's turn and its owner record.
  await takeObjectTurn(tx, 'processes', p.name);
  const unchanged = async () => {
    const { rows } = await tx.query<Row>(`select ${COLUMNS} from processes.processes where name = lower($1)`, [p.name]);
    const stored = rows[0];
    return stored !== undefined && unchangedApply({ manifest: stored.manifest, normalised: storedForm(recordOf(stored)) }, manifest, storedForm(p));
  };
  if (await unchanged()) return { name: p.name, created: false, unchanged: true, warnings: [] };
  await takeTenantPlace(tx, { table: 'processes.processes', noun: 'process', plural: 'processes', max: MAX_PROCESSES_PER_TENANT }, p.name);
  // Asked again once the tenant's turn is taken: an apply of the same manifest that committed since
  // the read above (it held the turn) stored it already.
  if (await unchanged()) return { name: p.name, created: false, unchanged: true, warnings: [] };
  const { rows } = await tx.query<{ created: boolean }>(
    `insert into processes.processes (tenant_id, name, event, when_expr, decision, message, manifest, created_by, updated_by)
     values (core.current_tenant(), $1, $2, $3, $4, $5, $6, $7, $7)
     on conflict (tenant_id, name) do update
       set event = excluded.event, when_expr = excluded.when_expr, decision = excluded.decision, message = excluded.message,
           manifest = excluded.manifest, updated_by = excluded.updated_by, updated_at = now()
     returning (xmax = 0) as created`,
    [p.name, p.event, p.when, p.decision, p.message, JSON.stringify(manifest), opts.actor ?? null],
  );
  return { name: p.name, created: rows[0]!.created, unchanged: false, warnings: [] };
}

export async function listProcesses(tx: Tx): Promise<ProcessRecord[]> {
  const { rows } = await tx.query<Row>(`select ${COLUMNS} from processes.processes order by name`);
  return rows.map(recordOf);
}

export async function getProcess(tx: Tx, name: string): Promise<ProcessDetail | undefined> {
  const { rows } = await tx.query<Row>(`select ${COLUMNS} from processes.processes where name = lower($1)`, [name]);
  return rows[0] && { ...recordOf(rows[0]), manifest: rows[0].manifest };
}

export async function storedManifest(tx: Tx, name: string): Promise<{ manifest: unknown; schedule: null; appliedBy: string | null } | undefined> {
  const { rows } = await tx.query<{ manifest: unknown; appliedBy: string | null }>('select manifest, updated_by as "appliedBy" from processes.processes where name = lower($1)', [name]);
  return rows[0] && { manifest: rows[0].manifest, schedule: null, appliedBy: rows[0].appliedBy };
}

export async function deleteProcess(tx: Tx, name: string): Promise<boolean> {
  const { rowCount } = await tx.query('delete from processes.processes where name = lower($1)', [name]);
  return (rowCount ?? 0) > 0;
}

/** A process as the consumer evaluates it. */
export interface ActiveProcess {
  tenantId: number;
  name: string;
  event: string;
  when: string | null;
  decision: string;
  message: string;
  updatedAt: Date;
}

/** The processes of these tenants, read in a cross-tenant (worker) transaction. */
export async function processesOfTenants(tx: Tx, tenantIds: number[]): Promise<ActiveProcess[]> {
  const { rows } = await tx.query<Row & { tenant_id: number }>(
    `select tenant_id::int as tenant_id, ${COLUMNS} from processes.processes where tenant_id = any($1::bigint[]) order by tenant_id, name`,
    [tenantIds],
  );
  return rows.map((r) => ({ tenantId: r.tenant_id, name: r.name, event: r.event, when: r.when_expr, decision: r.decision, message: r.message, updatedAt: r.updated_at }));
}

/**
 * SQL, true when no active tenant has a process: the process consumer then has nothing to evaluate
 * for any event (its OutboxLoop `idleWhen`; a deactivated tenant's events are handed to no consumer,
 * so its processes alone must not make the consumer read every event).
 */
export const NO_PROCESSES = `not exists (select 1 from processes.processes p where ${activeTenant('p.tenant_id')})`;

/** Whether a process of the tenant of `tx` watches `type` (the Subscribers registry: data.row.changed is written only when watched). */
export async function anyProcessWatches(tx: Tx, type: string): Promise<boolean> {
  const { rows } = await tx.query<{ event: string }>('select distinct event from processes.processes');
  return rows.some((r) => r.event === type || (r.event.endsWith('.*') && type.startsWith(r.event.slice(0, -1))));
}

import type { Tx } from '../db/database.js';
import { ValidationError } from '../errors.js';

/**
 * A per-tenant cap on applied manifests of one kind (processes, workflows: each costs work on every
 * event or tick), checked in the apply's transaction. Applies of one tenant and kind take turns from
 * here (a transaction lock), so two concurrent ones cannot both take the last place; a name already
 * applied is never refused (an update). Past the cap, a 400 naming `metadata.name`.
 */
export async function takeTenantPlace(tx: Tx, kind: { table: 'processes.processes' | 'workflows.workflows'; noun: string; plural: string; max: number }, name: string): Promise<void> {
  await tx.query(`select pg_advisory_xact_lock(hashtextextended('svc-hub:' || $1 || ':' || core.current_tenant()::text, 0))`, [kind.plural]);
  const count = await tx.query<{ n: number; known: boolean }>(`select count(*)::int as n, coalesce(bool_or(name = $1), false) as known from ${kind.table}`, [name]);
  const { n, known } = count.rows[0]!;
  if (!known && n >= kind.max) {
    throw new ValidationError(
      `this tenant has ${n} ${kind.plural}, the most a tenant may have (${kind.max}): delete one before applying a new ${kind.noun} ${name} (an existing name can still be updated)`,
      'metadata.name',
    );
  }
}

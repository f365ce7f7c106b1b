import type { Tx } from '../db/database.js';
import { type ApplyContext, type ManifestHandler, type RemoveContext, warningLines } from '../manifests/handler.js';
import { entityShape } from './entity-shape.js';
import { checkExportManifest, destinationWarning } from './manifest/validate.js';
import { latestRun, warnEndedDead } from './runs/ledger.js';
import { applyExport, deleteExport, lockForApply, storedManifest } from './store.js';

/**
 * What the operator (or any other manifest source) does with an Export: the very functions of
 * `POST /api/exports/apply` and `DELETE /api/exports/{name}`, in the caller's tenant transaction.
 * A custom resource has no calling user, so no scope grant applies (the entity's scopes still do).
 */
export const exportHandler: ManifestHandler = {
  stored: (tx: Tx, name: string) => storedManifest(tx, name),
  lockForApply: (tx: Tx, name: string) => lockForApply(tx, name),
  async apply(tx: Tx, manifest: unknown, actor: string, context?: ApplyContext) {
    const result = await applyExport(tx, manifest, { actor, entity: entityShape, egress: context?.egress });
    return { created: result.created, unchanged: result.unchanged, warnings: warningLines(result.warnings), schedule: result.spec.schedule ?? null };
  },
  // Its destination's address (the S3 endpoint's host, the SFTP host), as the policy in force sees it.
  policyWarnings(manifest: unknown, context: ApplyContext) {
    if (!context.egress) return [];
    const { spec } = checkExportManifest(manifest);
    const warning = spec && destinationWarning(context.egress, spec.destination);
    return warning ? warningLines([warning]) : [];
  },
  // As DELETE /api/exports/{name}: a run in flight stops at its process's next heartbeat, and one
  // whose process died (no heartbeat for svc.export.run-stale-after) ends at once, or the name
  // applied again could not run until the interrupted-run sweep ended it.
  async remove(tx: Tx, name: string, context?: RemoveContext) {
    const staleAfterMs = context?.exportRunStaleAfterMs;
    const { deleted, ended } = await deleteExport(tx, name, staleAfterMs === undefined ? undefined : { staleAfterMs });
    const exportName = name.toLowerCase();
    if (ended.length > 0) {
      context!.afterCommit(() => {
        for (const id of ended) warnEndedDead(tx.tenantId, { id, exportName }, 'delete', staleAfterMs!);
      });
    }
    return deleted;
  },
  async lastRun(tx: Tx, name: string) {
    const run = await latestRun(tx, name.toLowerCase());
    return run ? { id: run.id, status: run.status, endedAt: run.endedAt } : undefined;
  },
  async runsSince(tx: Tx, since: Date) {
    const { rows } = await tx.query<{ tenant: string; name: string }>(
      `select distinct t.code as tenant, r.export_name as name
         from exports.runs r join core.tenants t on t.id = r.tenant_id
        where r.started_at > $1 or r.ended_at > $1`,
      [since],
    );
    return rows;
  },
  runArgs: (name: string) => ['export', name],
};

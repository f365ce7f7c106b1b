import type { Tx } from '../db/database.js';
import { type ManifestHandler, warningLines } from '../manifests/handler.js';
import { applyWorkflow, deleteWorkflow, lockForApply, storedManifest } from './store.js';

/**
 * What the operator (or any other manifest source) does with a Workflow: the very functions the
 * HTTP paths call (`POST /api/workflows/apply`, `DELETE /api/workflows/{name}`), in the caller's
 * tenant transaction. Workflows have no runs and no schedule.
 */
export const workflowHandler: ManifestHandler = {
  stored: (tx: Tx, name: string) => storedManifest(tx, name),
  lockForApply: (tx: Tx, name: string) => lockForApply(tx, name),
  async apply(tx: Tx, manifest: unknown, actor: string) {
    const result = await applyWorkflow(tx, manifest, { actor });
    return { created: result.created, unchanged: result.unchanged, warnings: warningLines(result.warnings), schedule: null };
  },
  remove: (tx: Tx, name: string) => deleteWorkflow(tx, name),
};

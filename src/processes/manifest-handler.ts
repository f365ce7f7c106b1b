import type { Tx } from '../db/database.js';
import { type ManifestHandler, warningLines } from '../manifests/handler.js';
import { applyProcess, deleteProcess, lockForApply, storedManifest } from './store.js';

/**
 * What the operator does with a Process: the very functions of `POST /api/processes/apply` and
 * `DELETE /api/processes/{name}`, in the caller's tenant transaction. Processes have no runs and no schedule.
 */
export const processHandler: ManifestHandler = {
  stored: (tx: Tx, name: string) => storedManifest(tx, name),
  lockForApply: (tx: Tx, name: string) => lockForApply(tx, name),
  async apply(tx: Tx, manifest: unknown, actor: string) {
    const result = await applyProcess(tx, manifest, { actor });
    return { created: result.created, unchanged: result.unchanged, warnings: warningLines(result.warnings), schedule: null };
  },
  remove: (tx: Tx, name: string) => deleteProcess(tx, name),
};

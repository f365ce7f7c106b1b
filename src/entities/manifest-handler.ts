import type { Tx } from '../db/database.js';
import { type ManifestHandler, warningLines } from '../manifests/handler.js';
import { applyEntity, deleteEntity, lockForApply, storedManifest } from './store.js';

/**
 * What the operator (or any other manifest source) does with an Entity: the very functions the
 * HTTP paths call (`POST /api/entities/apply`, `DELETE /api/entities/{name}`), in the caller's
 * tenant transaction. Entities have no runs and no schedule.
 */
export const entityHandler: ManifestHandler = {
  stored: (tx: Tx, name: string) => storedManifest(tx, name),
  lockForApply: (tx: Tx, name: string) => lockForApply(tx, name),
  async apply(tx: Tx, manifest: unknown, actor: string) {
    const result = await applyEntity(tx, manifest, { actor });
    return { created: result.created, unchanged: result.unchanged, warnings: warningLines(result.warnings), schedule: null };
  },
  remove: (tx: Tx, name: string) => deleteEntity(tx, name),
};

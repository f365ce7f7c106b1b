import type { Tx } from '../db/database.js';
import { type ApplyContext, type ManifestHandler, warningLines } from '../manifests/handler.js';
import { baseUrlWarning, checkManifest } from './manifest/validate.js';
import { listRuns } from './runs/ledger.js';
import { applyConnector, deleteConnector, lockForApply, storedManifest } from './store.js';

/**
 * What the operator (or any other manifest source) does with a Connector: the very functions the
 * HTTP paths call (`POST /api/connectors/apply`, `DELETE /api/connectors/{name}`), in the caller's
 * tenant transaction.
 */
export const connectorHandler: ManifestHandler = {
  stored: (tx: Tx, name: string) => storedManifest(tx, name),
  lockForApply: (tx: Tx, name: string) => lockForApply(tx, name),
  async apply(tx: Tx, manifest: unknown, actor: string, context?: ApplyContext) {
    const result = await applyConnector(tx, manifest, { actor, egress: context?.egress });
    return { created: result.created, unchanged: result.unchanged, warnings: warningLines(result.warnings), schedule: result.connector.schedule ?? null };
  },
  // Its one address, base_url, as the policy in force sees it.
  policyWarnings(manifest: unknown, context: ApplyContext) {
    if (!context.egress) return [];
    const { connector } = checkManifest(manifest);
    const warning = connector && baseUrlWarning(connector.baseUrl, context.egress);
    return warning ? warningLines([warning]) : [];
  },
  // The Connector's own stored connector only: a CSV source of its name is not the manifest's (deleteConnectorOrSource).
  remove: (tx: Tx, name: string) => deleteConnector(tx, name),
  async lastRun(tx: Tx, name: string) {
    const found = await storedManifest(tx, name);
    if (!found) return undefined;
    const [run] = await listRuns(tx, 1, found.id);
    return run ? { id: run.id, status: run.status, endedAt: run.endedAt } : undefined;
  },
  async runsSince(tx: Tx, since: Date) {
    const { rows } = await tx.query<{ tenant: string; name: string }>(
      `select distinct t.code as tenant, r.connector_name as name
         from connectors.runs r join core.tenants t on t.id = r.tenant_id
        where r.started_at > $1 or r.ended_at > $1`,
      [since],
    );
    return rows;
  },
  runArgs: (name: string) => ['connector', name],
};

import type { Database, TenantId, Tx } from '../db/database.js';
import type { JsonText } from '../db/json-text.js';
import type { Page, PageRequest } from '../db/keyset.js';
import type { EgressPolicy } from '../egress/policy.js';
import { type Caller, requireEvery, scopeAccess } from '../admin/scope-access.js';
import { NotFoundError, ScopeNotGranted } from '../errors.js';
import { takeObjectTurn } from '../manifests/tenant-cap.js';
import { logger } from '../observability/logger.js';
import { type CsvIngestRequest, ingestCsv } from './csv-ingest.js';
import type { ConnectorRunner } from './runner.js';
import { connectorIdsOf, type DeadLetter, deadLetterScopes, discard, erase, getDeadLetter, holdsAnyConnector, listDeadLetters, markReplayed, runConnectorIds } from './runs/dead-letters.js';
import { isUuid } from '../validation/uuid.js';
import { getRun, listRunsJson, requestCancel, type RunFilter, type RunRecord } from './runs/ledger.js';
import { rowByHash } from './runs/rows.js';
import { checkManifest, type ManifestCheck } from './manifest/validate.js';
import {
  type ApplyResult,
  type ConnectorDetail,
  applyConnector,
  deleteConnectorOrSource,
  deleteCsvSource,
  getConnector,
  listConnectorsJson,
  loadConnector,
  connectorScopesById,
  lockedConnectorScopes,
  promoteConflicts,
  tableNameRefusals,
  purgeEndpoint,
  resetCursor,
  targetChanges,
} from './store.js';
import { requireTableWriters } from './target/writers.js';
import type { Triggered } from './runner.js';
import type { ConnectorSpec } from './types.js';

/**
 * What the connector area does for one tenant's callers (the HTTP API, `svc-hub run`): each method
 * takes the tenant and opens its own transaction in it (row-level security). The writes take the
 * caller too: a scope-bound caller (src/admin/scope-access.ts) writes only connectors every scope of
 * which they hold, as stored and as applied, and only over tables whose other writers they hold
 * (target/writers.ts); 403 `scope not granted` otherwise, nothing written.
 */
export interface ConnectorTenantServices {
  /** The stored connector of that name, undefined when there is none. */
  byName(tenantId: TenantId, name: string): Promise<ConnectorSpec | undefined>;
  manifests: {
    apply(tenantId: TenantId, caller: Caller, manifest: unknown, actor: string): Promise<ApplyResult>;
    /**
     * Every error and warning of a manifest, those of its endpoints' stored rows included (an
     * endpoint changing its unique_key or table over rows: store.ts targetChanges); writes nothing.
     */
    check(tenantId: TenantId, manifest: unknown): Promise<ManifestCheck>;
    /** Every connector, by name, as the answer's JSON text. */
    list(tenantId: TenantId): Promise<JsonText>;
    /** 404 when unknown. */
    get(tenantId: TenantId, name: string): Promise<ConnectorDetail>;
    /** 404 when unknown. */
    remove(tenantId: TenantId, caller: Caller, name: string): Promise<void>;
    resetCursor(tenantId: TenantId, caller: Caller, name: string, endpointId: string): Promise<void>;
    purgeEndpoint(tenantId: TenantId, caller: Caller, name: string, endpointId: string): Promise<void>;
  };
  runs: {
    /** A page of the runs, newest first, as the answer's JSON text; with `connector` (a name or an id), only its runs. */
    list(tenantId: TenantId, page: PageRequest, filter?: RunFilter): Promise<Page<JsonText>>;
    get(tenantId: TenantId, id: string): Promise<RunRecord>;
    /**
     * Flags a Running run for its process to stop (Cancelled); one whose heartbeat is stale (its
     * process died) is ended at once as the interrupted-run sweep would (Failed, interrupted). 409 when
     * already over.
     */
    cancel(tenantId: TenantId, caller: Caller, id: string): Promise<RunRecord>;
    /** Runs of the stored connector of that name (ConnectorRunner.trigger); 404 when unknown. */
    start(tenantId: number, caller: Caller, name: string, options: { endpoint?: string; triggeredBy: string }): Promise<Triggered>;
    /** One run upserting a CSV body into `ext.<table>` (csv-ingest.ts). */
    ingestCsv(tenantId: number, caller: Caller, request: CsvIngestRequest): Promise<RunRecord>;
  };
  /**
   * The entries are read and resolved with the scopes of the connector they came from: a scope-bound
   * caller lists only those of connectors every scope of which they hold, and any other entry, or a
   * `run` or `connector` filter naming only others' runs, is a 403 `scope not granted` to them (a CSV
   * source's, or a deleted connector's, has no scope).
   */
  deadLetters: {
    /** `run` wins over `connector` (a name or id); an unknown connector has none. */
    list(tenantId: TenantId, caller: Caller, page: PageRequest, query: { run?: string; connector?: string }): Promise<Page<DeadLetter[]>>;
    get(tenantId: TenantId, caller: Caller, id: string): Promise<DeadLetter>;
    markReplayed(tenantId: TenantId, caller: Caller, id: string, newRunId?: string): Promise<void>;
    discard(tenantId: TenantId, caller: Caller, id: string): Promise<void>;
    erase(tenantId: TenantId, caller: Caller, id: string): Promise<void>;
  };
  /** The source row behind a citation row hash, flattened to strings; 403 `scope not granted` to a scope-bound caller not holding every scope of its table's writers. */
  rowByHash(tenantId: TenantId, caller: Caller, hash: string): Promise<Record<string, string>>;
}

/** 403 `scope not granted` unless the caller holds every scope of the stored connector of that name (locked); nothing when there is none (the write's own 404 follows). */
async function requireConnectorScopes(tx: Tx, caller: Caller, name: string): Promise<void> {
  const access = await scopeAccess(tx, caller);
  if (!access.bound) return;
  const scopes = await lockedConnectorScopes(tx, name);
  if (scopes !== undefined) requireEvery(access, scopes);
}

/** 403 `scope not granted` unless the caller holds every scope of the connector a dead-letter entry came from; nothing when there is no entry (the call's own 404 follows). */
async function requireEntryScopes(tx: Tx, caller: Caller, id: string): Promise<void> {
  const access = await scopeAccess(tx, caller);
  if (!access.bound) return;
  const scopes = await deadLetterScopes(tx, id);
  if (scopes !== undefined) requireEvery(access, scopes);
}

/** How a run whose process died is told and ended (src/connectors/services.ts): the interrupted-run sweep's rule and event. */
export interface InterruptedRuns {
  /** `svc.connectors.run-stale-after`: a Running run without a heartbeat for this long has no process left. */
  staleAfterMs: number;
  /** Emits the run's `connector.run.failed` (interrupted, retryable) in the transaction that ended it. */
  emit(tx: Tx, tenantId: number | undefined, runId: string, connectorId: string): Promise<void>;
}

/**
 * `inlineCredentials`: whether a manifest may carry a credential value itself (a `token_value`, a
 * literal Authorization header): the dev profile only. `egress`: the outbound address policy, whose
 * refusal of a base_url apply and validate answer as a warning.
 */
export function connectorTenantServices(db: Database, runner: ConnectorRunner, inlineCredentials: boolean, interrupted: InterruptedRuns, egress: EgressPolicy): ConnectorTenantServices {
  return {
    byName: (t, name) => db.readWithTenant(t, (tx) => loadConnector(tx, name)),
    manifests: {
      apply: (t, caller, manifest, actor) =>
        db.withTenant(t, async (tx) => {
          const result = await applyConnector(tx, manifest, { actor, inlineCredentials, egress });
          // Checked after the apply, in its transaction (a refusal rolls it back): the connector it replaced is read there, locked.
          const access = await scopeAccess(tx, caller);
          requireEvery(access, result.connector.scopes, result.replacedScopes ?? result.connector.scopes);
          await requireTableWriters(tx, access, result.connector.endpoints.map((e) => e.target.table), { except: result.connector.id });
          return result;
        }),
      check: async (t, manifest) => {
        const check = checkManifest(manifest, { inlineCredentials, egress });
        const draft = check.connector;
        if (!draft) return check;
        const { taken, changes, types } = await db.readWithTenant(t, async (tx) => ({
          taken: await tableNameRefusals(tx, draft),
          changes: await targetChanges(tx, draft),
          types: await promoteConflicts(tx, draft),
        }));
        // A target table another relation has the name of: apply refuses it (applyConnector), validate says so as an error.
        if (taken.length) return { errors: taken, warnings: check.warnings };
        return { ...check, warnings: [...check.warnings, ...changes.flatMap((c) => (c.warning ? [c.warning] : [])), ...types] };
      },
      list: (t) => db.readWithTenant(t, (tx) => listConnectorsJson(tx)),
      get: async (t, name) => {
        const found = await db.readWithTenant(t, (tx) => getConnector(tx, name));
        if (!found) throw new NotFoundError(`connector ${name} not found`);
        return found;
      },
      remove: async (t, caller, name) => {
        const deleted = await db.withTenant(t, async (tx) => {
          // The object's turn first (takeObjectTurn): before its row, which the delete locks, and its owner record, which it deletes.
          await takeObjectTurn(tx, 'connectors', name);
          const access = await scopeAccess(tx, caller);
          if (access.bound) {
            const scopes = await lockedConnectorScopes(tx, name);
            // A CSV source with no manifest has no scope: 404 when there is none either.
            if (scopes === undefined && !(await deleteCsvSource(tx, name))) return false;
            requireEvery(access, scopes ?? []);
          }
          return deleteConnectorOrSource(tx, name);
        });
        if (!deleted) throw new NotFoundError(`connector ${name} not found`);
      },
      resetCursor: (t, caller, name, endpointId) =>
        db.withTenant(t, async (tx) => {
          await requireConnectorScopes(tx, caller, name);
          await resetCursor(tx, name, endpointId);
        }),
      purgeEndpoint: (t, caller, name, endpointId) =>
        db.withTenant(t, async (tx) => {
          await requireConnectorScopes(tx, caller, name);
          await purgeEndpoint(tx, name, endpointId);
        }),
    },
    runs: {
      list: (t, page, filter) => db.readWithTenant(t, (tx) => listRunsJson(tx, page, filter)),
      get: (t, id) => db.readWithTenant(t, (tx) => getRun(tx, id)),
      cancel: async (t, caller, id) => {
        const { run, interrupted: ended, tenantId } = await db.withTenant(t, async (tx) => {
          const access = await scopeAccess(tx, caller);
          // A scope-bound caller stops only runs of a connector every scope of which they hold (a CSV source's, or a deleted connector's, has none).
          if (access.bound) requireEvery(access, (await connectorScopesById(tx, (await getRun(tx, id)).connectorId)) ?? []);
          const asked = await requestCancel(tx, id, interrupted.staleAfterMs);
          if (asked.interrupted) await interrupted.emit(tx, tx.tenantId, id, asked.run.connectorId);
          return { ...asked, tenantId: tx.tenantId };
        });
        if (ended) {
          // Its process died (no heartbeat): ended now, as the interrupted-run sweep would have ended it.
          logger().warn({ runId: id, tenantId, connector: run.connector }, `run ${id} of connector ${run.connector} failed as interrupted on cancel: no heartbeat for ${interrupted.staleAfterMs} ms`);
        }
        // A run of this process stops now; one of another process at its next heartbeat or page.
        runner.cancel(id);
        return run;
      },
      start: async (t, caller, name, options) => {
        const connector = await db.readWithTenant(t, (tx) => loadConnector(tx, name));
        if (!connector) throw new NotFoundError(`connector ${name} not found`);
        // The scopes as stored when the runs are recorded (a re-apply meanwhile included).
        return runner.trigger(t, connector, { ...options, admit: async (tx, scopes) => requireEvery(await scopeAccess(tx, caller), scopes) });
      },
      ingestCsv: (t, caller, request) =>
        ingestCsv(runner, t, async (tx, name) => (await loadConnector(tx, name))?.id, (fn) => db.withTenant(t, fn), request, caller),
    },
    deadLetters: {
      list: (t, caller, page, query) =>
        db.readWithTenant(t, async (tx) => {
          const access = await scopeAccess(tx, caller);
          const held = access.bound ? access.granted : undefined;
          let connectorIds: string[] | undefined;
          if (query.connector && !query.run) {
            connectorIds = await connectorIdsOf(tx, query.connector);
            if (connectorIds.length === 0) return { items: [] };
          }
          // A filter naming only runs of connectors the scope-bound caller does not hold is asked outside the grants.
          const named = query.run ? (isUuid(query.run) ? await runConnectorIds(tx, query.run) : []) : connectorIds;
          if (held && named?.length && !(await holdsAnyConnector(tx, named, held))) throw new ScopeNotGranted();
          return listDeadLetters(tx, page, { runId: query.run, connectorIds, held });
        }),
      get: (t, caller, id) =>
        db.readWithTenant(t, async (tx) => {
          await requireEntryScopes(tx, caller, id);
          return getDeadLetter(tx, id);
        }),
      markReplayed: (t, caller, id, newRunId) =>
        db.withTenant(t, async (tx) => {
          await requireEntryScopes(tx, caller, id);
          await markReplayed(tx, id, newRunId);
        }),
      discard: (t, caller, id) =>
        db.withTenant(t, async (tx) => {
          await requireEntryScopes(tx, caller, id);
          await discard(tx, id);
        }),
      erase: (t, caller, id) =>
        db.withTenant(t, async (tx) => {
          await requireEntryScopes(tx, caller, id);
          await erase(tx, id);
        }),
    },
    rowByHash: (t, caller, hash) => db.readWithTenant(t, async (tx) => rowByHash(tx, hash, await scopeAccess(tx, caller))),
  };
}

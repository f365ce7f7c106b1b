import { createReadStream, createWriteStream } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type ScopeAccess, scopeAccess } from '../admin/scope-access.js';
import { requireTableWriters } from '../connectors/target/writers.js';
import type { Principal } from '../auth/principal.js';
import { type Config, ConfigError } from '../config/config.js';
import { entityShape } from './entity-shape.js';
import { credentialSources } from '../connectors/auth/resolver.js';
import { latestSlot, SlotWithdrawn } from '../connectors/schedule.js';
import { scheduledOfActiveTenants } from '../connectors/scheduler.js';
import type { Database, Tx } from '../db/database.js';
import type { Page, PageRequest } from '../db/keyset.js';
import type { EgressPolicy } from '../egress/policy.js';
import { EntityDefinitionError, entityRelation } from '../entities/relation.js';
import { loadEntity } from '../entities/store.js';
import { ConflictError, NotFoundError, ScopeNotGranted } from '../errors.js';
import { takeObjectTurn } from '../manifests/tenant-cap.js';
import { logger } from '../observability/logger.js';
import type { SecretStore } from '../platform/secrets/store.js';
import { csvSnapshot } from './csv/writer.js';
import type { Issue } from './manifest/validate.js';
import { deletedSince, ExportRunner, notRetryable } from './runner.js';
import { DigestStream } from './csv/digest.js';
import { CLEANED_UP, type DeadRunRule, deadRunStop, EXPORT_DELETED, endIfDead, type ExportRun, failInterrupted, getRun, latestRun, listRuns, requestStopFirst, runById, type StopRequest, warnEndedDead } from './runs/ledger.js';
import { applyExport, deleteExport, type ExportDetail, type ExportRecord, getExport, getExportById, listExports } from './store.js';

/** Who calls: the scope rules read the caller's hub user (scope grants). */
export type Caller = Pick<Principal, 'userId'> | undefined;

export type SlotOutcome =
  | { kind: 'not-due' }
  | { kind: 'already-run'; slot: Date }
  | { kind: 'busy'; slot: Date }
  | { kind: 'withdrawn'; slot: Date; reason: string }
  | { kind: 'started'; slot: Date; run: ExportRun; done: Promise<ExportRun> };

export interface Download {
  /**
   * The CSV, read from a temporary file that lost its name as soon as it was opened: a hub that
   * stops or dies while it is written or sent leaves nothing in the temporary directory. Read to
   * its end or destroyed, it closes the file, and the space is freed.
   */
  body: Readable;
  filename: string;
  rows: number;
  bytes: number;
  sha256: string;
  /** Closes the file when `body` is not read. */
  dispose(): Promise<void>;
}

/** What the export area offers the HTTP API, `svc-hub run` and the operator. Methods take the tenant and open their own transactions. */
export interface ExportServices {
  manifests: {
    /** 201/200 by `created`; 400 naming the field; 403 `scope not granted` when the caller does not hold spec.scope. */
    apply(tenantId: number, caller: Caller, manifest: unknown, actor: string): Promise<{ name: string; id: string; created: boolean; unchanged: boolean; warnings: Issue[] }>;
    /** The exports whose scope the caller holds. */
    list(tenantId: number, caller: Caller): Promise<ExportRecord[]>;
    get(tenantId: number, caller: Caller, name: string): Promise<ExportDetail>;
    remove(tenantId: number, caller: Caller, name: string): Promise<void>;
  };
  runs: {
    /** 202 `{runId}` once claimed; 409 `already has a run in flight`. */
    start(tenantId: number, caller: Caller, name: string, actor: string): Promise<ExportRun>;
    /**
     * A page of the runs, newest first: those the caller may read of the page's runs (one holding
     * none of them may be empty while `next` says more follow).
     */
    list(tenantId: number, caller: Caller, name: string, page: PageRequest): Promise<Page<ExportRun[]>>;
    get(tenantId: number, caller: Caller, name: string, id: string): Promise<ExportRun>;
    retry(tenantId: number, caller: Caller, name: string, id: string, actor: string): Promise<ExportRun>;
    /** Stops a Running run: it ends Failed `interrupted` (Completed if it had published); 409 when it is not Running. */
    cancel(tenantId: number, caller: Caller, name: string, id: string, actor: string): Promise<ExportRun>;
  };
  /** The one-shot CSV of an entity (every canonical column in declared order, comma, header), in a temporary file. */
  download(tenantId: number, caller: Caller, entity: string): Promise<Download>;
  /** A run in this process, waited for (`svc-hub run export`). */
  runNow(tenantId: number, name: string): Promise<ExportRun>;
  scheduler: {
    /** One tick across tenants: the latest due slot of every scheduled export, once. */
    tick(): Promise<number>;
    /** The latest due slot of one export (`svc-hub run export --scheduled`). */
    fire(tenantId: number, name: string): Promise<SlotOutcome>;
  };
  /** Fails Running runs whose process died; returns how many. */
  sweepInterrupted(): Promise<number>;
  /** The latest run of an export (operator status). */
  lastRun(tenantId: number, name: string): Promise<ExportRun | undefined>;
  /** Aborts this process's runs (they end Failed `interrupted`). */
  close(): Promise<void>;
}

export interface ExportDeps {
  config: Config;
  db: Database;
  secrets: SecretStore;
  egress: EgressPolicy;
  /** Test hook: the clock of the scheduler. */
  now?: () => Date;
}

/** Whether the caller may act on something of this scope (an unbound caller holds every scope). */
function holds(access: { bound: boolean; granted: string[] }, scope: string): boolean {
  return !access.bound || access.granted.includes(scope);
}

async function requireScope(tx: Tx, caller: Caller, scope: string): Promise<void> {
  const access = await scopeAccess(tx, caller);
  if (!holds(access, scope)) throw new ScopeNotGranted();
}

/**
 * 403 `scope not granted` unless a scope-bound caller holds every scope of every connector writing
 * the source tables of entity `entityName` (their rows belong to those scopes, whatever the entity
 * declares: src/connectors/target/writers.ts). Nothing for an unknown entity (the run fails on it).
 */
async function requireEntitySources(tx: Tx, access: ScopeAccess, entityName: string): Promise<void> {
  if (!access.bound) return;
  const entity = await loadEntity(tx, entityName);
  if (entity) await requireTableWriters(tx, access, entity.sources.map((s) => s.table));
}

/** The export of that name for a run the caller asks for: its scope held (found), and its entity's sources (requireEntitySources). */
async function runnable(tx: Tx, caller: Caller, name: string): Promise<ExportDetail> {
  const exp = await found(tx, caller, name, 'share');
  await requireEntitySources(tx, await scopeAccess(tx, caller), exp.entity);
  return exp;
}

/** The export of that name if the caller holds its scope (404, 403); `lock` as getExport's. */
async function found(tx: Tx, caller: Caller, name: string, lock?: 'share' | 'update'): Promise<ExportDetail> {
  const exp = await getExport(tx, name, lock);
  if (!exp) throw new NotFoundError(`export ${name.toLowerCase()} not found`);
  await requireScope(tx, caller, exp.scope);
  return exp;
}

/**
 * Runs of an export by name, its history kept after a delete (and across a re-apply). A run is
 * read with the scope it was made under: the caller needs the export's scope while it exists, and
 * each run's own; without the export (deleted), 404 when no run has the name. `one`: a single
 * run is asked for, and one the caller cannot read is a 403. A listing leaves such runs out, in its
 * statement (`read` is given the scopes a scope-bound caller holds) so that a page holds `limit`
 * runs the caller reads while that many follow; the first page of a deleted export's runs empty
 * for the caller (none of them of a scope it holds) is a 403.
 */
async function history(
  tx: Tx,
  caller: Caller,
  name: string,
  one: boolean,
  read: (name: string, scopes: readonly string[] | undefined) => Promise<ExportRun[]>,
  firstPage = true,
): Promise<ExportRun[]> {
  const exp = await getExport(tx, name);
  const access = await scopeAccess(tx, caller);
  const granted = (scope: string) => holds(access, scope);
  const lower = name.toLowerCase();
  if (exp) {
    if (!granted(exp.scope)) throw new ScopeNotGranted();
  } else {
    const { rows } = await tx.query('select 1 from exports.runs where export_name = $1 limit 1', [lower]);
    if (rows.length === 0) throw new NotFoundError(`export ${lower} not found`);
  }
  const runs = await read(exp?.name ?? lower, access.bound ? access.granted : undefined);
  const visible = runs.filter((r) => granted(r.scope));
  if (visible.length === 0 && (one ? runs.length > 0 : !exp && firstPage)) throw new ScopeNotGranted();
  return visible;
}

const record = ({ manifest: _m, spec: _s, ...rest }: ExportDetail): ExportRecord => rest;

export function createExportServices(deps: ExportDeps): ExportServices {
  const { config, db } = deps;
  const now = deps.now ?? (() => new Date());
  const heartbeatEveryMs = config.duration('svc.export.heartbeat-every');
  const staleAfterMs = config.duration('svc.export.run-stale-after');
  if (staleAfterMs <= heartbeatEveryMs) {
    throw ConfigError.of('svc.export.run-stale-after', 'must be longer than svc.export.heartbeat-every, or live runs would be failed as interrupted');
  }
  // At most svc.datasource.pool-size − 2: checked with the configuration (Config.checkCombinations).
  const concurrency = { total: config.int('svc.export.concurrency'), perTenant: config.int('svc.export.concurrency-per-tenant') };
  const runner = new ExportRunner({
    db,
    sources: credentialSources(config, deps.secrets),
    egress: deps.egress,
    heartbeatEveryMs,
    timeoutMs: config.int('svc.export.snapshot.timeout-seconds') * 1000,
    concurrency,
  });
  const fire = async (tenantId: number, exp: ExportDetail): Promise<SlotOutcome> => {
    if (!exp.schedule) return { kind: 'not-due' };
    const slot = latestSlot(exp.schedule, now());
    // No back-fill: a slot due more than a minute (a tick) before the export was last applied is not
    // due; one due in that minute still runs (an apply right after a slot must not swallow it).
    if (slot.getTime() < exp.updatedAt.getTime() - 60_000) return { kind: 'not-due' };
    try {
      const started = await runner.start(tenantId, exp, { trigger: 'scheduled', slot, artifactTime: slot });
      if (!started) return { kind: 'already-run', slot };
      logger().info({ export: exp.name, slot: slot.toISOString(), runId: started.run.id }, 'scheduled export run started');
      return { kind: 'started', slot, run: started.run, done: started.done };
    } catch (err) {
      if (err instanceof ConflictError) return { kind: 'busy', slot };
      // A re-apply or delete committed since the export was read no longer schedules this slot: no run.
      if (err instanceof SlotWithdrawn) {
        logger().warn({ export: exp.name, slot: slot.toISOString() }, `scheduled export run skipped: ${err.message}`);
        return { kind: 'withdrawn', slot, reason: err.message };
      }
      throw err;
    }
  };

  /** Runs `endIfDead` ends: the runs of this process live (their caller stops them here). */
  const dead: DeadRunRule = { staleAfterMs, runsHere: (id) => runner.runsHere(id) };

  return {
    manifests: {
      apply: (t, caller, manifest, actor) =>
        db.withTenant(t, async (tx) => {
          const result = await applyExport(tx, manifest, { actor, entity: entityShape, egress: deps.egress });
          await requireScope(tx, caller, result.spec.scope);
          // Re-applying an export of a scope the caller does not hold would re-point it (or take it
          // over under another scope): refused as reading, running or deleting it is.
          if (result.replacedScope !== undefined) await requireScope(tx, caller, result.replacedScope);
          return { name: result.spec.name, id: result.id, created: result.created, unchanged: result.unchanged, warnings: result.warnings };
        }),
      list: (t, caller) =>
        db.withTenant(t, async (tx) => {
          const access = await scopeAccess(tx, caller);
          return (await listExports(tx)).filter((e) => holds(access, e.scope)).map(record);
        }),
      get: (t, caller, name) => db.withTenant(t, (tx) => found(tx, caller, name)),
      async remove(t, caller, name) {
        // A run in flight is stopped (it would publish for an export that no longer exists, and
        // hold its slot until its time limit): here at once when this process runs it, elsewhere
        // at that process's next heartbeat, and at once when no live process holds it (its process
        // died: the name's next run would wait for the sweep to end it).
        // The row is locked as the caller's scope is checked: a concurrent delete or re-apply waits or
        // was first, so the scope checked is the one of the export deleted, and of two deletes the
        // second finds none (404), as for every other kind.
        const { exportName, stopped, ended } = await db.withTenant(t, async (tx) => {
          // The object's turn first (takeObjectTurn): before its row, which the delete locks, and its owner record, which it deletes.
          await takeObjectTurn(tx, 'exports', name);
          const exp = await found(tx, caller, name, 'update');
          return { exportName: exp.name, ...(await deleteExport(tx, name, dead)) };
        });
        for (const id of stopped) {
          if (ended.includes(id)) warnEndedDead(t, { id, exportName }, 'delete', staleAfterMs);
          else runner.stop(id, EXPORT_DELETED);
        }
      },
    },
    runs: {
      async start(t, caller, name, actor) {
        // The caller's scope checked in the claim's transaction, the export's row held until the run is
        // recorded: a re-apply to another scope cannot come between (it waits, or was read first).
        const started = await runner.start(t, (tx) => runnable(tx, caller, name), { trigger: 'manual', artifactTime: new Date(), requestedBy: actor });
        return started!.run;
      },
      list: (t, caller, name, page) =>
        db.withTenant(t, async (tx) => {
          const read: Partial<Page<ExportRun[]>> = {};
          const items = await history(
            tx,
            caller,
            name,
            false,
            async (n, scopes) => {
              Object.assign(read, await listRuns(tx, n, page, scopes));
              return read.items ?? [];
            },
            !page.after,
          );
          return { items, ...(read.next ? { next: read.next } : {}) };
        }),
      get: (t, caller, name, id) =>
        db.withTenant(t, async (tx) => (await history(tx, caller, name, true, async (n) => [await getRun(tx, n, id)]))[0]!),
      async cancel(t, caller, name, id, actor) {
        const stop: StopRequest = {
          code: 'interrupted',
          reason: `cancelled by ${actor} during the run; nothing was published${CLEANED_UP}. Retry it: a collision on retry means it did publish`,
        };
        const { run, ended } = await db.withTenant(t, async (tx) => {
          const [running] = await history(tx, caller, name, true, async (n) => [await getRun(tx, n, id)]);
          const notRunning = (status: string) => new ConflictError(`run ${id} is ${status}: only a Running run can be cancelled`);
          if (running!.status !== 'Running') throw notRunning(running!.status);
          // The first stop asked for stands (a delete, another cancel): a second is told so.
          const standing = await requestStopFirst(tx, id, stop);
          if (standing && 'status' in standing) throw notRunning(standing.status);
          if (standing) throw new ConflictError(`run ${id} is being stopped already: ${standing.reason}`);
          // No live process holds it: it ends now. Its process cleaned nothing up.
          const end = deadRunStop(`cancelled by ${actor}`, staleAfterMs, '. Retry it: a collision on retry means this run did publish');
          if (await endIfDead(tx, id, dead, end)) return { run: (await runById(tx, id))!, ended: true };
          return { run: running!, ended: false };
        });
        if (ended) {
          warnEndedDead(t, run, 'cancel', staleAfterMs);
          return run;
        }
        runner.stop(run.id, stop);
        return run;
      },
      async retry(t, caller, name, id, actor) {
        // Checked in the claim's transaction, the export's row held until the retry is recorded (as start).
        const checked = async (tx: Tx) => {
          // The run retried is read with its own scope (it may be of an earlier export of the name).
          const [run] = await history(tx, caller, name, true, async (n) => [await getRun(tx, n, id)]);
          // Its export deleted and the name not applied again: a 409 as when it was (runner.retry).
          const exp = await getExport(tx, name, 'share');
          if (!exp) {
            if (run!.status !== 'Failed') throw notRetryable(id, run!.status);
            throw deletedSince(id, name.toLowerCase());
          }
          await requireScope(tx, caller, exp.scope);
          await requireEntitySources(tx, await scopeAccess(tx, caller), exp.entity);
          return exp;
        };
        return (await runner.retry(t, checked, id, actor)).run;
      },
    },
    async download(t, caller, entityName) {
      const path = join(tmpdir(), `svc-hub-download-${randomUUID()}.csv`);
      const file = await open(path, 'wx+', 0o600);
      try {
        // Reached through the handle alone from here on (written, then read from its start).
        await rm(path, { force: true });
        // The snapshot's transaction is open while the file is written: a unit holding its connection
        // for long (Database.holdConnection), counted with export runs, chunk writes and analytic queries.
        return await db.holdConnection(t, () => db.withTenant(t, async (tx) => {
          const entity = await loadEntity(tx, entityName);
          if (!entity) throw new NotFoundError(`entity ${entityName.toLowerCase()} not found`);
          const access = await scopeAccess(tx, caller);
          if (access.bound && !entity.scopes.some((s) => holds(access, s))) throw new ScopeNotGranted();
          // Its rows are of the scopes of the connectors writing its sources, whatever it declares.
          await requireTableWriters(tx, access, entity.sources.map((s) => s.table));
          const relation = await entityRelation(tx, entity).catch((err: unknown) => {
            // An entity applied before its sources were ingested (the apply warned): nothing to read yet.
            if (err instanceof EntityDefinitionError) throw new ConflictError(`entity ${entity.name} cannot be read: ${err.message}; ingest its sources first or fix the entity`);
            throw err;
          });
          const columns = entity.columns.map((c) => c.name);
          const csv = csvSnapshot(tx, { relation, columns, order: [entity.key], delimiter: ',', header: true });
          const digest = new DigestStream();
          // Written through its descriptor, the handle left open (a FileHandle's own write stream,
          // even with autoClose off, keeps a read stream of the handle from ever reading).
          await pipeline(csv, digest, createWriteStream('', { fd: file.fd, autoClose: false }));
          const body = createReadStream('', { fd: file, start: 0 });
          return { body, filename: `${entity.name}.csv`, rows: csv.rows, bytes: digest.bytes, sha256: digest.sha256(), dispose: async () => void body.destroy() };
        }));
      } catch (err) {
        await file.close();
        await rm(path, { force: true });
        throw err;
      }
    },
    async runNow(t, name) {
      const exp = await db.withTenant(t, async (tx) => {
        const e = await getExport(tx, name);
        if (!e) throw new NotFoundError(`export ${name.toLowerCase()} not found`);
        return e;
      });
      const started = await runner.start(t, exp, { trigger: 'manual', artifactTime: new Date() });
      return started!.done;
    },
    scheduler: {
      async tick() {
        const scheduled = await scheduledOfActiveTenants(db, 'export-scheduler', 'exports.exports');
        let started = 0;
        for (const row of scheduled) {
          // A stopping hub claims no more slots: a slot claimed now would only fail `interrupted`.
          if (!runner.accepting) break;
          try {
            const exp = await db.withTenant(row.tenant_id, (tx) => getExportById(tx, row.id));
            if (exp && (await fire(row.tenant_id, exp)).kind === 'started') started++;
          } catch (err) {
            logger().error({ err, exportId: row.id, tenant: row.tenant_id }, 'scheduled export run could not start');
          }
        }
        return started;
      },
      async fire(t, name) {
        const exp = await db.withTenant(t, (tx) => getExport(tx, name));
        if (!exp) throw new NotFoundError(`export ${name.toLowerCase()} not found`);
        return fire(t, exp);
      },
    },
    async sweepInterrupted() {
      const closed = await db.crossTenant('export-interrupted-runs', (tx) => failInterrupted(tx, staleAfterMs));
      for (const run of closed) logger().warn({ runId: run.id, tenantId: run.tenantId, export: run.exportName }, `export run ${run.id} of ${run.exportName} failed as interrupted: no heartbeat for ${staleAfterMs} ms`);
      return closed.length;
    },
    lastRun: (t, name) => db.withTenant(t, (tx) => latestRun(tx, name.toLowerCase())),
    close: () => runner.close(),
  };
}

import type { Tx } from '../db/database.js';
import type { EgressPolicy } from '../egress/policy.js';
import type { Issue } from '../validation/schema-errors.js';

/**
 * What the hub does with a manifest of a kind, in the caller's tenant transaction: the same
 * functions as the kind's HTTP paths, so a custom resource behaves exactly like the same bytes sent
 * to `POST /api/<plural>/apply`. The operator calls these and nothing kind-specific.
 */
export interface ManifestHandler {
  /**
   * The manifest as last applied, its schedule and who applied it last (`updated_by`: the operator's
   * actor or an HTTP caller), or undefined when the hub holds no such name.
   */
  stored(tx: Tx, name: string): Promise<{ manifest: unknown; schedule: string | null; appliedBy: string | null } | undefined>;
  /**
   * Validates and stores (create or update by name); throws ValidationError naming the field.
   * `unchanged`: the manifest was the one stored and so was what the running code makes of it (its
   * normalised form, what it derives from other objects: unchangedApply), and nothing was written.
   * `context.egress`: the hub's outbound address policy, for the warnings of kinds that store an
   * address the hub connects to (as their HTTP apply answers them).
   */
  apply(tx: Tx, manifest: unknown, actor: string, context?: ApplyContext): Promise<{ created: boolean; unchanged: boolean; warnings: string[]; schedule: string | null }>;
  /**
   * Takes the locks `apply` takes before it writes the object of that name, in the order it takes
   * them (takeApplyLocks): a writer that holds them sees every apply of the name committed, and the
   * ones to come wait for it. Taken before `apply`, they never make it deadlock with another apply.
   */
  lockForApply(tx: Tx, name: string): Promise<void>;
  /**
   * The lines of `apply`'s warnings that follow the hub's configuration (its outbound address policy,
   * `context.egress`) rather than the manifest: what an apply of `manifest`, already stored, would
   * warn of now, found without storing anything. Kinds that store an address the hub connects to.
   */
  policyWarnings?(manifest: unknown, context: ApplyContext): string[];
  /** Deletes by name (with what it owns in the hub); false when there was none. */
  remove(tx: Tx, name: string, context?: RemoveContext): Promise<boolean>;
  /** The latest run (kinds with `lastRun`). */
  lastRun?(tx: Tx, name: string): Promise<{ id: string; status: string; endedAt: string | null } | undefined>;
  /**
   * The (tenant code, name) of resources whose runs started or ended after `since`, read in a
   * transaction that sees every tenant: the operator refreshes their `lastRun` at once.
   */
  runsSince?(tx: Tx, since: Date): Promise<Array<{ tenant: string; name: string }>>;
  /** The words after `svc-hub run` that run it once (kinds with schedules): `['connector', name]`. */
  runArgs?(name: string): string[];
}

/** What the hub lends a kind's apply besides the transaction. */
export interface ApplyContext {
  egress?: EgressPolicy;
}

/** What the hub lends a kind's remove besides the transaction. */
export interface RemoveContext {
  /**
   * svc.export.run-stale-after: a Running run of a deleted Export with no heartbeat for this long
   * (its process died) ends at once, as with `DELETE /api/exports/{name}`. Unset: it is only asked
   * to stop, and the interrupted-run sweep ends it.
   */
  exportRunStaleAfterMs?: number;
  /** Takes what to do once the remove's transaction has committed (a log line of what it did). */
  afterCommit(then: () => void): void;
}

/** Apply's warnings as the operator shows them (an event, a status condition): one line each, the field first. */
export function warningLines(warnings: readonly Issue[]): string[] {
  return warnings.map((w) => (w.field ? `${w.field}: ${w.message}` : w.message));
}

import { holdsEvery, type ScopeAccess } from '../admin/scope-access.js';
import type { Tx } from '../db/database.js';
import { ScopeNotGranted } from '../errors.js';
import { workflowScopesByName } from '../workflows/store.js';

/**
 * Event families that carry one domain's data: `connector.run.*` (a connector's runs),
 * `data.row.changed` (an ingest table's rows) and `decision.dormant.*` (a workflow's records).
 * Events carry no scopes, so a subscription to them cannot be narrowed to a caller's grants: a
 * scope-bound caller (docs/admin.md, "Scopes") may neither make nor read, change, delete, test or
 * replay an integration or e-mail rule whose event types can match one, except an exact
 * `decision.dormant.<workflow>` of a workflow every scope of which they hold.
 */

/** What a scope-bound caller must be able to hold, for the API's 403 descriptions. */
export const SUBSCRIPTION_SCOPES =
  'a subscription (integration or e-mail rule) whose event types can match `connector.run.*`, `data.row.changed` or `decision.dormant.*`, other than an exact `decision.dormant.<workflow>` of a workflow every scope of which they hold (events carry no scopes)';

/** The prefix of a connector's run events, `connector.run.<outcome>`. */
export const CONNECTOR_RUN = 'connector.run.';
/** The prefix of a workflow's dormancy decisions, `decision.dormant.<workflow>`. */
export const DORMANT = 'decision.dormant.';
const FAMILY_PREFIXES = [CONNECTOR_RUN, DORMANT];
const FAMILY_TYPES = ['data.row.changed'];

/** Whether a subscription pattern (an exact type or `prefix.*`) can match an event of a scoped family. */
export function reachesScopedFamily(pattern: string): boolean {
  if (pattern.endsWith('.*')) {
    const prefix = pattern.slice(0, -1);
    return FAMILY_PREFIXES.some((f) => f.startsWith(prefix) || prefix.startsWith(f)) || FAMILY_TYPES.some((t) => t.startsWith(prefix));
  }
  return FAMILY_PREFIXES.some((f) => pattern.startsWith(f)) || FAMILY_TYPES.includes(pattern);
}

/** The workflow an exact `decision.dormant.<workflow>` (a pattern or an event's type) names; undefined for any other. */
export const dormantWorkflow = (pattern: string): string | undefined => (pattern.startsWith(DORMANT) && !pattern.endsWith('.*') ? pattern.slice(DORMANT.length) : undefined);

/**
 * Which of these subscriptions (each an event-type list) the caller may hold: all of them for an
 * unbound caller (no query); for a scope-bound one, those none of whose patterns reaches a scoped
 * family other than an exact `decision.dormant.<workflow>` of a workflow of their scopes (one
 * statement for the workflows named).
 */
export async function heldSubscriptions(tx: Tx, access: ScopeAccess, lists: ReadonlyArray<readonly string[]>): Promise<(types: readonly string[]) => boolean> {
  if (!access.bound) return () => true;
  const names = [...new Set(lists.flat().flatMap((p) => dormantWorkflow(p) ?? []))];
  const scopes = names.length > 0 ? await workflowScopesByName(tx, names) : new Map<string, string[]>();
  const held = (pattern: string) => {
    if (!reachesScopedFamily(pattern)) return true;
    const of = scopes.get(dormantWorkflow(pattern) ?? '');
    return of !== undefined && holdsEvery(access, of);
  };
  return (types) => types.every(held);
}

/** 403 `scope not granted` unless the caller may hold a subscription to each list (heldSubscriptions). */
export async function requireSubscriptions(tx: Tx, access: ScopeAccess, ...lists: ReadonlyArray<readonly string[]>): Promise<void> {
  if (!access.bound) return;
  const held = await heldSubscriptions(tx, access, lists);
  if (!lists.every(held)) throw new ScopeNotGranted();
}

import { type Caller, holdsEvery, hubUserId, type ScopeAccess } from '../admin/scope-access.js';
import { scopesOf } from '../admin/scopes.js';
import { heldTables } from '../connectors/target/writers.js';
import type { Tx } from '../db/database.js';
import { listWorkflows } from '../workflows/store.js';
import type { OutboxEvent } from './outbox.js';
import { CONNECTOR_RUN, DORMANT } from './scoped-families.js';

/**
 * What a scope-bound caller's live event stream lets through of the families that carry one
 * domain's data (src/events/scoped-families.ts). Events carry no scopes: an event of them goes to
 * such a caller only when its payload names an object every scope of which they hold, read at one
 * moment (the stream reads it again at each heartbeat, and asks an unbound caller's binding again):
 * - `connector.run.*`: its `connector_id` (a connector of their scopes); a run's end written before
 *   its payload named the connector names none, and is left out;
 * - `data.row.changed`: its `entity`, the ext table written (every writer of which is of their
 *   scopes, src/connectors/target/writers.ts);
 * - `decision.dormant.<workflow>`: that workflow (its scope and its entity's).
 * Other types are not split by scope.
 */
export interface HeldObjects {
  connectors: ReadonlySet<string>;
  tables: ReadonlySet<string>;
  workflows: ReadonlySet<string>;
}

/**
 * The objects a scope-bound caller holds; undefined for an unbound caller (every event goes to them).
 * An unbound caller costs one statement, their grants (a grant's row names a user of the tenant):
 * the stream asks it at each heartbeat, to begin filtering once the caller is bound.
 */
export async function streamHeld(tx: Tx, caller: Caller): Promise<HeldObjects | undefined> {
  const id = hubUserId(caller);
  const granted = id === undefined ? [] : await scopesOf(tx, id);
  if (granted.length === 0) return undefined;
  const access: ScopeAccess = { bound: true, granted, defaultScope: '' };
  const connectors = await tx.query<{ id: string; scopes: string[] }>('select id::text as id, scopes from connectors.connectors');
  return {
    connectors: new Set(connectors.rows.filter((c) => holdsEvery(access, c.scopes)).map((c) => c.id)),
    tables: await heldTables(tx, access),
    workflows: new Set((await listWorkflows(tx, access.granted)).map((w) => w.name)),
  };
}

/** Whether the event goes to a caller holding `held` (HeldObjects). */
export function eventHeld(held: HeldObjects, event: Pick<OutboxEvent, 'type' | 'payload'>): boolean {
  const { type, payload } = event;
  if (type.startsWith(CONNECTOR_RUN)) return typeof payload.connector_id === 'string' && held.connectors.has(payload.connector_id);
  if (type === 'data.row.changed') return typeof payload.entity === 'string' && held.tables.has(payload.entity);
  if (type.startsWith(DORMANT)) return held.workflows.has(type.slice(DORMANT.length));
  return true;
}

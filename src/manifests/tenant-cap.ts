import type { Tx } from '../db/database.js';
import { ConflictError, ValidationError } from '../errors.js';

/**
 * Per-tenant caps on the objects of one kind, so that one tenant cannot fill the shared database
 * (or, with integrations, multiply the deliveries every event costs). Checked in the create's
 * transaction: creates of one tenant and kind take turns from here (a transaction lock on
 * `svc-hub:<plural>:<tenant>`), so two concurrent ones cannot both take the last place.
 */

/**
 * Takes the transaction's tenant's turn for `plural` (until the transaction ends): creates of one
 * tenant and kind take turns from here. Taken again in the same transaction, it is held already.
 */
export async function takeTenantTurn(tx: Tx, plural: string): Promise<void> {
  await tx.query(`select pg_advisory_xact_lock(hashtextextended('svc-hub:' || $1 || ':' || core.current_tenant()::text, 0))`, [plural]);
}

/**
 * Takes the object's turn: the transaction's tenant's lock on the object `name` of `plural` (a
 * connector, entity, export, process or workflow: lower-cased, as most kinds store names), whether
 * or not it exists, until the transaction ends. Taken first, before the object's row, the tenant's
 * turn and the object's owner record (manifests.owners), by every write of the object or of its
 * record: an apply or a delete over HTTP, the operator's apply and delete. The record is written by
 * triggers when the object's row is deleted or its manifest changes (after the row), and by the
 * operator, which reads it locked before the row: without this turn, an HTTP delete or apply holding
 * the row while it waits for the record, and the operator holding the record while it waits for the
 * row, was a deadlock (one of them failed, the HTTP request with a 503). A transaction writes one
 * object: it takes one such turn (taken again, it is held already).
 */
export async function takeObjectTurn(tx: Tx, plural: string, name: string): Promise<void> {
  await tx.query(`select pg_advisory_xact_lock(hashtextextended('svc-hub:object:' || $1 || ':' || core.current_tenant()::text || ':' || lower($2), 0))`, [plural, name]);
}

/**
 * Takes the locks a kind's apply of `name` takes before it writes the object (until the transaction
 * ends), in the order that apply takes them: the object's turn (takeObjectTurn), then the row of that name in `table` (none when there is no
 * such row) in `mode`, the mode of the apply's own read and upsert of it, and the tenant's turn for
 * `plural` (takeTenantPlace). `order`: `row-then-turn` for the kinds whose apply reads the object it
 * replaces, locked, before it waits for the turn (connectors, entities, exports); `turn-then-row` for
 * those whose apply waits for the turn first (processes, workflows). A writer taking them otherwise
 * could deadlock with the apply. `where`: how the apply finds the row by `$1` (default
 * `name = lower($1)`). Taken again by the apply in the same transaction, they are held already.
 */
export async function takeApplyLocks(
  tx: Tx,
  kind: { table: 'processes.processes' | 'workflows.workflows' | 'connectors.connectors' | 'entities.entities' | 'exports.exports'; plural: string; mode: 'for update' | 'for no key update'; order: 'row-then-turn' | 'turn-then-row'; where?: string },
  name: string,
): Promise<void> {
  const row = () => tx.query(`select 1 from ${kind.table} where ${kind.where ?? 'name = lower($1)'} ${kind.mode}`, [name]);
  await takeObjectTurn(tx, kind.plural, name);
  if (kind.order === 'turn-then-row') await takeTenantTurn(tx, kind.plural);
  await row();
  if (kind.order === 'row-then-turn') await takeTenantTurn(tx, kind.plural);
}

/**
 * Takes the tenant's turn for `plural` (until the transaction ends) and counts what `from` holds
 * (row-level security: the tenant's); `known`: whether one of its rows has the `name` given.
 */
async function lockedCount(tx: Tx, plural: string, from: string, name?: string): Promise<{ n: number; known: boolean }> {
  await takeTenantTurn(tx, plural);
  if (name === undefined) {
    const { rows } = await tx.query<{ n: number }>(`select count(*)::int as n from ${from}`);
    return { n: rows[0]!.n, known: false };
  }
  const { rows } = await tx.query<{ n: number; known: boolean }>(`select count(*)::int as n, coalesce(bool_or(name = $1), false) as known from ${from}`, [name]);
  return rows[0]!;
}

/**
 * Applied manifests (processes, workflows: each costs work on every event or tick; connectors,
 * entities, exports). A name already applied is never refused (an update). Past the cap, a 400
 * naming `metadata.name`.
 */
export async function takeTenantPlace(
  tx: Tx,
  kind: { table: 'processes.processes' | 'workflows.workflows' | 'connectors.connectors' | 'entities.entities' | 'exports.exports'; noun: string; plural: string; max: number },
  name: string,
): Promise<void> {
  const { n, known } = await lockedCount(tx, kind.plural, kind.table, name);
  if (!known && n >= kind.max) {
    throw new ValidationError(
      `this tenant has ${n} ${kind.plural}, the most a tenant may have (${kind.max}): delete one before applying a new ${kind.noun} ${name} (an existing name can still be updated)`,
      'metadata.name',
    );
  }
}

/** The 409 of a create past the cap. */
const full = (n: number, kind: { plural: string; max: number; advice: string }) => new ConflictError(`this tenant has ${n} ${kind.plural}, the most it may have (${kind.max}): ${kind.advice}`);

/**
 * Deleted rows a tenant keeps of each kind created over HTTP and deleted softly (takeLivePlace): the
 * most recently deleted, as history. Deleted ones do not count against the kind's cap, so without
 * this a loop of creates and deletes grew them without end.
 */
export const MAX_DELETED_KEPT_PER_TENANT = 1000;

/**
 * Objects created one at a time over HTTP and deleted softly (integrations, stored secrets, e-mail
 * rules): those not deleted count; a create past the cap is a 409. `advice` ends the refusal
 * (`delete one first`). A create that passes also purges the tenant's deleted rows of the kind past
 * the MAX_DELETED_KEPT_PER_TENANT deleted most recently, each only once nothing holds it: `heldBy`,
 * SQL over the row `t` (an integration's delivery journal, an e-mail rule's send claims), keeps it
 * until that history is gone (a later create then purges it). A delete adds a deleted row only for a
 * row created before, so a tenant keeps at most that many plus its cap, and those still held.
 */
export async function takeLivePlace(
  tx: Tx,
  kind: { table: 'hub.integrations' | 'platform.secrets' | 'email.rules'; plural: string; max: number; advice: string; heldBy?: string },
): Promise<void> {
  const { n } = await lockedCount(tx, kind.plural, `${kind.table} where deleted_at is null`);
  if (n >= kind.max) throw full(n, kind);
  await tx.query(
    `delete from ${kind.table} where id in (
       select id from (select id from ${kind.table} where deleted_at is not null order by deleted_at desc, id desc offset $1) t
        where not (${kind.heldBy ?? 'false'}))`,
    [MAX_DELETED_KEPT_PER_TENANT],
  );
}

/**
 * The ext tables of a tenant (connectors.ext_tables, each table once, whoever writes it): a CSV
 * ingest into a table the tenant does not have takes a place, registered (`register`) in the
 * transaction that records its run, so that the place is held from there on; past the cap a 409.
 * A table the tenant has is never refused.
 */
export async function takeTablePlace(tx: Tx, kind: { plural: string; max: number; advice: string }, table: string, register: () => Promise<void>): Promise<void> {
  const { n, known } = await lockedCount(tx, kind.plural, '(select distinct table_name as name from connectors.ext_tables) t', table);
  if (known) return;
  if (n >= kind.max) throw full(n, kind);
  await register();
}

/**
 * Rows that are never deleted, only switched off (organisations archived, users deactivated, roles,
 * role assignments, organisation grants and user scopes revoked): every row counts, switched off or
 * not, since each stays. `adds` (asked once the tenant's turn is taken) says how many rows the create
 * adds: switching on again a row that exists adds none and is never refused; past the cap, a create
 * adding rows is a 409.
 */
export async function takeKeptPlaces(
  tx: Tx,
  kind: { table: 'core.orgs' | 'core.users' | 'core.roles' | 'core.user_roles' | 'core.role_orgs' | 'core.user_scopes'; plural: string; max: number; advice: string },
  adds: () => Promise<number> = async () => 1,
): Promise<void> {
  const { n } = await lockedCount(tx, kind.plural, kind.table);
  const more = await adds();
  if (more > 0 && n + more > kind.max) throw full(n, kind);
}

import type { AdminServices } from '../admin/services.js';
import type { Database, TenantId, Tx } from '../db/database.js';
import type { EgressPolicy } from '../egress/policy.js';
import { ConflictError, ValidationError } from '../errors.js';
import { sameManifest } from './canonical.js';
import type { ManifestKind } from './kinds.js';
import { takeObjectTurn } from './tenant-cap.js';

/**
 * What a manifest source other than the HTTP API (the Kubernetes operator) does with the hub: each
 * method takes the tenant and opens its own transaction, and runs the kind's handler, the very
 * functions of the kind's HTTP paths. The operator holds no database handle and no SQL.
 *
 * Ownership (docs/kubernetes.md, "Ownership and conflicts"): the table `manifests.owners` records
 * which custom resource (namespace, name, uid) manages each hub object the operator applied,
 * written in the apply's transaction. A resource may apply an object only when it owns it, when the
 * object does not exist, or when the object has no record and was last applied by the operator
 * itself (an object applied before records existed: adopted). Anything else is a conflict, and
 * nothing is written. For a name with no record (a new name, an object to adopt), the check is made
 * again under the locks the kind's apply takes before it writes (ManifestHandler.lockForApply: its
 * row and the tenant's turn, in the apply's order): of two writers of one name at once (an HTTP
 * apply, another resource), the second finds the first's object (or record) and is the conflict. An
 * object with no record is adopted by the first resource to record itself: the record is inserted
 * only where none is (should two adopting at once still both get there, the second's apply is
 * rolled back and made again, and finds the first's record: the conflict). Cleanup goes through the
 * record (`owned`, `removeOwned`); the record goes with its object whatever deletes it (a trigger per
 * kind's table, migrations/manifests).
 *
 * Locks, in one order for every writer of an object and its record (no deadlock between them): the
 * object's turn (takeObjectTurn: an HTTP apply or delete, an apply or delete here), then its record
 * (read locked here), then what the kind's apply or delete locks (its row, the tenant's turn). The
 * triggers that write the record after the row (a delete, a change of the manifest) run under the
 * object's turn, so nothing waits for a record while it holds the row.
 */

/** The custom resource that manages (or wants to manage) a hub object. */
export interface ManifestOwner {
  namespace: string;
  name: string;
  uid: string;
  /**
   * The resource's `metadata.generation` whose manifest is applied (recorded with the owner): an
   * apply for the same uid with an older generation than the recorded one is refused (`stale`).
   * Undefined: not known, nothing refused (and the recorded one is kept).
   */
  generation?: number;
}

/** A hub object with its owner record. */
export interface OwnedObject {
  tenantId: number;
  /** The tenant's code. */
  tenant: string;
  /** The hub object's name. */
  name: string;
  owner: ManifestOwner;
}

/** Why a resource may not apply a hub object: another resource manages it, or it came over HTTP. */
export type OwnershipConflict = { by: 'resource'; owner: ManifestOwner } | { by: 'http'; appliedBy: string | null };

export type ApplyOutcome =
  | { conflict: OwnershipConflict; stale?: undefined }
  /**
   * The hub holds the manifest of a later generation of the same resource (uid): nothing written.
   * What a replica applies that read the resource before another one applied a newer generation.
   */
  | { conflict?: undefined; stale: { recorded: number } }
  | {
      conflict?: undefined;
      stale?: undefined;
      changed: boolean;
      created: boolean;
      adopted: boolean;
      schedule: string | null;
      /** The apply's warnings; none when nothing changed (nothing was applied). */
      warnings: string[];
      /**
       * The outbound address policy's warnings for the manifest under the policy in force
       * (ManifestHandler.policyWarnings), whether or not it changed: among `warnings` when it did.
       */
      policyWarnings: string[];
      /**
       * The other warnings (not the policy's) of the last apply by the operator that changed the
       * object, recorded with its owner in that apply's transaction: this apply's when it changed
       * something; undefined when not known (no change applied since records kept them).
       */
      changeWarnings?: string[];
    };

/**
 * Called in the transaction of a write, after the write and with the object's owner record locked
 * (or its uid's unique entry written), just before the commit; only when something is written. What
 * it throws rolls the write back and is thrown as it is. The operator confirms there that what it
 * decided from (the resource and its Namespace, by resourceVersion) is still what the API server
 * holds: a write decided from an older copy (a relabel, which changes no generation) is refused,
 * and a competing write of the same object waits for this commit and confirms after it.
 */
export type Fence = () => Promise<void>;

export interface ManifestServices {
  /** The tenant of that code, active or not (the admin area owns tenants). */
  tenantByCode(code: string): Promise<{ id: number; active: boolean } | undefined>;
  /**
   * Applies `manifest` for the resource `owner` unless another resource manages the object or it
   * was created or last applied over HTTP (then a conflict, nothing written), and unless the hub
   * already holds exactly it and what the kind makes of it now (its normalised form, and what it
   * derives from other objects, a Workflow's default scope from its Entity: the kind's apply
   * decides, unchangedApply), so a resync writes nothing and an edit made over HTTP is reverted;
   * the manifest held that the kind would now refuse (what it depends on changed since) stays
   * applied as it was, unchanged,
   * and unless the record names the same uid with a later generation than `owner.generation`
   * (`stale`, nothing written). Records `owner` (and its generation) in the same transaction, and
   * with it, when it changed the object, the apply's warnings other than the policy's
   * (`changeWarnings`, answered again by each later apply that changes nothing).
   * Throws the kind's ValidationError naming the field. `fence`: see Fence.
   */
  applyIfChanged(kind: ManifestKind, tenantId: TenantId, name: string, manifest: Record<string, unknown>, actor: string, owner: ManifestOwner, fence?: Fence): Promise<ApplyOutcome>;
  /**
   * Whether `owner` could apply `manifest` in that tenant: the ownership conflict `applyIfChanged`
   * would answer, if any; else the kind's apply service runs in a transaction that is rolled back
   * (nothing stored, no owner recorded). Throws the kind's ValidationError naming the field.
   */
  checkApply(kind: ManifestKind, tenantId: TenantId, name: string, manifest: Record<string, unknown>, actor: string, owner: ManifestOwner): Promise<OwnershipConflict | undefined>;
  /**
   * The warnings an apply of `manifest` in that tenant would answer now, the outbound address
   * policy's among them: the kind's apply service runs in a transaction that is rolled back (nothing
   * stored). For a manifest the hub already holds (an apply that changes nothing answers none).
   * Throws the kind's ValidationError naming the field.
   */
  warningsOf(kind: ManifestKind, tenantId: TenantId, manifest: Record<string, unknown>, actor: string): Promise<string[]>;
  /**
   * Across tenants: the hub objects of `kind` recorded as managed by the resource of that uid, or of
   * that namespace and name, or every one (`all`, in one namespace when given).
   */
  owned(kind: ManifestKind, by: { uid: string } | { namespace: string; name: string } | { all: true; namespace?: string }): Promise<OwnedObject[]>;
  /**
   * Deletes the object by name with what it owns in the hub, only while its record names `uid`
   * (or, with `unownedAppliedBy`, only while it has no record and was last applied by that actor);
   * false when nothing was deleted. `fence`: see Fence.
   */
  removeOwned(kind: ManifestKind, tenantId: TenantId, name: string, by: { uid: string } | { unownedAppliedBy: string }, fence?: Fence): Promise<boolean>;
  /** The latest run of kinds that have runs. */
  lastRun(kind: ManifestKind, tenantId: TenantId, name: string): Promise<{ id: string; status: string; endedAt: string | null } | undefined>;
  /**
   * Across tenants: the database's clock, and the (kind, tenant code, name) of resources whose runs
   * started or ended after `since(now)`.
   */
  runsChanged(kinds: readonly ManifestKind[], since: (now: Date) => Date): Promise<{ now: Date; changed: Array<{ kind: ManifestKind; tenant: string; name: string }> }>;
}

interface OwnerRow {
  namespace: string;
  resource: string;
  uid: string;
}

/**
 * An apply of an object with no owner record found one written when it wrote its own (another
 * resource's apply committed first): thrown to roll the apply back.
 */
class RecordTaken extends Error {}

/** The owner record of a hub object in the transaction's tenant, locked for the rest of it. */
async function ownerOf(tx: Tx, kind: ManifestKind, name: string): Promise<ManifestOwner | undefined> {
  return (await recordOf(tx, kind, name))?.owner;
}

/** The owner record of a hub object in the transaction's tenant, locked for the rest of it, with the warnings of its last change (V3). */
async function recordOf(tx: Tx, kind: ManifestKind, name: string): Promise<{ owner: ManifestOwner; changeWarnings?: string[] } | undefined> {
  const { rows } = await tx.query<OwnerRow & { generation: string | null; warnings: string[] | null }>(
    'select namespace, resource, uid, generation, warnings from manifests.owners where kind = $1 and name = $2 for update',
    [kind.kind, name],
  );
  const row = rows[0];
  if (!row) return undefined;
  const owner = { namespace: row.namespace, name: row.resource, uid: row.uid, ...(row.generation === null ? {} : { generation: Number(row.generation) }) };
  return { owner, ...(row.warnings === null ? {} : { changeWarnings: row.warnings }) };
}

/**
 * The owner record and the stored object of that name in the transaction's tenant, and the conflict
 * that keeps `owner` from applying it: another resource's record, or (no record) an object created
 * or last applied over HTTP. An object the operator applied before records existed is adopted.
 */
async function ownership(tx: Tx, kind: ManifestKind, name: string, owner: ManifestOwner, actor: string) {
  const record = await recordOf(tx, kind, name);
  const recorded = record?.owner;
  const stored = await kind.handler.stored(tx, name);
  let conflict: OwnershipConflict | undefined;
  if (recorded && recorded.uid !== owner.uid) conflict = { by: 'resource', owner: recorded };
  else if (!recorded && stored && stored.appliedBy !== actor) conflict = { by: 'http', appliedBy: stored.appliedBy ?? null };
  return { recorded, changeWarnings: record?.changeWarnings, stored, conflict };
}

/**
 * `egress`: the hub's outbound address policy, lent to each kind's apply for its warnings
 * (ApplyContext); `exportRunStaleAfterMs`: svc.export.run-stale-after, lent to each kind's remove
 * (RemoveContext).
 */
export function createManifestServices(deps: { db: Database; admin: AdminServices; egress?: EgressPolicy; exportRunStaleAfterMs?: number }): ManifestServices {
  const { db, admin } = deps;
  const context = { egress: deps.egress };
  const policyWarnings = (kind: ManifestKind, manifest: unknown) => kind.handler.policyWarnings?.(manifest, context) ?? [];
  /** `work` in a tenant transaction that is always rolled back; what it returned. */
  /**
   * The kind's apply of the manifest the hub holds, which writes only when the running code makes
   * something else of it now (unchangedApply). One the kind would now refuse (what it depends on
   * changed since: a ValidationError) or refuses for now (409) is undone to its savepoint and leaves
   * the object as it was: undefined.
   */
  const reapplied = async (tx: Tx, kind: ManifestKind, manifest: Record<string, unknown>, actor: string) => {
    await tx.query('savepoint reapply_held');
    try {
      const result = await kind.handler.apply(tx, manifest, actor, context);
      await tx.query('release savepoint reapply_held');
      return result;
    } catch (err) {
      if (!(err instanceof ValidationError || err instanceof ConflictError)) throw err;
      await tx.query('rollback to savepoint reapply_held');
      return undefined;
    }
  };
  const rolledBack = async <T>(tenantId: TenantId, work: (tx: Tx) => Promise<T>): Promise<T> => {
    const rollback = new Error('checked: rolled back');
    let result: T | undefined;
    try {
      await db.withTenant(tenantId, async (tx) => {
        result = await work(tx);
        throw rollback;
      });
    } catch (err) {
      if (err !== rollback) throw err;
    }
    return result as T;
  };
  /** applyIfChanged in one transaction: throws RecordTaken (rolled back) when another resource recorded itself first. */
  const applyOnce: ManifestServices['applyIfChanged'] = (kind, tenantId, name, manifest, actor, owner, fence) =>
    db.withTenant(tenantId, async (tx): Promise<ApplyOutcome> => {
      // The object's turn before its record is locked (takeObjectTurn): an HTTP apply or delete of it
      // takes the turn before the row, then writes the record (triggers); this takes the record, then the row.
      await takeObjectTurn(tx, kind.plural, name);
      let found = await ownership(tx, kind, name, owner, actor);
      if (!found.recorded && !found.conflict) {
        // A new name, or an unrecorded object to adopt: nothing of it was locked by that read, so a
        // writer of it that had not committed then (an HTTP apply, another resource's apply) is not
        // seen, and an apply of it would overwrite (or, the same manifest, claim) what that writer
        // committed meanwhile. So the locks the kind's apply takes before it writes are taken here,
        // in its order (lockForApply: the row then the tenant's turn, or the turn then the row; never
        // otherwise, which could deadlock with an apply), and the check is made again under them, on
        // the object as stored then: of two writers, the later one is the Conflict.
        await kind.handler.lockForApply(tx, name);
        found = await ownership(tx, kind, name, owner, actor);
      }
      const { recorded, changeWarnings, stored, conflict } = found;
      if (conflict) return { conflict };
      // The record's uid is the owner's here (or there is none): a generation older than the one applied is stale.
      if (recorded?.generation !== undefined && owner.generation !== undefined && owner.generation < recorded.generation) return { stale: { recorded: recorded.generation } };
      let outcome: ApplyOutcome;
      const result = stored && sameManifest(stored.manifest, manifest) ? await reapplied(tx, kind, manifest, actor) : await kind.handler.apply(tx, manifest, actor, context);
      if (!result || result.unchanged) {
        const policy = policyWarnings(kind, manifest);
        outcome = { changed: false, created: false, adopted: !recorded, schedule: stored?.schedule ?? null, warnings: [], policyWarnings: policy, ...(changeWarnings ? { changeWarnings } : {}) };
      } else {
        const policy = policyWarnings(kind, manifest);
        const others = result.warnings.filter((w) => !policy.includes(w));
        outcome = { changed: true, created: result.created, adopted: !recorded && !!stored, schedule: result.schedule, warnings: result.warnings, policyWarnings: policy, changeWarnings: others };
      }
      // Written with the change, so that they outlive a status write that fails after the commit.
      const warnings = outcome.changed ? outcome.changeWarnings : null;
      if (!recorded) {
        // Written only if no record is there by now: another resource's apply of this name that
        // committed its record first, which the locks taken above should already have shown
        // (this insert waits for it). The apply is rolled back and made again, and finds that
        // record: the Conflict.
        const { rowCount } = await tx.query(
          `insert into manifests.owners (tenant_id, kind, name, namespace, resource, uid, generation, warnings)
           values (core.current_tenant(), $1, $2, $3, $4, $5, $6, $7)
           on conflict (tenant_id, kind, name) do nothing`,
          [kind.kind, name, owner.namespace, owner.name, owner.uid, owner.generation ?? null, warnings],
        );
        if (!rowCount) throw new RecordTaken(`${kind.kind} ${name}: another resource recorded itself as its owner during this apply`);
        await fence?.();
      } else if (recorded.namespace !== owner.namespace || recorded.name !== owner.name || (owner.generation !== undefined && owner.generation !== recorded.generation)) {
        // The record is this uid's (locked since ownership read it): it keeps the later generation of the two.
        // The warnings of the object's last change stay unless this apply changed it.
        await tx.query(
          `update manifests.owners set namespace = $3, resource = $4, generation = greatest(generation, $5), warnings = coalesce($6, warnings), updated_at = now()
            where kind = $1 and name = $2`,
          [kind.kind, name, owner.namespace, owner.name, owner.generation ?? null, warnings],
        );
        await fence?.();
      } else if (outcome.changed) {
        await tx.query('update manifests.owners set warnings = $3, updated_at = now() where kind = $1 and name = $2', [kind.kind, name, warnings]);
        await fence?.();
      }
      return outcome;
    });
  return {
    tenantByCode: (code) => admin.tenants.byCode(code),
    applyIfChanged: async (kind, tenantId, name, manifest, actor, owner, fence) => {
      // Once more when another resource recorded itself as the owner of an unrecorded object while
      // this apply ran (rolled back, RecordTaken): the second time reads its record, the Conflict.
      for (let attempt = 1; ; attempt++) {
        try {
          return await applyOnce(kind, tenantId, name, manifest, actor, owner, fence);
        } catch (err) {
          if (!(err instanceof RecordTaken) || attempt === 2) throw err;
        }
      }
    },
    checkApply: (kind, tenantId, name, manifest, actor, owner) =>
      rolledBack(tenantId, async (tx) => {
        await takeObjectTurn(tx, kind.plural, name);
        const { conflict } = await ownership(tx, kind, name, owner, actor);
        if (!conflict) await kind.handler.apply(tx, manifest, actor, context);
        return conflict;
      }),
    warningsOf: (kind, tenantId, manifest, actor) => rolledBack(tenantId, async (tx) => (await kind.handler.apply(tx, manifest, actor, context)).warnings),
    owned: (kind, by) =>
      db.crossTenant('operator-owned', async (tx) => {
        const [where, values] =
          'uid' in by
            ? ['o.uid = $2', [kind.kind, by.uid]]
            : 'all' in by
              ? by.namespace === undefined
                ? ['true', [kind.kind]]
                : ['o.namespace = $2', [kind.kind, by.namespace]]
              : ['o.namespace = $2 and o.resource = $3', [kind.kind, by.namespace, by.name]];
        const { rows } = await tx.query<OwnerRow & { tenant_id: string; code: string; name: string }>(
          `select o.tenant_id, t.code, o.name, o.namespace, o.resource, o.uid
             from manifests.owners o join core.tenants t on t.id = o.tenant_id
            where o.kind = $1 and ${where} order by o.tenant_id, o.name`,
          values,
        );
        return rows.map((r) => ({ tenantId: Number(r.tenant_id), tenant: r.code, name: r.name, owner: { namespace: r.namespace, name: r.resource, uid: r.uid } }));
      }),
    async removeOwned(kind, tenantId, name, by, fence) {
      const committed: Array<() => void> = [];
      const removed = await db.withTenant(tenantId, async (tx) => {
        // As applyOnce: the object's turn before its record, then its row (the delete).
        await takeObjectTurn(tx, kind.plural, name);
        const recorded = await ownerOf(tx, kind, name);
        if ('uid' in by) {
          if (recorded?.uid !== by.uid) return false;
        } else {
          const unowned = async () => !(await ownerOf(tx, kind, name)) && (await kind.handler.stored(tx, name))?.appliedBy === by.unownedAppliedBy;
          if (recorded || !(await unowned())) return false;
          // Asked again under the locks an apply of it takes (lockForApply, as applyIfChanged does): an
          // HTTP apply, or another resource's adoption, that committed since the read above is seen
          // (and its object kept); one to come waits for this delete.
          await kind.handler.lockForApply(tx, name);
          if (!(await unowned())) return false;
        }
        // The kind's delete takes the record with it (trigger forget_owner).
        const deleted = await kind.handler.remove(tx, name, { exportRunStaleAfterMs: deps.exportRunStaleAfterMs, afterCommit: (then) => committed.push(then) });
        if (deleted) await fence?.();
        return deleted;
      });
      for (const then of committed) then();
      return removed;
    },
    lastRun: async (kind, tenantId, name) => (kind.handler.lastRun ? db.withTenant(tenantId, (tx) => kind.handler.lastRun!(tx, name)) : undefined),
    runsChanged: (kinds, since) =>
      db.crossTenant('operator-runs', async (tx) => {
        const now = (await tx.query<{ now: Date }>('select now() as now')).rows[0]!.now;
        const changed: Array<{ kind: ManifestKind; tenant: string; name: string }> = [];
        for (const kind of kinds) {
          if (!kind.handler.runsSince) continue;
          for (const run of await kind.handler.runsSince(tx, since(now))) changed.push({ kind, ...run });
        }
        return { now, changed };
      }),
  };
}

import type { Database, Tx } from '../db/database.js';
import { ConflictError } from '../errors.js';
import { logger } from '../observability/logger.js';
import type { ConnectorRunner, Triggered } from './runner.js';
import { inWindow, latestSlot, SlotWithdrawn } from './schedule.js';
import type { ConnectorSpec } from './types.js';

/**
 * The scheduled connectors or exports of every active tenant, for a scheduler's tick: a deactivated
 * tenant's schedules do not fire (its callers are refused, and `svc-hub run --scheduled` skips its
 * slots), and no slot of theirs is claimed. How many were left out is logged at debug, once a tick.
 *
 * Round-robin across tenants: every tenant's first schedule (by id), then every tenant's second, and
 * so on. A tick fires them one after the other (a claim and a trigger each), so in id order alone a
 * tenant with thousands of schedules would hold the others' back for most of the tick (and a tick
 * longer than the cadence makes the next one skip). No per-tenant bound: a schedule left out of a tick
 * would only fire late or lose its slot even when the tick had time for it.
 */
export async function scheduledOfActiveTenants(
  db: Database,
  job: string,
  table: 'connectors.connectors' | 'exports.exports',
): Promise<{ id: string; tenant_id: number }[]> {
  const { rows } = await db.crossTenant(job, (tx) =>
    tx.query<{ id: string; tenant_id: number; active: boolean }>(
      `select s.id, s.tenant_id, t.active from ${table} s join core.tenants t on t.id = s.tenant_id where s.schedule is not null
        order by row_number() over (partition by s.tenant_id order by s.id), s.tenant_id`,
    ),
  );
  const inactive = rows.filter((r) => !r.active);
  if (inactive.length > 0) logger().debug({ job, skipped: inactive.length }, 'scheduled runs of deactivated tenants skipped');
  return rows.filter((r) => r.active).map(({ id, tenant_id }) => ({ id, tenant_id }));
}

type ConnectorLookup = (tx: Tx, connectorId: string) => Promise<ConnectorSpec | undefined>;

type SlotOutcome =
  | { kind: 'started'; slot: Date; triggered: Triggered }
  | { kind: 'already-claimed'; slot: Date }
  | { kind: 'outside-window'; slot: Date }
  | { kind: 'in-flight'; slot: Date; reason: string }
  | { kind: 'withdrawn'; slot: Date; reason: string }
  | { kind: 'not-due' };

/**
 * Fires scheduled connectors: on each tick, the latest due slot of every connector's cron (UTC) is
 * claimed once in connectors.schedule_slots (so two hub processes, or a CronJob and a hub, run it
 * once) and run unless the window fence excludes it (skipped, never queued), unless a re-apply since
 * the claim no longer schedules it (the trigger checks the stored schedule under its row lock), or unless a run of one
 * of its endpoints is still in flight (skipped and logged: one run in flight per endpoint). No back-fill: only the
 * latest slot counts, and never one that fell due more than a minute (a tick) before the connector
 * was last applied; one due in that minute still runs, so that an apply right after a slot, which a
 * GitOps pipeline repeats, does not swallow it before a tick reached it.
 */
export class ConnectorScheduler {
  constructor(
    private readonly db: Database,
    private readonly runner: ConnectorRunner,
    private readonly lookup: ConnectorLookup,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** One scheduler tick across tenants; returns the slots it started. */
  async tick(): Promise<number> {
    const scheduled = await scheduledOfActiveTenants(this.db, 'connector-scheduler', 'connectors.connectors');
    let started = 0;
    for (const row of scheduled) {
      // A stopping hub claims no more slots: a slot claimed now would only fail `interrupted`.
      if (!this.runner.accepting) break;
      try {
        const outcome = await this.fire(row.tenant_id, row.id);
        if (outcome.kind === 'started') started++;
      } catch (err) {
        logger().error({ err, connectorId: row.id, tenant: row.tenant_id }, 'scheduled connector run could not start');
      }
    }
    return started;
  }

  /** Claims and starts the latest due slot of one connector (used by the tick and by `svc-hub run --scheduled`). */
  async fire(tenantId: number, connectorId: string, endpoint?: string): Promise<SlotOutcome> {
    const now = this.now();
    const claim = await this.db.withTenant(tenantId, async (tx) => {
      const connector = await this.lookup(tx, connectorId);
      if (!connector?.schedule) return { outcome: { kind: 'not-due' } as SlotOutcome };
      const slot = latestSlot(connector.schedule, now);
      const applied = await tx.query<{ updated_at: Date }>('select updated_at from connectors.connectors where id = $1', [connectorId]);
      const since = applied.rows[0]?.updated_at;
      if (since && slot.getTime() < since.getTime() - 60_000) return { outcome: { kind: 'not-due' } as SlotOutcome };
      const fenced = !inWindow(slot, connector.window);
      const inserted = await tx.query(
        `insert into connectors.schedule_slots (tenant_id, connector_id, slot, outcome) values (core.current_tenant(), $1, $2, $3)
         on conflict (connector_id, slot) do nothing`,
        [connectorId, slot, fenced ? 'skipped-window' : 'claimed'],
      );
      if (inserted.rowCount === 0) return { outcome: { kind: 'already-claimed', slot } as SlotOutcome };
      if (fenced) return { outcome: { kind: 'outside-window', slot } as SlotOutcome };
      return { outcome: undefined, connector, slot };
    });
    if (claim.outcome) return claim.outcome;
    let triggered: Triggered;
    try {
      // The connector as the claim read it: an endpoint a re-apply removed since is left out (logged), the others run.
      triggered = await this.runner.trigger(tenantId, claim.connector!, { triggeredBy: 'schedule', slot: claim.slot, endpoint, leaveOutRemoved: true });
    } catch (err) {
      // A re-apply committed since the claim that no longer schedules this slot (schedule removed, cron
      // changed, window moved): skipped, no run.
      if (err instanceof SlotWithdrawn) {
        logger().warn({ connector: claim.connector!.name, slot: claim.slot!.toISOString() }, `scheduled connector run skipped: ${err.message}`);
        return { kind: 'withdrawn', slot: claim.slot!, reason: err.message };
      }
      // A run of the connector still in flight (a slow run, a manual one): this slot is skipped, not queued.
      if (!(err instanceof ConflictError)) throw err;
      const reason = `${err.message}: ${err.hint}`;
      logger().warn({ connector: claim.connector!.name, slot: claim.slot!.toISOString() }, `scheduled connector run skipped: ${reason}`);
      return { kind: 'in-flight', slot: claim.slot!, reason };
    }
    logger().info({ connector: claim.connector!.name, slot: claim.slot!.toISOString(), runs: triggered.runs.length }, 'scheduled connector runs started');
    return { kind: 'started', slot: claim.slot!, triggered };
  }
}

/**
 * How long a claimed slot is kept once a later slot of its connector has been claimed: a claim only
 * ever takes the latest due slot of the connector's cron, never one from before its last apply, so a
 * slot with a later one claimed is never claimed again; the day is a margin for the clocks of
 * replicas and CronJob pods that disagree. The latest slot of each connector is kept whatever its
 * age (a yearly cron's slot stays the latest all year, and its row is what keeps it from running twice).
 */
export const SLOT_KEEP_MS = 24 * 60 * 60 * 1000;

/**
 * The daily purge of connectors.schedule_slots: the slots of connectors deleted since (the delete
 * removes its own; a claim committed while the delete ran leaves one), and every slot older than
 * SLOT_KEEP_MS with a later slot of its connector claimed. Returns how many rows went.
 */
export async function purgeScheduleSlots(db: Database, keepMs: number = SLOT_KEEP_MS): Promise<number> {
  return db.crossTenant('schedule-slot-retention', async (tx) => {
    const { rowCount } = await tx.query(
      `delete from connectors.schedule_slots s
        where not exists (select 1 from connectors.connectors c where c.id = s.connector_id)
           or (s.slot < now() - make_interval(secs => $1::double precision / 1000)
               and exists (select 1 from connectors.schedule_slots later where later.connector_id = s.connector_id and later.slot > s.slot))`,
      [keepMs],
    );
    return rowCount ?? 0;
  });
}

import { randomUUID } from 'node:crypto';
import { arrayLiteral } from '../db/array-literal.js';
import type { Database } from '../db/database.js';
import { advanceSql, advanceValues, type CursorMove } from '../events/consumer.js';
import type { OutboxEvent } from '../events/outbox.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';
import { matchesSql } from './integrations.js';
import { batchMatchesSql, type ClaimedRow, DELIVERY_ID_SEQUENCE, type IntegrationColumns, integrationColumns, RELEASE_LEASES_SQL, TENANT_ACTIVE_SQL } from './journal.js';
import { RETRIES_EXHAUSTED_REASON, TENANT_INACTIVE_REASON, TEST_INTERRUPTED_REASON } from './model.js';
import type { Claim, DeliveryWorker } from './worker.js';

/**
 * The webhook consumer and the retry sweep (spec 1 Events "Outbox and delivery", the Delivery state
 * table). Both only record and claim rows in short transactions and hand the attempts to the
 * worker's bounded pool; neither waits for an HTTP call, so the outbox cursor moves on whatever the
 * endpoints do.
 */

interface WebhookConsumerOptions {
  db: Database;
  worker: DeliveryWorker;
  leaseMs: number;
  /** Attempts per delivery, the first included (`svc.webhook.max-attempts`). */
  maxAttempts: number;
  /** Rows of one integration claimed per sweep at most (its queue never outgrows what a lease covers). */
  perIntegrationClaim: number;
  /**
   * Rows of one tenant claimed per sweep at most, those of its claims before still in flight
   * included (its queues never outgrow what a lease covers at `svc.webhook.concurrency-per-tenant`);
   * default: no limit but the others.
   */
  perTenantClaim?: number;
  /** Rows claimed per sweep at most. */
  sweepBatch: number;
  /**
   * When set, a sweep that filled an integration's claim claims again as soon as one of those
   * integrations has half of it or less in flight (one that filled the whole batch: as soon as one of
   * its integrations is done with the attempts this sweep queued), waiting this long at most
   * (`svc.webhook.retry-every`): a backlog, such as the leased first attempts of a dispatcher that
   * died, drains at the endpoints' pace instead of a claim per sweep. Without it, one claim.
   */
  refillWaitMs?: number;
  /**
   * A row is claimed only once this long has passed since its last attempt ended (half of
   * `svc.webhook.retry-every`): a first attempt that failed just before a sweep, or a retry late in
   * one sweep's refill, is not sent again moments later. Default 0.
   */
  minGapMs?: number;
  /** How long a batch waits, in all, for room in full integration queues (default QUEUE_WAIT_MS). */
  queueWaitMs?: number;
  /**
   * A batch's first attempts that wait for room are handed over while the next batch is read and
   * recorded (`handleBatch` returns once its batch is recorded and the batch before it handed over):
   * the pool does not run dry while the next statement runs. Default false: `handleBatch` returns
   * once its own batch is handed over.
   */
  handOverAhead?: boolean;
  /**
   * Called with how many first attempts found no room in their integration's queue once their rows
   * are free for the retry sweep (`handOver`): the process starts a sweep, which sends them as their
   * queue makes room, instead of their waiting for the next one (up to `svc.webhook.retry-every`). A
   * sweep of this consumer under way is told directly (`wakeSweep`), not through this.
   */
  onDeferred?: (count: number) => void;
}

type Inserted = { id: number; tenant_id: number; integration_id: number };

/**
 * What the consumer's statement answers: one row per integration of the rows it recorded, with that
 * integration's columns and its rows' ids and events (`idList`, in id order). Not one row per
 * recorded row: a row object of every column for each delivery was a visible share of what a
 * drain allocates per delivery; the rest of a row (tenant, kind, event type, attempts) is the
 * event's, or the same for every row recorded.
 */
type Recorded = IntegrationColumns & { ids: string; event_ids: string; batch_id: number };

/** The numbers of a comma-separated list of decimal integers (`array_to_string` of ids), read without a string per element. */
function idList(text: string): number[] {
  const ids: number[] = [];
  let n = 0;
  for (let k = 0; k < text.length; k++) {
    const c = text.charCodeAt(k);
    if (c === 44) {
      ids.push(n);
      n = 0;
    } else n = n * 10 + (c - 48);
  }
  if (text.length > 0) ids.push(n);
  return ids;
}

/** The recorded rows as the worker's Claims need them (ordered by id): each with its event's fields, its body and its integration's columns. */
function claimedRows(recorded: Recorded[], events: OutboxEvent[], bodies: string[]): ClaimedRow[] {
  const eventIndex = new Map<number, number>();
  for (let k = 0; k < events.length; k++) eventIndex.set(events[k]!.id, k);
  const rows: ClaimedRow[] = [];
  for (const row of recorded) {
    const integration = integrationColumns(row);
    const ids = idList(row.ids);
    const eventIds = idList(row.event_ids);
    for (let k = 0; k < ids.length; k++) {
      const index = eventIndex.get(eventIds[k]!);
      // Cannot be missing: every row names an event of the batch.
      if (index === undefined) throw new Error(`delivery ${ids[k]}: its event is missing from the statement that recorded it`);
      const event = events[index]!;
      // A new row: kind 'event', no attempt yet.
      rows.push({ id: ids[k]!, tenant_id: event.tenantId, kind: 'event', event_id: event.id, event_type: event.type, attempts: 0, body: bodies[index]!, ...integration });
    }
  }
  return rows.sort((a, b) => a.id - b.id);
}

/**
 * How long a batch of the consumer waits, in all, for room in full, not stalled, integration queues
 * before leaving their first attempts to the sweep. An integration whose queue stayed full for a whole
 * wait while fewer of its queued attempts started than PROGRESS_FACTOR times those it had running is
 * stalled (SlotPool): the next batches leave its first attempts to the sweep at once, until that many
 * start within one wait again; one whose attempts end that fast is waited for again by the next batch.
 */
const QUEUE_WAIT_MS = 1_000;

/** The consumer's batches whose lease ran out written out per transaction of the retry sweep (`expandBatches`). */
const EXPAND_BATCHES = 20;

/**
 * The retry sweep's claim (`claim` below): $1 max attempts, $2 rows per integration, $3 rows in all,
 * $4 lease ms, $5 lease token, $6/$12 each integration's attempts running (one with $2 or more is left
 * out), $7 attempted before, $8 rows per tenant, $9/$10 each tenant's attempts running, $11 the gap
 * after an attempt (ms). Exported for its plan's test.
 */
/**
 * Closes the open rows that failed every attempt allowed ($2 = svc.webhook.max-attempts) and hold no
 * lease, with RETRIES_EXHAUSTED_REASON ($1). Left open, they stayed in deliveries_open_by_integration
 * for ever, and every claim read past all of them (30,000 exhausted rows: 30,000 rows read a claim).
 */
export const CLOSE_EXHAUSTED_SQL = `update hub.deliveries set closed_reason = $1, lease_until = null, lease_token = null
  where not succeeded and closed_reason is null and kind <> 'test' and attempts >= $2
    and (lease_until is null or lease_until < now())`;

export const SWEEP_CLAIM_SQL = `with recursive integrations (id) as (
   -- The integrations with open rows, one index probe each (deliveries_open_by_integration):
   -- from one to the next, never reading the open rows of one to find the next.
   (select integration_id from hub.deliveries
     where not succeeded and closed_reason is null and kind <> 'test'
     order by integration_id limit 1)
   union all
   select (select d.integration_id from hub.deliveries d
            where not d.succeeded and d.closed_reason is null and d.kind <> 'test' and d.integration_id > i.id
            order by d.integration_id limit 1)
     from integrations i where i.id is not null
 ), candidates as (
   -- Each integration's first $2 rows to attempt, in id order, read from its open rows alone, of which
   -- as many as $2 less its attempts running ($6/$12) are kept (a LIMIT cannot name a lateral column:
   -- numbered instead); one with $2 or more running is not read at all.
   select c.id, c.tenant_id
     from integrations i
     left join unnest($6::bigint[], $12::integer[]) as b (integration_id, running) on b.integration_id = i.id
     cross join lateral (
       select d.id, d.tenant_id, row_number() over (order by d.id) as n
         from hub.deliveries d
        where d.integration_id = i.id
          and not d.succeeded and d.closed_reason is null and d.kind <> 'test' and d.attempts < $1
          and (d.lease_until is null or d.lease_until < now())
          and ($7::timestamptz is null or d.attempted_at is null or d.attempted_at < $7)
          and (d.attempted_at is null or d.attempted_at + make_interval(secs => (coalesce(d.duration_ms, 0) + $11::double precision) / 1000) < now())
        order by d.id
        limit $2
     ) c
    where i.id is not null and coalesce(b.running, 0) < $2 and c.n <= $2 - coalesce(b.running, 0)
 ), per_tenant as (
   select id, tenant_id, row_number() over (partition by tenant_id order by id) as tn
     from candidates
 ), picked as (
   -- The candidates' rows looked up by id (a join let the planner walk the whole journal in id order).
   select d.id from hub.deliveries d
    where d.id = any (array(
            select c.id from per_tenant c
              left join unnest($9::bigint[], $10::integer[]) as b (tenant_id, running) on b.tenant_id = c.tenant_id
             where $8::integer is null or c.tn <= $8::integer - coalesce(b.running, 0)))
      and not d.succeeded and d.closed_reason is null and d.attempts < $1
      and (d.lease_until is null or d.lease_until < now())
      and ($7::timestamptz is null or d.attempted_at is null or d.attempted_at < $7)
      and (d.attempted_at is null or d.attempted_at + make_interval(secs => (coalesce(d.duration_ms, 0) + $11::double precision) / 1000) < now())
    order by d.id
    limit $3
    for update of d skip locked
 )
 update hub.deliveries d set lease_until = now() + make_interval(secs => $4::double precision / 1000), lease_token = $5
   from picked where d.id = picked.id
 returning d.id, d.tenant_id, d.integration_id`;

export class WebhookConsumer {
  /** With `handOverAhead`: the hand-over of the last batch's first attempts that wait for room, while it runs. */
  private handingOver: Promise<void> | undefined;
  /**
   * First attempts were left to the sweep since a running sweep last claimed (`handOver`): its
   * refill claims again at once, rather than when what it waits for comes (up to `refillWaitMs`).
   */
  private deferredSinceClaim = false;
  /** Ends a running sweep's refill wait now (set while a sweep claims). */
  private wakeSweep: (() => void) | undefined;

  constructor(private readonly o: WebhookConsumerOptions) {}

  /**
   * A batch of outbox events: one delivery per (event, active matching integration of the event's
   * tenant), its first attempt queued. Matching is against the real event type, at fire time: an
   * integration matches only events written after it became active (not retroactive). The one
   * statement matches the whole batch, reserves each delivery's id (the deliveries' identity),
   * writes one row for the batch (hub.delivery_batches, leased) instead of a row per delivery, and
   * reads what the first attempts need (their integration's columns once per integration; the
   * bodies are the ones sent): the worker sends them without reading again if they start soon, and
   * writes each delivery's row once, whole with its outcome (worker.ts, `Claim`). Given `cursor`,
   * it also moves the consumer's cursor past the batch: the batch row and the move commit together
   * (a crash after it leaves the batch to the retry sweep, which writes the rows of its deliveries
   * once the batch's lease runs out). Reading an event again (a crash before the cursor moved)
   * records and sends nothing twice: a match that has its row, or whose batch is still held, is
   * left out, and given a cursor nothing is matched unless this statement moved it.
   */
  async handleBatch(events: OutboxEvent[], cursor?: CursorMove): Promise<number> {
    if (events.length === 0) return 0;
    const token = randomUUID();
    const stamp = this.o.worker.stamp();
    // The batch's outbox rows are looked up by primary key first (a materialised CTE): joined
    // directly, the planner may start from the integration and scan the tenant's whole outbox.
    // The bodies go as one JSON array of them, each element's text kept as it is by the json type
    // (`json_array_elements`): the bodies sent, with no quoting of each as a text[] element (a copy
    // of every body with its quotes escaped, a visible share of what a drain allocated per delivery).
    const bodies = events.map((e) => JSON.stringify(e.payload));
    const { rows: recorded } = await this.o.db.crossTenantQuery<Recorded>(
      'outbox:webhooks',
      `with batch as materialized (
         select o.id, o.tenant_id, o.type, o.created_at, o.txid from events.outbox o where o.id = any($1::bigint[])
       )${cursor ? `, moved as (${advanceSql(4)} returning 1)` : ''}, matched as materialized (
         -- Each match's delivery id reserved, in event order. An event read again is not sent again:
         -- not a match that has its row, nor one of a batch still held (its row not written yet);
         -- given a cursor, nothing unless this statement moved it (two processes that both believed
         -- they led read the same batch: the one whose move waited for the other's sends nothing).
         select nextval(${DELIVERY_ID_SEQUENCE}) as id, m.event_id, m.integration_id
           from (select b.id as event_id, i.id as integration_id
                   from ${batchMatchesSql(matchesSql('b.type'))}
                    -- A probe of deliveries_once per match (a scalar subquery: as not exists, the
                    -- planner made it an anti join that read the integration's whole journal).
                    and (select 1 from hub.deliveries d where d.integration_id = i.id and d.event_id = b.id and d.kind = 'event' limit 1) is null
                    and b.id not in (select unnest(x.event_ids) from hub.delivery_batches x)
                    ${cursor ? 'and exists (select 1 from moved)' : ''}
                  order by b.txid, b.id, i.id) m
       ), recorded as (
         insert into hub.delivery_batches (event_ids, lease_until, lease_token)
         select array(select distinct event_id from matched), now() + make_interval(secs => $2::double precision / 1000), $3
          where exists (select 1 from matched)
         returning id
       )
       -- One row per integration of the deliveries matched (read once, with its tenant's state), their
       -- ids and events in id order.
       select i.id as integration_id, i.target_url, i.auth_mode, i.secret_iv, i.secret_tag, i.secret_ciphertext, i.event_types, i.enabled,
              i.deleted_at is not null as deleted, i.standard_webhooks, ${TENANT_ACTIVE_SQL}, d.ids, d.event_ids, (select id from recorded) as batch_id
         from (select integration_id, array_to_string(array_agg(id order by id), ',') as ids,
                      array_to_string(array_agg(event_id order by id), ',') as event_ids
                 from matched group by integration_id) d
         join hub.integrations i on i.id = d.integration_id`,
      [arrayLiteral(events.map((e) => e.id)), this.o.leaseMs, token, ...(cursor ? advanceValues(cursor) : [])],
    );
    const rows = claimedRows(recorded, events, bodies);
    // The batch row stands for these first attempts' rows until each is written (worker.ts, `Claim`).
    const batch = rows.length > 0 ? this.o.worker.batches.hold(recorded[0]!.batch_id, token, rows.length) : undefined;
    // Every row whose integration's queue has room is queued at once; the rest wait for room in
    // their own integration's queue, in order, all integrations at the same time and QUEUE_WAIT_MS
    // for the whole batch at most: a slow endpoint (its queue full, room freed attempt by attempt)
    // holds the batch, and so every other integration's next events, that long at most, never at
    // its own pace row after row.
    const full = new Map<number, Claim[]>();
    for (const row of rows) {
      const claim: Claim = { row, stamp, batch };
      if (!full.has(row.integration_id) && this.o.worker.submit({ tenantId: row.tenant_id, integrationId: row.integration_id }, row.id, token, claim)) continue;
      const lane = full.get(row.integration_id);
      if (lane) lane.push(claim);
      else full.set(row.integration_id, [claim]);
    }
    if (!this.o.handOverAhead) {
      if (full.size > 0) await this.handOver(full, token);
      return rows.length;
    }
    // This batch's waiting attempts are handed over while the loop reads and records the next batch;
    // that batch's own wait for room begins once this one's has ended (its QUEUE_WAIT_MS is its own,
    // not spent behind this batch's rows), and it returns only then, so one batch at most waits
    // besides the queues. Its batch row is leased: a crash meanwhile leaves its deliveries to the
    // retry sweep, as for attempts queued.
    const before = this.handingOver;
    const handover = full.size > 0 ? (before ?? Promise.resolve()).then(() => this.handOver(full, token)).catch((err) => this.handOverFailed(err)) : undefined;
    this.handingOver = handover;
    await before;
    return rows.length;
  }

  /** Resolves once the first attempts of the batches handled so far are handed over (queued, or left to the sweep). */
  async handedOver(): Promise<void> {
    while (this.handingOver) {
      const handover = this.handingOver;
      await handover;
      if (this.handingOver === handover) this.handingOver = undefined;
    }
  }

  /** The first attempts of full queues: queued as room frees (QUEUE_WAIT_MS in all), the rows of what finds none written for the sweep. */
  private async handOver(full: Map<number, Claim[]>, token: string): Promise<void> {
    const deferred: Claim[] = [];
    await Promise.all(
      [...full.values()].map(async (lane) => {
        const { row } = lane[0]!;
        const queued = await this.o.worker.submitEach({ tenantId: row.tenant_id, integrationId: row.integration_id }, lane, token, this.o.queueWaitMs ?? QUEUE_WAIT_MS);
        for (let k = queued; k < lane.length; k++) deferred.push(lane[k]!);
      }),
    );
    if (deferred.length > 0) {
      // Their integrations do not keep up: their rows written with no lease, for the next retry sweep at once.
      await this.o.worker.materialise(deferred);
      logger().warn({ deferred: deferred.length }, `${deferred.length} first attempt(s) left to the retry sweep: their integrations' queues are full`);
      // A sweep of this process under way takes them up (its refill claims again); none: the process starts one.
      this.deferredSinceClaim = true;
      this.wakeSweep?.();
      this.o.onDeferred?.(deferred.length);
    }
  }

  /** A hand-over ahead that failed: the rows it did not write are written by the retry sweep once their batch's lease runs out. */
  private handOverFailed(err: unknown): void {
    logger().warn({ err: loggableMessage(err) }, 'first attempts left to the retry sweep could not be written; the sweep writes them once their batch\'s lease runs out');
  }

  /**
   * The retry sweep: closes the open rows of deactivated tenants (`closeOfInactiveTenants`) and those
   * that failed every attempt allowed (`closeExhausted`), claims unsuccessful open rows with attempts left whose lease is free or ran out
   * (`FOR UPDATE SKIP LOCKED`, so concurrent sweepers never take the same row), leases them, and
   * queues their attempts; with `refillWaitMs`, again while the claims come back full (see there).
   * Returns how many rows it claimed.
   */
  async sweep(keepGoing: () => boolean = () => true): Promise<number> {
    await this.expandBatches();
    await this.closeInterruptedTests();
    await this.closeOfInactiveTenants();
    await this.closeExhausted();
    try {
      return await this.claimAndRefill(keepGoing);
    } finally {
      this.wakeSweep = undefined;
    }
  }

  /** The sweep's claims: one, then (with `refillWaitMs`) again while they come back full (`sweep`). */
  private async claimAndRefill(keepGoing: () => boolean): Promise<number> {
    // This sweep's attempts not yet over, per integration; `wake` when one has half of its claim or less left.
    const inFlight = new Map<number, number>();
    const perIntegrationClaim = this.o.perIntegrationClaim;
    // The same per tenant; `wake` also when a tenant whose claim was full has half of it or less left.
    const tenantInFlight = new Map<number, number>();
    const perTenantClaim = this.o.perTenantClaim;
    let wake: (() => void) | undefined;
    this.wakeSweep = () => wake?.();
    const over = (tenantId: number, integrationId: number) => () => {
      const left = inFlight.get(integrationId)! - 1;
      if (left > 0) inFlight.set(integrationId, left);
      else inFlight.delete(integrationId);
      if (left <= perIntegrationClaim / 2) wake?.();
      const tenantLeft = tenantInFlight.get(tenantId)! - 1;
      if (tenantLeft > 0) tenantInFlight.set(tenantId, tenantLeft);
      else tenantInFlight.delete(tenantId);
      if (perTenantClaim !== undefined && tenantLeft <= perTenantClaim / 2) wake?.();
    };
    // Integrations whose queue was full when a claim of this sweep came (the first attempts of a
    // drain, say): the rows claimed for them are given back at once (`claim`), and they are left out
    // of the claims until their queue has room again (looked at every second), or every refill would
    // lease their next rows and leave them leased, unsent, for a whole lease.
    const queueFull = new Set<number>();
    let total = 0;
    // A row is attempted at most once per sweep: a failed attempt frees the row at once, and a
    // refill that took it back would spend its retries within moments instead of one per sweep.
    const started = new Date();
    let refill = false;
    for (;;) {
      // Told to stop (the clock stopped, the leadership lost), or the worker stopping: no more
      // claims (a claim the worker refuses would only lease its rows again).
      if (refill && (!keepGoing() || this.o.worker.isStopping())) return total;
      // An integration is claimed up to perIntegrationClaim rows with this sweep's attempts still
      // going: its queue never outgrows one claim (the first claim has none going, as a sweep without
      // refill). A tenant is claimed up to perTenantClaim rows the same way: its queues never outgrow
      // one tenant claim either. Integrations whose queue was full at a claim are left out until it
      // has room.
      const busy = new Map(inFlight);
      for (const id of queueFull) busy.set(id, perIntegrationClaim);
      this.deferredSinceClaim = false;
      const rows = await this.claim(busy, new Map(tenantInFlight), refill ? started : null, queueFull, (tenantId, integrationId) => {
        inFlight.set(integrationId, (inFlight.get(integrationId) ?? 0) + 1);
        tenantInFlight.set(tenantId, (tenantInFlight.get(tenantId) ?? 0) + 1);
        return over(tenantId, integrationId);
      });
      total += rows.length;
      if (this.o.refillWaitMs === undefined) return total;
      const perIntegration = new Map<number, number>();
      // Only the rows queued count here (those of a full queue were given back).
      for (const row of rows) if (!queueFull.has(row.integration_id)) perIntegration.set(row.integration_id, (perIntegration.get(row.integration_id) ?? 0) + 1);
      // Filled: its rows of this claim and its attempts going before it make a whole claim.
      const full = [...perIntegration].filter(([id, n]) => n + (busy.get(id) ?? 0) >= perIntegrationClaim).map(([id]) => id);
      const tenants = new Set(rows.map((row) => row.tenant_id));
      const fullTenants = perTenantClaim === undefined ? [] : [...tenants].filter((id) => (tenantInFlight.get(id) ?? 0) >= perTenantClaim);
      const more = full.length > 0 || fullTenants.length > 0 || rows.length >= this.o.sweepBatch;
      if (!more && queueFull.size === 0 && !this.deferredSinceClaim) return total;
      refill = true;
      // More may wait: claim again once one of the integrations or tenants it filled has half of its
      // claim or less in flight, or (the batch filled, nothing else) one of its integrations is done
      // with this sweep's attempts, or one whose queue was full has room.
      const batchOnly = more && full.length === 0 && fullTenants.length === 0 ? [...perIntegration.keys()] : [];
      const deadline = Date.now() + this.o.refillWaitMs;
      for (;;) {
        if (full.some((id) => (inFlight.get(id) ?? 0) <= perIntegrationClaim / 2)) break;
        if (batchOnly.some((id) => !inFlight.has(id))) break;
        if (fullTenants.some((id) => (tenantInFlight.get(id) ?? 0) <= perTenantClaim! / 2)) break;
        if (queueFull.size > 0 && this.roomIn(queueFull)) break;
        // First attempts left to the sweep since this claim: claimed now (a full queue gives them back, above).
        if (this.deferredSinceClaim) break;
        const left = deadline - Date.now();
        // Checked every second: the clock stopped, the leadership lost, the worker stopping.
        if (left <= 0 || !keepGoing() || this.o.worker.isStopping()) return total;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(left, 1_000));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
    }
  }

  /** Takes the integrations whose queue has room now out of `queueFull`; whether there were any. */
  private roomIn(queueFull: Set<number>): boolean {
    let roomy = false;
    for (const id of queueFull) {
      if (this.o.worker.queueFull(id)) continue;
      queueFull.delete(id);
      roomy = true;
    }
    return roomy;
  }

  /**
   * The consumer's batches whose lease ran out (their process died, or stopped with first attempts
   * unwritten): the rows of every match of their events that has none are written as the consumer
   * matches them, with no lease (this sweep claims them), and the batch rows go, in one transaction
   * per EXPAND_BATCHES of them (`for update skip locked`: concurrent sweepers never take the same).
   */
  private async expandBatches(): Promise<void> {
    for (;;) {
      const expanded = await this.o.db.crossTenant('webhook-retry', async (tx) => {
        const { rows: batches } = await tx.query<{ id: number }>(
          `select id from hub.delivery_batches where lease_until < now() order by id limit ${EXPAND_BATCHES} for update skip locked`,
        );
        if (batches.length === 0) return 0;
        const ids = batches.map((b) => b.id);
        // The bodies as the consumer sends them: the payload as the outbox read gives it, serialised here.
        const { rows: events } = await tx.query<{ id: number; payload: Record<string, unknown> }>(
          'select o.id, o.payload from events.outbox o where o.id in (select unnest(b.event_ids) from hub.delivery_batches b where b.id = any($1::bigint[]))',
          [ids],
        );
        let written = 0;
        if (events.length > 0) {
          const { rowCount } = await tx.query(
            `with batch as materialized (
               select o.id, o.tenant_id, o.type, o.created_at, o.txid, e.body
                 from events.outbox o
                 join rows from (unnest($1::bigint[]), json_array_elements($2::json)) as e (id, body) on e.id = o.id
                where o.id = any($1::bigint[])
             )
             insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body)
             select b.tenant_id, i.id, 'event', b.id, b.type, b.body::text
               from ${batchMatchesSql(matchesSql('b.type'))}
              order by b.txid, b.id, i.id
             on conflict (integration_id, event_id) where kind = 'event' do nothing`,
            [arrayLiteral(events.map((e) => e.id)), `[${events.map((e) => JSON.stringify(e.payload)).join(',')}]`],
          );
          written = rowCount ?? 0;
        }
        await tx.query('delete from hub.delivery_batches where id = any($1::bigint[])', [ids]);
        if (written > 0) logger().info({ batches: ids.length, written }, 'webhook retry sweep: wrote the deliveries of batches whose process stopped before writing them');
        return batches.length;
      });
      if (expanded < EXPAND_BATCHES) return;
    }
  }

  /**
   * Test deliveries whose process died mid-send (no outcome recorded, the lease run out): never
   * retried, they are closed with TEST_INTERRUPTED_REASON instead of staying open for ever.
   */
  private async closeInterruptedTests(): Promise<void> {
    const { rowCount } = await this.o.db.crossTenant('webhook-retry', (tx) =>
      tx.query(
        `update hub.deliveries set closed_reason = $1, lease_until = null, lease_token = null
          where kind = 'test' and attempts = 0 and closed_reason is null and lease_until < now()`,
        [TEST_INTERRUPTED_REASON],
      ),
    );
    if (rowCount) logger().info({ closed: rowCount }, 'webhook retry sweep: closed test deliveries whose process stopped before recording their outcome');
  }

  /** Open rows that failed every attempt allowed: closed (CLOSE_EXHAUSTED_SQL), out of the claims' way. */
  private async closeExhausted(): Promise<void> {
    const { rowCount } = await this.o.db.crossTenant('webhook-retry', (tx) => tx.query(CLOSE_EXHAUSTED_SQL, [RETRIES_EXHAUSTED_REASON, this.o.maxAttempts]));
    if (rowCount) logger().info({ closed: rowCount }, 'webhook retry sweep: closed deliveries that failed every attempt allowed');
  }

  /**
   * Open rows of deactivated tenants with attempts left (pending, or failed and waiting for a retry)
   * whose lease is free or ran out: closed with TENANT_INACTIVE_REASON, never attempted again. A
   * row leased meanwhile is closed by its attempt instead (the worker reads the tenant with the lease).
   */
  private async closeOfInactiveTenants(): Promise<void> {
    const { rowCount } = await this.o.db.crossTenant('webhook-retry', (tx) =>
      tx.query(
        `update hub.deliveries d set closed_reason = $1, lease_until = null, lease_token = null
           from core.tenants t
          where t.id = d.tenant_id and not t.active
            and not d.succeeded and d.closed_reason is null and d.kind <> 'test' and d.attempts < $2
            and (d.lease_until is null or d.lease_until < now())`,
        [TENANT_INACTIVE_REASON, this.o.maxAttempts],
      ),
    );
    if (rowCount) logger().info({ closed: rowCount }, 'webhook retry sweep: closed open deliveries of deactivated tenants');
  }

  /**
   * One claim, each integration's rows up to `perIntegrationClaim` less its rows in `busy`, each
   * tenant's rows up to `perTenantClaim` less its rows in `tenantBusy` (this sweep's attempts still in
   * flight; a queue full counts as a whole claim) and, given `attemptedBefore`, no row attempted since
   * then (a refill never takes back a row its sweep attempted); its attempts
   * queued, `track` told of each. A row the worker does not queue has its lease given back at once;
   * its integration, when its queue was full, is added to `queueFull`.
   */
  private async claim(
    busy: Map<number, number>,
    tenantBusy: Map<number, number>,
    attemptedBefore: Date | null,
    queueFull: Set<number>,
    track: (tenantId: number, integrationId: number) => () => void,
  ): Promise<Inserted[]> {
    const token = randomUUID();
    const perTenant = this.o.perTenantClaim ?? null;
    const rows = await this.o.db.crossTenant('webhook-retry', async (tx) => {
      const { rows } = await tx.query<Inserted>(
        SWEEP_CLAIM_SQL,
        [
          this.o.maxAttempts,
          this.o.perIntegrationClaim,
          this.o.sweepBatch,
          this.o.leaseMs,
          token,
          [...busy.keys()],
          attemptedBefore,
          perTenant,
          [...tenantBusy.keys()],
          [...tenantBusy.values()],
          this.o.minGapMs ?? 0,
          [...busy.values()],
        ],
      );
      return rows;
    });
    rows.sort((a, b) => a.id - b.id);
    const refused: number[] = [];
    for (const row of rows) {
      const done = track(row.tenant_id, row.integration_id);
      if (this.o.worker.submit({ tenantId: row.tenant_id, integrationId: row.integration_id }, row.id, token, undefined, done)) continue;
      // Not queued: it counts as over here, and its lease is given back at once. Its integration's
      // queue full (the first attempts of a drain, say), the sweep claims it again once the queue has
      // room (`sweep`), rather than the row waiting for its lease to run out (a minute unsent after
      // the queue emptied); the worker stopping (a claim made as the process stops), the next
      // leader's sweep takes it up at once.
      done();
      refused.push(row.id);
      if (!this.o.worker.isStopping()) queueFull.add(row.integration_id);
    }
    if (refused.length > 0) await this.release('webhook-retry', refused, token);
    if (rows.length > 0) logger().debug({ claimed: rows.length }, 'webhook retry sweep');
    return rows;
  }

  /** Gives back the leases of rows leased under `token` and never queued. */
  private async release(job: string, ids: number[], token: string): Promise<void> {
    await this.o.db.crossTenantQuery(job, RELEASE_LEASES_SQL, [ids, token]);
  }
}

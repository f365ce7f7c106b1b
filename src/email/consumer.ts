import { randomUUID } from 'node:crypto';
import { arrayLiteral } from '../db/array-literal.js';
import type { Database, Tx } from '../db/database.js';
import { Postpone } from '../dispatch/outbox-loop.js';
import { type OutboxEvent, type OutboxRow, toEvent } from '../events/outbox.js';
import { runForTenant } from '../observability/context.js';
import { logger } from '../observability/logger.js';
import { lazyGauge } from '../observability/metrics.js';
import { type Mailer, sendFailure, serverUnavailable } from './mailer.js';
import { type ActiveRule, activeRules, normalizeRecipient, recipients, rulesMatch } from './rules.js';
import { renderTemplate, subjectLine, type TemplateContext } from './templates.js';

/** What one event came to: per matching rule, sent, mocked or failed. */
interface EmailOutcome {
  ruleId: number;
  outcome: 'sent' | 'mocked' | 'failed' | 'throttled' | 'refused';
}

/** One message of an event as its send left it; `silent` when it met the server not answering (not yet logged). */
type Attempted = EmailOutcome & { silent?: Silent };

/** A message whose send met the server not answering: its rule, recipients and the failure. */
interface Silent {
  rule: ActiveRule;
  to: string[];
  error: unknown;
}

/** How many events after a suspect one the probe looks through for a message to send (ServerGate). */
const PROBE_AHEAD = 100;

/**
 * Each tenant's budget of recipients per minute: a bucket of `perMinute` tokens, refilled evenly
 * over the minute, a message taking one token per address (it goes while one token is left, the
 * bucket then owing the rest). Kept in the process that runs the
 * consumer (the leader); a new leader starts with full buckets.
 */
class RecipientBudget {
  private readonly buckets = new Map<number, { tokens: number; at: number }>();
  /** When a tenant's last "over budget" warning was logged. */
  private readonly warned = new Map<number, number>();

  constructor(
    private readonly perMinute: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  take(tenantId: number, recipients: number): boolean {
    const now = this.now();
    const bucket = this.buckets.get(tenantId) ?? { tokens: this.perMinute, at: now };
    bucket.tokens = Math.min(this.perMinute, bucket.tokens + ((now - bucket.at) * this.perMinute) / 60_000);
    bucket.at = now;
    this.buckets.set(tenantId, bucket);
    // A message goes while any token is left, and may take the budget below zero: a rule with many
    // recipients is not starved by one with few that takes each token as it comes back.
    if (bucket.tokens < 1) return false;
    bucket.tokens -= recipients;
    return true;
  }

  /** Whether to log the tenant's next "over budget" line (one a minute). */
  shouldWarn(tenantId: number): boolean {
    const last = this.warned.get(tenantId);
    const now = this.now();
    if (last !== undefined && now - last < 60_000) return false;
    this.warned.set(tenantId, now);
    return true;
  }
}

/** 1 while the e-mail consumer waits for the mail server to answer again, 0 once it does. */
const serverWaiting = lazyGauge({ name: 'svc_mail_server_waiting', help: 'Whether e-mail rules are waiting for the SMTP server to answer again (1) or sending (0)' });

/**
 * The mail server as the consumer last found it. A send that finds it unreachable or not answering
 * (serverUnavailable) is not skipped: its messages that met that wait, with the later events, unsent
 * and in order, instead of each paying the timeout: every `backoffMs` the server is checked (a
 * connection, its greeting, MAIL FROM, RCPT TO the sender's own address and RSET: no message), and
 * once it answers the events that waited are sent as usual, each once. A server silent only after a
 * message's data passes the check: the waiting message is sent again after each check that passes.
 * One message is skipped for a silence (`suspect`): one that met it right after two checks found the
 * server answering, when the server then takes the next message (the consumer's probe) -- the
 * server takes mail, not that one, which would otherwise hold the later mail for ever. A probe that
 * meets the server not answering too (the suspect may have crashed it) is sent first after the next
 * check that passes: taken, the suspect is skipped without being sent again. Kept per
 * mailer (a replaced mailer starts afresh) in the process that runs the consumer.
 */
class ServerGate {
  private waiting: { mailer: Mailer; since: number; until: number; checks: number; afterEventId: number } | undefined;

  /** The last event whose send met the server not answering right after a check found it answering. */
  private silentAfterCheck: number | undefined;

  /**
   * A suspect event whose probe met the server not answering too, and its messages that met it:
   * after the next check that passes, the probe is sent first (`probeFirst`). The suspect may have
   * brought the server down (dropped the connection, crashed it) so that the probe sent right after
   * it found the server still down: the probe sent on its own, to a server just checked, tells.
   */
  private unresolved: { eventId: number; silent: Silent[] } | undefined;

  constructor(private readonly backoffMs: number) {}

  /**
   * Returns when the server may be sent to: `true` when a check has just found it answering again
   * (this event's messages are the first sent since); throws a Postpone (the event waits) while it
   * does not answer.
   */
  async pass(mailer: Mailer, event: OutboxEvent): Promise<boolean> {
    const waiting = this.waiting;
    if (!waiting) return false;
    if (waiting.mailer !== mailer) {
      this.waiting = undefined;
      return false;
    }
    if (performance.now() < waiting.until) throw new Postpone(waiting.until, `mail server ${mailer.server} not answering`);
    try {
      await mailer.check();
    } catch (err) {
      // Any other failure is an answer: the server is there, and the sends say what it thinks of them.
      if (serverUnavailable(err)) {
        waiting.checks += 1;
        waiting.until = performance.now() + this.backoffMs;
        logger().warn(
          { server: mailer.server, eventId: event.id, waitingSince: waiting.afterEventId, checks: waiting.checks, error: sendFailure(err) },
          `mail server ${mailer.server} still not answering (check ${waiting.checks}, ${Math.round((performance.now() - waiting.since) / 1000)} s since it stopped): e-mail event ${event.id} and the later ones wait, unsent; next check in ${this.backoffMs} ms (svc.mail.backoff)`,
        );
        throw new Postpone(waiting.until, `mail server ${mailer.server} not answering`);
      }
    }
    this.waiting = undefined;
    serverWaiting().set(0);
    logger().info(
      { server: mailer.server, eventId: event.id, checks: waiting.checks },
      `mail server ${mailer.server} answers again (after ${Math.round((performance.now() - waiting.since) / 1000)} s): sending the e-mail events that waited, in order, from event ${event.id} on`,
    );
    return true;
  }

  /**
   * The send of `event` met the server not answering; `afterCheck`: right after a check found it
   * answering. Whether the event is suspect: this is the second time in a row it did so (the
   * consumer then sends the next message as a probe).
   */
  suspect(event: OutboxEvent, afterCheck: boolean): boolean {
    if (!afterCheck) return false;
    if (this.silentAfterCheck === event.id) return true;
    this.silentAfterCheck = event.id;
    return false;
  }

  /** The suspect's probe met the server not answering (or an answer that tells nothing): it is sent first after the next check that passes. */
  probeUnresolved(event: OutboxEvent, silent: Silent[]): void {
    this.unresolved = { eventId: event.id, silent };
  }

  /**
   * The messages of `event` that met the server not answering when it was suspect and its probe
   * could not tell, once a check has just found the server answering (`afterCheck`): the consumer
   * sends the probe first. Asked once: whatever that probe finds, the suspect then goes on as any.
   */
  probeFirst(event: OutboxEvent, afterCheck: boolean): Silent[] | undefined {
    const unresolved = this.unresolved;
    if (!afterCheck || unresolved?.eventId !== event.id) return undefined;
    this.unresolved = undefined;
    return unresolved.silent;
  }

  /** A send found the server not answering: the event's messages that met it and the later events wait (logged once, until it answers). */
  unavailable(mailer: Mailer, event: OutboxEvent): number {
    if (this.waiting?.mailer === mailer) return this.waiting.until;
    const now = performance.now();
    this.waiting = { mailer, since: now, until: now + this.backoffMs, checks: 0, afterEventId: event.id };
    serverWaiting().set(1);
    logger().warn(
      { server: mailer.server, eventId: event.id },
      `mail server ${mailer.server} is not answering: e-mail event ${event.id} (its messages that met it kept, to be sent again) and the later ones wait, unsent and in order, and go out once it answers; next check in ${this.backoffMs} ms (svc.mail.backoff)`,
    );
    return this.waiting.until;
  }
}

/**
 * How long a claim on a message holds beyond the longest a send may take (three times
 * svc.mail.timeout): a process frozen (or whose send ran) longer than both loses its claim, and its
 * message may be sent by another process too.
 */
const CLAIM_MARGIN_MS = 30_000;

/** How often a process that finds a message claimed by another, still sending it, looks again. */
const CLAIM_RECHECK_MS = 1_000;

/**
 * Claims the messages of `ruleIds` for the event, for `token` (one per consumer) until `leaseMs`
 * from now: a message not claimed yet, or whose claim is unfinished and either this consumer's or
 * past its lease (its process died mid-send). One claimed by another process and not finished (it is
 * sending it) or finished (sent already) is not claimed: `busyMs`, when some of them are still being
 * sent, is how long their lease runs at most. Finished claims are deleted by a daily purge
 * (retention.ts, `purgeSendClaims`), not here.
 */
async function claimSends(
  tx: Tx,
  event: OutboxEvent,
  ruleIds: number[],
  token: string,
  leaseMs: number,
): Promise<{ claimed: Set<number>; busyMs: number | undefined }> {
  const { rows } = await tx.query<{ rule_id: string }>(
    `insert into email.sends as s (tenant_id, event_id, rule_id, token, lease_until)
     select $1, $2, r, $3, clock_timestamp() + make_interval(secs => $4::double precision / 1000) from unnest($5::bigint[]) as r
     on conflict (event_id, rule_id) do update set token = excluded.token, lease_until = excluded.lease_until
      where s.finished_at is null and (s.lease_until < clock_timestamp() or s.token = excluded.token)
     returning s.rule_id`,
    [event.tenantId, event.id, token, leaseMs, arrayLiteral(ruleIds)],
  );
  const claimed = new Set(rows.map((row) => Number(row.rule_id)));
  let busyMs: number | undefined;
  if (claimed.size < ruleIds.length) {
    const { rows: busy } = await tx.query<{ ms: number | null }>(
      `select (extract(epoch from max(lease_until) - clock_timestamp()) * 1000)::float8 as ms
         from email.sends where event_id = $1 and rule_id = any($2::bigint[]) and finished_at is null and token <> $3`,
      [event.id, arrayLiteral(ruleIds), token],
    );
    if (busy[0]?.ms != null) busyMs = Math.max(0, busy[0].ms);
  }
  return { claimed, busyMs };
}

/**
 * Gives up this consumer's unfinished claims on messages of the event that are kept to be sent
 * again (ServerGate): claimed again when the event is handled again, by this process or another.
 */
async function releaseSends(tx: Tx, event: OutboxEvent, ruleIds: number[], token: string): Promise<void> {
  await tx.query('delete from email.sends where event_id = $1 and rule_id = any($2::bigint[]) and token = $3 and finished_at is null', [event.id, arrayLiteral(ruleIds), token]);
}

/** Records how this consumer's claimed messages of the event ended: they are never claimed again. */
async function finishSends(tx: Tx, event: OutboxEvent, outcomes: EmailOutcome[], token: string): Promise<void> {
  await tx.query(
    `update email.sends s set finished_at = clock_timestamp(), outcome = o.outcome
       from unnest($2::bigint[], $3::text[]) as o (rule_id, outcome)
      where s.event_id = $1 and s.rule_id = o.rule_id and s.token = $4`,
    [event.id, arrayLiteral(outcomes.map((o) => o.ruleId)), arrayLiteral(outcomes.map((o) => o.outcome)), token],
  );
}

/**
 * The PostgreSQL server's system identifier and the database's oid (`7715956959062061798.16384`):
 * with the event's id and time and the rule id, a Message-ID that is the same for every send of one message and
 * differs between deployments, two databases of one server included. Null (logged once) when the
 * role may not call pg_control_system() or the server does not have it (some managed services):
 * messages then get random Message-IDs. Under a savepoint, so the caller's transaction goes on.
 */
async function deploymentOf(tx: Tx): Promise<string | null> {
  await tx.query('savepoint deployment_id');
  try {
    const { rows } = await tx.query<{ id: string }>(
      "select system_identifier::text || '.' || (select oid from pg_database where datname = current_database())::text as id from pg_control_system()",
    );
    await tx.query('release savepoint deployment_id');
    return rows[0]?.id ?? null;
  } catch (err) {
    // Not allowed, not there or not supported; anything else (the database away) is thrown as a
    // failed read of the rules is.
    if (!['42501', '42883', '0A000'].includes(String((err as { code?: string }).code))) throw err;
    await tx.query('rollback to savepoint deployment_id');
    logger().info('e-mail rules: pg_control_system() cannot be called by this role; messages get random Message-IDs (a copy sent again is not recognisable as one)');
    return null;
  }
}

/**
 * The e-mail consumer's handler (run by an OutboxLoop named `email`): for one event, every enabled
 * rule of the event's tenant that matches its type and existed when it was written gets one message.
 * Best effort (spec 1 Events rule 5): a send that fails with an answer is logged and skipped, never
 * retried, and the cursor moves on. Reading the rules can throw (the database is away); the loop
 * then reads the event again later. A send that meets the mail server not answering (ServerGate) is
 * kept, and so is every later event with something to send: a Postpone, until a check finds the
 * server back (skipped only as ServerGate says).
 * Each message is claimed in the database before it is sent (`claimSends`): a message another
 * process is still sending makes the event wait (a Postpone) until it has finished or its claim has
 * run out.
 */
export class EmailConsumer {
  /** A tenant's enabled rules as read at `readAt` (database time), for at most `maxAgeMs`. */
  private readonly cache = new Map<number, { rules: ActiveRule[]; readAt: Date; fetched: number }>();

  private readonly budget: RecipientBudget;

  private readonly gate: ServerGate;

  constructor(
    private readonly db: Database,
    private readonly mailer: () => Mailer,
    private readonly maxAgeMs = 1_000,
    /**
     * Recipients per tenant and minute (svc.mail.recipients-per-minute); the wait between checks of
     * a mail server that does not answer (svc.mail.backoff); `now` for tests.
     */
    limits: { recipientsPerMinute?: number; backoffMs?: number; now?: () => number } = {},
  ) {
    this.budget = new RecipientBudget(limits.recipientsPerMinute ?? 300, limits.now);
    this.gate = new ServerGate(limits.backoffMs ?? 30_000);
  }

  /**
   * The tenant's rules, read once for a run of events: a read serves every event written before it
   * (every rule that can receive such an event, being active before it, is in the read: the read
   * waits for the tenant's rule writes in progress, `activeRules` with `awaitWrites`), for at
   * most `maxAgeMs`; an event written after the read reads again. Under load that is one read per
   * batch instead of one transaction per event.
   */
  private async rulesFor(event: OutboxEvent): Promise<ActiveRule[]> {
    const cached = this.cache.get(event.tenantId);
    // Strictly before: both times are the database's cut to milliseconds (a Date), and an event of
    // the read's own millisecond may have been written after it (a rule active in between missing).
    if (cached && event.createdAt.getTime() < cached.readAt.getTime() && performance.now() - cached.fetched < this.maxAgeMs) return cached.rules;
    const fetched = performance.now();
    const { rules, readAt } = await this.db.withTenant(event.tenantId, async (tx) => {
      const read = await activeRules(tx, { awaitWrites: true });
      if (this.deploymentId === undefined) this.deploymentId = await deploymentOf(tx);
      return read;
    });
    this.cache.set(event.tenantId, { rules, readAt, fetched });
    return rules;
  }

  async handle(event: OutboxEvent): Promise<EmailOutcome[]> {
    const due = await this.dueRules(event);
    if (!due.length) return [];
    const mailer = this.mailer();
    // Whether a check has just found the server answering again (this event's are the first sends since).
    const afterCheck = await this.gate.pass(mailer, event);
    // Each message claimed before it is sent: a process that believes it leads a moment too long
    // (its leadership handed over while it was sending) and the new leader, reading the event again
    // from the cursor, do not both send it.
    const leaseMs = (mailer.sendLimitMs ?? 0) + CLAIM_MARGIN_MS;
    const unresolved = this.gate.probeFirst(event, afterCheck);
    if (unresolved) {
      // A suspect whose probe could not tell (the server down right after it): the probe first,
      // to the server just checked. Taken: the suspect's messages are skipped, not sent again (a
      // message that crashes the server would crash it once more). Not taken, or nothing to send:
      // the suspect goes on as usual (sent again below, or both wait).
      const told = await this.probe(mailer, event, leaseMs);
      if (typeof told === 'number') return this.skipSuspect(event, unresolved, told, leaseMs);
      if (told === null) throw new Postpone(this.gate.unavailable(mailer, event), `mail server ${mailer.server} not answering`);
    }
    const { results, busyMs } = await this.attempt(mailer, event, due, leaseMs);
    const silent = results.filter((r) => r.silent);
    // Messages that met the server not answering wait (kept), unless they met it right after two
    // checks found it answering and the server takes the next message (ServerGate): then skipped.
    // A probe that met the server not answering too is sent first after the next check that passes.
    const told = silent.length > 0 && this.gate.suspect(event, afterCheck) ? await this.probe(mailer, event, leaseMs) : undefined;
    const takenInstead = typeof told === 'number' ? told : undefined;
    if (told === null) this.gate.probeUnresolved(event, silent.map((r) => r.silent!));
    for (const r of silent) this.logSilent(event, r.silent!, takenInstead);
    const outcomes = await this.settle(event, results, takenInstead === undefined ? silent : []);
    if (silent.length > 0 && takenInstead === undefined) throw new Postpone(this.gate.unavailable(mailer, event), `mail server ${mailer.server} not answering`);
    if (busyMs !== undefined) {
      // Another process is sending some of them: the event (and the later ones) wait until it has
      // finished, or its claim has run out (it died mid-send: they are sent then).
      if (this.waitLogged !== event.id) {
        this.waitLogged = event.id;
        logger().info(
          { eventId: event.id, eventType: event.type, tenantId: event.tenantId },
          `e-mail event ${event.id}: another process claimed some of its messages and is sending them (a leadership handover); this one waits until it has finished (or its claim runs out, at most ${Math.ceil(busyMs / 1000)} s)`,
        );
      }
      throw new Postpone(performance.now() + Math.min(busyMs, CLAIM_RECHECK_MS), `e-mail event ${event.id} claimed by another process`);
    }
    return outcomes;
  }

  /** The tenant's rules that are due the event: matching its type, and active when it was written. */
  private async dueRules(event: OutboxEvent): Promise<ActiveRule[]> {
    const rules = (await this.rulesFor(event)).filter((rule) => rulesMatch(rule, event.type));
    return rules.length > 0 ? this.notRetroactive(event, rules) : rules;
  }

  /**
   * Claims the event's due messages and sends those claimed, concurrently; records nothing (`settle`
   * does). `busyMs`: some are claimed by another process still sending them (`claimSends`).
   */
  private async attempt(mailer: Mailer, event: OutboxEvent, due: ActiveRule[], leaseMs: number): Promise<{ results: Attempted[]; busyMs: number | undefined }> {
    const { claimed, busyMs } = await this.db.withTenant(event.tenantId, (tx) => claimSends(tx, event, due.map((rule) => rule.id), this.token, leaseMs));
    const deployment = this.deploymentId ?? undefined;
    const results: Attempted[] = await Promise.all(
      due
        .filter((rule) => claimed.has(rule.id))
        .map((rule) => {
          if (!this.recipientsAccepted(rule, event)) return { ruleId: rule.id, outcome: 'refused' as const };
          return this.withinBudget(rule, event) ? this.sendOne(mailer, rule, event, deployment) : { ruleId: rule.id, outcome: 'throttled' as const };
        }),
    );
    return { results, busyMs };
  }

  /**
   * Records how the event's attempted messages ended, but for `kept` ones, whose claims are given up
   * (they wait, and are claimed and sent again when the event is handled again, by this process or
   * another). A failure here leaves the claims unfinished: the event is read again and they are sent
   * again (this consumer's own). Returns the outcomes recorded.
   */
  private async settle(event: OutboxEvent, results: Attempted[], kept: Attempted[]): Promise<EmailOutcome[]> {
    const outcomes = results.filter((r) => !kept.includes(r)).map(({ ruleId, outcome }) => ({ ruleId, outcome }));
    if (results.length > 0) {
      await this.db.withTenant(event.tenantId, async (tx) => {
        if (outcomes.length > 0) await finishSends(tx, event, outcomes, this.token);
        if (kept.length > 0) await releaseSends(tx, event, kept.map((r) => r.ruleId), this.token);
      });
    }
    return outcomes;
  }

  /**
   * Skips the suspect's messages that met the server not answering (`silent`, kept until now) as
   * failed sends, the server having taken event `takenInstead`'s message instead: claimed and
   * recorded `failed` without being sent again, each logged.
   */
  private async skipSuspect(event: OutboxEvent, silent: Silent[], takenInstead: number, leaseMs: number): Promise<EmailOutcome[]> {
    const { claimed } = await this.db.withTenant(event.tenantId, (tx) => claimSends(tx, event, silent.map((s) => s.rule.id), this.token, leaseMs));
    const skipped = silent.filter((s) => claimed.has(s.rule.id));
    for (const s of skipped) this.logSilent(event, s, takenInstead);
    return this.settle(event, skipped.map((s) => ({ ruleId: s.rule.id, outcome: 'failed' as const })), []);
  }

  /**
   * The probe for a suspect event (ServerGate): the next event after it, in outbox order, with a
   * message due and claimable (of an active tenant, among the next PROBE_AHEAD), has its messages
   * sent now, ahead of the cursor (recorded as usual: when the cursor reaches it, nothing is sent
   * again). Returns its id when the server took one of them: it takes mail, not the suspect's. Null:
   * its messages met the server not answering too (kept: they wait with the rest), or failed with an
   * answer. Undefined: no later event has one yet. Events whose messages did not reach the server
   * (refused, throttled, sent already) are passed over for the next.
   */
  private async probe(mailer: Mailer, suspect: OutboxEvent, leaseMs: number): Promise<number | null | undefined> {
    const { rows } = await this.db.crossTenantQuery<OutboxRow>(
      'outbox:email probe',
      `select e.id, e.tenant_id, e.type, e.payload, e.created_at, e.txid::text as txid
         from events.outbox e
         left join core.tenants t on t.id = e.tenant_id
        where (e.txid, e.id) > ($1::xid8, $2::bigint)
          and e.txid < pg_snapshot_xmin(pg_current_snapshot())
          and t.active is not false
        order by e.txid, e.id
        limit $3`,
      [suspect.position.txid, suspect.position.id, PROBE_AHEAD],
    );
    for (const next of rows.map(toEvent)) {
      // Its own tenant's unit of work (its lines carry that tenant), as when its turn comes.
      const told = await runForTenant(next.tenantId, async (): Promise<number | null | undefined> => {
        const due = await this.dueRules(next);
        if (!due.length) return undefined;
        const { results } = await this.attempt(mailer, next, due, leaseMs);
        const silent = results.filter((r) => r.silent);
        for (const r of silent) this.logSilent(next, r.silent!, undefined);
        await this.settle(next, results, silent);
        if (results.some((r) => r.outcome === 'sent')) return next.id;
        return results.some((r) => r.outcome === 'failed') ? null : undefined;
      });
      // A number: taken; null: the server met (silent, or an answer that tells nothing); undefined: not reached, the next.
      if (told !== undefined) return told;
    }
    return undefined;
  }

  /**
   * Logs a message whose send met the server not answering: kept (it waits, to be sent again after
   * the next check that passes), or skipped, the server having taken event `takenInstead`'s message
   * right after it.
   */
  private logSilent(event: OutboxEvent, { rule, to, error }: Silent, takenInstead: number | undefined): void {
    const where = { ruleId: rule.id, rule: rule.name, eventId: event.id, eventType: event.type, to, error: sendFailure(error) };
    if (takenInstead === undefined) {
      logger().warn({ ...where, kept: true }, `e-mail rule ${rule.name}: sending event ${event.id} failed, the server not answering; kept: sent again once a check finds it answering`);
    } else {
      logger().warn(
        { ...where, takenInstead },
        `e-mail rule ${rule.name}: sending event ${event.id} failed, the server not answering right after two checks found it answering, and it took event ${takenInstead}'s message next: it takes mail, not this message; skipped (best effort)`,
      );
    }
  }

  /**
   * Not retroactive: the rules that became active (created, or enabled again) no later than the
   * event was written. Both times are the database's in microseconds; as Dates they are cut to
   * milliseconds, so a rule of the event's own millisecond is compared in the database (an event
   * written in it before the rule is not the rule's). That costs a statement only then.
   */
  private async notRetroactive(event: OutboxEvent, rules: ActiveRule[]): Promise<ActiveRule[]> {
    const at = event.createdAt.getTime();
    const tied = rules.filter((rule) => rule.activeSince.getTime() === at).map((rule) => rule.id);
    let sameMs = new Set<number>();
    if (tied.length > 0) {
      const { rows } = await this.db.withTenant(event.tenantId, (tx) =>
        tx.query<{ id: string }>(
          'select r.id from email.rules r join events.outbox o on o.id = $1 where r.id = any($2::bigint[]) and r.active_since <= o.created_at',
          [event.id, arrayLiteral(tied)],
        ),
      );
      sameMs = new Set(rows.map((row) => Number(row.id)));
    }
    return rules.filter((rule) => rule.activeSince.getTime() < at || sameMs.has(rule.id));
  }

  /** This consumer's claims on messages (email.sends.token). */
  private readonly token = randomUUID();

  /** The event whose wait for another process's claim was logged last. */
  private waitLogged: number | undefined;

  /** What tells this deployment's messages from another's (null: it cannot be read), once known. */
  private deploymentId: string | null | undefined;

  /** Rule ids and recipient texts already judged (true: accepted), and the refused ones already logged. */
  private readonly judged = new Map<number, { recipient: string; accepted: boolean; logged: boolean }>();

  /**
   * Whether the rule's stored recipients pass today's check (normalizeRecipient): a rule stored
   * before a check existed (a relay-local address such as `root@localhost`) sends nothing until its
   * recipient is changed; a `warn` line says so once per rule and process.
   */
  private recipientsAccepted(rule: ActiveRule, event: OutboxEvent): boolean {
    let judged = this.judged.get(rule.id);
    if (judged?.recipient !== rule.recipient) {
      let accepted = true;
      try {
        normalizeRecipient(rule.recipient);
      } catch {
        accepted = false;
      }
      judged = { recipient: rule.recipient, accepted, logged: false };
      this.judged.set(rule.id, judged);
    }
    if (!judged.accepted && !judged.logged) {
      judged.logged = true;
      logger().warn(
        { ruleId: rule.id, rule: rule.name, eventId: event.id, eventType: event.type, tenantId: event.tenantId },
        `e-mail rule ${rule.name}: its recipient is not accepted (stored before addresses had to be on a public domain): event ${event.id} and later ones not sent until the rule's recipient is changed (refused; this line once per rule)`,
      );
    }
    return judged.accepted;
  }

  /** Takes the message's recipients from its tenant's budget; false (logged, once a minute per tenant) when they do not fit. */
  private withinBudget(rule: ActiveRule, event: OutboxEvent): boolean {
    if (this.budget.take(event.tenantId, recipients(rule).length)) return true;
    if (this.budget.shouldWarn(event.tenantId)) {
      logger().warn(
        { ruleId: rule.id, rule: rule.name, eventId: event.id, eventType: event.type, tenantId: event.tenantId },
        `e-mail rules of tenant ${event.tenantId} are over their budget of recipients per minute (svc.mail.recipients-per-minute): event ${event.id} not sent by rule ${rule.name}, nor further messages until the budget refills (throttled; this line at most once a minute)`,
      );
    }
    return false;
  }

  /** Sends one rule's message for the event. A failure that is the server not answering is not logged here (`silent`): the caller decides whether it is kept or skipped. */
  private async sendOne(mailer: Mailer, rule: ActiveRule, event: OutboxEvent, deployment: string | undefined): Promise<Attempted> {
    const ctx: TemplateContext = { type: event.type, id: event.id, tenantId: event.tenantId, createdAt: event.createdAt, rule: rule.name, payload: event.payload };
    const to = recipients(rule);
    const where = { ruleId: rule.id, rule: rule.name, eventId: event.id, eventType: event.type, to };
    try {
      const result = await mailer.send({
        to,
        subject: subjectLine(renderTemplate(rule.subject, ctx)),
        text: renderTemplate(rule.body, ctx),
        headers: { 'X-Svc-Event': event.type, 'X-Svc-Event-Id': String(event.id), 'X-Svc-Email-Rule': String(rule.id) },
        // The event's time too: a database restored to an earlier point (or a copy of it) writes new
        // events under ids already used, and their messages must not look like copies of those sent then.
        key: deployment ? `e${event.id}.t${event.createdAt.getTime()}.r${rule.id}.${deployment}` : undefined,
      });
      if (result.outcome === 'sent') {
        // A server may take some recipients and refuse others (no such mailbox): the message went to those it took only.
        const refused = result.refused ?? [];
        const sentTo = refused.length > 0 ? (result.accepted ?? to.filter((a) => !refused.includes(a))) : to;
        if (refused.length > 0) {
          logger().warn(
            { ...where, refused },
            `e-mail rule ${rule.name}: the server refused ${refused.join(', ')} for event ${event.id}; sent to the other recipients only (best effort, not retried)`,
          );
        }
        logger().info({ ...where, to: sentTo, messageId: result.messageId }, `e-mail rule ${rule.name}: sent event ${event.id} to ${sentTo.join(', ')}`);
      }
      return { ruleId: rule.id, outcome: result.outcome };
    } catch (err) {
      if (serverUnavailable(err)) return { ruleId: rule.id, outcome: 'failed', silent: { rule, to, error: err } };
      logger().warn({ ...where, error: sendFailure(err) }, `e-mail rule ${rule.name}: sending event ${event.id} failed; skipped (best effort)`);
      return { ruleId: rule.id, outcome: 'failed' };
    }
  }
}

import type { Database } from '../db/database.js';
import type { OutboxEvent } from '../events/outbox.js';
import { logger } from '../observability/logger.js';
import { type Mailer, sendFailure } from './mailer.js';
import { type ActiveRule, activeRules, normalizeRecipient, recipients, rulesMatch } from './rules.js';
import { renderTemplate, subjectLine, type TemplateContext } from './templates.js';

/** What one event came to: per matching rule, sent, mocked or failed. */
interface EmailOutcome {
  ruleId: number;
  outcome: 'sent' | 'mocked' | 'failed' | 'throttled' | 'refused';
}

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

/**
 * The e-mail consumer's handler (run by an OutboxLoop named `email`): for one event, every enabled
 * rule of the event's tenant that matches its type and existed when it was written gets one message.
 * Best effort (spec 1 Events rule 5): a failed send is logged and skipped, never retried, and the
 * cursor moves on. Reading the rules is the only thing that can throw (the database is away); the
 * loop then reads the event again later.
 */
export class EmailConsumer {
  /** A tenant's enabled rules as read at `readAt` (database time), for at most `maxAgeMs`. */
  private readonly cache = new Map<number, { rules: ActiveRule[]; readAt: Date; fetched: number }>();

  private readonly budget: RecipientBudget;

  constructor(
    private readonly db: Database,
    private readonly mailer: () => Mailer,
    private readonly maxAgeMs = 1_000,
    /** Recipients per tenant and minute (svc.mail.recipients-per-minute); `now` for tests. */
    limits: { recipientsPerMinute?: number; now?: () => number } = {},
  ) {
    this.budget = new RecipientBudget(limits.recipientsPerMinute ?? 300, limits.now);
  }

  /**
   * The tenant's rules, read once for a run of events: a read serves every event written before it
   * (every rule that can receive such an event, being created before it, is in the read), for at
   * most `maxAgeMs`; an event written after the read reads again. Under load that is one read per
   * batch instead of one transaction per event.
   */
  private async rulesFor(event: OutboxEvent): Promise<ActiveRule[]> {
    const cached = this.cache.get(event.tenantId);
    if (cached && event.createdAt.getTime() <= cached.readAt.getTime() && performance.now() - cached.fetched < this.maxAgeMs) return cached.rules;
    const fetched = performance.now();
    const { rules, readAt } = await this.db.withTenant(event.tenantId, (tx) => activeRules(tx));
    this.cache.set(event.tenantId, { rules, readAt, fetched });
    return rules;
  }

  async handle(event: OutboxEvent): Promise<EmailOutcome[]> {
    const rules = (await this.rulesFor(event)).filter((rule) => rulesMatch(rule, event.type));
    // Not retroactive: a rule created after the event was written does not receive it.
    const due = rules.filter((rule) => rule.createdAt.getTime() <= event.createdAt.getTime());
    if (!due.length) return [];
    const mailer = this.mailer();
    return Promise.all(
      due.map((rule) => {
        if (!this.recipientsAccepted(rule, event)) return { ruleId: rule.id, outcome: 'refused' as const };
        return this.withinBudget(rule, event) ? this.sendOne(mailer, rule, event) : { ruleId: rule.id, outcome: 'throttled' as const };
      }),
    );
  }

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

  private async sendOne(mailer: Mailer, rule: ActiveRule, event: OutboxEvent): Promise<EmailOutcome> {
    const ctx: TemplateContext = { type: event.type, id: event.id, tenantId: event.tenantId, createdAt: event.createdAt, rule: rule.name, payload: event.payload };
    const to = recipients(rule);
    const where = { ruleId: rule.id, rule: rule.name, eventId: event.id, eventType: event.type, to };
    try {
      const result = await mailer.send({
        to,
        subject: subjectLine(renderTemplate(rule.subject, ctx)),
        text: renderTemplate(rule.body, ctx),
        headers: { 'X-Svc-Event': event.type, 'X-Svc-Event-Id': String(event.id), 'X-Svc-Email-Rule': String(rule.id) },
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
      logger().warn({ ...where, error: sendFailure(err) }, `e-mail rule ${rule.name}: sending event ${event.id} failed; skipped (best effort)`);
      return { ruleId: rule.id, outcome: 'failed' };
    }
  }
}

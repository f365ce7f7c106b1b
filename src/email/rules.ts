import { takeLivePlace } from '../manifests/tenant-cap.js';
import type { Tx } from '../db/database.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { patternsMatch, type SubscriberCheck } from '../events/subscribers.js';
import { checkTemplate } from './templates.js';
import { isUniqueViolation } from '../validation/database-refusals.js';
import { labelName } from '../validation/names.js';

/**
 * E-mail rules (spec 1 Events rule 5; CONTRACTS.md section 4): events of a tenant whose type
 * matches one of a rule's patterns are sent to its recipients through its subject and body
 * templates. Run in `Database.withTenant`: row-level security keeps each tenant to its own rules,
 * so another tenant's id is a 404 like an unknown one. A delete is soft: the row stays with
 * `deleted_at` set, leaves every view (list, get, update and delete answer 404) and frees its name.
 */

export interface EmailRule {
  id: number;
  name: string;
  eventTypes: string[];
  recipient: string;
  subject: string;
  body: string;
  enabled: boolean;
}

export interface EmailRuleInput {
  name: string;
  eventTypes: string[];
  recipient: string;
  subject?: string;
  body?: string;
  enabled?: boolean;
}

export type EmailRulePatch = Partial<EmailRuleInput>;

/**
 * An active rule as the consumer needs it, with when it became active, created or enabled again
 * (rules are not retroactive).
 */
export interface ActiveRule extends EmailRule {
  activeSince: Date;
}

export const DEFAULT_SUBJECT = '[svc-hub] {{type}}';
export const DEFAULT_BODY = 'Event {{type}} (id {{id}}) in tenant {{tenantId}} at {{createdAt}}.\n\n{{payload}}\n\n-- sent by e-mail rule "{{rule}}"';

/** At most this many addresses in one rule's `recipient`. */
export const MAX_RECIPIENTS = 10;

/** At most this many live (not deleted) rules per tenant: rule mail is for notices, not mailings. */
export const MAX_RULES = 50;

const PATTERN = /^[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*(?:\.\*)?$/;
// A plain address: dot-atom local part, a host name of letters, digits and dashes (no display names,
// quotes, comments or IP literals).
const LOCAL = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/;
const LABEL = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;

/**
 * `eventTypes`: a non-empty list of exact types or `prefix.*` patterns. A bare `*`, another wildcard
 * or whitespace is refused; duplicates collapse (first occurrence kept).
 */
export function normalizeEventTypes(value: readonly string[]): string[] {
  if (!value.length) throw new ValidationError('eventTypes must name at least one event type or prefix.* pattern', 'eventTypes');
  const out: string[] = [];
  value.forEach((entry, i) => {
    const field = `eventTypes[${i}]`;
    if (entry === '*' || entry === '.*') throw new ValidationError(`${field}: a bare * is not allowed; name a type or a prefix.* pattern`, field, 'e.g. org.created or connector.run.*');
    if (!PATTERN.test(entry)) throw new ValidationError(`${field}: '${entry}' is neither an event type nor a prefix.* pattern`, field, 'e.g. org.created or connector.run.*');
    if (!out.includes(entry)) out.push(entry);
  });
  return out;
}

/** `recipient`: one address or a comma-separated list of up to MAX_RECIPIENTS, normalised to `a@x, b@y`. */
export function normalizeRecipient(value: string): string {
  const parts = value.split(',').map((s) => s.trim());
  if (parts.length === 1 && !parts[0]) throw new ValidationError('recipient must not be blank', 'recipient');
  if (parts.length > MAX_RECIPIENTS) throw new ValidationError(`recipient: at most ${MAX_RECIPIENTS} addresses`, 'recipient');
  const seen = new Set<string>();
  const out: string[] = [];
  for (const address of parts) {
    if (!isAddress(address)) {
      throw new ValidationError(`recipient: '${address}' is not an e-mail address`, 'recipient', 'plain addresses such as ops@example.com, separated by commas');
    }
    // A domain of two labels at least, not the relay's own names: a bare host name (`root@localhost`),
    // `localhost.localdomain` or an address written as numbers would reach the relay's own mailboxes.
    const labels = address.slice(address.lastIndexOf('@') + 1).toLowerCase().split('.');
    if (labels.length < 2 || /^[0-9]+$/.test(labels.at(-1)!) || labels.some((label) => label === 'localhost' || label === 'localdomain')) {
      throw new ValidationError(
        `recipient: '${address}' is not an address on a public domain (a bare host name, localhost, localdomain or a numeric address is not accepted)`,
        'recipient',
        'plain addresses such as ops@example.com, separated by commas',
      );
    }
    const key = address.toLowerCase();
    if (!seen.has(key)) {
      seen.add(key);
      out.push(address);
    }
  }
  return out.join(', ');
}

export function isAddress(address: string): boolean {
  if (address.length > 254) return false;
  const at = address.lastIndexOf('@');
  if (at < 1) return false;
  const local = address.slice(0, at);
  const domain = address.slice(at + 1);
  return local.length <= 64 && LOCAL.test(local) && domain.length > 0 && domain.split('.').every((label) => LABEL.test(label));
}

/** The recipients of a stored rule, as a list. */
export function recipients(rule: Pick<EmailRule, 'recipient'>): string[] {
  return rule.recipient.split(',').map((s) => s.trim()).filter(Boolean);
}

/**
 * A tenant's rule writes that make a rule active (a create, an enabling) take this lock, exclusive,
 * before they take their time (`active_since`), and hold it until they commit; the e-mail consumer
 * takes it shared before it reads the rules (`activeRules` with `awaitWrites`). So a read sees every
 * rule that became active before it: one whose write took its time before the read and committed
 * after it would otherwise be missing from the read while an event written between the two is
 * handled, and that event (and, cached, those of the next second) would go by without it.
 */
const RULE_WRITES_LOCK = "hashtext('email.rules'), $1";

async function lockRuleWrites(tx: Tx): Promise<void> {
  await tx.query(`select pg_advisory_xact_lock(${RULE_WRITES_LOCK})`, [tenantOf(tx)]);
}

function tenantOf(tx: Tx): number {
  if (tx.tenantId === undefined) throw new Error('e-mail rules need a tenant transaction (Database.withTenant)');
  return tx.tenantId;
}

const COLUMNS = 'id, name, event_types as "eventTypes", recipient, subject, body, enabled';
const NAME_INDEX = 'rules_live_name';

function isNameTaken(err: unknown): boolean {
  return isUniqueViolation(err, NAME_INDEX);
}

/** Rules of the tenant that are not deleted, by id. */
export async function listRules(tx: Tx): Promise<EmailRule[]> {
  const { rows } = await tx.query<EmailRule>(`select ${COLUMNS} from email.rules where deleted_at is null order by id`);
  return rows;
}

/** One rule; 404 when unknown, deleted or of another tenant. */
export async function getRule(tx: Tx, id: number): Promise<EmailRule> {
  const { rows } = await tx.query<EmailRule>(`select ${COLUMNS} from email.rules where id = $1 and deleted_at is null`, [id]);
  if (!rows[0]) throw new NotFoundError(`e-mail rule ${id} not found`);
  return rows[0];
}

/** 400 naming the field for an invalid pattern, address or template; 409 when the name is taken in the tenant. */
export async function createRule(tx: Tx, input: EmailRuleInput, by?: string): Promise<EmailRule> {
  const name = labelName(input.name);
  const eventTypes = normalizeEventTypes(input.eventTypes);
  const recipient = normalizeRecipient(input.recipient);
  const subject = input.subject ?? DEFAULT_SUBJECT;
  const body = input.body ?? DEFAULT_BODY;
  checkTemplate(subject, 'subject');
  checkTemplate(body, 'body');
  // One create at a time per tenant, so that two at once cannot both pass the count.
  await lockRuleWrites(tx);
  await takeLivePlace(tx, {
    table: 'email.rules',
    plural: 'e-mail rules',
    max: MAX_RULES,
    advice: 'delete one first, or give a rule more patterns or recipients',
    // A deleted rule's send claims name it (a foreign key) until the daily purge of claims.
    heldBy: 'exists (select 1 from email.sends s where s.rule_id = t.id)',
  });
  try {
    const { rows } = await tx.query<EmailRule>(
      `insert into email.rules (tenant_id, name, event_types, recipient, subject, body, enabled, created_by, updated_by)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $8) returning ${COLUMNS}`,
      [tenantOf(tx), name, eventTypes, recipient, subject, body, input.enabled ?? true, by ?? null],
    );
    return rows[0]!;
  } catch (err) {
    if (isNameTaken(err)) throw new ConflictError(`an e-mail rule named ${name} already exists`, 'name');
    throw err;
  }
}

/** Applies the fields present; the rest stay. 404 as getRule, 400 and 409 as createRule. */
export async function updateRule(tx: Tx, id: number, patch: EmailRulePatch, by?: string): Promise<EmailRule> {
  const sets: string[] = [];
  const values: unknown[] = [id];
  const set = (column: string, value: unknown) => {
    values.push(value);
    sets.push(`${column} = $${values.length}`);
  };
  if (patch.name !== undefined) set('name', labelName(patch.name));
  if (patch.eventTypes !== undefined) set('event_types', normalizeEventTypes(patch.eventTypes));
  if (patch.recipient !== undefined) set('recipient', normalizeRecipient(patch.recipient));
  if (patch.subject !== undefined) {
    checkTemplate(patch.subject, 'subject');
    set('subject', patch.subject);
  }
  if (patch.body !== undefined) {
    checkTemplate(patch.body, 'body');
    set('body', patch.body);
  }
  if (patch.enabled !== undefined) {
    set('enabled', patch.enabled);
    // Enabling a disabled rule makes it active from this write on (`enabled` here is the row's value
    // before the update): not the events written while it was disabled.
    if (patch.enabled) sets.push('active_since = case when enabled then active_since else clock_timestamp() end');
  }
  if (!sets.length) return getRule(tx, id);
  // An enabling takes its time under the lock a consumer's read waits for (lockRuleWrites), and takes
  // it before the update locks the rule's row, as the database's statement trigger does for every
  // version's update of `enabled` (email V8): the other order could deadlock with another writer.
  if (patch.enabled) await lockRuleWrites(tx);
  set('updated_by', by ?? null);
  try {
    const { rows } = await tx.query<EmailRule>(
      `update email.rules set ${sets.join(', ')}, updated_at = now() where id = $1 and deleted_at is null returning ${COLUMNS}`,
      values,
    );
    if (!rows[0]) throw new NotFoundError(`e-mail rule ${id} not found`);
    return rows[0];
  } catch (err) {
    if (isNameTaken(err)) throw new ConflictError(`an e-mail rule named ${patch.name?.trim()} already exists`, 'name');
    throw err;
  }
}

/** Soft delete: no message goes out for it from now on; 404 when unknown or already deleted. */
export async function deleteRule(tx: Tx, id: number, by?: string): Promise<void> {
  const { rowCount } = await tx.query('update email.rules set deleted_at = now(), updated_by = $2, updated_at = now() where id = $1 and deleted_at is null', [
    id,
    by ?? null,
  ]);
  if (!rowCount) throw new NotFoundError(`e-mail rule ${id} not found`);
}

/** Enabled, not deleted rules of the transaction's tenant whose patterns match `type`. */
export async function matchingRules(tx: Tx, type: string): Promise<ActiveRule[]> {
  return (await activeRules(tx)).rules.filter((rule) => rulesMatch(rule, type));
}

/**
 * Every enabled rule of the caller's tenant, and the database time they were read at. With
 * `awaitWrites` (the consumer, whose read serves every event written before `readAt`), it first
 * waits for the tenant's rule writes in progress (creates, enablings) to end: then every rule active
 * before `readAt` is in the read. Not for a read inside a long transaction (the subscriber check in
 * an ingestion): the shared lock holds until that transaction ends, and rule writes wait for it.
 */
export async function activeRules(tx: Tx, options: { awaitWrites?: boolean } = {}): Promise<{ rules: ActiveRule[]; readAt: Date }> {
  if (options.awaitWrites) await tx.query(`select pg_advisory_xact_lock_shared(${RULE_WRITES_LOCK})`, [tenantOf(tx)]);
  const { rows } = await tx.query<ActiveRule & { readAt: Date }>(
    `select ${COLUMNS}, active_since as "activeSince", statement_timestamp() as "readAt" from email.rules where tenant_id = $1 and enabled and deleted_at is null order by id`,
    [tenantOf(tx)],
  );
  if (rows.length === 0) return { rules: [], readAt: (await tx.query<{ now: Date }>('select statement_timestamp() as now')).rows[0]!.now };
  return { rules: rows.map(({ readAt: _r, ...rule }) => rule), readAt: rows[0]!.readAt };
}

export const rulesMatch = (rule: ActiveRule, type: string): boolean => patternsMatch(rule.eventTypes, type);

/**
 * SQL, true when no active tenant has an enabled rule: the e-mail consumer then has nothing to send
 * for any event (its OutboxLoop `idleWhen`; a deactivated tenant's events are handed to no consumer,
 * so its rules alone must not make the consumer read every event). Nor while a rule write that
 * makes a rule active (`lockRuleWrites`, any tenant) is in progress: its rule, not visible yet, may
 * be due events written after it took its time, and the statement would pass them unread. A
 * function (email V5), which looks at the locks first and then reads the rules in a snapshot taken
 * after that look, so a write that commits while the calling statement runs (after that
 * statement's snapshot, in which the events it passes were read) is seen one way or the other.
 */
export const NO_ENABLED_RULES = 'email.no_enabled_rules()';

/**
 * For the subscriber registry (src/events/subscribers.ts): an enabled rule matching the type counts
 * as a subscriber, so `data.row.changed` is written when only an e-mail rule listens to it.
 */
export const emailRuleSubscriber: SubscriberCheck = async (tx, type) => {
  if (tx.tenantId === undefined) return false;
  return (await matchingRules(tx, type)).length > 0;
};

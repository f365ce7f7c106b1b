import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import type { Database, Tx } from '../db/database.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import type { OutboxEvent } from '../events/outbox.js';
import { Subscribers } from '../events/subscribers.js';
import { EmailConsumer } from './consumer.js';
import { type Mailer, MockedMailer, type OutgoingMail } from './mailer.js';
import { RENDERED_MAX } from './templates.js';
import { MAX_DELETED_KEPT_PER_TENANT } from '../manifests/tenant-cap.js';
import { deletedHistoryCases } from '../../test/harness/tenant-cap-cases.js';
import {
  createRule, DEFAULT_BODY, DEFAULT_SUBJECT, deleteRule, MAX_RULES, emailRuleSubscriber, getRule, listRules, matchingRules, normalizeEventTypes, normalizeRecipient, updateRule,
} from './rules.js';
import { untilEndedOrWaiting } from '../../test/harness/held-transaction.js';

let testDb: MigratedDatabase;
let db: Database;

beforeAll(async () => {
  testDb = await migratedDatabase({ 1: 'acme', 2: 'globex', 3: 'initech' }, 2);
  db = testDb.db;
});

afterAll(async () => {
  await testDb.close();
});

const t1 = <T>(fn: (tx: Tx) => Promise<T>) => db.withTenant(1, fn);
const t2 = <T>(fn: (tx: Tx) => Promise<T>) => db.withTenant(2, fn);
const t3 = <T>(fn: (tx: Tx) => Promise<T>) => db.withTenant(3, fn);

function fieldOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    if (err instanceof ValidationError) return err.field;
    throw err;
  }
  return 'no error';
}

describe('validation', () => {
  it('eventTypes: exact types or prefix.* patterns, never a bare * or an empty list', () => {
    expect(normalizeEventTypes(['org.created', 'connector.run.*', 'org.created', 'decision.dormant.x'])).toEqual(['org.created', 'connector.run.*', 'decision.dormant.x']);
    expect(fieldOf(() => normalizeEventTypes([]))).toBe('eventTypes');
    expect(fieldOf(() => normalizeEventTypes(['org.created', '*']))).toBe('eventTypes[1]');
    for (const bad of ['.*', 'org.*.created', 'org*', 'org.', '.org', 'org created', 'org.**', '']) expect(fieldOf(() => normalizeEventTypes([bad]))).toBe('eventTypes[0]');
  });

  it('recipient: one address or a comma list, normalised', () => {
    expect(normalizeRecipient(' ops@example.com ')).toBe('ops@example.com');
    expect(normalizeRecipient('ops@example.com,dev@mail.example.org , OPS@example.com')).toBe('ops@example.com, dev@mail.example.org');
    expect(normalizeRecipient('first.last+tag@mail.example.org')).toBe('first.last+tag@mail.example.org');
    // A bare host name as the domain would reach the relay's own mailboxes.
    for (const bad of ['root@localhost', 'first.last+tag@localhost', 'postmaster@relay', 'root@localhost.localdomain', 'root@mail.localdomain', 'root@127.0.0.1', 'postmaster@0.0.0.0', 'x@LOCALHOST.example']) {
      expect(fieldOf(() => normalizeRecipient(bad))).toBe('recipient');
    }
    for (const bad of ['', ' ', 'ops', 'ops@', '@example.com', 'Ops <ops@example.com>', 'a b@example.com', 'ops@exa_mple.com', 'ops@example.com,', 'a@b.c\r\nBcc: x@y.z', 'ops@-example.com']) {
      expect(fieldOf(() => normalizeRecipient(bad))).toBe('recipient');
    }
    expect(fieldOf(() => normalizeRecipient(Array.from({ length: 11 }, (_, i) => `u${i}@example.com`).join(',')))).toBe('recipient');
  });
});

describe('rules in the database', () => {
  it('create with defaults, get, list, update present fields only', async () => {
    const rule = await t1((tx) => createRule(tx, { name: ' ops ', eventTypes: ['org.*'], recipient: 'ops@example.com' }, 'ann'));
    expect(rule).toEqual({ id: rule.id, name: 'ops', eventTypes: ['org.*'], recipient: 'ops@example.com', subject: DEFAULT_SUBJECT, body: DEFAULT_BODY, enabled: true });
    expect(await t1((tx) => getRule(tx, rule.id))).toEqual(rule);
    const updated = await t1((tx) => updateRule(tx, rule.id, { subject: 'Org {{payload.orgId}}', enabled: false }, 'bob'));
    expect(updated).toEqual({ ...rule, subject: 'Org {{payload.orgId}}', enabled: false });
    expect(await t1((tx) => updateRule(tx, rule.id, {}))).toEqual(updated);
    expect((await t1(listRules)).map((r) => r.name)).toContain('ops');
  });

  it(`a tenant has at most ${MAX_RULES} live rules: one more is 409; a deleted rule frees its place`, async () => {
    const made = await t2(async (tx) => {
      const ids: number[] = [];
      const existing = (await listRules(tx)).length;
      for (let i = existing; i < MAX_RULES; i++) ids.push((await createRule(tx, { name: `cap-${i}`, eventTypes: ['org.created'], recipient: 'ops@globex.example' })).id);
      return ids;
    });
    const over = await t2((tx) => createRule(tx, { name: 'one-too-many', eventTypes: ['org.created'], recipient: 'ops@globex.example' })).catch((e: unknown) => e);
    expect(over).toBeInstanceOf(ConflictError);
    expect((over as Error).message).toBe(`this tenant has ${MAX_RULES} e-mail rules, the most it may have (${MAX_RULES}): delete one first, or give a rule more patterns or recipients`);
    // Creates at once cannot pass the count together (one at a time per tenant).
    await t2((tx) => deleteRule(tx, made.at(-1)!));
    // Each create, once it has counted, waits for the other to have counted too, or to wait on a lock (one at a time).
    let counted = 0;
    const slowAfterCount = (tx: Tx): Tx => ({
      ...tx,
      query: (async (text: string, values?: unknown[]) => {
        const result = await tx.query(text, values);
        if (text.includes('count(*)')) {
          counted += 1;
          await untilEndedOrWaiting(testDb.owner, () => counted >= 2, 'the other create to count');
        }
        return result;
      }) as Tx['query'],
    });
    const racing = await Promise.all(
      [0, 1].map((i) => t2((tx) => createRule(slowAfterCount(tx), { name: `race-${i}`, eventTypes: ['org.created'], recipient: 'ops@globex.example' })).then((r) => r.id, (e: unknown) => e)),
    );
    expect(racing.filter((r) => typeof r === 'number')).toHaveLength(1);
    expect(racing.filter((r) => r instanceof ConflictError)).toHaveLength(1);
    expect((await t2(listRules)).length).toBe(MAX_RULES);
    made.splice(-1, 1, ...(racing.filter((r) => typeof r === 'number') as number[]));
    // Another tenant is not counted against it.
    const other = await t3((tx) => createRule(tx, { name: 'not-capped', eventTypes: ['org.created'], recipient: 'ops@initech.example' }));
    await t3((tx) => deleteRule(tx, other.id));
    await t2((tx) => deleteRule(tx, made.at(-1)!));
    const again = await t2((tx) => createRule(tx, { name: 'one-too-many', eventTypes: ['org.created'], recipient: 'ops@globex.example' }));
    for (const id of [...made.slice(0, -1), again.id]) await t2((tx) => deleteRule(tx, id));
  });

  it('names are unique per tenant; another tenant may use the same name', async () => {
    await t1((tx) => createRule(tx, { name: 'dup', eventTypes: ['org.created'], recipient: 'a@example.com' }));
    await expect(t1((tx) => createRule(tx, { name: 'dup', eventTypes: ['org.created'], recipient: 'a@example.com' }))).rejects.toBeInstanceOf(ConflictError);
    const other = await t1((tx) => createRule(tx, { name: 'other', eventTypes: ['org.created'], recipient: 'a@example.com' }));
    await expect(t1((tx) => updateRule(tx, other.id, { name: 'dup' }))).rejects.toBeInstanceOf(ConflictError);
    await expect(t2((tx) => createRule(tx, { name: 'dup', eventTypes: ['org.created'], recipient: 'b@example.com' }))).resolves.toMatchObject({ name: 'dup' });
  });

  it('refuses bad templates on create and update', async () => {
    await expect(t1((tx) => createRule(tx, { name: 'bad', eventTypes: ['org.created'], recipient: 'a@example.com', body: 'Hi {{user}}' }))).rejects.toMatchObject({ field: 'body' });
    const rule = await t1((tx) => createRule(tx, { name: 'good', eventTypes: ['org.created'], recipient: 'a@example.com' }));
    await expect(t1((tx) => updateRule(tx, rule.id, { subject: '{{type' }))).rejects.toMatchObject({ field: 'subject' });
  });

  it('another tenant\'s rule is not found; a deleted rule is gone from every view and frees its name', async () => {
    const rule = await t1((tx) => createRule(tx, { name: 'temp', eventTypes: ['org.created'], recipient: 'a@example.com' }));
    await expect(t2((tx) => getRule(tx, rule.id))).rejects.toBeInstanceOf(NotFoundError);
    await expect(t2((tx) => updateRule(tx, rule.id, { enabled: false }))).rejects.toBeInstanceOf(NotFoundError);
    await expect(t2((tx) => deleteRule(tx, rule.id))).rejects.toBeInstanceOf(NotFoundError);
    expect((await t2(listRules)).map((r) => r.id)).not.toContain(rule.id);

    await t1((tx) => deleteRule(tx, rule.id));
    await expect(t1((tx) => getRule(tx, rule.id))).rejects.toBeInstanceOf(NotFoundError);
    await expect(t1((tx) => deleteRule(tx, rule.id))).rejects.toBeInstanceOf(NotFoundError);
    await expect(t1((tx) => updateRule(tx, rule.id, { enabled: true }))).rejects.toBeInstanceOf(NotFoundError);
    expect((await t1(listRules)).map((r) => r.id)).not.toContain(rule.id);
    await t1((tx) => createRule(tx, { name: 'temp', eventTypes: ['org.created'], recipient: 'a@example.com' }));
    const { rows } = await testDb.owner.query('select count(*)::int as n from email.rules where tenant_id = 1 and name = $1', ['temp']);
    expect(rows[0].n).toBe(2);
  });

  it('matching: exact or prefix, enabled and not deleted, own tenant only; the subscriber check follows', async () => {
    const subscribers = new Subscribers();
    subscribers.register(emailRuleSubscriber);
    expect(await t1((tx) => subscribers.any(tx, 'data.row.changed'))).toBe(false);
    const rule = await t1((tx) => createRule(tx, { name: 'rows', eventTypes: ['data.*', 'platform.secret.created'], recipient: 'a@example.com' }));
    expect(await t1((tx) => subscribers.any(tx, 'data.row.changed'))).toBe(true);
    expect(await t2((tx) => subscribers.any(tx, 'data.row.changed'))).toBe(false);
    expect((await t1((tx) => matchingRules(tx, 'data.row.changed'))).map((r) => r.id)).toEqual([rule.id]);
    expect((await t1((tx) => matchingRules(tx, 'datax.row'))).map((r) => r.id)).toEqual([]);
    await t1((tx) => updateRule(tx, rule.id, { enabled: false }));
    expect(await t1((tx) => subscribers.any(tx, 'data.row.changed'))).toBe(false);
    await t1((tx) => updateRule(tx, rule.id, { enabled: true }));
    await t1((tx) => deleteRule(tx, rule.id));
    expect(await t1((tx) => subscribers.any(tx, 'data.row.changed'))).toBe(false);
  });
});

class RecordingMailer implements Mailer {
  readonly mode = 'smtp' as const;
  readonly server = 'recording';
  readonly sent: OutgoingMail[] = [];
  failFor = new Set<string>();
  /** Recipients the server refuses at RCPT TO while it takes the others. */
  refuse = new Set<string>();
  async send(mail: OutgoingMail) {
    if (mail.to.some((a) => this.failFor.has(a))) throw Object.assign(new Error('Invalid login: 535 Authentication failed'), { code: 'EAUTH', responseCode: 535, command: 'AUTH PLAIN AGh1YgBzZWNyZXQ=' });
    this.sent.push(mail);
    return { outcome: 'sent' as const, accepted: mail.to.filter((a) => !this.refuse.has(a)), refused: mail.to.filter((a) => this.refuse.has(a)) };
  }
  async check() {}
  close() {}
}

let nextId = 1_000_000;
function event(tenantId: number, type: string, payload: Record<string, unknown>, createdAt = new Date(Date.now() + 1000)): OutboxEvent {
  const id = nextId++;
  return { id, tenantId, type, payload, createdAt, position: { txid: '1', id } };
}

describe('the e-mail consumer', () => {
  let mailer: RecordingMailer;
  let consumer: EmailConsumer;

  beforeAll(async () => {
    mailer = new RecordingMailer();
    consumer = new EmailConsumer(db, () => mailer);
    await t3((tx) =>
      createRule(tx, { name: 'org-watch', eventTypes: ['org.created', 'org.*'], recipient: 'a@initech.example, b@initech.example', subject: '{{ type }} #{{payload.orgId}}', body: 'Org {{payload.name}} ({{tenantId}}/{{id}}) by {{rule}}' }),
    );
    await t3((tx) => createRule(tx, { name: 'broken', eventTypes: ['org.created'], recipient: 'fails@initech.example' }));
  });

  it('sends one message per matching rule, rendered from the event, even when a pattern matches twice', async () => {
    mailer.sent.length = 0;
    mailer.failFor = new Set();
    const e = event(3, 'org.created', { orgId: 5, tenantId: 3, name: 'Acme' });
    const outcomes = await consumer.handle(e);
    expect(outcomes.map((o) => o.outcome)).toEqual(['sent', 'sent']);
    const watch = mailer.sent.find((m) => m.to.length === 2)!;
    expect(watch).toEqual({
      to: ['a@initech.example', 'b@initech.example'],
      // The same for every send of this event by this rule (src/email/message-id.test.ts).
      key: expect.stringMatching(new RegExp(`^e${e.id}\\.t${e.createdAt.getTime()}\\.r\\d+\\.\\d+\\.\\d+$`)),
      subject: 'org.created #5',
      text: `Org Acme (3/${e.id}) by org-watch`,
      headers: { 'X-Svc-Event': 'org.created', 'X-Svc-Event-Id': String(e.id), 'X-Svc-Email-Rule': expect.any(String) },
    });
    expect(mailer.sent).toHaveLength(2);
  });

  it('a failed send is logged without secrets and skipped; the other rules still get theirs', async () => {
    mailer.sent.length = 0;
    mailer.failFor = new Set(['fails@initech.example']);
    const logs = captureLogs('info');
    try {
      const outcomes = await consumer.handle(event(3, 'org.created', { orgId: 6, tenantId: 3, name: 'B' }));
      expect(outcomes.map((o) => o.outcome).sort()).toEqual(['failed', 'sent']);
      expect(mailer.sent).toHaveLength(1);
      const warn = logs.lines().find((l) => l.level === 'warn');
      expect(warn).toMatchObject({ rule: 'broken', error: { code: 'EAUTH', responseCode: 535, command: 'AUTH PLAIN' } });
      expect(logs.raw()).not.toContain('AGh1YgBzZWNyZXQ=');
    } finally {
      logs.restore();
    }
  });

  it('a recipient the server refuses while it takes the others: logged at warn naming it; the sent line names only those it took', async () => {
    mailer.sent.length = 0;
    mailer.failFor = new Set();
    mailer.refuse = new Set(['b@initech.example']);
    const logs = captureLogs('info');
    try {
      const e = event(3, 'org.updated', { orgId: 9, tenantId: 3 });
      expect((await consumer.handle(e)).map((o) => o.outcome)).toEqual(['sent']);
      const warn = logs.lines().filter((l) => l.level === 'warn');
      expect(warn).toEqual([expect.objectContaining({ rule: 'org-watch', eventId: e.id, refused: ['b@initech.example'] })]);
      const sent = logs.lines().find((l) => l.level === 'info' && /sent event/.test(String(l.msg)));
      expect(sent).toMatchObject({ rule: 'org-watch', to: ['a@initech.example'] });
      expect(String(sent!.msg)).not.toContain('b@initech.example');
    } finally {
      logs.restore();
      mailer.refuse = new Set();
    }
  });

  it('a rule stored before the recipient check (root@localhost) sends nothing, logged once; changed to a public address, it sends again', async () => {
    mailer.sent.length = 0;
    mailer.failFor = new Set();
    // As a rule of an earlier version was stored: written past today's check.
    const { rows } = await testDb.owner.query<{ id: number }>(
      `insert into email.rules (tenant_id, name, event_types, recipient, subject, body, created_at)
       values (2, 'legacy', '{legacy.checked}', 'root@localhost, ops@globex.example', $1, $2, now() - interval '1 minute') returning id`,
      [DEFAULT_SUBJECT, DEFAULT_BODY],
    );
    const logs = captureLogs('info');
    try {
      for (const orgId of [1, 2]) {
        const outcomes = await consumer.handle(event(2, 'legacy.checked', { orgId, tenantId: 2, name: 'G' }));
        expect(outcomes).toEqual([{ ruleId: rows[0]!.id, outcome: 'refused' }]);
      }
      expect(mailer.sent).toEqual([]);
      const warns = logs.lines().filter((l) => l.level === 'warn');
      expect(warns).toHaveLength(1);
      expect(warns[0]).toMatchObject({ rule: 'legacy', tenantId: 2 });
      expect(logs.raw()).not.toContain('root@localhost');
    } finally {
      logs.restore();
    }
    await t2((tx) => updateRule(tx, rows[0]!.id, { recipient: 'ops@globex.example' }));
    const outcomes = await consumer.handle(event(2, 'legacy.checked', { orgId: 3, tenantId: 2, name: 'G' }));
    expect(outcomes.map((o) => o.outcome)).toEqual(['sent']);
    expect(mailer.sent.map((m) => m.to)).toEqual([['ops@globex.example']]);
    await t2((tx) => deleteRule(tx, rows[0]!.id));
  });

  it('nothing for a non-matching type, for another tenant, or for an event older than the rule', async () => {
    mailer.sent.length = 0;
    mailer.failFor = new Set();
    expect(await consumer.handle(event(3, 'platform.secret.created', { name: 'x', by: 'y', at: 'z' }))).toEqual([]);
    expect(await consumer.handle(event(1, 'org.moved', { orgId: 1, tenantId: 1, newParentId: 0 }))).toEqual([]);
    expect(await consumer.handle(event(3, 'org.created', { orgId: 1, tenantId: 3, name: 'old' }, new Date(Date.now() - 3_600_000)))).toEqual([]);
    expect(mailer.sent).toEqual([]);
  });

  it('reads a tenant\'s rules once for the events written before the read; a rule added later still gets the events after it', async () => {
    mailer.sent.length = 0;
    mailer.failFor = new Set(['fails@initech.example']);
    let reads = 0;
    // Reads of the rules only (activeRules: claims on the messages are written besides, and an event of a rule's own
    // millisecond is compared with it in a statement of its own, notRetroactive: neither is a read of the rules).
    const counting = {
      withTenant: (id: number, fn: (tx: Tx) => Promise<unknown>) =>
        db.withTenant(id, (tx) => {
          let counted = false;
          const query: Tx['query'] = (text, ...rest) => {
            if (!counted && /"readAt" from email\.rules\b/.test(text)) {
              counted = true;
              reads += 1;
            }
            return tx.query(text, ...rest);
          };
          return fn({ ...tx, query });
        }),
    } as unknown as Database;
    const cached = new EmailConsumer(counting, () => mailer, 60_000);
    const before = new Date(Date.now() - 50);
    await cached.handle(event(3, 'org.updated', { orgId: 8, tenantId: 3 }, before));
    await cached.handle(event(3, 'org.updated', { orgId: 9, tenantId: 3 }, before));
    expect(reads).toBe(1);
    const late = await t3((tx) => createRule(tx, { name: 'late', eventTypes: ['org.updated'], recipient: 'late@initech.example' }));
    const outcomes = await cached.handle(event(3, 'org.updated', { orgId: 10, tenantId: 3 }, new Date(Date.now() + 10)));
    expect(reads).toBe(2);
    expect(outcomes.map((o) => o.ruleId)).toContain(late.id);
    // An event written before that read is served by it, and does not reach the later rule.
    const older = await cached.handle(event(3, 'org.updated', { orgId: 11, tenantId: 3 }, before));
    expect(reads).toBe(2);
    expect(older.map((o) => o.ruleId)).not.toContain(late.id);
    await t3((tx) => deleteRule(tx, late.id));
  });

  it('a tenant\'s messages over its budget of recipients per minute are not sent (throttled, logged once a minute); the budget refills; other tenants keep theirs', async () => {
    mailer.sent.length = 0;
    mailer.failFor = new Set(['fails@initech.example']);
    let now = 0;
    // org-watch has two recipients: a budget of 5 a minute sends while a token is left (5, 3, 1),
    // the third taking it below zero; then none.
    const budgeted = new EmailConsumer(db, () => mailer, 1_000, { recipientsPerMinute: 5, now: () => now });
    const logs = captureLogs('info');
    try {
      const watch = async (orgId: number) => (await budgeted.handle(event(3, 'org.updated', { orgId, tenantId: 3 }))).map((o) => o.outcome);
      expect(await watch(20)).toEqual(['sent']);
      expect(await watch(21)).toEqual(['sent']);
      expect(await watch(22)).toEqual(['sent']);
      expect(await watch(23)).toEqual(['throttled']);
      expect(mailer.sent.map((m) => m.subject)).toEqual(['org.updated #20', 'org.updated #21', 'org.updated #22']);
      const warnings = logs.lines().filter((l) => l.level === 'warn' && /over their budget/.test(String(l.msg)));
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatchObject({ tenantId: 3, eventType: 'org.updated' });
      // 24 s later 2 tokens more (5 a minute) on the one owed: one token, one more message.
      now += 24_000;
      expect(await watch(24)).toEqual(['sent']);
      expect(await watch(25)).toEqual(['throttled']);
      // Another tenant's budget is its own.
      expect((budgeted as unknown as { budget: { take(tenant: number, recipients: number): boolean } }).budget.take(1, 5)).toBe(true);
    } finally {
      logs.restore();
    }
  });

  it('a body naming a large payload hundreds of times sends one bounded message, not hundreds of copies', async () => {
    mailer.sent.length = 0;
    mailer.failFor = new Set();
    const rule = await t2((tx) => createRule(tx, { name: 'copies', eventTypes: ['decision.copies'], recipient: 'big@globex.example', body: '{{ payload }}'.repeat(1500) }));
    try {
      const outcomes = await consumer.handle(event(2, 'decision.copies', { message: 'm'.repeat(16 * 1024) }));
      expect(outcomes).toEqual([{ ruleId: rule.id, outcome: 'sent' }]);
      expect(mailer.sent).toHaveLength(1);
      expect(mailer.sent[0]!.text.length).toBeLessThan(RENDERED_MAX + 100);
      expect(mailer.sent[0]!.text).toMatch(/… \(cut at 262,144 characters\)$/);
    } finally {
      await t2((tx) => deleteRule(tx, rule.id));
    }
  });

  it('with the mocked mailer every message is logged as mocked', async () => {
    const mocked = new EmailConsumer(db, () => new MockedMailer());
    const logs = captureLogs('info');
    try {
      const outcomes = await mocked.handle(event(3, 'org.updated', { orgId: 7, tenantId: 3 }));
      expect(outcomes).toEqual([{ ruleId: expect.any(Number), outcome: 'mocked' }]);
      expect(logs.lines().filter((l) => l.mail === 'mocked')).toEqual([expect.objectContaining({ to: ['a@initech.example', 'b@initech.example'], subject: 'org.updated #7' })]);
    } finally {
      logs.restore();
    }
  });
});

describe('deleted rules per tenant', () => {
  deletedHistoryCases({
    plural: 'e-mail rules',
    kept: MAX_DELETED_KEPT_PER_TENANT,
    db: () => db,
    table: 'email.rules',
    tenant: 3,
    other: 1,
    create: (tenant, name) => db.withTenant(tenant, (tx) => createRule(tx, { name, eventTypes: ['history.kept'], recipient: 'ops@example.com' })),
    remove: (tenant, name) =>
      db.withTenant(tenant, async (tx) => deleteRule(tx, Number((await tx.query<{ id: string }>('select id from email.rules where name = $1 and deleted_at is null', [name])).rows[0]!.id))),
    // A send claim naming it.
    hold: async (tx, tenant, id) => {
      await tx.query('insert into email.sends (tenant_id, event_id, rule_id, token, lease_until) values ($1, 1, $2, gen_random_uuid(), now())', [tenant, id]);
    },
  });
});

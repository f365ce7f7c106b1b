import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import '../../test/harness/quiet-logs.js';
import { startSmtpServer, type TestSmtpServer } from '../../test/harness/smtp.js';
import { Config } from '../config/config.js';
import type { OutboxEvent } from '../events/outbox.js';
import { EmailConsumer } from './consumer.js';
import { createMailer, type Mailer } from './mailer.js';
import { createRule } from './rules.js';

/**
 * The Message-ID of a rule's message is the same however often it is sent (a restart, a second
 * leader), so a mail service that de-duplicates by it keeps one copy; it differs between rules, and
 * between deployments (here: two databases of one PostgreSQL server) whose ids coincide.
 */

let smtp: TestSmtpServer;
let mailer: Mailer;
let one: MigratedDatabase;
let other: MigratedDatabase;

async function withRules(t: MigratedDatabase): Promise<number[]> {
  return t.db.withTenant(1, async (tx) => [
    (await createRule(tx, { name: 'first', eventTypes: ['org.updated'], recipient: 'ops@acme.example' })).id,
    (await createRule(tx, { name: 'second', eventTypes: ['org.*'], recipient: 'dev@acme.example' })).id,
  ]);
}

beforeAll(async () => {
  smtp = await startSmtpServer();
  mailer = createMailer(Config.load({ env: {}, overrides: { 'svc.mail.host': '127.0.0.1', 'svc.mail.port': smtp.port, 'svc.mail.from': 'Hub <hub@Mail.Example.net>' } }));
  one = await migratedDatabase({ 1: 'acme' }, 2);
  other = await migratedDatabase({ 1: 'acme' }, 2);
});

afterAll(async () => {
  mailer.close();
  await smtp.close();
  await one.close();
  await other.close();
});

const event: OutboxEvent = { id: 42, tenantId: 1, type: 'org.updated', payload: { orgId: 7, tenantId: 1 }, createdAt: new Date(Date.now() + 60_000), position: { txid: '1', id: 42 } };

/** Sends the event through a new consumer (as a restarted process would) and returns the Message-ID of each rule's message. */
async function send(t: MigratedDatabase, sent: OutboxEvent = event): Promise<Map<string, string>> {
  const before = smtp.messages.length;
  const outcomes = await new EmailConsumer(t.db, () => mailer).handle(sent);
  expect(outcomes.map((o) => o.outcome)).toEqual(['sent', 'sent']);
  const got = (await smtp.waitFor(before + 2)).slice(before);
  return new Map(got.map((m) => [String(m.parsed.headers.get('x-svc-email-rule')), String(m.parsed.messageId)]));
}

describe('Message-ID of an e-mail rule\'s message', () => {
  it('is the same for two sends of one event by one rule, differs between rules and between deployments', async () => {
    const rules = await withRules(one);
    expect(await withRules(other)).toEqual(rules); // the same rule ids in both deployments
    const first = await send(one);
    // Sent again as after a crash between the send and its record: the claims unfinished, their lease run out.
    await one.owner.query("update email.sends set finished_at = null, lease_until = clock_timestamp() - interval '1 second'");
    const again = await send(one);
    expect(again).toEqual(first);
    const [a, b] = rules.map((id) => first.get(String(id))!);
    expect(a).toMatch(new RegExp(`^<svc-hub\\.e42\\.t${event.createdAt.getTime()}\\.r${rules[0]}\\.\\d+\\.\\d+@mail\\.example\\.net>$`));
    expect(b).toMatch(new RegExp(`^<svc-hub\\.e42\\.t\\d+\\.r${rules[1]}\\.`));
    expect(a).not.toBe(b);
    const elsewhere = await send(other);
    for (const id of rules) expect(elsewhere.get(String(id))).not.toBe(first.get(String(id)));
  });

  it('differs for another event with the same id: a database restored to an earlier point (or cloned) writes new events under ids already used', async () => {
    const before: OutboxEvent = { ...event, id: 43, position: { txid: '1', id: 43 } };
    const first = await send(one, before);
    // The same id, the same database (system identifier and oid), the same rules: a new event,
    // written later. (Its claims are another event's, so they are cleared as a restore does.)
    await one.owner.query('delete from email.sends where event_id = 43');
    const later = await send(one, { ...before, createdAt: new Date(before.createdAt.getTime() + 1) });
    expect([...later.keys()]).toEqual([...first.keys()]);
    for (const [rule, id] of first) expect(later.get(rule)).not.toBe(id);
  });

  it('is random when the hub\'s role may not call pg_control_system(): the messages are sent all the same', async () => {
    const denied = await migratedDatabase({ 1: 'acme' }, 2);
    try {
      // In this database only (the catalog is the database's).
      await denied.owner.query('revoke execute on function pg_catalog.pg_control_system() from public');
      await withRules(denied);
      const ids = [...(await send(denied)).values()];
      expect(ids).toHaveLength(2);
      for (const id of ids) expect(id).not.toContain('svc-hub.');
    } finally {
      await denied.close();
    }
  });
});

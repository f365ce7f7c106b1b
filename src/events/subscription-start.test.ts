import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import '../../test/harness/quiet-logs.js';
import type { Tx } from '../db/database.js';
import { EmailConsumer } from '../email/consumer.js';
import { MockedMailer } from '../email/mailer.js';
import { createRule } from '../email/rules.js';
import { createIntegration, updateIntegration } from '../webhooks/integrations.js';
import { loadCatalog } from './catalog.js';
import { EventWriter, type OutboxRow, toEvent } from './outbox.js';

/**
 * "A subscription is not retroactive", against a create (or an enable) that waits inside its
 * transaction, as one does on the per-tenant advisory lock: an event committed while it waits was
 * written before the subscription existed, so it is neither mailed nor delivered. The subscription's
 * time is its row's insert (clock_timestamp()), as an event's is, not its transaction's start (now()).
 */

const writer = new EventWriter(loadCatalog());
let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' }, 4);
});

afterAll(async () => {
  await t.close();
});

const emit = (orgId: number) => t.db.withTenant(1, (tx) => writer.emit(tx, 'org.updated', { orgId, tenantId: 1 }));

async function eventOf(id: number) {
  const { rows } = await t.db.withTenant(1, (tx) => tx.query<OutboxRow>('select id, tenant_id, type, payload, created_at, txid::text as txid from events.outbox where id = $1', [id]));
  return toEvent(rows[0]!);
}

/** Runs `fn` in a tenant transaction that has begun (its now() fixed) before an event is written and committed elsewhere. */
async function waitingWhileAnEventCommits<T>(fn: (tx: Tx) => Promise<T>): Promise<{ made: T; eventId: number }> {
  let eventId = 0;
  const made = await t.db.withTenant(1, async (tx) => {
    await tx.query('select now()');
    eventId = await emit(1);
    return fn(tx);
  });
  return { made, eventId };
}

describe('a subscription is not retroactive, even when its create waited', () => {
  it('an e-mail rule does not get an event committed while its create waited; it gets the next one', async () => {
    const { made: rule, eventId } = await waitingWhileAnEventCommits((tx) => createRule(tx, { name: 'waited', eventTypes: ['org.updated'], recipient: 'ops@acme.example' }));
    const consumer = new EmailConsumer(t.db, () => new MockedMailer(), 0);
    expect((await consumer.handle(await eventOf(eventId))).map((o) => o.ruleId)).not.toContain(rule.id);
    const next = await emit(2);
    expect((await consumer.handle(await eventOf(next))).map((o) => o.ruleId)).toContain(rule.id);
  });

  it('a webhook integration, created or enabled again, is active from its write, after an event committed while it waited', async () => {
    const rules = { key: Buffer.alloc(32, 9) };
    // The webhook consumer's test: `active_since <= the event's created_at`.
    const delivered = async (integrationId: number, eventId: number) => {
      const { rows } = await t.db.withTenant(1, (tx) =>
        tx.query<{ due: boolean }>('select i.active_since <= o.created_at as due from hub.integrations i, events.outbox o where i.id = $1 and o.id = $2', [integrationId, eventId]),
      );
      return rows[0]!.due;
    };
    const created = await waitingWhileAnEventCommits((tx) => createIntegration(tx, { name: 'waited', targetUrl: 'https://hooks.example.com/x', eventTypes: ['org.updated'], authMode: 'NONE' }, rules));
    const id = Number(created.made.id);
    expect(await delivered(id, created.eventId)).toBe(false);
    expect(await delivered(id, await emit(3))).toBe(true);
    await t.db.withTenant(1, (tx) => updateIntegration(tx, id, { enabled: false }, rules));
    const enabled = await waitingWhileAnEventCommits((tx) => updateIntegration(tx, id, { enabled: true }, rules));
    expect(await delivered(id, enabled.eventId)).toBe(false);
    expect(await delivered(id, await emit(4))).toBe(true);
  });
});

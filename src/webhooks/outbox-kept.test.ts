import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { purgeOutbox } from '../events/consumer.js';
import { loadCatalog } from '../events/catalog.js';
import { EventWriter } from '../events/outbox.js';
import { OUTBOX_KEPT_FOR_BATCHES } from './journal.js';

/**
 * The outbox retention purge and the webhook consumer's batches (hub.delivery_batches): an event a
 * batch names stays, whatever its age, while the batch does; the retry sweep writes a dead process's
 * batch's deliveries from the event itself.
 */

const writer = new EventWriter(loadCatalog());
let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
});

afterAll(async () => {
  await t.close();
});

describe('the outbox purge beside the webhook consumer\'s batches', () => {
  it('keeps an event past its retention while a batch names it, and purges it once the batch is gone', async () => {
    // No consumer cursor holds anything back: only the batch can keep the event.
    await t.owner.query('delete from events.consumer_cursors');
    const named = await t.db.withTenant(1, (tx) => writer.emit(tx, 'org.updated', { orgId: 1, tenantId: 1 }));
    const other = await t.db.withTenant(1, (tx) => writer.emit(tx, 'org.updated', { orgId: 2, tenantId: 1 }));
    await t.owner.query(`update events.outbox set created_at = now() - interval '40 days'`);
    await t.owner.query(`insert into hub.delivery_batches (event_ids, lease_until, lease_token) values (array[$1::bigint], now() - interval '1 minute', gen_random_uuid())`, [named]);

    expect(await purgeOutbox(t.db, 30, undefined, [OUTBOX_KEPT_FOR_BATCHES])).toBe(1);
    const left = await t.owner.query<{ id: string }>('select id from events.outbox order by id');
    expect(left.rows.map((r) => Number(r.id))).toEqual([named]);
    expect(other).not.toBe(named);

    await t.owner.query('delete from hub.delivery_batches');
    expect(await purgeOutbox(t.db, 30, undefined, [OUTBOX_KEPT_FOR_BATCHES])).toBe(1);
    expect((await t.owner.query('select id from events.outbox')).rowCount).toBe(0);
  });
});

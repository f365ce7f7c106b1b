import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { purgeSendClaims } from './retention.js';
import { createRule } from './rules.js';

/**
 * The daily purge of the e-mail consumer's finished claims against a real database: the claims of
 * every tenant whose send ended more than the days kept ago go, a tenant that sends nothing more
 * included (they used to go only as that tenant's later messages were claimed); claims finished
 * since, and claims not finished whatever their age, stay.
 */

let t: MigratedDatabase;
const rules = new Map<number, number>();

beforeAll(async () => {
  t = await migratedDatabase({ 501: 'a', 502: 'b' });
  for (const tenant of [501, 502]) {
    const rule = await t.db.withTenant(tenant, (tx) => createRule(tx, { name: 'claims', eventTypes: ['org.updated'], recipient: 'ops@acme.example', subject: 's' }));
    rules.set(tenant, rule.id);
  }
});

afterAll(async () => {
  await t?.close();
});

/**
 * Claims on events `eventIds`' messages of the tenant's rule, finished `finished` ago (SQL interval;
 * null: not finished), all at the same time (one statement: one now()).
 */
async function claim(tenant: number, eventIds: number | number[], finished: string | null, leaseAgo = '2 days'): Promise<void> {
  await t.owner.query(
    `insert into email.sends (tenant_id, event_id, rule_id, token, lease_until, finished_at, outcome)
     select $1, e, $3, gen_random_uuid(), now() - $4::interval, now() - $5::interval, case when $5::interval is null then null else 'sent' end
       from unnest($2::bigint[]) e`,
    [tenant, [eventIds].flat(), rules.get(tenant), leaseAgo, finished],
  );
}

async function kept(): Promise<number[]> {
  const { rows } = await t.owner.query<{ event_id: string }>('select event_id from email.sends order by event_id');
  return rows.map((r) => Number(r.event_id));
}

describe('the daily purge of finished e-mail claims', () => {
  it("deletes every tenant's claims finished over the days kept, in batches; keeps newer and unfinished ones", async () => {
    // Tenant 501 stopped sending a day and more ago: nothing of its own claims anything any more.
    await claim(501, 1, '26 hours');
    await claim(501, [2, 3, 4], '25 hours'); // ended at the same time: the walk's key tells them apart
    await claim(501, 5, null); // its process died mid-send: claimed again once its lease ran out, not purged
    await claim(502, 6, '30 hours');
    await claim(502, 7, '1 hour');
    await claim(502, 8, null, '-1 minute'); // being sent now
    // Batches of one row: the walk over the index goes past each tenant's kept claims.
    expect(await purgeSendClaims(t.db, 1, 1)).toBe(5);
    expect(await kept()).toEqual([5, 7, 8]);
    expect(await purgeSendClaims(t.db, 1)).toBe(0);
    // 0 days keeps everything (none is purged however old).
    await claim(501, 9, '3 days');
    expect(await purgeSendClaims(t.db, 0)).toBe(0);
    expect(await kept()).toEqual([5, 7, 8, 9]);
  });
});

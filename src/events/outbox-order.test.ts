import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { migratedDatabase } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import type { Database } from '../db/database.js';
import { headPosition, readAfter, START } from './outbox.js';

/**
 * The outbox's order is its xid8 `txid`, then `id`, whatever the number of digits: the event stream's
 * reads and its starting point once sorted the text form of txid, so an outbox holding txids 992 and
 * 1685 put 992 last (a resumed stream skipped events, a new one started hours back). Events are
 * written here with chosen, long-past txids of 1 to 3 digits, ids in another order.
 */

let db: Database;
let owner: pg.Client;
const TENANT = 401;
const OTHER = 402;
/** [txid, tenant] in the order of insertion (so ids ascend in this order). */
const WRITTEN: Array<[string, number]> = [
  ['101', TENANT],
  ['99', TENANT],
  ['9', TENANT],
  ['100', OTHER],
  ['10', TENANT],
  ['98', TENANT],
  ['11', TENANT],
];

beforeAll(async () => {
  ({ db, owner } = await migratedDatabase({ [TENANT]: 'order-a', [OTHER]: 'order-b' }, 2));
  // Readable events are those of transactions older than every running one: the server's oldest
  // running transaction must be past the txids written here (each statement below takes an xid).
  await until('the server to be past txid 200', async () => {
    const { rows } = await owner.query<{ xmin: string }>('select pg_current_xact_id()::text as current, pg_snapshot_xmin(pg_current_snapshot())::text as xmin');
    return BigInt(rows[0]!.xmin) > 200n;
  });
  for (const [txid, tenant] of WRITTEN) {
    await owner.query(`insert into events.outbox (tenant_id, type, payload, txid) values ($1, 'org.updated', '{}', $2::xid8)`, [tenant, txid]);
  }
});

afterAll(async () => {
  await owner.end();
  await db.close();
});

const query = (text: string, values?: unknown[]) => owner.query(text, values);
const written = (tenant?: number) =>
  WRITTEN.filter(([, t]) => tenant === undefined || t === tenant)
    .map(([txid]) => txid)
    .sort((a, b) => Number(a) - Number(b));

describe('the outbox order', () => {
  it('readAfter returns events by txid as a number, across digit counts, for all tenants and for one', async () => {
    const all = await readAfter(query, START, 100);
    const ours = all.filter((e) => WRITTEN.some(([txid]) => txid === e.position.txid));
    expect(ours.map((e) => e.position.txid)).toEqual(written());
    // Every event the migrations wrote too: one order throughout.
    const txids = all.map((e) => BigInt(e.position.txid));
    expect(txids).toEqual([...txids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    expect((await readAfter(query, START, 100, TENANT)).map((e) => e.position.txid)).toEqual(written(TENANT));
  });

  it('resuming after an event returns everything after it and nothing before', async () => {
    const [first, second] = await readAfter(query, START, 2, TENANT);
    expect([first!.position.txid, second!.position.txid]).toEqual(['9', '10']);
    const rest = await readAfter(query, second!.position, 100, TENANT);
    expect(rest.map((e) => e.position.txid)).toEqual(['11', '98', '99', '101']);
  });

  it('headPosition is the event with the greatest txid, not the greatest text', async () => {
    const { rows } = await owner.query<{ txid: string }>('select max(txid)::text as txid from events.outbox');
    const head = await headPosition(query);
    expect(head.txid).toBe(rows[0]!.txid);
    expect(BigInt(head.txid)).toBeGreaterThanOrEqual(101n);
  });
});

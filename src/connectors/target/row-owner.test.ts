import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../../test/harness/api-client.js';
import { hubRunner } from '../../../test/harness/connector-runner.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { Subscribers } from '../../events/subscribers.js';
import { ingestCsv } from '../csv-ingest.js';
import { csvSourceId } from '../csv-source.js';

/**
 * A row belongs to its last writer (its connector_id and endpoint_id: what a delete of that writer
 * erases), whatever something subscribes to `data.row.changed`. With a subscriber, a CSV ingest
 * writes only the rows whose content changed (and tells them): a row another CSV source had stored
 * with the same content stayed that source's, and deleting that source erased it, although the
 * later ingest had stored it (without a subscriber the same ingest took the row over). On the real
 * PostgreSQL, chunks of 64 rows and more staged with COPY, smaller ones sent as JSON.
 */

let hub: TestHub;
let owner: pg.Client;
const TENANT = 1;

const subscribed = new Subscribers();
subscribed.register(async (_tx, type) => type === 'data.row.changed');

const ingest = (connector: string, table: string, csv: string) => {
  return ingestCsv(hubRunner(hub, { subscribers: subscribed }), TENANT, async () => undefined, (fn) => hub.services.db.withTenant(TENANT, fn), { connector, table, key: 'id', csv, triggeredBy: 'test' });
};

const changedEvents = async (runId: string) =>
  (await owner.query<{ key: string; op: string }>(`select payload->>'entity_key' as key, payload->>'op' as op from events.outbox where type = 'data.row.changed' and payload->>'run_id' = $1 order by id`, [runId])).rows;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('a CSV ingest over rows another source stored with the same content', () => {
  it.each([
    ['staged with COPY', 100],
    ['sent as JSON', 3],
  ])('takes them over without telling them changed, and a delete of the other source leaves them (%s)', async (_how, n) => {
    const table = `owned_${n}`;
    const lines = Array.from({ length: n }, (_v, i) => `k${String(i).padStart(3, '0')},city ${i}`);
    const first = await ingest(`first-${n}`, table, ['id,city', ...lines].join('\n'));
    expect(first).toMatchObject({ status: 'Completed', recordsOut: n });
    expect(await changedEvents(first.id)).toHaveLength(n);
    // The second source: the same rows, and one of them changed.
    const second = await ingest(`second-${n}`, table, ['id,city', ...lines.slice(0, -1), `k${String(n - 1).padStart(3, '0')},moved`].join('\n'));
    expect(second).toMatchObject({ status: 'Completed', recordsOut: n });
    expect(await changedEvents(second.id)).toEqual([{ key: `k${String(n - 1).padStart(3, '0')}`, op: 'update' }]);
    const owners = await owner.query<{ owner: string; n: number }>(`select connector_id::text as owner, count(*)::int as n from ext_t${TENANT}.${table} group by 1`);
    expect(owners.rows).toEqual([{ owner: csvSourceId(TENANT, `second-${n}`), n }]);

    const deleted = await fetch(`${hub.url}/api/connectors/first-${n}`, { method: 'DELETE', headers: { 'X-Tenant-ID': String(TENANT) } });
    expect(deleted.status).toBe(204);
    expect(Number((await owner.query(`select count(*) as n from ext_t${TENANT}.${table}`)).rows[0].n)).toBe(n);
    // Ingested again as it is: nothing changed, nothing told, nothing rewritten.
    const again = await ingest(`second-${n}`, table, ['id,city', ...lines.slice(0, -1), `k${String(n - 1).padStart(3, '0')},moved`].join('\n'));
    expect(again).toMatchObject({ status: 'Completed', recordsOut: n });
    expect(await changedEvents(again.id)).toEqual([]);
  }, 60_000);
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type DemoSource, startDemoSource } from '../../src/demo-source/server.js';
import { createTestDatabase } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import { seedPartners } from './partners.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of a real `svc-hub all` process in the middle of a workflow dormancy sweep that is
 * announcing decisions (1,000 records a transaction), then a new process on the same database.
 * docs/workflows.md ("Dormancy"): a due spell's `decision.dormant.<workflow>` is emitted in the same
 * transaction that marks the spell notified, never twice for one spell, whichever process sweeps:
 * so after the crash every due spell gets its decision (none lost) and exactly one (none doubled).
 */

const EXTRA = 30_000;
const owners: pg.Client[] = [];
let demo: DemoSource;

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 2400, log: () => undefined });
});

afterAll(async () => {
  await killAll();
  for (const owner of owners) await owner.end();
  await demo?.close();
});

describe('kill -9 of the hub mid dormancy sweep', () => {
  it('loses no decision and doubles none', async () => {
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);
    // No sweep while the table is filled: the first process only prepares.
    const prepare = await startHubProcess('all', url, { SVC_WORKFLOW_SWEEP_EVERY: '1h' });
    const records = await seedPartners(prepare, owner, { url: demo.url, rows: 2400 }, 'dormant_partners', 'country', { rows: EXTRA, value: "'DE'" });
    // The states: every country of the records.
    const countries = (await owner.query(`select array_agg(distinct country order by country) as c from ext_t1.dormant_partners`)).rows[0].c as string[];
    const post = async (path: string, body: unknown) =>
      (await fetch(`${prepare.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'content-type': 'application/json' }, body: JSON.stringify(body) })).status;
    const entity = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'dormant' },
      spec: { scope: 'crm', key: 'id', columns: [{ name: 'id', type: 'text' }, { name: 'country', type: 'text' }], sources: [{ table: 'ext.dormant_partners', key: 'external_id', columns: { id: 'external_id', country: 'country' } }] },
    };
    expect(await post('/api/entities/apply', entity)).toBe(201);
    // Every record is due 1 s after the apply (records already there are in their state since it).
    const workflow = { apiVersion: 'apps.svc.io/v1', kind: 'Workflow', metadata: { name: 'dormant-status' }, spec: { entity: 'dormant', stateColumn: 'country', states: countries, dormancy: { after: '1s' } } };
    expect(await post('/api/workflows/apply', workflow)).toBe(201);
    await prepare.stop();
    // Every record due before the first process starts (its first pass announces them all): by the database's clock, which the sweep reads.
    await until('every record to be due', async () => (await owner.query(`select now() > tracked_since + interval '1 second' as due from workflows.workflows where name = 'dormant-status'`)).rows[0]?.due === true, { timeoutMs: 5_000 });

    const clocks = { SVC_WORKFLOW_SWEEP_EVERY: '500ms', SVC_LEADER_CHECK_EVERY: '300ms' };
    const decisions = async () => Number((await owner.query(`select count(*)::int as n from events.outbox where type = 'decision.dormant.dormant-status'`)).rows[0].n);
    const first = await startHubProcess('all', url, clocks);
    await until('the first decisions', async () => (await decisions()) > 0, { timeoutMs: 60_000, everyMs: 20, detail: () => first.output().slice(-2000) });
    await first.crash();
    const atCrash = await decisions();
    expect(atCrash).toBeLessThan(records); // killed mid-pass
    const notified = (await owner.query(`select count(*)::int as n from workflows.spells where notified_at is not null`)).rows[0].n;
    expect(notified).toBe(atCrash); // each decision committed with its spell's mark, nothing else

    const second = await startHubProcess('all', url, clocks);
    let seen = atCrash;
    const caughtUp = async () => {
      seen = await decisions();
      return seen >= records;
    };
    await until('a decision for every record', caughtUp, {
      timeoutMs: 90_000,
      everyMs: 200,
      detail: () => `${seen} of ${records} decisions (${atCrash} at the crash); the hub said:\n${second.output().slice(-1500)}`,
    });
    // Nothing more comes: a marker record, due 1 s after a later pass sees it, is announced by a pass
    // after that one; a decision doubled by those passes would show by then.
    await owner.query(
      `insert into ext_t1.dormant_partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, country)
         select 1, 'marker', 'h-marker', '{}', connector_id, endpoint_id, 'DE' from ext_t1.dormant_partners limit 1`,
    );
    await until('the marker record\'s decision', async () => (await owner.query(`select 1 from events.outbox where type = 'decision.dormant.dormant-status' and payload->>'key' = 'marker'`)).rows.length > 0, {
      timeoutMs: 30_000,
      everyMs: 100,
      detail: () => second.output().slice(-1500),
    });
    const { rows } = await owner.query(
      `select count(*)::int as decisions, count(distinct payload->>'key')::int as keys
         from events.outbox where type = 'decision.dormant.dormant-status'`,
    );
    expect(rows[0]).toEqual({ decisions: records + 1, keys: records + 1 });
    const spells = await owner.query(`select count(*)::int as n, count(*) filter (where notified_at is not null)::int as notified from workflows.spells`);
    expect(spells.rows[0]).toEqual({ n: records + 1, notified: records + 1 });
    await second.stop();
  }, 240_000);
});

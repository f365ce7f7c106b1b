import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type DemoSource, startDemoSource } from '../../src/demo-source/server.js';
import { createTestDatabase } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import { checkDormancyOnce, prepareDormancy } from './partners.js';
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
    const records = await prepareDormancy(url, owner, { url: demo.url, rows: 2400 }, EXTRA);

    const clocks = { SVC_WORKFLOW_SWEEP_EVERY: '500ms', SVC_LEADER_CHECK_EVERY: '300ms' };
    const decisions = async () => Number((await owner.query(`select count(*)::int as n from events.outbox where type = 'decision.dormant.dormant-status'`)).rows[0].n);
    const first = await startHubProcess('all', url, clocks);
    await until('the first decisions', async () => (await decisions()) > 0, { timeoutMs: 60_000, everyMs: 20, detail: () => first.output().slice(-2000) });
    await first.crash();
    const atCrash = await decisions();
    expect(atCrash).toBeLessThan(records); // killed mid-pass
    const notified = (await owner.query(`select count(*)::int as n from workflows.spells where notified_at is not null`)).rows[0].n;
    expect(notified).toBe(atCrash); // each decision committed with its spell's mark, nothing else
    expect((await owner.query(`select count(*)::int as n from events.inbox where type = 'decision.dormant.dormant-status'`)).rows[0].n).toBe(atCrash);

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
    await checkDormancyOnce(owner, records, () => second.output().slice(-1500));
    await second.stop();
  }, 240_000);
});

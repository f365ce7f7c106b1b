import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { applySweptWorkflow } from '../../test/harness/workflow-fixture.js';
import { until } from '../../test/harness/until.js';
import type { Database } from '../db/database.js';
import { ASK_PARTS, sweepWorkflows } from './sweep.js';

/**
 * A quiet tick of the dormancy sweep, on the real PostgreSQL: a part of the records read (WRITE_ROWS,
 * 1,000) with nothing to start, end or announce opens no write transaction, so it takes no
 * transaction id (which would hold back every outbox consumer while it ran) and costs no commit.
 * The parts of each fetch are asked about in one read (the reader's digests of their spells), but
 * after a fetch whose every part wrote. Each part with something to do still writes it (a changed
 * record, a gone one, a due spell announced once, the baseline of an unfinished first pass marked
 * done at the end of the next), and a part asked about and found quiet is not written. A re-apply
 * on another state column during a pass still stops it at the next fetch.
 * Every transaction the sweep opens is recorded with its statements and the transaction id it
 * held at its end (`pg_current_xact_id_if_assigned()`, null without one).
 */

let hub: TestHub;
let owner: pg.Client;
const RECORDS = 2_500;
const WORKFLOW = 'quiet-status';

interface Opened {
  statements: string[];
  xid: string | null;
}
const opened: Opened[] = [];
let recording: Database;
/** Called once each statement of the sweep has answered. */
let afterStatement: ((text: string) => Promise<void>) | undefined;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await applySweptWorkflow(hub, owner, {
    name: 'quiet',
    records: RECORDS,
    key: "'p' || lpad(g::text, 5, '0')",
    status: "'prospect'",
    states: ['prospect', 'active'],
    dormancy: { after: '1s', states: ['prospect'] },
  });
  const db = hub.services.db;
  recording = Object.create(db) as Database;
  recording.withTenant = (tenantId, fn) =>
    db.withTenant(tenantId, async (tx) => {
      const one: Opened = { statements: [], xid: null };
      opened.push(one);
      const result = await fn({
        tenantId: tx.tenantId,
        query: async (text, values, options) => {
          one.statements.push(text);
          const answered = await tx.query(text, values, options);
          await afterStatement?.(text);
          return answered as never;
        },
      });
      one.xid = (await tx.query<{ xid: string | null }>('select pg_current_xact_id_if_assigned()::text as xid')).rows[0]!.xid;
      return result;
    });
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

/**
 * One sweep through `recording`: its result, the transactions that held a transaction id, the
 * fetches whose parts were asked about before any write (the reader's digests of their spells) and
 * the parts written (the workflow's row share-locked).
 */
async function tick(batch = 10_000) {
  opened.length = 0;
  const result = await sweepWorkflows(recording, hub.services.events, { batch });
  return {
    result,
    withXid: opened.filter((t) => t.xid !== null).length,
    asked: opened.flatMap((t) => t.statements).filter((s) => s.includes('sha256(')).length,
    written: opened.filter((t) => t.statements.some((s) => / for share$/.test(s))).length,
  };
}

const spell = async (key: string) =>
  (
    await owner.query<{ state: string; due: boolean; notified: boolean }>(
      `select s.state, s.since <= now() - interval '1 second' as due, s.notified_at is not null as notified
         from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = $1 and s.record_key = $2`,
      [WORKFLOW, key],
    )
  ).rows[0];

const decisions = async (key: string) =>
  (await owner.query<{ n: number }>(`select count(*)::int as n from events.outbox where tenant_id = 1 and type = $1 and payload->>'key' = $2`, [`decision.dormant.${WORKFLOW}`, key])).rows[0]!.n;

describe('a quiet tick of the dormancy sweep', () => {
  it('opens no write transaction and takes no transaction id; a part with something to do is still written, once', async () => {
    await until('the spells to come due at the first pass', async () => (await owner.query(`select now() - tracked_since > interval '1.1 seconds' as due from workflows.workflows where name = $1`, [WORKFLOW])).rows[0]?.due);
    const first = await tick();
    expect(first.result).toMatchObject({ workflows: 1, records: RECORDS, started: RECORDS, emitted: RECORDS, ended: 0 });
    expect(first.written).toBe(3);
    expect(first.withXid).toBe(3);

    // Nothing changed, nothing due: each fetch's parts only read, in one statement, whatever the batch read at a time.
    for (const [batch, fetches] of [
      [10_000, 1],
      [1_000, 3],
      [700, 4],
    ]) {
      const quiet = await tick(batch);
      expect(quiet.result).toMatchObject({ workflows: 1, records: RECORDS, started: 0, ended: 0, emitted: 0, skipped: 0 });
      expect({ batch, asked: quiet.asked, written: quiet.written, withXid: quiet.withXid }).toEqual({ batch, asked: fetches, written: 0, withXid: 0 });
    }

    // A first pass that stopped before its end: the next marks the baseline done, in its last part only.
    await owner.query('update workflows.workflows set baseline_done = false where name = $1', [WORKFLOW]);
    const baseline = await tick();
    expect(baseline.result).toMatchObject({ records: RECORDS, started: 0, ended: 0, emitted: 0 });
    expect(baseline.written).toBe(1);
    expect((await owner.query('select baseline_done from workflows.workflows where name = $1', [WORKFLOW])).rows[0].baseline_done).toBe(true);
    expect((await tick()).written).toBe(0);

    // One record of the last part changes state, then back: each time that part is written, a new spell started.
    await owner.query(`update ext_t1.quiet_partners set status = 'active' where external_id = 'p02345'`);
    const changed = await tick();
    expect(changed.result).toMatchObject({ records: RECORDS, started: 1, ended: 0, emitted: 0 });
    expect(changed).toMatchObject({ asked: 1, written: 1, withXid: 1 });
    expect(await spell('p02345')).toMatchObject({ state: 'active', notified: false });
    await owner.query(`update ext_t1.quiet_partners set status = 'prospect' where external_id = 'p02345'`);
    expect(await tick()).toMatchObject({ result: { started: 1, emitted: 0 }, written: 1 });

    // Its new spell in a dormancy state comes due: announced once, in one part's transaction.
    await until('the new spell of p02345 due', async () => (await spell('p02345'))?.due);
    const due = await tick();
    expect(due.result).toMatchObject({ started: 0, ended: 0, emitted: 1 });
    expect(due.written).toBe(1);
    expect(await decisions('p02345')).toBe(2);
    expect(await tick()).toMatchObject({ result: { emitted: 0 }, written: 0, withXid: 0 });
    expect(await decisions('p02345')).toBe(2);

    // A record gone from the first part and the last of all: their spells end, in those two parts only.
    await owner.query(`delete from ext_t1.quiet_partners where external_id in ('p00042', 'p02500')`);
    const gone = await tick();
    expect(gone.result).toMatchObject({ records: RECORDS - 2, started: 0, ended: 2, emitted: 0 });
    expect(gone).toMatchObject({ asked: 1, written: 2, withXid: 2 });
    const asked = await tick(1_000);
    expect(asked).toMatchObject({ result: { records: RECORDS - 2, started: 0, ended: 0 }, written: 0, withXid: 0 });
    expect(await spell('p00042')).toBeUndefined();
  });

  it('stops at the next part when the workflow is re-applied on another state column during the pass', async () => {
    expect((await tick()).written).toBe(0);
    let parts = 0;
    afterStatement = async (text) => {
      // Once the first fetch (of one part) was found quiet, before the second is looked at.
      if (text.includes('sha256(') && ++parts === 1) {
        await hub.services.workflows.apply(1, undefined, { apiVersion: 'apps.svc.io/v1', kind: 'Workflow', metadata: { name: WORKFLOW }, spec: { entity: 'quiet', stateColumn: 'id', states: ['prospect', 'active'], dormancy: { after: '1s', states: ['prospect'] } } }, 'test');
      }
    };
    let stopped: Awaited<ReturnType<typeof tick>>;
    try {
      stopped = await tick(1_000);
    } finally {
      afterStatement = undefined;
    }
    expect(parts).toBe(2);
    expect(stopped.result).toMatchObject({ workflows: 1, records: 1_000, started: 0, ended: 0, emitted: 0 });
    expect(stopped.written).toBe(0);
    const spells = async () => (await owner.query<{ n: number }>(`select count(*)::int as n from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = $1`, [WORKFLOW])).rows[0]!.n;
    expect(await spells()).toBe(0);
    // The next tick starts afresh: a spell per record (its key its state), the baseline done.
    const records = (await owner.query<{ n: number }>('select count(*)::int as n from ext_t1.quiet_partners')).rows[0]!.n;
    expect((await tick()).result).toMatchObject({ records, started: records, ended: 0 });
    expect(await spells()).toBe(records);
    expect(await spell('p00001')).toMatchObject({ state: 'p00001' });
    expect((await owner.query('select baseline_done from workflows.workflows where name = $1', [WORKFLOW])).rows[0].baseline_done).toBe(true);
  });
  it('compares keys and states of any length and script: a quiet tick over non-ASCII records writes nothing', async () => {
    // The digests of the records (made by the hub) and of the spells (made by PostgreSQL) must agree
    // byte for byte: multi-byte UTF-8, keys of different lengths, states outside ASCII. The other
    // workflow goes first, so that the ticks below sweep this one alone.
    await owner.query('delete from workflows.workflows where name = $1', [WORKFLOW]);
    await applySweptWorkflow(hub, owner, {
      name: 'scripts',
      records: 1_500,
      key: "'ключ-' || g || '-' || repeat('é', g % 7) || case when g % 5 = 0 then '😀' else '' end",
      status: "case when g % 2 = 0 then 'état' else '😀 prospect' end",
      states: ['état', '😀 prospect'],
      dormancy: { after: '1h', states: ['état'] },
    });
    const first = await tick();
    expect(first.result).toMatchObject({ started: 1_500, ended: 0, emitted: 0 });
    for (const batch of [10_000, 700]) {
      const quiet = await tick(batch);
      expect({ batch, started: quiet.result.started, ended: quiet.result.ended, written: quiet.written, withXid: quiet.withXid }).toEqual({ batch, started: 0, ended: 0, written: 0, withXid: 0 });
    }
    // One state changed: that part is written, the others are not.
    await owner.query(`update ext_t1.scripts_partners set status = 'état' where external_id = 'ключ-13-éééééé'`);
    expect(await tick()).toMatchObject({ result: { started: 1 }, written: 1 });
    // In fetches of 700: the first fetch's one part wrote, so the second is written without asking
    // (and writes nothing); the third is asked about again.
    await owner.query(`update ext_t1.scripts_partners set status = '😀 prospect' where external_id = 'ключ-13-éééééé'`);
    expect(await tick(700)).toMatchObject({ result: { started: 1 }, asked: 2, written: 2, withXid: 2 });
  });
  it('asks about at most ASK_PARTS parts in one statement, whatever the batch', async () => {
    await owner.query('delete from workflows.workflows where name = $1', ['scripts-status']);
    // 11,500 records: twelve parts of at most 1,000, all in one fetch of 100,000.
    await applySweptWorkflow(hub, owner, {
      name: 'many',
      records: 11_500,
      key: "'m' || lpad(g::text, 6, '0')",
      status: "'active'",
      states: ['prospect', 'active'],
      dormancy: { after: '1h', states: ['prospect'] },
    });
    expect(ASK_PARTS).toBe(10);
    expect((await tick(100_000)).result).toMatchObject({ records: 11_500, started: 11_500 });
    expect(await tick(100_000)).toMatchObject({ result: { records: 11_500, started: 0 }, asked: 2, written: 0, withXid: 0 });
    // A change in the twelfth part, asked about in the second statement: that part alone written.
    await owner.query(`update ext_t1.many_partners set status = 'prospect' where external_id = 'm011400'`);
    expect(await tick(100_000)).toMatchObject({ result: { started: 1 }, asked: 2, written: 1 });
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../../test/harness/database.js';
import { deferred } from '../../../test/harness/deferred.js';
import { outcome, untilEndedOrWaiting } from '../../../test/harness/held-transaction.js';
import type { Tx } from '../../db/database.js';
import { addChunk, chunkStatement, failInterrupted, finishRun, getRun, listRuns, listRunsJson, RunClosedError, requestCancel, type RunRecord, runClosed } from './ledger.js';

/**
 * A run's counts as its chunks record them (connectors V14): each chunk a row of its own, written
 * without waiting for the other chunks in flight (they updated the run's one row, each waiting for
 * the commit of the one before); what the run reports while Running adds them up, and whatever ends
 * it (its own end, the interrupted-run sweep after its process was killed, a cancel of a silent run)
 * moves every committed chunk's counts into its row, waiting for a chunk in flight, once.
 */

const T = 1;
let t: MigratedDatabase;

beforeAll(async () => {
  t = await migratedDatabase({ [T]: 'chunk-counts', 2: 'other' });
}, 60_000);

afterAll(async () => {
  await t?.close();
});

async function runningRun(): Promise<string> {
  const { rows } = await t.owner.query<{ id: string }>(
    `insert into connectors.runs (tenant_id, connector_id, connector_name, endpoint_uuid, endpoint_id, status, triggered_by)
     values ($1, gen_random_uuid(), 'counted', gen_random_uuid(), 'e', 'Running', 'test') returning id`,
    [T],
  );
  return rows[0]!.id;
}

const chunk = (n: number, skipped = 0) => ({ in: n, out: n - skipped, skipped, deadLetters: skipped });
const add = (runId: string, counts: ReturnType<typeof chunk>) => t.db.withTenant(T, (tx) => addChunk(tx, runId, counts));

/** A chunk's transaction held open after its counts were recorded, until `release()`. */
function heldChunk(runId: string, counts: ReturnType<typeof chunk>) {
  const released = deferred();
  const recorded = deferred();
  const done = t.db.withTenant(T, async (tx: Tx) => {
    await addChunk(tx, runId, counts);
    recorded.resolve();
    await released.promise;
  });
  return { atCommit: recorded.promise, release: () => released.resolve(), done };
}

const counts = (run: RunRecord) => ({ in: run.recordsIn, out: run.recordsOut, skipped: run.recordsSkipped, dead: run.deadLetterCount, chunks: run.chunkCount });
const chunkRows = async (runId: string) => (await t.owner.query<{ n: number }>('select count(*)::int as n from connectors.run_chunk_counts where run_id = $1', [runId])).rows[0]!.n;

describe("a run's chunk counts", () => {
  it('are recorded by chunks in flight at once, none waiting for another to commit', async () => {
    const runId = await runningRun();
    const first = heldChunk(runId, chunk(1000));
    await first.atCommit;
    let secondDone = false;
    const second = outcome(add(runId, chunk(1000, 3)).finally(() => (secondDone = true)));
    // Before connectors V14 the second chunk's update of the run's row waited here for the first's commit.
    await untilEndedOrWaiting(t.owner, () => secondDone, 'the second chunk');
    expect(secondDone).toBe(true);
    expect(await second).toBe('committed');
    first.release();
    await first.done;
    const run = await t.db.withTenant(T, (tx) => getRun(tx, runId));
    expect(counts(run)).toEqual({ in: 2000, out: 1997, skipped: 3, dead: 3, chunks: 2 });
  });

  it("are what a Running run reports (its record and both lists), and are moved into its row as it ends", async () => {
    const runId = await runningRun();
    await add(runId, chunk(1000));
    await add(runId, chunk(500, 2));
    const expected = { in: 1500, out: 1498, skipped: 2, dead: 2, chunks: 2 };
    const read = await t.db.withTenant(T, async (tx) => ({
      one: await getRun(tx, runId),
      listed: (await listRuns(tx, 50)).find((r) => r.id === runId)!,
      page: (JSON.parse((await listRunsJson(tx, { limit: 50 })).items.text) as RunRecord[]).find((r) => r.id === runId)!,
    }));
    expect(read.one.status).toBe('Running');
    expect([counts(read.one), counts(read.listed), counts(read.page)]).toEqual([expected, expected, expected]);
    // Another tenant sees neither the run nor its chunks.
    expect(await t.db.withTenant(2, async (tx) => (await tx.query<{ n: number }>('select count(*)::int as n from connectors.run_chunk_counts')).rows[0]!.n)).toBe(0);

    const ended = await t.db.withTenant(T, (tx) => finishRun(tx, runId, 'Completed'));
    expect(ended.ended).toBe(true);
    expect(counts(ended)).toEqual(expected);
    expect(await chunkRows(runId)).toBe(0);
    const stored = await t.owner.query('select records_in::int as "in", records_out::int as out, chunk_count as chunks from connectors.runs where id = $1', [runId]);
    expect(stored.rows[0]).toEqual({ in: 1500, out: 1498, chunks: 2 });
    expect(counts(await t.db.withTenant(T, (tx) => getRun(tx, runId)))).toEqual(expected);
  });

  it('of a run whose process was killed are all in the Failed end the interrupted-run sweep gives it, and in a cancel that ends it', async () => {
    const swept = await runningRun();
    const cancelled = await runningRun();
    for (const runId of [swept, cancelled]) {
      await add(runId, chunk(1000));
      await add(runId, chunk(1000, 1000));
      await add(runId, chunk(7));
    }
    // The process gone: no heartbeat since.
    await t.owner.query(`update connectors.runs set heartbeat_at = now() - interval '1 hour' where id = any($1::uuid[])`, [[swept, cancelled]]);
    const closed = await t.db.crossTenant('test-sweep', (tx) => failInterrupted(tx, 60_000, async () => {}));
    expect(closed.map((r) => r.id).sort()).toEqual([swept, cancelled].sort());
    const expected = { in: 2007, out: 1007, skipped: 1000, dead: 1000, chunks: 3 };
    expect(counts(await t.db.withTenant(T, (tx) => getRun(tx, swept)))).toEqual(expected);

    // A cancel that finds the run silent ends it as the sweep does.
    const other = await runningRun();
    await add(other, chunk(10));
    await t.owner.query(`update connectors.runs set heartbeat_at = now() - interval '1 hour' where id = $1`, [other]);
    const asked = await t.db.withTenant(T, (tx) => requestCancel(tx, other, 60_000));
    expect(asked.interrupted).toBe(true);
    expect(counts(asked.run)).toEqual({ in: 10, out: 10, skipped: 0, dead: 0, chunks: 1 });
    expect(await chunkRows(swept)).toBe(0);
    expect(await chunkRows(other)).toBe(0);
  });

  it("an end waits for a chunk in flight and counts it; a chunk after the end is rolled back, counted nowhere", async () => {
    const runId = await runningRun();
    await add(runId, chunk(100));
    const inFlight = heldChunk(runId, chunk(100, 1));
    await inFlight.atCommit;
    let endDone = false;
    const end = t.db.withTenant(T, (tx) => finishRun(tx, runId, 'Failed', 'stopped')).finally(() => (endDone = true));
    await untilEndedOrWaiting(t.owner, () => endDone, 'the end');
    expect(endDone).toBe(false);
    inFlight.release();
    await inFlight.done;
    expect(counts(await end)).toEqual({ in: 200, out: 199, skipped: 1, dead: 1, chunks: 2 });

    expect(await outcome(add(runId, chunk(100)))).toMatch(/^failed: run .* was closed \(Failed\) by another process/);
    await expect(add(runId, chunk(100))).rejects.toEqual(new RunClosedError(runId, 'Failed'));
    expect(await chunkRows(runId)).toBe(0);
    expect(counts(await t.db.withTenant(T, (tx) => getRun(tx, runId)))).toEqual({ in: 200, out: 199, skipped: 1, dead: 1, chunks: 2 });
  });

  it('of a run closed already fail in the database: the statements before them and the COMMIT of their message are undone', async () => {
    const runId = await runningRun();
    await t.db.withTenant(T, (tx) => finishRun(tx, runId, 'Cancelled', 'stopped'));
    const statement = chunkStatement(runId, chunk(10));
    const written = { text: `insert into connectors.dead_letters (tenant_id, run_id, connector_id, endpoint_uuid, skip_reason, error_message, payload)
      values ($1, $2, gen_random_uuid(), gen_random_uuid(), 'test', 'before the counts', '{}')`, values: [T, runId] };
    const failed = await t.db
      .withTenant(T, (tx) => tx.queryAfter!([written], statement.text, statement.values, { prepare: statement.prepare, commit: true }))
      .then(() => undefined, (err: unknown) => err);
    expect(failed).toMatchObject({ code: 'SV002', detail: 'Cancelled' });
    expect(runClosed(failed, runId)).toEqual(new RunClosedError(runId, 'Cancelled'));
    const letters = await t.owner.query('select count(*)::int as n from connectors.dead_letters where run_id = $1', [runId]);
    expect(letters.rows).toEqual([{ n: 0 }]);
    expect(await chunkRows(runId)).toBe(0);
    // Of a Running run, the same message commits the three.
    const open = await runningRun();
    const answered = await t.db.withTenant(T, (tx) =>
      tx.queryAfter!([{ ...written, values: [T, open] }], statement.text, [open, ...statement.values!.slice(1)], { prepare: statement.prepare, commit: true }),
    );
    expect(answered.rows).toEqual([{ status: 'Running', cancel_requested: false }]);
    expect((await t.owner.query('select count(*)::int as n from connectors.dead_letters where run_id = $1', [open])).rows).toEqual([{ n: 1 }]);
    expect(await chunkRows(open)).toBe(1);
  });

  it('of a hub of the version before (its chunks added to the run row) add up with this version', async () => {
    const runId = await runningRun();
    await add(runId, chunk(100));
    // 1e37b414 src/connectors/runs/ledger.ts, addChunk.
    await t.db.withTenant(T, (tx) =>
      tx.query(
        `update connectors.runs set records_in = records_in + $2, records_out = records_out + $3, records_skipped = records_skipped + $4,
            dead_letter_count = dead_letter_count + $5, chunk_count = chunk_count + 1, heartbeat_at = now()
      where id = $1 and status = 'Running' returning cancel_requested, dead_letter_count`,
        [runId, 50, 49, 1, 1],
      ),
    );
    const expected = { in: 150, out: 149, skipped: 1, dead: 1, chunks: 2 };
    expect(counts(await t.db.withTenant(T, (tx) => getRun(tx, runId)))).toEqual(expected);
    // Its end, as that version wrote it (1e37b414 finishRun), moves this version's chunks in too.
    await t.db.withTenant(T, (tx) => tx.query(`update connectors.runs set status = $2, ended_at = now(), error_message = $3 where id = $1 and status = 'Running'`, [runId, 'Completed', null]));
    expect(counts(await t.db.withTenant(T, (tx) => getRun(tx, runId)))).toEqual(expected);
    expect(await chunkRows(runId)).toBe(0);
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { hubRunner } from '../../test/harness/connector-runner.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { TEST_ROLES } from '../../test/harness/database.js';
import { type CommitHook, Database, runWithCommitHook, type TenantTxOptions, type Tx } from '../db/database.js';
import { pendingIndexer } from '../retrieval/indexer.js';
import { roleUrl } from '../db/roles.js';
import type { PageReader } from './runner.js';
import { applyConnector } from './store.js';
import type { ConnectorSpec } from './types.js';

/**
 * A run's chunks that emit no event commit asynchronously (their COMMIT does not wait for the WAL
 * flush); the run's end commits synchronously, flushing them all. A chunk PostgreSQL lost before
 * that (a crash loses what was not yet on disk: here its row is deleted, as the crash would have
 * left it) is found missing at the end, and the run fails instead of completing with rows missing.
 */

let hub: TestHub;
let owner: pg.Client;
let connector: ConnectorSpec;
const CHUNK = 10;

beforeAll(async () => {
  hub = await startTestHub();
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  const manifest = {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name: 'async-chunks' },
    connector_type: 'rest-generic',
    spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'p', path: '/p', incremental: { mode: 'watermark', watermark_path: '$.id', param: 'since' }, target: { table: 'ext.async_chunks', unique_key: '$.id' } }] },
  };
  connector = (await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest))).connector;
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

/** `count` pages of CHUNK rows; `beforePage(n)` runs before page n is given. */
const pages = (count: number, beforePage?: (n: number) => Promise<void>): PageReader => ({
  async *read() {
    for (let n = 1; n <= count; n++) {
      await beforePage?.(n);
      yield { number: n, items: Array.from({ length: CHUNK }, (_, i) => ({ id: (n - 1) * CHUNK + i + 1 })) };
    }
  },
});

/**
 * The hub's database, each tenant transaction's options and `synchronous_commit` as it commits recorded: read as
 * the transaction's first statement (a chunk's last statement carries its COMMIT, so nothing can follow it), the
 * setting being the transaction's own from its opening on.
 */
function recording(seen: Array<{ options?: TenantTxOptions; synchronousCommit: string }>): Database {
  const db = hub.services.db;
  return Object.assign(Object.create(db) as Database, {
    withTenant: ((tenantId, fn, options) =>
      db.withTenant(
        tenantId,
        async (tx) => {
          const { rows } = await tx.query<{ s: string }>(`select current_setting('synchronous_commit') as s`);
          const result = await fn(tx);
          seen.push({ options, synchronousCommit: rows[0]!.s });
          return result;
        },
        options,
      )) as Database['withTenant'],
  });
}

const runnerOn = (db: Database) => hubRunner(hub, { db, reader: pages(0), chunkSize: CHUNK });

const watermark = async () => (await owner.query<{ watermark: string | null }>('select watermark from connectors.endpoints where uuid = $1', [connector.endpoints[0]!.uuid])).rows[0]!.watermark;

describe("a run's chunks commit asynchronously, its end synchronously", () => {
  it('a tenant transaction asked for it commits with synchronous_commit off, and leaves the setting to no other', async () => {
    const one = new Database({ appUrl: roleUrl(hub.ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(hub.ownerUrl, TEST_ROLES.worker), poolSize: 1 });
    try {
      const setting = (tx: { query: Database['app']['query'] }) => tx.query(`select current_setting('synchronous_commit') as s`).then((r) => (r.rows[0] as { s: string }).s);
      expect(await one.withTenant(1, (tx) => setting(tx as never), { asyncCommit: true })).toBe('off');
      // The same (only) connection, next transaction: the default again.
      expect(await one.withTenant(1, (tx) => setting(tx as never))).toBe('on');
      expect(await one.withTenant(1, async (tx) => (await tx.query<{ t: string }>(`select current_setting('svc.tenant_id') as t`)).rows[0]!.t, { asyncCommit: true })).toBe('1');
    } finally {
      await one.close();
    }
  });

  it('a source emitting no row events: its chunks asynchronously, the end synchronously; one emitting them: every chunk synchronously', async () => {
    const seen: Array<{ options?: TenantTxOptions; synchronousCommit: string }> = [];
    const quiet = await runnerOn(recording(seen)).trigger(1, connector, { triggeredBy: 'manual', reader: pages(3) });
    const [run] = await quiet.done;
    expect(run).toMatchObject({ status: 'Completed', recordsOut: 30, chunkCount: 3 });
    expect(seen.filter((s) => s.options?.asyncCommit).map((s) => s.synchronousCommit)).toEqual(['off', 'off', 'off']);
    // Every other transaction of the run (its start, its end) commits synchronously.
    expect(seen.filter((s) => !s.options?.asyncCommit).every((s) => s.synchronousCommit === 'on')).toBe(true);

    seen.length = 0;
    const emitting = await runnerOn(recording(seen)).trigger(1, connector, { triggeredBy: 'manual', reader: pages(3), emitsRowChanges: true });
    expect((await emitting.done)[0]).toMatchObject({ status: 'Completed', recordsOut: 30 });
    expect(seen.some((s) => s.options?.asyncCommit)).toBe(false);
    expect(seen.every((s) => s.synchronousCommit === 'on')).toBe(true);
  });

  it("a run a request triggered writes outside the request's commit hook: its chunks commit in the message of their counts row", async () => {
    // What the request's audit entry is: a hook called before the COMMIT of each of the request's transactions.
    const hook: CommitHook & { calls: number } = {
      calls: 0,
      async beforeCommit() {
        this.calls++;
        return undefined;
      },
    };
    const done = await runWithCommitHook(hook, async () => (await runnerOn(hub.services.db).trigger(1, connector, { triggeredBy: 'manual', reader: pages(3) })).done);
    expect(done[0]).toMatchObject({ status: 'Completed', recordsOut: 30, chunkCount: 3 });
    // The trigger's own transaction (which records the run) only: not the run's chunks, nor its end.
    expect(hook.calls).toBe(1);
  });

  it('a chunk lost before the end fails the run (retryable), without moving the watermark, instead of completing it', async () => {
    await owner.query('truncate ext_t1.async_chunks');
    await owner.query('update connectors.endpoints set watermark = null where uuid = $1', [connector.endpoints[0]!.uuid]);
    let runId = '';
    // Before the last page: wait for a committed chunk of the run, then lose it (what a crash of
    // PostgreSQL does to an asynchronous commit not yet flushed: its rows and its count are gone).
    const reader = pages(4, async (n) => {
      if (n !== 4) return;
      for (;;) {
        const { rows } = await owner.query<{ n: number }>('select count(*)::int as n from connectors.run_chunk_counts where run_id = $1', [runId]);
        if (rows[0]!.n > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      await owner.query('delete from connectors.run_chunk_counts where ctid = (select ctid from connectors.run_chunk_counts where run_id = $1 limit 1)', [runId]);
    });
    const triggered = await runnerOn(hub.services.db).trigger(1, connector, { triggeredBy: 'manual', reader });
    runId = triggered.runs[0]!.id;
    const [run] = await triggered.done;
    expect(run).toMatchObject({ status: 'Failed', chunkCount: 3 });
    expect(run!.errorMessage).toMatch(/lost chunks/);
    expect(await watermark()).toBeNull();
    const { rows } = await owner.query<{ payload: { retryable: boolean } }>(`select payload from events.outbox where type = 'connector.run.failed' and payload->>'run_id' = $1`, [run!.id]);
    expect(rows[0]!.payload.retryable).toBe(true);

    // Nothing lost: the same run completes and moves the watermark.
    const again = await runnerOn(hub.services.db).trigger(1, connector, { triggeredBy: 'manual', reader: pages(4) });
    expect((await again.done)[0]).toMatchObject({ status: 'Completed', chunkCount: 4 });
    expect(await watermark()).toBe('40');
  });
});

/** The hub's database, the calls each chunk transaction (asynchronous commit) made on its Tx recorded: each is one message at least. */
function counting(calls: string[][]): Database {
  const db = hub.services.db;
  return Object.assign(Object.create(db) as Database, {
    withTenant: ((tenantId, fn, options) => {
      if (!options?.asyncCommit) return db.withTenant(tenantId, fn, options);
      const made: string[] = [];
      calls.push(made);
      return db.withTenant(
        tenantId,
        (tx) =>
          fn({
            tenantId: tx.tenantId,
            query: (text, values, o) => {
              made.push('query');
              return tx.query(text, values, o);
            },
            queryAfter: (before, text, values, o) => {
              made.push(`queryAfter(${before.length + 1})`);
              return tx.queryAfter!(before, text, values, o);
            },
            copyFrom: (sql, rows, o) => {
              made.push('copyFrom');
              return tx.copyFrom!(sql, rows, o);
            },
          } as Tx),
        options,
      );
    }) as Database['withTenant'],
  });
}

/**
 * A chunk's transaction sends as few messages as it can: the staging table readied with the
 * transaction's opening in the COPY's message, then the rows' statement with the chunk's retrieval hand-off entry
 * and its counts row in one message (Tx.queryAfter), where each of those three was a round trip of
 * its own. What the chunk writes is as before: its rows, one pending entry with their hashes, its counts.
 */
describe("a chunk's statements", () => {
  it('go in two messages besides the commit: the staging table with the opening and the COPY, the rows with the hand-off entry and the counts', async () => {
    const calls: string[][] = [];
    // Chunks of 100 rows (the staged COPY's, the writer's STAGE_FROM_ROWS), keys no other test of this file writes.
    const runner = hubRunner(hub, { db: counting(calls), reader: pages(0), indexer: pendingIndexer, chunkSize: 100 });
    const reader: PageReader = {
      async *read() {
        for (let n = 0; n < 3; n++) yield { number: n + 1, items: Array.from({ length: 100 }, (_, i) => ({ id: 1_000_000 + n * 100 + i })) };
      },
    };
    const [run] = await (await runner.trigger(1, connector, { triggeredBy: 'manual', reader })).done;
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 300, recordsOut: 300, chunkCount: 3, deadLetterCount: 0 });
    expect(calls).toEqual([0, 1, 2].map(() => ['copyFrom', 'queryAfter(3)']));
    // What they wrote: every row, one pending entry per chunk holding its rows' hashes, the counts folded into the run.
    const stored = await owner.query<{ n: number }>('select count(*)::int as n from ext_t1.async_chunks where external_id::bigint >= 1000000');
    expect(stored.rows[0]!.n).toBe(300);
    const pending = await owner.query<{ entries: number; hashes: number; matching: number }>(
      `select count(distinct p.id)::int as entries, count(*)::int as hashes, count(t.row_hash)::int as matching
         from retrieval.pending p cross join unnest(p.row_hashes) h left join ext_t1.async_chunks t on t.row_hash = h
        where p.connector_id = $1`,
      [connector.id],
    );
    expect(pending.rows[0]).toEqual({ entries: 3, hashes: 300, matching: 300 });
    const counts = await owner.query<{ n: number }>('select count(*)::int as n from connectors.run_chunk_counts where run_id = $1', [run!.id]);
    expect(counts.rows[0]!.n).toBe(0);

    // The same rows again, changed: the first chunk's insert meets stored keys and fails its message, nothing of
    // it is left (no entry, no counts), and the chunks are merged in transactions of the same two messages.
    calls.length = 0;
    const changed: PageReader = {
      async *read() {
        for (let n = 0; n < 3; n++) yield { number: n + 1, items: Array.from({ length: 100 }, (_, i) => ({ id: 1_000_000 + n * 100 + i, again: true })) };
      },
    };
    const [second] = await (await runner.trigger(1, connector, { triggeredBy: 'manual', reader: changed })).done;
    expect(second).toMatchObject({ status: 'Completed', recordsIn: 300, recordsOut: 300, chunkCount: 3, deadLetterCount: 0 });
    // (Chunks already in flight when the first one met a stored key fail on theirs too: from four transactions to six.)
    expect(calls.length).toBeGreaterThanOrEqual(4);
    expect(calls.length).toBeLessThanOrEqual(6);
    expect(calls).toEqual(calls.map(() => ['copyFrom', 'queryAfter(3)']));
    const merged = await owner.query<{ n: number }>(`select count(*)::int as n from ext_t1.async_chunks where external_id::bigint >= 1000000 and data->>'again' = 'true'`);
    expect(merged.rows[0]!.n).toBe(300);
    const entries = await owner.query<{ entries: number; hashes: number }>('select count(*)::int as entries, sum(cardinality(row_hashes))::int as hashes from retrieval.pending where connector_id = $1', [connector.id]);
    expect(entries.rows[0]).toEqual({ entries: 6, hashes: 600 });
  });
});

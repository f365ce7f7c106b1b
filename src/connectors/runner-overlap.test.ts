import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { hubRunner } from '../../test/harness/connector-runner.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { Database, type Tx } from '../db/database.js';
import { roleUrl } from '../db/roles.js';
import { TEST_ROLES } from '../../test/harness/database.js';
import type { RowIndexer } from './indexer.js';
import type { PageReader } from './runner.js';
import { applyConnector } from './store.js';
import { currentContext, runWithContext } from '../observability/context.js';
import type { ConnectorSpec } from './types.js';
import { until } from '../../test/harness/until.js';

/**
 * The runner overlaps reading with writing (three chunks in flight, each in its own transaction): the
 * reader is asked for the next page while the previous chunk's transaction is still open; a fourth
 * chunk waits for the first; a chunk sharing a key with one in flight waits for it, so the key's
 * last version lands last; a write
 * that fails surfaces and fails the run with what was written before it kept; a run inserts until a
 * chunk meets a stored key, merges that chunk and every one after it. Slow writes are made with an
 * indexer that waits inside the chunk transaction (the hook the retrieval indexer uses).
 */

let hub: TestHub;
let owner: pg.Client;
let connector: ConnectorSpec;
const CHUNK = 10;

const pages = (count: number, log: string[], onPage?: (n: number) => Promise<void>): PageReader => ({
  async *read() {
    for (let n = 1; n <= count; n++) {
      log.push(`read ${n}`);
      await onPage?.(n);
      yield { number: n, items: Array.from({ length: CHUNK }, (_, i) => ({ id: (n - 1) * CHUNK + i + 1, page: n })) };
    }
  },
});

const runner = (indexer: RowIndexer, db: Database = hub.services.db) => hubRunner(hub, { db, reader: pages(0, []), indexer, chunkSize: CHUNK });

beforeAll(async () => {
  hub = await startTestHub();
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'overlap' }, connector_type: 'rest-generic', spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'p', path: '/p', target: { table: 'ext.overlap_rows', unique_key: '$.id' } }] } };
  connector = (await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest))).connector;
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('the runner', () => {
  it('reads the next page while a chunk is being written, and writes at most three chunks at once', async () => {
    const log: string[] = [];
    // Write 1 stays in its transaction until writes 2 and 3 have begun beside it and page 4 was read
    // (the runner then waits for room for its chunk): on the runner's own order, not on a fixed
    // sleep outlasting two other transactions' statements, which a loaded machine did not. Then
    // 200 ms more: a runner writing a fourth chunk at once would begin it meanwhile.
    const slow: RowIndexer = {
      async rowsWritten(_tx, batch) {
        const page = (batch.rows[0]!.data as { page: number }).page;
        log.push(`write ${page} begins`);
        if (page === 1) {
          await until('writes 2 and 3 to begin and page 4 to be read while write 1 is open', () => ['write 2 begins', 'write 3 begins', 'read 4'].every((l) => log.includes(l)), { everyMs: 5, detail: () => log.join(', ') });
          await new Promise((r) => setTimeout(r, 200));
        }
        log.push(`write ${page} ends`);
      },
    };
    const triggered = await runner(slow).trigger(1, connector, { triggeredBy: 'manual', reader: pages(4, log) });
    const [run] = await triggered.done;
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 40, recordsOut: 40, chunkCount: 4 });
    // Page 2 was asked for before chunk 1 was committed; chunks 2 and 3 were written beside chunk 1; chunk 4 waited for chunk 1.
    expect(log.indexOf('read 2')).toBeLessThan(log.indexOf('write 1 ends'));
    expect(log.indexOf('write 2 begins')).toBeLessThan(log.indexOf('write 1 ends'));
    expect(log.indexOf('write 3 begins')).toBeLessThan(log.indexOf('write 1 ends'));
    expect(log.indexOf('write 1 ends')).toBeLessThan(log.indexOf('write 4 begins'));
    const { rows } = await owner.query(`select count(*)::int as n from ext_t1.overlap_rows where tenant_id = 1`);
    expect(rows[0].n).toBe(40);
  });

  it('a chunk sharing a key with a chunk in flight waits for it: the last version of a row wins', async () => {
    await owner.query('truncate ext_t1.overlap_rows');
    const log: string[] = [];
    const slow: RowIndexer = {
      async rowsWritten(_tx, batch) {
        const page = (batch.rows[0]!.data as { page: number }).page;
        log.push(`write ${page} begins`);
        // The first chunk is the slow one: without the wait, the second would commit first and lose.
        await new Promise((r) => setTimeout(r, page === 1 ? 200 : 0));
        log.push(`write ${page} ends`);
      },
    };
    // Both pages carry ids 1..10: the second page is the newer version of the same rows.
    const samePages: PageReader = {
      async *read() {
        for (let n = 1; n <= 2; n++) yield { number: n, items: Array.from({ length: CHUNK }, (_, i) => ({ id: i + 1, page: n })) };
      },
    };
    const triggered = await runner(slow).trigger(1, connector, { triggeredBy: 'manual', reader: samePages });
    const [run] = await triggered.done;
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 20, chunkCount: 2 });
    expect(log.indexOf('write 1 ends')).toBeLessThan(log.indexOf('write 2 begins'));
    const { rows } = await owner.query(`select count(*)::int as n, min((data->>'page')::int) as page from ext_t1.overlap_rows where tenant_id = 1`);
    expect(rows[0]).toEqual({ n: 10, page: 2 });
  });

  it('inserts while the run meets no stored key; the chunk that meets one is merged in a new transaction, and so is every chunk after it', async () => {
    await owner.query('truncate ext_t1.overlap_rows');
    const quick: RowIndexer = { rowsWritten: async () => undefined };
    // Page 2's keys (11..20) are stored already, by an earlier run, with other content.
    const earlier: PageReader = {
      async *read() {
        yield { number: 1, items: Array.from({ length: CHUNK }, (_, i) => ({ id: CHUNK + i + 1, page: 0 })) };
      },
    };
    expect((await (await runner(quick).trigger(1, connector, { triggeredBy: 'manual', reader: earlier })).done)[0]).toMatchObject({ status: 'Completed', recordsOut: CHUNK });

    // The writes of the run, by page: the text of every statement that writes rows into the table.
    const writes: Array<{ page: number; merge: boolean }> = [];
    const savepoints: string[] = [];
    const recording = Object.create(hub.services.db) as Database;
    recording.withTenant = (tenantId, fn) =>
      hub.services.db.withTenant(tenantId, (tx) => {
        const watched: Tx = {
          ...tx,
          query: (text, values, options) => {
            if (/savepoint/i.test(text)) savepoints.push(text);
            if (text.startsWith('insert into "ext_t1"."overlap_rows"')) {
              writes.push({ page: (JSON.parse(values![3] as string) as Array<{ data: { page: number } }>)[0]!.data.page, merge: text.includes('on conflict') });
            }
            return tx.query(text, values, options);
          },
        };
        return fn(watched);
      });
    // Chunk 1 is slow, so chunk 2 is refused while it is in flight; page 3 is read only once chunk 2 was
    // written again merged, so chunk 3 begins after chunk 2 has met the stored keys.
    const slowFirst: RowIndexer = { rowsWritten: async (_tx, batch) => void (await new Promise((r) => setTimeout(r, (batch.rows[0]!.data as { page: number }).page === 1 ? 200 : 0))) };
    const afterMerge = async (n: number) => {
      if (n === 3) await until('chunk 2 written again merged', () => writes.some((w) => w.page === 2 && w.merge), { everyMs: 5 });
    };
    const [run] = await (await runner(slowFirst, recording).trigger(1, connector, { triggeredBy: 'manual', reader: pages(5, [], afterMerge) })).done;
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 50, recordsOut: 50, deadLetterCount: 0 });
    // By page: chunks in flight at once are written each on its own connection, their statements
    // reaching PostgreSQL in either order (chunk 2's insert may come before chunk 1's, chunk 4's
    // before chunk 3's); pages 3 to 5 are read only once chunk 2 was merged (afterMerge).
    const byPage = (page: number) => writes.filter((w) => w.page === page).map((w) => (w.merge ? 'merge' : 'insert'));
    expect([1, 2, 3, 4, 5].map(byPage)).toEqual([
      ['insert'],
      ['insert', 'merge'], // refused: a key of it is stored
      ['merge'],
      ['merge'],
      ['merge'],
    ]);
    // The refused insert rolled its transaction back; the chunk was written again in a new one.
    expect(savepoints).toEqual([]);
    const { rows } = await owner.query(`select count(*)::int as n, count(*) filter (where (data->>'page')::int = (external_id::int - 1) / ${CHUNK} + 1)::int as current from ext_t1.overlap_rows`);
    expect(rows[0]).toEqual({ n: 50, current: 50 });
  });

  it('prepares a large chunk in slices, letting the event loop turn between them', async () => {
    await owner.query('truncate ext_t1.overlap_rows');
    // A counter that moves once per turn of the event loop, read by every row as it is prepared.
    let turn = 0;
    let spinning = true;
    const spin = () => {
      turn += 1;
      if (spinning) setImmediate(spin);
    };
    spin();
    const seen = new Set<number>();
    const ROWS = 300;
    const onePage: PageReader = {
      async *read() {
        yield {
          number: 1,
          items: Array.from({ length: ROWS }, (_, i) => ({
            get id() {
              seen.add(turn);
              return i + 1;
            },
          })),
        };
      },
    };
    const large = hubRunner(hub, { reader: pages(0, []), indexer: { rowsWritten: async () => undefined }, chunkSize: ROWS });
    const [run] = await (await large.trigger(1, connector, { triggeredBy: 'manual', reader: onePage })).done;
    spinning = false;
    expect(run).toMatchObject({ status: 'Completed', recordsOut: ROWS });
    // The unique key is read as each row is prepared: 300 rows saw the loop turn at least twice.
    expect(seen.size).toBeGreaterThanOrEqual(3);
  });

  it('two runs writing the same keys into one table at once both complete, each key stored once', async () => {
    await owner.query('truncate ext_t1.overlap_rows');
    const other = (await hub.services.db.withTenant(1, (tx) =>
      applyConnector(tx, { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'overlap-twin' }, connector_type: 'rest-generic', spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'p', path: '/p', target: { table: 'ext.overlap_rows', unique_key: '$.id' } }] } }),
    )).connector;
    // Both start by inserting; each meets the other's keys, in flight or committed, and merges.
    const quick: RowIndexer = { rowsWritten: async () => undefined };
    const [first, second] = await Promise.all([
      runner(quick).trigger(1, connector, { triggeredBy: 'manual', reader: pages(6, []) }),
      runner(quick).trigger(1, other, { triggeredBy: 'manual', reader: pages(6, []) }),
    ]);
    const runs = [...(await first.done), ...(await second.done)];
    expect(runs.map((r) => r.status)).toEqual(['Completed', 'Completed']);
    expect(runs.map((r) => r.recordsOut)).toEqual([60, 60]);
    const { rows } = await owner.query('select count(*)::int as n, count(distinct external_id)::int as k from ext_t1.overlap_rows');
    expect(rows[0]).toEqual({ n: 60, k: 60 });
  });

  it('writes at most the pool less two chunks at once over all its runs, each chunk in its own run\'s context', async () => {
    const apply = async (name: string) =>
      (await hub.services.db.withTenant(1, (tx) =>
        applyConnector(tx, { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'p', path: '/p', target: { table: `ext.${name.replace(/-/g, '_')}`, unique_key: '$.id' } }] } }),
      )).connector;
    const connectors = [await apply('slots-a'), await apply('slots-b'), await apply('slots-c')];
    let writing = 0;
    let most = 0;
    /** How many writes at once the first ones wait for (once reached, no write waits): the overlap counted is the runner's, not a race with the machine's load. */
    let awaited = 0;
    const contexts: Array<{ connector: string; job: string | undefined }> = [];
    const slow: RowIndexer = {
      async rowsWritten(_tx, batch) {
        contexts.push({ connector: batch.connectorName, job: currentContext()?.job });
        most = Math.max(most, ++writing);
        await until(`${awaited} chunks to be written at once`, () => most >= awaited, { everyMs: 5 });
        await new Promise((r) => setTimeout(r, 30)); // a write that takes its time (kept: the others' overlap is what is counted)
        writing--;
      },
    };
    const run = async (db: Database, atOnce: number) => {
      writing = 0;
      most = 0;
      awaited = atOnce;
      contexts.length = 0;
      const shared = runner(slow, db);
      // Each run started in a context of its own: a chunk must run in its run's, whichever chunk's end let it start.
      const triggered = await Promise.all(connectors.map((c) => runWithContext({ job: c.name }, () => shared.trigger(1, c, { triggeredBy: 'manual', reader: pages(6, []) }))));
      const runs = (await Promise.all(triggered.map((t) => t.done))).flat();
      expect(runs.map((r) => [r.status, r.recordsOut])).toEqual(connectors.map(() => ['Completed', 60]));
      return most;
    };
    // With the pool of 10 (8 places), three runs of three chunks in flight each write more than two at once.
    expect(hub.services.db.heldLimit).toBe(8);
    expect(await run(hub.services.db, 3)).toBeGreaterThan(2);
    // With a pool of 4, two at once: the API keeps two connections.
    const small = new Database({ appUrl: roleUrl(hub.ownerUrl, TEST_ROLES.app), workerUrl: roleUrl(hub.ownerUrl, TEST_ROLES.worker), poolSize: 4 });
    try {
      expect(await run(small, 2)).toBe(2);
    } finally {
      await small.close();
    }
    expect(contexts).toHaveLength(18);
    for (const seen of contexts) expect(seen.job).toBe(seen.connector);
  });

  it('fails the run when a chunk write fails, keeping the chunks written before it', async () => {
    await owner.query('truncate ext_t1.overlap_rows');
    const failing: RowIndexer = {
      async rowsWritten(_tx, batch) {
        if ((batch.rows[0]!.data as { page: number }).page === 2) throw new Error('the index is unavailable');
      },
    };
    const log: string[] = [];
    const triggered = await runner(failing).trigger(1, connector, { triggeredBy: 'manual', reader: pages(5, log) });
    const [run] = await triggered.done;
    expect(run).toMatchObject({ status: 'Failed', errorMessage: 'the index is unavailable' });
    const { rows } = await owner.query(`select distinct (data->>'page')::int as page from ext_t1.overlap_rows where tenant_id = 1 order by 1`);
    // Chunk 1 stays; chunk 2 rolled back; what was read after it is written on the way out.
    expect(rows.map((r: { page: number }) => r.page)).not.toContain(2);
    expect(rows.map((r: { page: number }) => r.page)).toContain(1);
    expect(run!.recordsOut).toBe(rows.length * CHUNK);
  });

  it('a chunk read when an earlier chunk\'s failure surfaces is written on the way out, not dropped', async () => {
    if ((await owner.query(`select to_regclass('ext_t1.overlap_rows') as t`)).rows[0].t) await owner.query('truncate ext_t1.overlap_rows');
    const failing: RowIndexer = {
      async rowsWritten(_tx, batch) {
        if ((batch.rows[0]!.data as { page: number }).page === 2) throw new Error('the index is unavailable');
      },
    };
    // Chunks 1-3 in flight; chunk 4 waits for chunk 1; chunk 5 waits for chunk 2, whose failure then fails the run.
    const triggered = await runner(failing).trigger(1, connector, { triggeredBy: 'manual', reader: pages(5, []) });
    const [run] = await triggered.done;
    expect(run).toMatchObject({ status: 'Failed', errorMessage: 'the index is unavailable' });
    const { rows } = await owner.query(`select distinct (data->>'page')::int as page from ext_t1.overlap_rows where tenant_id = 1 order by 1`);
    expect(rows.map((r: { page: number }) => r.page)).toEqual([1, 3, 4, 5]);
    expect(run!.recordsOut).toBe(4 * CHUNK);
  });

  it('a run failed by its source writes nothing more once a chunk in flight crossed the dead-letter cap', async () => {
    if ((await owner.query(`select to_regclass('ext_t1.overlap_rows') as t`)).rows[0].t) await owner.query('truncate ext_t1.overlap_rows');
    let sourceFailed!: () => void;
    const failing = new Promise<void>((resolve) => {
      sourceFailed = resolve;
    });
    // Chunk 1 (4 rows, 6 without a key: past the cap of 5) stays in its transaction until the source has failed.
    const slow: RowIndexer = {
      async rowsWritten() {
        await failing;
      },
    };
    const reader: PageReader = {
      async *read() {
        yield { number: 1, items: Array.from({ length: CHUNK }, (_, i) => (i < 4 ? { id: 1000 + i, page: 1 } : { page: 1 })) };
        // Half a chunk, left in the buffer: 3 rows and 3 more without a key.
        yield { number: 2, items: Array.from({ length: 6 }, (_, i) => (i < 3 ? { id: 2000 + i, page: 2 } : { page: 2 })) };
        sourceFailed();
        throw new Error('the source failed');
      },
    };
    const capped = hubRunner(hub, { reader, indexer: slow, chunkSize: CHUNK, maxDeadLetters: 5 });
    const [run] = await (await capped.trigger(1, connector, { triggeredBy: 'manual' })).done;
    expect(run).toMatchObject({ status: 'Failed', errorMessage: 'the source failed', deadLetterCount: 6, recordsOut: 4 });
    const { rows } = await owner.query(`select distinct (data->>'page')::int as page from ext_t1.overlap_rows where tenant_id = 1 order by 1`);
    expect(rows.map((r: { page: number }) => r.page)).toEqual([1]);
    const letters = await owner.query('select count(*)::int as n from connectors.dead_letters where run_id = $1', [run!.id]);
    expect(letters.rows[0].n).toBe(6);
  });

  // Last: it registers a subscriber for the rest of the file.
  it('emits the data.row.changed events of a chunk in one statement, in the order of its rows', async () => {
    await owner.query(`select case when to_regclass('ext_t1.overlap_rows') is not null then 1 end`).then(({ rows }) => (rows[0].case ? owner.query('truncate ext_t1.overlap_rows') : undefined));
    hub.services.subscribers.register(async (_tx, type) => type === 'data.row.changed');
    const outboxWrites: number[] = [];
    const recording = Object.create(hub.services.db) as Database;
    recording.withTenant = (tenantId, fn) =>
      hub.services.db.withTenant(tenantId, (tx) => fn({ ...tx, query: (text, values, options) => {
        if (text.includes('insert into events.outbox') && values?.[1] === 'data.row.changed') outboxWrites.push(Array.isArray(values?.[2]) ? (values[2] as unknown[]).length : 1);
        return tx.query(text, values, options);
      } }));
    const [run] = await (await runner({ rowsWritten: async () => undefined }, recording).trigger(1, connector, { triggeredBy: 'manual', reader: pages(3, []), emitsRowChanges: true })).done;
    expect(run).toMatchObject({ status: 'Completed', recordsOut: 30 });
    // One statement per chunk, carrying the chunk's rows.
    expect(outboxWrites).toEqual([CHUNK, CHUNK, CHUNK]);
    const { rows } = await owner.query(`select payload->>'entity_key' as key, payload->>'op' as op from events.outbox where type = 'data.row.changed' and payload->>'run_id' = $1 order by id`, [run!.id]);
    const keys = rows.map((r: { key: string }) => Number(r.key));
    expect([...keys].sort((a, b) => a - b)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    // Within a chunk, in the order of its rows (chunks in flight at once may commit in either order).
    for (let chunk = 0; chunk < 3; chunk++) {
      const ofChunk = keys.filter((k: number) => Math.ceil(k / CHUNK) === chunk + 1);
      expect(ofChunk).toEqual([...ofChunk].sort((a, b) => a - b));
    }
    expect(new Set(rows.map((r: { op: string }) => r.op))).toEqual(new Set(['insert']));
  });
});

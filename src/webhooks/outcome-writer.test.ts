import { randomUUID } from 'node:crypto';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import type { Tx } from '../db/database.js';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { startStallRelay } from '../../test/harness/stall-relay.js';
import { roleUrl } from '../db/roles.js';
import { TEST_ROLES } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import { WebhookConsumer } from './consumer.js';
import { createIntegration } from './integrations.js';
import type { AttemptOutcome } from './model.js';
import { OutcomeWriter } from './outcome-writer.js';
import { SlotPool } from '../concurrency/slot-pool.js';
import { WebhookSender } from './sender.js';
import { DeliveryWorker } from './worker.js';

/**
 * The outcome writer against a real database: outcomes go in batches (one statement), a batch the
 * database refuses is written row by row, the writer pushes back when full, and outcomes lost
 * before a flush (a process that died) leave their rows leased for the retry sweep.
 */

const KEY = Buffer.alloc(32, 7);
let t: MigratedDatabase;
let receiver: Receiver;
let integrationId: number;
let eventId = 70_000;

beforeAll(async () => {
  t = await migratedDatabase({ 1: 'acme' });
  receiver = await startReceiver();
  const i = await t.db.withTenant(1, (tx) =>
    createIntegration(tx, { name: 'outcomes', targetUrl: `${receiver.url}/outcomes`, eventTypes: ['org.updated'], authMode: 'NONE' }, { key: KEY }),
  );
  integrationId = i.id;
});

afterAll(async () => {
  await receiver.close();
  await t.close();
});

/** Statements in autocommit as the worker role, counted. */
function countingTx(fail?: (text: string, values: unknown[] | undefined) => boolean): Tx & { statements: string[] } {
  const statements: string[] = [];
  return {
    tenantId: undefined,
    statements,
    query: (text, values) => {
      statements.push(text);
      if (fail?.(text, values)) return Promise.reject(new Error('refused by the test'));
      return t.db.worker.query(text, values as unknown[]);
    },
  } as Tx & { statements: string[] };
}

/** A connection as the worker role over TCP through a relay on `port` (not the server's socket). */
async function workerThrough(port: number): Promise<pg.Client> {
  const url = new URL(roleUrl(t.ownerUrl, TEST_ROLES.worker));
  url.host = `127.0.0.1:${port}`;
  url.searchParams.delete('host');
  const client = new pg.Client({ connectionString: url.toString() });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

/**
 * Statements through `tx`, but the batches of outcomes (`unnest`) through `relayed`: `before` is
 * called before a batch is sent, and what it returns after (while its answer is awaited).
 */
function batchesThrough(relayed: pg.Client, tx: Tx, before: () => Promise<() => Promise<void>>): Tx {
  return {
    tenantId: undefined,
    query: async (text, values) => {
      if (!text.includes('unnest')) return tx.query(text, values);
      const after = await before();
      const sent = relayed.query(text, values as unknown[]);
      sent.catch(() => undefined);
      await after();
      return (await sent) as never;
    },
  };
}

/** Delivery rows leased under `token` (lease `leaseSql` from now). */
async function leasedRows(count: number, token: string, leaseSql = "interval '1 minute'", integration = integrationId): Promise<number[]> {
  const { rows } = await t.owner.query(
    `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, lease_until, lease_token)
     select 1, $1, 'event', $2 + g, 'org.updated', '{"orgId":1}', now() + ${leaseSql}, $3 from generate_series(1, $4) g
     returning id`,
    [integration, eventId, token, count],
  );
  eventId += count;
  return rows.map((r) => Number(r.id));
}

async function rowsById(ids: number[]) {
  const { rows } = await t.owner.query(
    `select d.id, d.attempts, d.succeeded, d.http_status, d.response_body, d.error, d.lease_token, d.lease_until,
            (select array_agg(a.attempt order by a.attempt) from hub.delivery_attempts a where a.delivery_id = d.id) as journal
       from hub.deliveries d where d.id = any($1::bigint[]) order by d.id`,
    [ids],
  );
  return rows as Array<{ id: number; attempts: number; succeeded: boolean; http_status: number | null; response_body: string | null; error: string | null; lease_token: string | null; journal: number[] | null }>;
}

const ok = (status = 200): AttemptOutcome => ({ ok: true, httpStatus: status, responseBody: 'ok', error: null, durationMs: 3, attemptedAt: new Date() });
const failed = (status: number): AttemptOutcome => ({ ok: false, httpStatus: status, responseBody: 'nope', error: null, durationMs: 4, attemptedAt: new Date() });

describe('the outcome writer', () => {
  it('writes outcomes that arrive together in one statement: outcome, attempt count, journal, lease released', async () => {
    const token = randomUUID();
    const ids = await leasedRows(5, token);
    const tx = countingTx();
    const writer = new OutcomeWriter({ tx, delayMs: 20, maxBatch: 100, maxPending: 1000 });
    const attempts = await Promise.all(ids.map((id, n) => writer.write(id, token, n % 2 === 0 ? ok() : failed(503))));
    expect(attempts).toEqual([1, 1, 1, 1, 1]);
    expect(tx.statements.length).toBe(1);
    const rows = await rowsById(ids);
    expect(rows.map((r) => [r.attempts, r.succeeded, r.http_status, r.lease_token, r.journal])).toEqual([
      [1, true, 200, null, [1]],
      [1, false, 503, null, [1]],
      [1, true, 200, null, [1]],
      [1, false, 503, null, [1]],
      [1, true, 200, null, [1]],
    ]);
  });

  it('with no delay, what arrives in one turn of the event loop (or during a flush) goes together', async () => {
    const token = randomUUID();
    const ids = await leasedRows(6, token);
    const tx = countingTx();
    const writer = new OutcomeWriter({ tx, delayMs: 0, maxBatch: 100, maxPending: 1000 });
    const first = ids.slice(0, 3).map((id) => writer.write(id, token, ok()));
    await new Promise((r) => setImmediate(r)); // the first batch is being written
    const second = ids.slice(3).map((id) => writer.write(id, token, ok()));
    expect(await Promise.all([...first, ...second])).toEqual([1, 1, 1, 1, 1, 1]);
    expect(tx.statements.length).toBe(2);
  });

  it('with a delay, outcomes wait for company while other attempts are under way; the last one takes them all at once', async () => {
    const token = randomUUID();
    const ids = await leasedRows(4, token);
    const tx = countingTx();
    let underWay = 3;
    const delayMs = 60_000;
    const writer = new OutcomeWriter({ tx, delayMs, maxBatch: 100, maxPending: 1000, othersUnderWay: () => underWay });
    const started = Date.now();
    const first = ids.slice(0, 3).map((id) => writer.write(id, token, ok()));
    // With no delay the batch would be under way after this turn of the event loop.
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    expect(tx.statements.length).toBe(0);
    expect(writer.size()).toBe(3);
    underWay = 0; // the last attempt of the burst
    const last = writer.write(ids[3]!, token, ok());
    expect(await Promise.all([...first, last])).toEqual([1, 1, 1, 1]);
    expect(Date.now() - started).toBeLessThan(delayMs / 10);
    expect(tx.statements.length).toBe(1);
  });

  it('with a delay, outcomes that came in during a flush wait for company too while attempts are under way (a backlog: fewer, larger batches)', async () => {
    const token = randomUUID();
    const ids = await leasedRows(4, token);
    const tx = countingTx();
    let underWay = 5;
    const delayMs = 60_000;
    const writer = new OutcomeWriter({ tx, delayMs, maxBatch: 2, maxPending: 1000, othersUnderWay: () => underWay });
    const started = Date.now();
    const full = ids.slice(0, 2).map((id) => writer.write(id, token, ok())); // a full batch: written at once
    const during = writer.write(ids[2]!, token, ok()); // arrives while that batch is written
    expect(await Promise.all(full)).toEqual([1, 1]);
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    expect(tx.statements.length).toBe(1);
    expect(writer.size()).toBe(1);
    underWay = 0; // the last attempt under way
    const last = writer.write(ids[3]!, token, ok());
    expect(await Promise.all([during, last])).toEqual([1, 1]);
    expect(Date.now() - started).toBeLessThan(delayMs / 10);
    expect(tx.statements.length).toBe(2);
  });

  it('with a delay and no other attempt under way, an outcome is written at once', async () => {
    const token = randomUUID();
    const [id] = await leasedRows(1, token);
    const tx = countingTx();
    const delayMs = 60_000;
    const writer = new OutcomeWriter({ tx, delayMs, maxBatch: 100, maxPending: 1000, othersUnderWay: () => 0 });
    const started = Date.now();
    expect(await writer.write(id!, token, ok())).toBe(1);
    expect(Date.now() - started).toBeLessThan(delayMs / 10);
    expect(tx.statements.length).toBe(1);
  });

  it('a full batch goes at once, without waiting for the delay', async () => {
    const token = randomUUID();
    const ids = await leasedRows(4, token);
    const tx = countingTx();
    const delayMs = 60_000;
    const writer = new OutcomeWriter({ tx, delayMs, maxBatch: 2, maxPending: 1000 });
    const started = Date.now();
    expect(await Promise.all(ids.map((id) => writer.write(id, token, ok())))).toEqual([1, 1, 1, 1]);
    expect(Date.now() - started).toBeLessThan(delayMs / 10); // relative to the delay it must not wait for
    expect(tx.statements.length).toBe(2);
  });

  it('keeps the lease of a row another worker holds now, and records the attempt all the same', async () => {
    const token = randomUUID();
    const [id] = await leasedRows(1, token);
    const writer = new OutcomeWriter({ tx: countingTx(), delayMs: 1, maxBatch: 100, maxPending: 1000 });
    expect(await writer.write(id!, randomUUID(), failed(500))).toBe(1);
    const [row] = await rowsById([id!]);
    expect(row).toMatchObject({ attempts: 1, lease_token: token });
  });

  it('two outcomes of one row waiting together are both written, one statement each', async () => {
    const token = randomUUID();
    const [id] = await leasedRows(1, token);
    const tx = countingTx();
    const writer = new OutcomeWriter({ tx, delayMs: 10, maxBatch: 100, maxPending: 1000 });
    expect(await Promise.all([writer.write(id!, token, failed(500)), writer.write(id!, token, ok())])).toEqual([1, 2]);
    expect(tx.statements.length).toBe(2);
    expect((await rowsById([id!]))[0]).toMatchObject({ attempts: 2, succeeded: true, journal: [1, 2] });
  });

  it('a batch the database refuses is written row by row: only the bad row fails', async () => {
    const token = randomUUID();
    const ids = await leasedRows(3, token);
    // Refuse every batch of more than one row, and the single write of the middle row.
    const tx = countingTx((text, values) => (text.includes('unnest') ? true : values?.[0] === ids[1]));
    const writer = new OutcomeWriter({ tx, delayMs: 10, maxBatch: 100, maxPending: 1000 });
    const results = await Promise.allSettled(ids.map((id) => writer.write(id, token, ok())));
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    const rows = await rowsById(ids);
    expect(rows.map((r) => [r.attempts, r.lease_token])).toEqual([
      [1, null],
      [0, token],
      [1, null],
    ]);
  });

  it('a batch committed whose answer was lost (the connection cut after the commit) is written again row by row, each attempt counted once', async () => {
    const token = randomUUID();
    const ids = await leasedRows(3, token);
    // The batch's statement goes through a relay in front of the real server: it reaches PostgreSQL
    // and commits there (autocommit), its answer is dropped, then the connection is cut.
    const relay = await startStallRelay(Number(new URL(t.ownerUrl).port));
    const cutAfterCommit = await workerThrough(relay.port);
    const tx = countingTx();
    const lossy = batchesThrough(cutAfterCommit, tx, async () => {
      relay.dropAnswers();
      return async () => {
        await until('the batch committed', async () => (await rowsById(ids)).every((r) => r.attempts === 1));
        relay.cut();
      };
    });
    try {
      const writer = new OutcomeWriter({ tx: lossy, delayMs: 10, maxBatch: 100, maxPending: 1000 });
      expect(await Promise.all(ids.map((id) => writer.write(id, token, ok())))).toEqual([1, 1, 1]);
      // Written again one by one (each row marked, then written): nothing more recorded.
      expect(tx.statements.length).toBe(6);
      expect((await rowsById(ids)).map((r) => [r.attempts, r.journal, r.lease_token])).toEqual([
        [1, [1], null],
        [1, [1], null],
        [1, [1], null],
      ]);
    } finally {
      await cutAfterCommit.end().catch(() => undefined);
      await relay.close();
    }
  });

  it('a batch that reaches the server only after the worker gave up on it and wrote its outcomes again counts each attempt once', async () => {
    const token = randomUUID();
    const ids = await leasedRows(3, token);
    // The batch's statement goes through a relay that holds it (the server sees nothing yet) and
    // closes the worker's side: the worker finds the connection lost, not knowing whether the batch
    // committed, and writes the outcomes again row by row. Only then does the statement reach the
    // server, which runs it and commits (a network that delivered it late; a batch waiting for a lock
    // on the server is the same race).
    const relay = await startLateRelay(Number(new URL(t.ownerUrl).port));
    const late = await workerThrough(relay.port);
    const lossy = batchesThrough(late, countingTx(), async () => {
      relay.hold();
      return async () => {
        await until('the batch sent', () => relay.held() > 0);
        relay.giveUp();
      };
    });
    try {
      const writer = new OutcomeWriter({ tx: lossy, delayMs: 10, maxBatch: 100, maxPending: 1000 });
      expect(await Promise.all(ids.map((id) => writer.write(id, token, ok())))).toEqual([1, 1, 1]);
      // The batch reaches the server now, and its process runs it (then finds its client gone and ends).
      await relay.deliver();
      expect((await rowsById(ids)).map((r) => [r.attempts, r.journal, r.lease_token])).toEqual([
        [1, [1], null],
        [1, [1], null],
        [1, [1], null],
      ]);
    } finally {
      await late.end().catch(() => undefined);
      await relay.close();
    }
  });

  it('a batch still running on the server when the worker gave up on it (waiting for a row lock) counts each attempt once: writing again waits it out', async () => {
    const token = randomUUID();
    const ids = await leasedRows(3, token);
    // The last row locked by another transaction: the batch, which reaches the server, waits there.
    const locker = new pg.Client({ connectionString: t.ownerUrl });
    await locker.connect();
    await locker.query('begin');
    await locker.query('select 1 from hub.deliveries where id = $1 for update', [ids[2]]);
    const relay = await startLateRelay(Number(new URL(t.ownerUrl).port));
    const running = await workerThrough(relay.port);
    const backend = (running as unknown as { processID: number }).processID;
    const waitsForLock = async (condition: string, values: unknown[]) =>
      Number(
        (
          await t.owner.query(
            `select count(*) as n from pg_stat_activity where datname = current_database() and usename = $1 and wait_event_type = 'Lock' and ${condition}`,
            [TEST_ROLES.worker, ...values],
          )
        ).rows[0].n,
      );
    // The worker's statements besides the batch: those issued, and those ended.
    const tx = countingTx();
    let ended = 0;
    const counted: Tx = {
      tenantId: undefined,
      query: (text, values) => tx.query(text, values).finally(() => ended++) as never,
    };
    const lossy = batchesThrough(running, counted, async () => async () => {
      await until('the batch to wait for the lock', async () => (await waitsForLock('pid = $2', [backend])) === 1);
      // The worker finds its connection lost while the batch runs on.
      relay.giveUp();
    });
    try {
      const writer = new OutcomeWriter({ tx: lossy, delayMs: 10, maxBatch: 100, maxPending: 1000 });
      const written = Promise.all(ids.map((id) => writer.write(id, token, ok())));
      // The outcomes written again, each statement ended or waiting for a lock (the batch's, the locker's)...
      await until('the outcomes being written again', async () => {
        const issued = tx.statements.length;
        return issued >= ids.length && ended + (await waitsForLock('pid <> $2', [backend])) >= issued;
      });
      // ...then the batch goes on, and commits.
      await locker.query('commit');
      expect(await written).toEqual([1, 1, 1]);
      await relay.deliver(); // the batch's process ends
      expect((await rowsById(ids)).map((r) => [r.attempts, r.journal, r.lease_token])).toEqual([
        [1, [1], null],
        [1, [1], null],
        [1, [1], null],
      ]);
    } finally {
      await locker.end().catch(() => undefined);
      await running.end().catch(() => undefined);
      await relay.close();
    }
  });

  it('stores a response body with a NUL character (PostgreSQL text has none) instead of failing', async () => {
    const token = randomUUID();
    const [id] = await leasedRows(1, token);
    const writer = new OutcomeWriter({ tx: countingTx(), delayMs: 1, maxBatch: 100, maxPending: 1000 });
    expect(await writer.write(id!, token, { ...ok(), responseBody: 'a\u0000b' })).toBe(1);
    expect((await rowsById([id!]))[0]!.response_body).toBe('a\ufffdb');
  });

  it('add: the callbacks get what write would resolve or reject with (the attempt number; the refusal of the row alone)', async () => {
    const token = randomUUID();
    const [good, bad] = await leasedRows(2, token);
    // The batch is refused, then its rows one by one: only the bad row's statement fails.
    const writer = new OutcomeWriter({ tx: countingTx((text, values) => text.includes('unnest(') || values?.[0] === bad), delayMs: 0, maxBatch: 100, maxPending: 100 });
    const settled = await Promise.all(
      [good!, bad!].map(
        (id) =>
          new Promise<{ attempt?: number; error?: string }>((resolve) =>
            writer.add(id, token, ok(), (attempt) => resolve({ attempt }), (err) => resolve({ error: (err as Error).message })),
          ),
      ),
    );
    expect(settled).toEqual([{ attempt: 1 }, { error: 'refused by the test' }]);
    expect((await rowsById([good!, bad!])).map((r) => r.journal)).toEqual([[1], null]);
  });

  it('pushes back when full: room() waits for a flush', async () => {
    const token = randomUUID();
    const ids = await leasedRows(3, token);
    // Other attempts under way: the outcomes wait for the delay.
    const writer = new OutcomeWriter({ tx: countingTx(), delayMs: 200, maxBatch: 100, maxPending: 2, othersUnderWay: () => 1 });
    const written = ids.map((id) => writer.write(id, token, ok()));
    expect(writer.size()).toBe(3);
    let roomAt: number | undefined;
    const started = Date.now();
    const room = writer.room();
    expect(room).toBeDefined();
    await room!.then(() => {
      roomAt = Date.now();
    });
    expect(roomAt! - started).toBeGreaterThanOrEqual(150);
    await Promise.all(written);
    expect(writer.size()).toBe(0);
    expect(writer.room()).toBeUndefined(); // room at once
  });

  it('renews the lease of an outcome waiting to be written first for the one due first, whatever the order they came in', async () => {
    const token = randomUUID();
    // Leases of 2 s: one taken just now, one 1.5 s ago (0.5 s left in the database).
    const [fresh] = await leasedRows(1, token, "interval '2 seconds'");
    const [old] = await leasedRows(1, token, "interval '500 milliseconds'");
    let underWay = 1;
    // The outcomes wait for company (others under way) for a minute: nothing is written meanwhile.
    // Each renewal: when it was sent, and once it was answered.
    const counting = countingTx();
    const renewals: Array<{ sentAt: number; answered?: boolean }> = [];
    const tx: Tx = {
      ...counting,
      query: (async (text: string, values?: unknown[]) => {
        if (!/^\s*update hub\.deliveries d set lease_until/.test(text)) return counting.query(text, values);
        const renewal: { sentAt: number; answered?: boolean } = { sentAt: performance.now() };
        renewals.push(renewal);
        const result = await counting.query(text, values);
        renewal.answered = true;
        return result;
      }) as Tx['query'],
    };
    const writer = new OutcomeWriter({ tx, delayMs: 60_000, maxBatch: 100, maxPending: 1000, othersUnderWay: () => underWay, leaseMs: 2_000 });
    const now = performance.now();
    const written = [writer.write(fresh!, token, ok(), now), writer.write(old!, token, ok(), now - 1_500)];
    await until('the first renewal answered', () => renewals[0]?.answered);
    // The older one was renewed at once, within the 0.5 s its lease had left (was: a renewal armed for
    // the fresh one's half lease, 1 s on, 0.5 s after it ran out); both hold for more than 1 s now.
    expect(renewals[0]!.sentAt - now).toBeLessThan(500);
    const { rows } = await t.owner.query("select id, lease_until > now() + interval '1 second' as holding from hub.deliveries where id = any($1::bigint[]) order by id", [[fresh, old]]);
    expect(rows.map((r) => r.holding)).toEqual([true, true]);
    underWay = 0;
    await writer.flush();
    expect(await Promise.all(written)).toEqual([1, 1]);
  });

  it('a process that dies with outcomes not yet written leaves the rows leased; the retry sweep sends them again', async () => {
    // An integration of its own: the failed rows of the other tests are the sweep's too.
    const swept = await t.db.withTenant(1, (tx) =>
      createIntegration(tx, { name: 'swept', targetUrl: `${receiver.url}/swept`, eventTypes: ['org.updated'], authMode: 'NONE' }, { key: KEY }),
    );
    await t.owner.query('update hub.deliveries set closed_reason = $1 where integration_id = $2 and not succeeded', ['closed by the test', integrationId]);
    const token = randomUUID();
    const ids = await leasedRows(2, token, "interval '300 milliseconds'", swept.id);
    // The attempts happened; the process dies while their outcomes wait (a flush that never ends).
    let flushing!: () => void;
    const flushStarted = new Promise<void>((resolve) => (flushing = resolve));
    const dying: Tx = {
      tenantId: undefined,
      query: () => {
        flushing();
        return new Promise(() => undefined);
      },
    };
    const doomed = new OutcomeWriter({ tx: dying, delayMs: 1, maxBatch: 100, maxPending: 1000 });
    for (const id of ids) void doomed.write(id, token, ok());
    await flushStarted; // marker: the flush is under way (and never ends)
    expect((await rowsById(ids)).map((r) => [r.attempts, r.lease_token])).toEqual([
      [0, token],
      [0, token],
    ]);
    // Another process: its sweep claims nothing while the lease holds, everything once it ran out.
    const worker = new DeliveryWorker({
      db: t.db,
      key: KEY,
      sender: new WebhookSender({ connectTimeoutMs: 1000, timeoutMs: 1000, userAgent: 'test' }),
      pool: new SlotPool(4, 2, 10),
      leaseMs: 5_000,
    });
    const sweeper = new WebhookConsumer({ db: t.db, worker, leaseMs: 5_000, maxAttempts: 3, perIntegrationClaim: 10, sweepBatch: 10 });
    const before = receiver.on('/swept').length;
    expect(await sweeper.sweep()).toBe(0);
    // Marker: the database's clock says the leases ran out (instead of sleeping past them).
    await until('the leases to run out', async () => {
      const { rows } = await t.owner.query('select bool_and(lease_until < now()) as out from hub.deliveries where id = any($1)', [ids]);
      return rows[0].out === true;
    });
    expect(await sweeper.sweep()).toBe(2);
    await receiver.waitFor(before + 2, '/swept');
    await until('the attempts written', async () => (await rowsById(ids)).every((r) => r.attempts !== 0), 5_000);
    await worker.stop();
    expect((await rowsById(ids)).map((r) => [r.attempts, r.succeeded, r.lease_token, r.journal])).toEqual([
      [1, true, null, [1]],
      [1, true, null, [1]],
    ]);
  });
});

/**
 * A TCP relay in front of the database server for one client connection. `hold()`: what the client
 * sends from then on is kept, not passed (`held()` bytes so far); `giveUp()` closes the client's side
 * alone, so the client finds its connection lost while its statement is still on the way;
 * `deliver()` then passes what was held to the server and closes the server's side after it, and
 * resolves once the server's process has ended (it ran what it was sent, then found the client gone).
 */
async function startLateRelay(upstreamPort: number) {
  let holding = false;
  const kept: Buffer[] = [];
  const pairs: Array<{ client: Socket; server: Socket; ended: Promise<void> }> = [];
  const relay = createServer((client) => {
    const server = connect(upstreamPort, '127.0.0.1');
    const ended = new Promise<void>((resolve) => server.once('close', () => resolve()));
    pairs.push({ client, server, ended });
    for (const socket of [client, server]) socket.on('error', () => undefined);
    client.on('data', (chunk: Buffer) => (holding ? kept.push(chunk) : server.write(chunk)));
    server.on('data', (chunk: Buffer) => void (client.destroyed || client.write(chunk)));
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', () => resolve()));
  return {
    port: (relay.address() as AddressInfo).port,
    hold: () => {
      holding = true;
    },
    held: () => kept.reduce((n, chunk) => n + chunk.length, 0),
    giveUp: () => {
      for (const { client } of pairs) client.destroy();
    },
    deliver: async () => {
      for (const { server } of pairs) server.end(Buffer.concat(kept.splice(0)));
      await Promise.all(pairs.map((p) => p.ended));
    },
    close: () => {
      for (const { client, server } of pairs) {
        client.destroy();
        server.destroy();
      }
      return new Promise<void>((resolve) => relay.close(() => resolve()));
    },
  };
}

/**
 * The event writer of bench/deliver in a process of its own (the default, `BENCH_EMITTER=child`):
 * the load generator's database round trips and CPU stay off the hub's event loop, as the writers
 * of a real deployment (API requests, connector runs) are other work than the dispatcher's. It
 * writes through the hub's own `EventWriter` and `Database.withTenant` (the application role, row-
 * level security) exactly as the in-process writer does.
 *
 * Started with `fork()`; messages (IPC):
 *   parent → {kind: 'clock'}                         child → {kind: 'clock', now}   (clock offset)
 *   parent → {kind: 'emit', events, batch, tenant, rate, statements}
 *                                                    child → {kind: 'backends', pids} first (the
 *                                                    PostgreSQL backends it writes through, whose CPU
 *                                                    the parent counts apart from the hub's), then
 *                                                    {kind: 'committed', ids, commitSentAt, at} per
 *                                                    transaction, then {kind: 'done', ms}
 * `now`/`at`/`commitSentAt` are `performance.timeOrigin + performance.now()` (epoch milliseconds,
 * sub-millisecond). `commitSentAt` is taken as the transaction's work ends, just before
 * `withTenant` sends COMMIT; `at` once `withTenant` has resolved (COMMIT acknowledged, the
 * connection released): the moment the commit took effect lies between the two.
 */
import { loadCatalog } from '../../src/events/catalog.js';
import { EventWriter } from '../../src/events/outbox.js';
import { Database } from '../../src/db/database.js';
import { roleUrl } from '../../src/db/roles.js';

/**
 * `rate`: events per second at most (transactions started on a schedule, an open loop); 0 for as
 * fast as the database takes them. `statements`: how a transaction writes its `batch` events:
 * `chunk`, one statement for all of them (`EventWriter.emitAll`, as a connector run writes the
 * `data.row.changed` events of a chunk, the hub's writer of many events); `event`, one statement
 * each (`EventWriter.emit`, as an API request writes its one event).
 */
export type EmitterRequest = { kind: 'clock' } | { kind: 'emit'; events: number; batch: number; tenant: number; rate: number; statements: WriteStatements };
export type WriteStatements = 'chunk' | 'event';
export type EmitterMessage =
  | { kind: 'ready' }
  | { kind: 'clock'; now: number }
  | { kind: 'backends'; pids: number[] }
  | { kind: 'committed'; ids: string[]; commitSentAt: number; at: number }
  | { kind: 'done'; ms: number }
  | { kind: 'failed'; error: string };

const epochNow = () => performance.timeOrigin + performance.now();
const send = (message: EmitterMessage) => process.send?.(message);

const ownerUrl = process.env.BENCH_DATABASE_URL;
if (!ownerUrl) throw new Error('BENCH_DATABASE_URL is not set');
/**
 * Transactions in flight at most (BENCH_RATE_WRITERS, default 4): one writer alone is bound by the
 * database's round trips (with a statement per event ≈ 1,950 events/s on a slow day of the 2-core
 * machine); several keep the schedule, as concurrent API requests and runs would.
 */
const WRITERS = Math.max(1, Number(process.env.BENCH_RATE_WRITERS ?? 4) || 4);
const db = new Database({ appUrl: roleUrl(ownerUrl, 'svc_app'), workerUrl: roleUrl(ownerUrl, 'svc_worker'), poolSize: WRITERS });
const writer = new EventWriter(loadCatalog());

/** The backend pid of every connection of the pool: WRITERS transactions at once, each holding its connection a moment. */
async function backends(tenant: number): Promise<number[]> {
  const pids = await Promise.all(
    Array.from({ length: WRITERS }, () =>
      db.withTenant(tenant, async (tx) => {
        const { rows } = await tx.query<{ pid: number }>('select pg_backend_pid() as pid, pg_sleep(0.05)');
        return rows[0]!.pid;
      }),
    ),
  );
  return [...new Set(pids)];
}

async function emit(events: number, batch: number, tenant: number, rate: number, statements: WriteStatements): Promise<void> {
  send({ kind: 'backends', pids: await backends(tenant) });
  const t0 = performance.now();
  const inFlight = new Set<Promise<void>>();
  let failure: unknown;
  for (let start = 0; start < events && failure === undefined; start += batch) {
    const count = Math.min(batch, events - start);
    if (rate > 0) {
      // Transaction k starts at t0 + k·batch/rate; one that is late starts at once (no catching up by skipping).
      const due = t0 + (start / rate) * 1000;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    if (inFlight.size >= WRITERS) await Promise.race(inFlight);
    const from = start;
    let commitSentAt = 0;
    const transaction = db
      .withTenant(tenant, async (tx) => {
        const payloads = Array.from({ length: count }, (_, k) => ({ orgId: from + k + 1, tenantId: tenant }));
        const ids: string[] = [];
        if (statements === 'chunk') ids.push(...(await writer.emitAll(tx, 'org.updated', payloads)).map(String));
        else for (const payload of payloads) ids.push(String(await writer.emit(tx, 'org.updated', payload)));
        // The last thing before withTenant sends COMMIT (no commit hook runs in this process).
        commitSentAt = epochNow();
        return ids;
      })
      .then((ids) => {
        send({ kind: 'committed', ids, commitSentAt, at: epochNow() });
      })
      .catch((err: unknown) => {
        failure ??= err;
      })
      .finally(() => inFlight.delete(transaction));
    inFlight.add(transaction);
  }
  await Promise.all(inFlight);
  if (failure !== undefined) throw failure;
  send({ kind: 'done', ms: performance.now() - t0 });
}

process.on('message', (message: EmitterRequest) => {
  if (message.kind === 'clock') send({ kind: 'clock', now: epochNow() });
  else
    emit(message.events, message.batch, message.tenant, message.rate, message.statements).catch((err: unknown) => {
      send({ kind: 'failed', error: err instanceof Error ? err.message : String(err) });
    });
});
process.on('disconnect', () => {
  void db.close().finally(() => process.exit(0));
});
await db.ping();
send({ kind: 'ready' });

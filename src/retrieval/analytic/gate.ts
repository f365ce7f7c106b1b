import { SlotPool } from '../../concurrency/slot-pool.js';
import { AnalyticRefusal } from './refusal.js';

/** Queries of one tenant waiting for a slot at most; one more is refused at once. */
const WAITING_PER_TENANT = 16;

/**
 * How many analytic queries run at once in one process (`svc.analytic.concurrency`) and for one
 * tenant (`svc.analytic.concurrency-per-tenant`). Each holds a connection of the pool for up to the
 * statement timeout, so without a bound one tenant asking many questions at once would take every
 * connection and every other request of every tenant would wait behind its queries. Further
 * queries wait, tenants taking turns; one whose turn has not come within `waitMs` (the statement
 * timeout: the time a running query may take) is refused by guard 5 and holds nothing.
 */
export class AnalyticGate {
  private readonly slots: SlotPool;

  /**
   * `hold`: where a query that has its turn waits for a place among the process's units that hold a
   * connection for long (Database.holdConnection, shared with connector chunk writes and export
   * streams); its wait counts against `waitMs` too. Unset: no such wait (tests of the gate alone).
   */
  constructor(
    readonly total: number,
    readonly perTenant: number,
    private readonly hold: <T>(tenantId: number, work: () => Promise<T>) => Promise<T> = (_tenantId, work) => work(),
  ) {
    if (!Number.isSafeInteger(total) || total < 1) throw new Error(`total must be a positive integer, not ${total}`);
    if (!Number.isSafeInteger(perTenant) || perTenant < 1) throw new Error(`perTenant must be a positive integer, not ${perTenant}`);
    this.slots = new SlotPool(total, perTenant, WAITING_PER_TENANT);
  }

  /**
   * `work` once a slot is free for the tenant; an AnalyticRefusal (guard 5) of `sql` if none frees
   * within `waitMs`. `signal` (the asking client went away) ends the wait with the signal's reason:
   * the query never starts, and its turn, when it comes, is handed on at once.
   */
  run<T>(tenantId: number, sql: string, waitMs: number, work: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      let state: 'waiting' | 'started' | 'refused' = 'waiting';
      const gone = () => {
        if (state !== 'waiting') return;
        state = 'refused';
        clearTimeout(timer);
        reject(signal!.reason);
      };
      const refuse = () => {
        state = 'refused';
        reject(
          new AnalyticRefusal(
            5,
            `The hub is already running as many analytic queries as it allows (svc.analytic.concurrency, svc.analytic.concurrency-per-tenant) and none finished within ${waitMs} ms; ask again in a moment.`,
            sql,
          ),
        );
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', gone);
        if (state === 'waiting') refuse();
      }, waitMs);
      signal?.addEventListener('abort', gone, { once: true });
      // A query refused while waiting stays in the queue; when its turn comes it hands the slot (and
      // its place among the held connections) straight back.
      const job = (): Promise<void> => {
        if (state !== 'waiting') return Promise.resolve();
        return this.hold(tenantId, () => {
          if (state !== 'waiting') return Promise.resolve();
          state = 'started';
          clearTimeout(timer);
          signal?.removeEventListener('abort', gone);
          return work().then(resolve, reject);
        });
      };
      if (!this.slots.offer(tenantId, job)) {
        clearTimeout(timer);
        signal?.removeEventListener('abort', gone);
        refuse();
      }
    });
  }

  /** Queries running or waiting. */
  size(): number {
    return this.slots.size();
  }
}

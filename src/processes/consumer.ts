import type { Tx } from '../db/database.js';
import { isDecision } from '../events/catalog.js';
import type { EventWriter, OutboxEvent } from '../events/outbox.js';
import { matchesSubscription } from '../events/topics.js';
import { logger } from '../observability/logger.js';
import { type CompiledWhen, compileWhen, EVALUATION_TIMEOUT_MS, evaluateWhen, evaluateWhens, stoppedOutcome, type WhenOutcome } from './cel.js';
import { type ActiveProcess, processesOfTenants } from './store.js';
import { renderMessage } from './template.js';

/**
 * The process consumer (docs/processes.md): an outbox consumer with its own cursor
 * (`OutboxLoop` named `processes`, with `handleBatchInTx`). For each event of a batch, never a
 * `decision.*` one (decisions do not feed processes), it evaluates the tenant's processes whose
 * `event` glob matches and emits one `spec.decision` event per match, payload `{process, message,
 * sourceEventId, sourceType}`, in the transaction that advances the cursor past the batch.
 */

export const PROCESS_CONSUMER = 'processes';

/**
 * How often an evaluation stopped for time is run again before it counts as false. The time limit
 * is wall-clock (V8 interrupts the script): a garbage collection, a busy machine or the first
 * evaluation after a start (code still being compiled) can stop even a trivial condition once.
 * A condition that is really too costly is stopped every time.
 */
export const TIMEOUT_RETRIES = 2;

/**
 * CPU milliseconds the costly runs (COSTLY_RUN_MS) of ONE tenant's conditions may take at once, all
 * together (stopped ones and their runs again included): the time of one condition stopped at its
 * bound all three times (EVALUATION_TIMEOUT_MS × (1 + TIMEOUT_RETRIES)). Once the budget is spent,
 * the tenant's evaluations count as false, as a stopped one does, until it has refilled
 * (TENANT_REFILL_MS). Plain conditions never spend it.
 */
export const TENANT_BUDGET_MS = EVALUATION_TIMEOUT_MS * (1 + TIMEOUT_RETRIES);

/**
 * Milliseconds of the hub process's CPU time over which a tenant's spent budget comes back whole:
 * it refills evenly (TENANT_BUDGET_MS per TENANT_REFILL_MS), batch or no batch. So a tenant's
 * costly conditions take at most TENANT_BUDGET_MS at once and, over a flood of its events (batch
 * after batch), about that much per TENANT_REFILL_MS of the process's CPU: the other tenants'
 * events, queued behind its own, wait that long at most, not a budget's worth for every batch of
 * its events. CPU time, not the wall clock: on a machine busy with other work, where the process
 * gets less than 15 % of a core, a second of the wall clock would give back more than the
 * conditions could spend in it, and the budget would never run out.
 */
export const TENANT_REFILL_MS = 1_000;

/**
 * Wall-clock milliseconds after which a spent budget has come back whole however little CPU the
 * process had meanwhile (it refills at least at TENANT_BUDGET_MS per QUIET_REFILL_MS): a quiet hub
 * spends almost no CPU, and a tenant whose budget a burst spent must not wait for the next busy
 * spell before its conditions run again.
 */
export const QUIET_REFILL_MS = 10_000;

/**
 * CPU milliseconds from which one bounded run of a tenant's conditions counts against its budget.
 * Cheaper runs never do: a plain condition takes microseconds, and a busy tenant's many plain
 * conditions (or a slow machine, whose wall-clock time is not theirs) must never lose a decision.
 * A costly condition takes far more than this each time it runs, so it spends the budget whole.
 */
export const COSTLY_RUN_MS = 5;

/**
 * Milliseconds of evaluation after which the consumer lets the event loop run (setImmediate) before
 * the next evaluation, so HTTP requests and health checks interleave with a batch (in `svc-hub all`
 * the consumer runs in the API's process). One evaluation is bounded by EVALUATION_TIMEOUT_MS.
 */
export const YIELD_AFTER_MS = 10;

/** Tunables of a batch handler (tests); the constants above by default. */
export interface ProcessBatchOptions {
  tenantBudgetMs?: number;
  tenantRefillMs?: number;
  quietRefillMs?: number;
  /** The refill clock, milliseconds of the process's CPU time (processCpuMs) by default. */
  now?: () => number;
  /** The wall clock of the quiet refill (QUIET_REFILL_MS), milliseconds; performance.now by default. */
  wallNow?: () => number;
  costlyRunMs?: number;
  yieldAfterMs?: number;
  timeoutMs?: number;
}

/**
 * An evaluation, run again while it is stopped for time, until it has been stopped `1 + retries`
 * times (`stops` of them already). `mayRun` is awaited before each run (it yields the event loop
 * when due) and says whether one may start: false once the tenant's budget is spent. The outcome is
 * the last run's, a stop when `stops` were given and no run was allowed, or undefined when nothing
 * ran at all and none was stopped.
 */
export async function evaluateRetryingTimeouts(
  evaluate: () => WhenOutcome,
  options: { retries?: number; stops?: number; timeoutMs?: number; mayRun?: () => Promise<boolean> } = {},
): Promise<WhenOutcome | undefined> {
  const retries = options.retries ?? TIMEOUT_RETRIES;
  let stops = options.stops ?? 0;
  let outcome: WhenOutcome | undefined = stops > 0 ? stoppedOutcome(options.timeoutMs ?? EVALUATION_TIMEOUT_MS) : undefined;
  while (stops <= retries && (options.mayRun ? await options.mayRun() : true)) {
    outcome = evaluate();
    if (!('error' in outcome && outcome.timedOut)) return outcome;
    stops++;
  }
  return outcome;
}

/**
 * Compiled `when`s, by tenant, name, version (updatedAt) and the condition's text: compiled once per
 * version. The text is part of the key: `updatedAt` is read to the millisecond, and two applies whose
 * transactions began in the same one leave two versions the time alone would not tell apart.
 */
const compiled = new Map<string, CompiledWhen | Error>();

function whenOf(p: ActiveProcess): CompiledWhen | Error {
  const key = `${p.tenantId}/${p.name}/${p.updatedAt.getTime()}/${p.when}`;
  let c = compiled.get(key);
  if (!c) {
    try {
      // Without the apply-time check of matches() patterns: a process stored before that check
      // existed is evaluated as before (such a pattern fails, the condition counts as false).
      c = compileWhen(p.when!, { checkPatterns: false });
    } catch (err) {
      c = err as Error;
    }
    if (compiled.size > 10_000) compiled.clear();
    compiled.set(key, c);
  }
  return c;
}

/** Lets the event loop run once `afterMs` of synchronous work have passed since it last did. */
class Pacer {
  private since = performance.now();
  constructor(private readonly afterMs: number) {}

  async breathe(): Promise<void> {
    if (performance.now() - this.since < this.afterMs) return;
    // Twice: an immediate set from the poll phase (where a database reply resumed the batch) runs
    // in that same turn, before the timers and before the I/O that came in meanwhile; the second
    // one runs only after a whole turn (timers, I/O: HTTP requests, health checks).
    await new Promise<void>((resolve) => setImmediate(resolve));
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.rested();
  }

  /** The event loop just ran (an await on the database). */
  rested(): void {
    this.since = performance.now();
  }
}

/** What one tenant's conditions took in the batch, and the evaluations that its budget cut. */
interface TenantSpend {
  ms: number;
  skipped: number;
  skippedProcesses: Set<string>;
}

/** Milliseconds of CPU time this process has spent (every thread), a monotonic clock. */
export function processCpuMs(): number {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1000;
}

/**
 * Each tenant's budget for costly conditions, kept from batch to batch: `capacity` ms at most,
 * spent by costly runs (it may go below zero: a run is not cut short by the budget, and its cost
 * is owed), refilled evenly over `refillMs` of the refill clock (the process's CPU time), or over
 * `quietMs` of the wall clock when that is faster. A tenant with a full budget has no entry.
 */
export class TenantBudgets {
  private readonly balances = new Map<number, { ms: number; at: number; wallAt: number }>();

  constructor(
    private readonly capacity: number,
    private readonly refillMs: number,
    private readonly now: () => number = processCpuMs,
    private readonly quietMs = QUIET_REFILL_MS,
    private readonly wallNow: () => number = () => performance.now(),
  ) {}

  /** Milliseconds the tenant's costly conditions may still take now (at most `capacity`; below zero while a debt is being paid). */
  available(tenant: number): number {
    const balance = this.balances.get(tenant);
    if (!balance) return this.capacity;
    const refilled = Math.max((this.now() - balance.at) / this.refillMs, (this.wallNow() - balance.wallAt) / this.quietMs);
    return Math.min(this.capacity, balance.ms + refilled * this.capacity);
  }

  spend(tenant: number, ms: number): void {
    this.balances.set(tenant, { ms: this.available(tenant) - ms, at: this.now(), wallAt: this.wallNow() });
  }

  /** Forgets the tenants whose budget has come back whole. */
  prune(): void {
    for (const tenant of [...this.balances.keys()]) if (this.available(tenant) >= this.capacity) this.balances.delete(tenant);
  }
}

export function processBatchHandler(events: EventWriter, options: ProcessBatchOptions = {}): (tx: Tx, batch: OutboxEvent[]) => Promise<void> {
  const budgetMs = options.tenantBudgetMs ?? TENANT_BUDGET_MS;
  const costlyRunMs = options.costlyRunMs ?? COSTLY_RUN_MS;
  const timeoutMs = options.timeoutMs ?? EVALUATION_TIMEOUT_MS;
  const yieldAfterMs = options.yieldAfterMs ?? YIELD_AFTER_MS;
  const refillMs = options.tenantRefillMs ?? TENANT_REFILL_MS;
  const refillText = refillMs % 1000 === 0 ? `${refillMs / 1000} s` : `${refillMs} ms`;
  const budgets = new TenantBudgets(budgetMs, refillMs, options.now, options.quietRefillMs, options.wallNow);
  return async (tx, batch) => {
    budgets.prune();
    const watched = batch.filter((e) => !isDecision(e.type));
    if (watched.length === 0) return;
    const processes = await processesOfTenants(tx, [...new Set(watched.map((e) => e.tenantId))]);
    if (processes.length === 0) return;
    const byTenant = new Map<number, ActiveProcess[]>();
    for (const p of processes) {
      const own = byTenant.get(p.tenantId);
      if (own) own.push(p);
      else byTenant.set(p.tenantId, [p]);
    }
    const pacer = new Pacer(yieldAfterMs);
    // Each tenant's conditions share one time budget, refilled over time rather than per batch, so a
    // tenant's costly conditions (however many processes carry them, however many batches its events
    // fill) delay the other tenants' decisions by a bounded time; the
    // evaluations run in slices of at most YIELD_AFTER_MS (or one bounded evaluation), the event
    // loop running in between. Decisions are still emitted event by event, in process order.
    const spends = new Map<number, TenantSpend>();
    for (const event of watched) {
      const matching = (byTenant.get(event.tenantId) ?? []).filter((p) => matchesSubscription(p.event, event.type));
      if (matching.length === 0) continue;
      const spend = spends.get(event.tenantId) ?? { ms: 0, skipped: 0, skippedProcesses: new Set<string>() };
      spends.set(event.tenantId, spend);
      const holds = await decide(matching, event, spend);
      for (const [i, p] of matching.entries()) {
        if (!holds[i]) continue;
        const view = { id: event.id, type: event.type, tenantId: event.tenantId, payload: event.payload, createdAt: event.createdAt.toISOString() };
        // A template whose every placeholder is empty renders blank: the hub's sentence instead, as without one.
        const rendered = p.message ? renderMessage(p.message, view) : '';
        const message = rendered.trim() ? rendered : `${event.type} (event ${event.id}) matched process ${p.name}`;
        await events.emit(tx, p.decision, { process: p.name, message, sourceEventId: event.id, sourceType: event.type }, event.tenantId);
        pacer.rested();
      }
    }
    for (const [tenant, spend] of spends) {
      if (spend.skipped === 0) continue;
      const names = [...spend.skippedProcesses];
      logger().warn(
        { tenant, spentMs: Math.round(spend.ms), budgetMs, skipped: spend.skipped, processes: names.slice(0, 20) },
        `tenant ${tenant}: process conditions took ${Math.round(spend.ms)} ms of this batch and its budget is spent (${budgetMs} ms at once, refilled over ${refillText} of the hub's CPU time); its ${spend.skipped} remaining evaluation(s) in the batch (processes ${names.slice(0, 5).join(', ')}${names.length > 5 ? ', …' : ''}) counted as false`,
      );
    }

    /** Whether each of `matching` (one event's, one tenant's) holds for `event`, evaluated within the tenant's budget. */
    async function decide(matching: ActiveProcess[], event: OutboxEvent, spend: TenantSpend): Promise<boolean[]> {
      const holds = matching.map((p) => p.when === null);
      const input = { type: event.type, tenantId: event.tenantId, payload: event.payload };
      const tasks: Array<{ index: number; p: ActiveProcess; when: CompiledWhen }> = [];
      for (const [index, p] of matching.entries()) {
        if (p.when === null) continue;
        const when = whenOf(p);
        if (when instanceof Error) {
          logger().warn({ tenant: p.tenantId, process: p.name, err: when }, `process ${p.name}: spec.when does not compile; it matches nothing`);
          continue;
        }
        tasks.push({ index, p, when });
      }
      // CPU time, not wall-clock time: a machine busy with other work does not spend the budget. A
      // run stopped for time counts whatever its CPU: it is costly by definition, and on a machine
      // busy with other work it may have had less CPU than COSTLY_RUN_MS in its 50 ms (uncounted, a
      // costly condition would then never spend the budget).
      const timed = <T>(run: () => T, stopped: (result: T) => boolean): T => {
        const started = process.cpuUsage();
        let result: T | undefined;
        try {
          result = run();
          return result;
        } finally {
          const used = process.cpuUsage(started);
          const ms = (used.user + used.system) / 1000;
          if (ms >= costlyRunMs || (result !== undefined && stopped(result))) {
            spend.ms += ms;
            budgets.spend(event.tenantId, ms);
          }
        }
      };
      const mayRun = async (): Promise<boolean> => {
        if (budgets.available(event.tenantId) <= 0) return false;
        await pacer.breathe();
        return true;
      };
      const record = (task: (typeof tasks)[number], outcome: WhenOutcome | undefined): void => {
        if (outcome === undefined) {
          spend.skipped++;
          spend.skippedProcesses.add(task.p.name);
          return;
        }
        if ('error' in outcome) {
          if (outcome.timedOut) logger().warn({ tenant: task.p.tenantId, process: task.p.name, eventId: event.id }, `process ${task.p.name}: spec.when ${outcome.error}; counted as false`);
          else logger().debug({ tenant: task.p.tenantId, process: task.p.name, eventId: event.id, reason: outcome.error }, 'process condition failed; counted as false');
        }
        holds[task.index] = outcome.result;
      };
      let next = 0;
      while (next < tasks.length) {
        if (!(await mayRun())) {
          for (const task of tasks.slice(next)) record(task, undefined);
          break;
        }
        // The remaining conditions in one bounded run; a stop names the one then running.
        const rest = tasks.slice(next);
        const run = timed(() => evaluateWhens(rest.map((t) => ({ when: t.when, input })), timeoutMs), (r) => r.stopped);
        for (const outcome of run.outcomes) record(tasks[next++]!, outcome);
        if (!run.stopped) continue;
        // Stopped: run it again alone. It counts as stopped once already when it ran first, so had
        // the whole bound to itself.
        const task = tasks[next++]!;
        const alone = () => timed(() => evaluateWhen(task.when, input, timeoutMs), (o) => 'error' in o && o.timedOut);
        const outcome = await evaluateRetryingTimeouts(alone, {
          stops: run.outcomes.length === 0 ? 1 : 0,
          timeoutMs,
          mayRun,
        });
        record(task, outcome);
      }
      return holds;
    }
  };
}

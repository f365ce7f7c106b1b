import { describe, expect, it } from '@jest/globals';
import { SlotPool } from '../../concurrency/slot-pool.js';
import { AnalyticGate } from './gate.js';
import { AnalyticRefusal } from './refusal.js';

/** A query the test ends when it likes. */
function held(): { work: () => Promise<string>; started: () => boolean; finish: (v: string) => void } {
  let started = false;
  let finish: (v: string) => void = () => undefined;
  const done = new Promise<string>((resolve) => {
    finish = resolve;
  });
  return {
    work: () => {
      started = true;
      return done;
    },
    started: () => started,
    finish: (v) => finish(v),
  };
}

/** A macrotask: every promise callback set off before it (a query's end, the next one's start) has run. */
const tick = () => new Promise((r) => setImmediate(r));

describe('AnalyticGate', () => {
  it('runs at most perTenant queries of one tenant; another tenant is not held behind them', async () => {
    const gate = new AnalyticGate(4, 2);
    const a = [held(), held(), held()];
    const results = a.map((q) => gate.run(1, 'select 1', 10_000, q.work));
    const b = held();
    const other = gate.run(2, 'select 2', 10_000, b.work);
    await tick();
    expect(a.map((q) => q.started())).toEqual([true, true, false]);
    expect(b.started()).toBe(true);
    b.finish('b');
    await expect(other).resolves.toBe('b');
    a[0]!.finish('a0');
    await expect(results[0]).resolves.toBe('a0');
    await tick();
    expect(a[2]!.started()).toBe(true);
    a[1]!.finish('a1');
    a[2]!.finish('a2');
    await expect(Promise.all(results)).resolves.toEqual(['a0', 'a1', 'a2']);
    expect(gate.size()).toBe(0);
  });

  it('holds the total across tenants; tenants take turns for the freed slots', async () => {
    const gate = new AnalyticGate(2, 2);
    const first = [held(), held()];
    const firstRuns = first.map((q) => gate.run(1, 's', 10_000, q.work));
    const later1 = held();
    const later2 = held();
    const run1 = gate.run(1, 's', 10_000, later1.work);
    const run2 = gate.run(2, 's', 10_000, later2.work);
    await tick();
    expect([later1.started(), later2.started()]).toEqual([false, false]);
    first[0]!.finish('x');
    await firstRuns[0];
    await tick();
    // Tenant 1 queued first, but tenant 2 has nothing running: either may go, and only one of them.
    expect(Number(later1.started()) + Number(later2.started())).toBe(1);
    first[1]!.finish('y');
    await tick();
    expect([later1.started(), later2.started()]).toEqual([true, true]);
    later1.finish('1');
    later2.finish('2');
    await expect(Promise.all([...firstRuns, run1, run2])).resolves.toEqual(['x', 'y', '1', '2']);
  });

  it('refuses (guard 5, with the SQL) a query whose turn has not come within the wait, which then never runs', async () => {
    const gate = new AnalyticGate(1, 1);
    const running = held();
    const first = gate.run(1, 'select slow', 10_000, running.work);
    const late = held();
    const refused = gate.run(1, 'select late', 50, late.work);
    const err = await refused.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AnalyticRefusal);
    expect(err).toMatchObject({ guard: 5, sql: 'select late' });
    expect((err as Error).message).toMatch(/svc\.analytic\.concurrency.*none finished within 50 ms/);
    running.finish('done');
    await first;
    await tick();
    expect(late.started()).toBe(false);
    expect(gate.size()).toBe(0);
  });

  it('refuses at once a query of a tenant that already has 16 waiting', async () => {
    const gate = new AnalyticGate(1, 1);
    const running = held();
    const first = gate.run(1, 's', 60_000, running.work);
    const waiting = Array.from({ length: 16 }, () => held());
    const queued = waiting.map((q) => gate.run(1, 's', 60_000, q.work));
    const started = Date.now();
    await expect(gate.run(1, 'one too many', 60_000, async () => 'never')).rejects.toMatchObject({ guard: 5, sql: 'one too many' });
    // Kept waiting, it would wait its 60 s: 10 s leaves a loaded machine's pauses room.
    expect(Date.now() - started).toBeLessThan(10_000);
    // Another tenant still queues.
    const other = held();
    const otherRun = gate.run(2, 's', 60_000, other.work);
    running.finish('r');
    for (const q of waiting) q.finish('w');
    other.finish('o');
    await expect(Promise.all([first, ...queued, otherRun])).resolves.toHaveLength(18);
  });

  it('ends the wait of a query whose client went away (its signal), which then never runs; the next query takes the freed turn', async () => {
    const gate = new AnalyticGate(4, 1);
    const first = held();
    const running = gate.run(1, 's', 10_000, first.work);
    const gone = held();
    const controller = new AbortController();
    const waiting = gate.run(1, 's', 10_000, gone.work, controller.signal);
    const reason = new Error('the client closed the connection before the answer');
    controller.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    const next = held();
    const nextRun = gate.run(1, 's', 10_000, next.work);
    first.finish('first');
    await expect(running).resolves.toBe('first');
    await tick();
    expect(gone.started()).toBe(false);
    expect(next.started()).toBe(true);
    next.finish('next');
    await expect(nextRun).resolves.toBe('next');
    expect(gate.size()).toBe(0);
    // A signal aborted before the call: refused at once, nothing queued.
    await expect(gate.run(1, 's', 10_000, gone.work, controller.signal)).rejects.toBe(reason);
    expect(gate.size()).toBe(0);
    expect(gone.started()).toBe(false);
  });

  it('passes a failing query\'s error on and frees its slot', async () => {
    const gate = new AnalyticGate(1, 1);
    await expect(gate.run(1, 's', 1_000, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await expect(gate.run(1, 's', 1_000, async () => 'next')).resolves.toBe('next');
  });

  it('waits for a place among the held connections within the same wait; refused, it hands the place back unused', async () => {
    // One place, taken by other work (a chunk write, an export stream) until the test frees it.
    const budget = new SlotPool(1, 1, Number.POSITIVE_INFINITY);
    let free: () => void = () => undefined;
    budget.offer(9, () => new Promise<void>((resolve) => {
      free = resolve;
    }));
    const hold = <T>(tenantId: number, work: () => Promise<T>) =>
      new Promise<T>((resolve, reject) => {
        budget.offer(tenantId, () => work().then(resolve, reject));
      });
    const gate = new AnalyticGate(4, 2, hold);
    const query = held();
    const started = Date.now();
    await expect(gate.run(1, 'select 1', 200, query.work)).rejects.toMatchObject({ guard: 5, sql: 'select 1' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(query.started()).toBe(false);
    free();
    await tick();
    expect(query.started()).toBe(false);
    expect(budget.size()).toBe(0);
    // With a place free, a query runs inside it.
    const next = held();
    const answer = gate.run(1, 'select 2', 1_000, next.work);
    await tick();
    expect(next.started()).toBe(true);
    expect(budget.size()).toBe(1);
    next.finish('done');
    await expect(answer).resolves.toBe('done');
    await tick();
    expect(budget.size()).toBe(0);
  });
});

import { describe, expect, it } from '@jest/globals';
import { VectorBudgetExceeded } from './budget.js';
import { TenantVectors } from './tenant-vectors.js';
import { randomUnitVectors, seeded } from './testing.js';
import { type VectorRow, VectorIndex } from './vector-index.js';

const DIMS = 64;

function tenantRows(tenantId: number, count: number): VectorRow[] {
  const random = seeded(tenantId);
  return randomUnitVectors(count, DIMS, random).map((vector, i) => ({ id: tenantId * 100_000 + i, vector, meta: { corpus: 'c', scopes: ['s'] } }));
}

/** What one tenant of `rows` rows takes, measured on a TenantVectors of the same shape (sized exactly, as an array loader does). */
function bytesOf(rows: number): number {
  const t = new TenantVectors({ dimensions: DIMS, initialCapacity: rows });
  for (const row of tenantRows(99, rows)) t.add(row.id, row.vector, row.meta);
  return t.bytes;
}

describe('VectorIndex', () => {
  it('loads a tenant once, on its first search, even when searches race', async () => {
    const loads: number[] = [];
    const index = new VectorIndex({
      dimensions: DIMS,
      budgetBytes: 64 * 1024 * 1024,
      load: async (tenantId) => {
        loads.push(tenantId);
        // A load that yields to the event loop: the other searches, all begun before, meet it under way.
        await new Promise((r) => setImmediate(r));
        return tenantRows(tenantId, 300);
      },
    });
    expect(index.isLoaded(1)).toBe(false);
    const target = tenantRows(1, 300)[42]!;
    const answers = await Promise.all([index.search(1, target.vector, 3), index.search(1, target.vector, 3), index.search(2, target.vector, 3)]);
    expect(loads.sort()).toEqual([1, 2]);
    expect(answers[0]![0]!.id).toBe(target.id);
    expect(answers[1]).toEqual(answers[0]);
    expect(answers[2]!.every((h) => h.id >= 200_000)).toBe(true);
  });

  it('streams an async iterable from the loader', async () => {
    const index = new VectorIndex({
      dimensions: DIMS,
      budgetBytes: 64 * 1024 * 1024,
      load: async function* (tenantId) {
        yield* tenantRows(tenantId, 50);
      },
    });
    expect((await index.search(3, tenantRows(3, 50)[7]!.vector, 1))[0]!.id).toBe(300_007);
  });

  it('applies add and remove to loaded tenants only: the loader is the record', async () => {
    const stored = new Map<number, VectorRow[]>([[1, tenantRows(1, 20)]]);
    const index = new VectorIndex({ dimensions: DIMS, budgetBytes: 64 * 1024 * 1024, load: async (t) => stored.get(t) ?? [] });
    const extra = tenantRows(5, 1)[0]!;
    await index.add(1, 777, extra.vector, extra.meta);
    expect(index.isLoaded(1)).toBe(false);
    expect((await index.search(1, extra.vector, 1))[0]!.id).not.toBe(777);
    await index.add(1, 777, extra.vector, extra.meta);
    expect((await index.search(1, extra.vector, 1))[0]).toEqual({ id: 777, similarity: expect.closeTo(1, 5) });
    expect(await index.remove(1, 777)).toBe(true);
    expect(await index.remove(1, 777)).toBe(false);
    expect((await index.search(1, extra.vector, 1))[0]!.id).not.toBe(777);
  });

  it('evicts the least recently used tenants whole to stay within the budget', async () => {
    const one = bytesOf(400);
    const index = new VectorIndex({ dimensions: DIMS, budgetBytes: Math.floor(one * 2.5), load: async (t) => tenantRows(t, 400) });
    const q = tenantRows(1, 1)[0]!.vector;
    await index.search(1, q, 1);
    await index.search(2, q, 1);
    await index.search(1, q, 1); // 1 is now the most recently used
    await index.search(3, q, 1);
    const usage = index.usage();
    expect(usage.tenants.map((t) => t.tenantId)).toEqual([1, 3]);
    expect(usage.evictions).toBe(1);
    expect(usage.bytes).toBeLessThanOrEqual(usage.budgetBytes);
    expect(usage.tenants[0]!.bytes).toBe(one);
  });

  it('fails a tenant that alone exceeds the budget with a 503 and keeps nothing of it', async () => {
    const index = new VectorIndex({ dimensions: DIMS, budgetBytes: bytesOf(500), load: async (t) => tenantRows(t, t === 9 ? 5000 : 100) });
    const q = tenantRows(1, 1)[0]!.vector;
    await index.search(1, q, 1);
    const err = await index.search(9, q, 1).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(VectorBudgetExceeded);
    const rendered = (err as VectorBudgetExceeded).render();
    expect(rendered.status).toBe(503);
    expect(rendered.body).toEqual({ json: { error: expect.stringMatching(/tenant 9 need .* MiB, more than the vector memory budget/), hint: expect.any(String) } });
    expect(index.isLoaded(9)).toBe(false);
    expect(index.usage().bytes).toBeLessThanOrEqual(bytesOf(500));
  });

  it('refuses an add that cannot fit and keeps the tenant as it was', async () => {
    const budget = bytesOf(300);
    const index = new VectorIndex({ dimensions: DIMS, budgetBytes: budget, load: async (t) => tenantRows(t, 200) });
    const q = tenantRows(1, 1)[0]!.vector;
    await index.search(1, q, 1);
    let refused: unknown;
    const extra = tenantRows(7, 2000);
    for (const row of extra) {
      try {
        await index.add(1, row.id, row.vector, row.meta);
      } catch (err) {
        refused = err;
        break;
      }
    }
    expect(refused).toBeInstanceOf(VectorBudgetExceeded);
    const tenant = await index.tenant(1);
    expect(tenant.size).toBeGreaterThanOrEqual(200);
    expect(tenant.size).toBeLessThan(2200);
    expect(index.usage().bytes).toBeLessThanOrEqual(budget);
    expect((await index.search(1, extra[0]!.vector, 1))[0]!.id).toBe(extra[0]!.id);
  });
});

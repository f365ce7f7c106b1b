import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { ClockRunner } from '../clock/clock.js';
import { loadCatalog } from '../events/catalog.js';
import { EventWriter } from '../events/outbox.js';
import { OutboxLoop } from './outbox-loop.js';

let t: MigratedDatabase;
const events = new EventWriter(loadCatalog());
const emit = (orgId: number) => t.db.withTenant(401, (tx) => events.emit(tx, 'org.updated', { orgId, tenantId: 401 }));

beforeAll(async () => {
  t = await migratedDatabase({ 401: 'loop' });
});

afterAll(async () => {
  await t.close();
});

async function drainUntil(loop: OutboxLoop, count: number): Promise<number> {
  let total = 0;
  const deadline = Date.now() + 10_000;
  while (total < count && Date.now() < deadline) {
    total += await loop.drain();
    if (total < count) await new Promise((r) => setTimeout(r, 50));
  }
  return total;
}

describe('outbox loop', () => {
  it('is not retroactive, hands events over in order across batches, and a failure is retried from that event', async () => {
    await emit(0); // before the consumer exists: never handed over
    const seen: number[] = [];
    let failOn: number | undefined = 3;
    const loop = new OutboxLoop(t.db, {
      name: 'loop-test',
      every: 60_000,
      batch: 2,
      handle: async (event) => {
        const orgId = event.payload.orgId as number;
        if (orgId === failOn) {
          failOn = undefined;
          throw new Error('receiver down');
        }
        seen.push(orgId);
      },
    });
    const clock = new ClockRunner();
    await loop.start(clock);
    for (let i = 1; i <= 5; i++) await emit(i);
    expect(await drainUntil(loop, 2)).toBe(2); // 1, 2, then 3 fails and stops the pass
    expect(await drainUntil(loop, 3)).toBe(3);
    expect(seen).toEqual([1, 2, 3, 4, 5]);
    expect(await loop.drain()).toBe(0);
    await clock.stop();
  });
});

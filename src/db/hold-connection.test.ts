import { afterAll, describe, expect, it } from '@jest/globals';
import { Database } from './database.js';

/**
 * Database.holdConnection: the places of the units that hold an application connection for long
 * (connector chunk writes, export streams, analytic queries) are the pool less two, shared by all of
 * them. The pools open no connection until one is asked for: these units use none.
 */
const url = 'postgres://nobody@127.0.0.1:1/none';
const databases: Database[] = [];
const database = (poolSize: number) => {
  const db = new Database({ appUrl: url, workerUrl: url, poolSize });
  databases.push(db);
  return db;
};

afterAll(async () => {
  for (const db of databases) await db.close();
});

describe('holdConnection', () => {
  it('gives the pool less two places, one at least', () => {
    expect([3, 4, 10, 50].map((size) => database(size).heldLimit)).toEqual([1, 2, 8, 48]);
  });

  it('runs at most that many units at once, whoever asks; tenants take turns for a freed place', async () => {
    const db = database(4);
    let running = 0;
    let most = 0;
    const order: string[] = [];
    const releases: Array<() => void> = [];
    const unit = (name: string) => () =>
      new Promise<string>((resolve) => {
        order.push(name);
        most = Math.max(most, ++running);
        releases.push(() => {
          running--;
          resolve(name);
        });
      });
    // The marker: a macrotask, once every promise callback set off before it (a unit's end, the next one's start) has run.
    const settled = () => new Promise((r) => setImmediate(r));
    const done = [db.holdConnection(1, unit('a1')), db.holdConnection(1, unit('a2')), db.holdConnection(1, unit('a3')), db.holdConnection(2, unit('b1'))];
    await settled();
    expect(order).toEqual(['a1', 'a2']);
    releases.shift()!();
    await settled();
    // Tenant 2 waited behind tenant 1's queue: its unit goes next, not a3.
    expect(order).toEqual(['a1', 'a2', 'b1']);
    while (releases.length > 0) {
      releases.shift()!();
      await settled();
    }
    await expect(Promise.all(done)).resolves.toEqual(['a1', 'a2', 'a3', 'b1']);
    expect(most).toBe(2);
  });

  it('a unit that throws before returning its promise rejects, and its place is free again', async () => {
    const db = database(3);
    await expect(
      db.holdConnection(1, () => {
        throw new Error('thrown at once');
      }),
    ).rejects.toThrow('thrown at once');
    await expect(db.holdConnection(1, async () => 'next')).resolves.toBe('next');
  });
});

import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { Directory } from './directory.js';

/** The directory's caches over a real database: what they keep in memory as users and tenants come and go. */

let testDb: MigratedDatabase;
const TENANTS = Array.from({ length: 120 }, (_, i) => 100 + i);

beforeAll(async () => {
  testDb = await migratedDatabase({ 1: 'acme', ...Object.fromEntries(TENANTS.map((id) => [id, `t${id}`])) }, 2);
});

afterAll(async () => {
  await testDb.close();
});

const sizes = (directory: Directory) => {
  const d = directory as unknown as { tenants: Map<unknown, unknown>; users: Map<unknown, unknown> };
  return { tenants: d.tenants.size, users: d.users.size };
};

/** The caches' clock (Date) moved on by hand, not slept; timers stay real (the database client's). */
function withWallClock<T>(work: (later: (ms: number) => void) => Promise<T>): Promise<T> {
  jest.useFakeTimers({ now: Date.now(), doNotFake: ['hrtime', 'nextTick', 'performance', 'queueMicrotask', 'setImmediate', 'clearImmediate', 'setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] });
  return work((ms) => jest.setSystemTime(Date.now() + ms)).finally(() => jest.useRealTimers());
}
const identity = (subject: string) => ({ tenantId: 1, issuer: 'https://idp.example', subject });

describe('Directory caches', () => {
  it('keep no more than maxEntries once the entries past them are stale: every user ever seen does not stay in memory', async () => {
    const directory = new Directory(testDb.db, 20, 5);
    const { tenants, users } = await withWallClock(async (later) => {
      for (let n = 0; n < 5; n++) {
        await directory.userFor(identity(`sub-${n}`));
        await directory.requireActiveTenant(TENANTS[n]!);
      }
      expect(sizes(directory)).toEqual({ tenants: 5, users: 5 });
      later(30);
      for (let n = 5; n < TENANTS.length; n++) {
        await directory.userFor(identity(`sub-${n}`));
        await directory.requireActiveTenant(TENANTS[n]!);
        if (n % 20 === 0) later(25);
      }
      return sizes(directory);
    });
    expect(tenants).toBeLessThan(45);
    expect(users).toBeLessThan(45);
  });

  it('a fresh entry is served from the cache, however full it is', async () => {
    const directory = new Directory(testDb.db, 60_000, 2);
    const first = await directory.userFor(identity('kept'));
    for (let n = 0; n < 10; n++) await directory.userFor(identity(`other-${n}`));
    // Locked in the database meanwhile: the cached entry, still fresh, is what the directory answers.
    await testDb.owner.query(`update core.users set locked = true where subject = 'kept'`);
    expect(await directory.userFor(identity('kept'))).toEqual(first);
    directory.invalidate();
    await expect(directory.userFor(identity('kept'))).rejects.toThrow('account locked');
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import type { Database } from '../db/database.js';
import { loadCatalog } from './catalog.js';
import { EventWriter } from './outbox.js';
import { LiveStream } from './stream.js';

let testDb: MigratedDatabase;
let db: Database;
let stream: LiveStream;
const events = new EventWriter(loadCatalog());

beforeAll(async () => {
  testDb = await migratedDatabase({ 301: 'x' });
  db = testDb.db;
  stream = new LiveStream(db, { pollEvery: 30, batch: 500 });
  stream.start();
});

afterAll(async () => {
  await stream.stop();
  await testDb.close();
});

const emit = (orgId: number) => db.withTenant(301, (tx) => events.emit(tx, 'org.updated', { orgId, tenantId: 301 }));

describe('live stream bounds', () => {
  it('a subscriber that cannot keep up is ended, not buffered without bound', async () => {
    const delivered: number[] = [];
    let ended = '';
    const sub = await stream.subscribe({
      tenantId: 301,
      topics: [],
      deliver: (event) => {
        delivered.push(event.payload.orgId as number);
        return delivered.length < 3; // the client's buffer is full after the third
      },
      onEnd: (reason) => {
        ended = reason;
      },
    });
    for (let i = 1; i <= 10; i++) await emit(i);
    const deadline = Date.now() + 3000;
    while (!ended && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(ended).toBe('client too slow');
    expect(sub.closed).toBe(true);
    expect(delivered).toEqual([1, 2, 3]);
    expect(stream.count()).toBe(0);
  });

  it('stop ends every subscription with a reason', async () => {
    const own = new LiveStream(db, { pollEvery: 30, batch: 10 });
    own.start();
    const reasons: string[] = [];
    await own.subscribe({ tenantId: 301, topics: [], deliver: () => true, onEnd: (r) => reasons.push(r) });
    await own.subscribe({ tenantId: 301, topics: [], deliver: () => true, onEnd: (r) => reasons.push(r) });
    await own.stop();
    expect(reasons).toEqual(['server stopping', 'server stopping']);
    expect(own.count()).toBe(0);
  });
});

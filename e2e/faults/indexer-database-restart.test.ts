import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { startDemoSource, type DemoSource } from '../../src/demo-source/server.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { until } from '../../test/harness/until.js';
import { count, embeddingsAnswer, indexed, indexerEnv, ingest, oneChunkEachRow, post } from './indexing.js';
import { endOutages, restartableServer } from './outages.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * The hub's PostgreSQL stopped while the retrieval indexer embeds (a stand-in model on loopback,
 * indexing.ts, answering each call after 300 ms), and started again: the same process's indexer
 * goes on by itself (no hub restart), every chunk gets its vector once, and a run written after the
 * restart is indexed too (docs/retrieval.md, "Chunks": vectors stored only on chunks still without one).
 */

const ROWS = 200;
let demo: DemoSource;
let model: Receiver;
let owner: pg.Client | undefined;

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: ROWS, log: () => undefined });
  model = await startReceiver((_path, received) => embeddingsAnswer(received, 300));
});

afterAll(async () => {
  await killAll();
  await owner?.end().catch(() => undefined);
  await endOutages();
  await model?.close();
  await demo?.close();
});

describe('PostgreSQL stopped and restarted while the indexer embeds', () => {
  it('the same process indexes on: every row one chunk with a vector, a later run indexed too', async () => {
    const fresh = await restartableServer();
    let server = fresh.server;
    const hub = await startHubProcess('all', server.url, indexerEnv(model.url, 10));
    expect((await post(hub, '/api/platform/secrets', { name: 'DEMO_PASSWORD', value: 'demo-password' })).status).toBe(201);
    owner = new pg.Client({ connectionString: server.url });
    await owner.connect();
    await ingest(hub, demo.url, 'restart-a');
    await until('a first call\'s vectors', async () => (await count(owner!, 'select count(*) as n from retrieval.chunks where embedding is not null and row_hash is not null')) > 0, { timeoutMs: 30_000 });
    const embedded = await count(owner, 'select count(*) as n from retrieval.chunks where embedding is not null and row_hash is not null');
    expect(embedded).toBeLessThan(ROWS); // 20 calls of 10, 300 ms each: mid embedding
    const calls = model.received.length;
    await owner.end();
    owner = undefined;

    await server.stop();
    const ready = async () => (await fetch(`${hub.url}/q/health/ready`).catch(() => undefined))?.status;
    await until('readiness to go down', async () => (await ready()) === 503, { timeoutMs: 20_000, everyMs: 100 });
    server = await fresh.restart();
    await until('readiness to come back', async () => (await ready()) === 200, { timeoutMs: 30_000, everyMs: 100, detail: () => hub.output().slice(-3000) });
    owner = new pg.Client({ connectionString: server.url });
    await owner.connect();

    // A run after the restart: its entries and the chunks left without a vector are indexed by the same process.
    await ingest(hub, demo.url, 'restart-b');
    await indexed(owner, 2 * ROWS, () => hub.output().slice(-3000));
    expect(hub.child.exitCode).toBeNull();
    expect(model.received.length).toBeGreaterThan(calls);
    await oneChunkEachRow(owner, ['restart-a', 'restart-b'], ROWS);
    expect(hub.output()).not.toContain('"level":"fatal"');
    expect(await hub.stop()).toBe(0);
  }, 90_000);
});

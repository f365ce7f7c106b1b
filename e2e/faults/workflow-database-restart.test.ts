import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { EventSource } from 'eventsource';
import pg from 'pg';
import { type DemoSource, startDemoSource } from '../../src/demo-source/server.js';
import { until } from '../../test/harness/until.js';
import { endOutages, openStream, restartableServer } from './outages.js';
import { checkDormancyOnce, prepareDormancy } from './partners.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * The hub's PostgreSQL stopped for 11 s and started again while the workflow dormancy sweep
 * announces the decisions of 32,400 due records (1,000 a transaction) and an event stream reads them
 * live. What the docs state: a decision commits with its spell's mark and its inbox item, never
 * twice for one spell (docs/workflows.md, "Dormancy"; docs/processes.md, "The inbox"); a periodic job
 * that fails meanwhile tries again at every tick, and the same process recovers (docs/operations.md,
 * "When the database goes away"); a PostgreSQL outage ends no open stream, which goes on once the
 * database is back, nothing lost or sent twice ("Live event stream").
 */

const EXTRA = 30_000;
let demo: DemoSource;

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 2400, log: () => undefined });
});

afterAll(async () => {
  await killAll();
  await endOutages();
  await demo?.close();
});

describe('PostgreSQL stopped and restarted mid dormancy sweep', () => {
  it('every record gets exactly one decision, streamed once, by the same process', async () => {
    const fresh = await restartableServer();
    let server = fresh.server;
    const connect = async () => {
      const client = new pg.Client({ connectionString: server.url });
      await client.connect();
      return client;
    };
    let owner = await connect();
    const records = await prepareDormancy(server.url, owner, { url: demo.url, rows: 2400 }, EXTRA);
    const decisions = async () => Number((await owner.query(`select count(*)::int as n from events.outbox where type = 'decision.dormant.dormant-status'`)).rows[0].n);

    const hub = await startHubProcess('all', server.url, {
      SVC_WORKFLOW_SWEEP_EVERY: '500ms',
      SVC_LEADER_CHECK_EVERY: '300ms',
      SVC_EVENTS_STREAM_POLL_EVERY: '100ms',
      SVC_EVENTS_STREAM_HEARTBEAT: '300ms',
    });
    const said = () => `exit ${hub.child.exitCode}; ${hub.output().split(/\n(?=\[)/).filter((line) => !line.includes('INFO: request')).join('\n').slice(-3000)}`;
    // Opened before the first decision: it reads every one of them live.
    const stream = openStream(`${hub.url}/api/platform/events/stream?topic=decision.dormant.dormant-status`);
    await until('the stream to be open', () => stream.es.readyState === EventSource.OPEN, { timeoutMs: 20_000 });

    await until('the first decisions', async () => (await decisions()) > 0, { timeoutMs: 60_000, everyMs: 20, detail: said });
    await owner.end();
    const stoppedAt = Date.now();
    await server.stop();
    const ready = async () => (await fetch(`${hub.url}/q/health/ready`).catch(() => undefined))?.status;
    await until('readiness to go down', async () => (await ready()) === 503, { timeoutMs: 20_000, everyMs: 100, detail: said });
    await until('the sweep to find the database gone', () => said().includes('the database is unavailable; trying again at every tick'), { timeoutMs: 20_000, everyMs: 100, detail: said });
    // An outage of 11 s: past the 10 s the hub caches a tenant's and user's state, so the open
    // stream's access checks at its heartbeats need the database too (which leaves the stream open).
    await new Promise((r) => setTimeout(r, Math.max(0, stoppedAt + 11_000 - Date.now())));
    server = await fresh.restart();
    await until('readiness to come back', async () => (await ready()) === 200, { timeoutMs: 30_000, everyMs: 100, detail: said });
    owner = await connect();
    const atRestart = await decisions();
    expect(atRestart).toBeLessThan(records); // stopped mid-pass

    let seen = atRestart;
    const caughtUp = async () => {
      seen = await decisions();
      return seen >= records;
    };
    await until('a decision for every record', caughtUp, {
      timeoutMs: 120_000,
      everyMs: 200,
      detail: () => `${seen} of ${records} decisions (${atRestart} at the restart); ${said()}`,
    });
    const marker = await checkDormancyOnce(owner, records, said);
    // The stream, never reopened: every decision once, the marker's last.
    await until("the stream to reach the marker's decision", () => stream.received.includes(marker), { timeoutMs: 60_000, detail: () => `${stream.opens.join('; ')}; streamed ${stream.received.length}` });
    expect(stream.opens).toEqual(['open after null']);
    expect(stream.received).toHaveLength(records + 1);
    expect(new Set(stream.received).size).toBe(records + 1);
    stream.es.close();
    await owner.end();
    expect(hub.child.exitCode).toBeNull(); // the same process throughout
    expect(await hub.stop()).toBe(0);
    await server.stop();
  }, 300_000);
});

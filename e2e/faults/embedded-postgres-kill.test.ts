import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { EventSource } from 'eventsource';
import { isLive } from '../../src/db/embedded.js';
import { stopPostmaster } from '../../test/harness/run-tmpdir.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { until } from '../../test/harness/until.js';
import { endOutages, openStream } from './outages.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of the embedded PostgreSQL itself (its postmaster), not of the hub, while `svc-hub all`
 * runs on it under a load of writes, an event stream open and a webhook subscribed. What
 * docs/operations.md states ("When the database goes away"): the hub watches the server it started
 * and starts it again on the same port and data (an error in the log), the pools reconnect, requests
 * meanwhile answer 503 (never a 500, never a hang), readiness comes back in the same process; the
 * open stream goes on (nothing lost or sent twice); every event committed is delivered.
 */

const H = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
const dirs: string[] = [];
let receiver: Receiver | undefined;

afterAll(async () => {
  await killAll();
  await endOutages();
  await receiver?.close();
  for (const dir of dirs) {
    // The server of a hub killed by killAll above (a failed test) is stopped before its directory goes.
    await stopPostmaster(join(dir, 'data', 'pg', 'postmaster.pid'));
    rmSync(dir, { recursive: true, force: true });
  }
});

const postmasterOf = (dataDir: string) => Number(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);

describe('the embedded PostgreSQL killed -9 under the hub', () => {
  it('is started again by the hub; requests meanwhile answer 503, readiness comes back in the same process; the open stream and the webhook get every event once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-fault-embedded-'));
    chmodSync(dir, 0o755);
    dirs.push(dir);
    const dataDir = join(dir, 'data');
    const hub = await startHubProcess('all', undefined, {
      SVC_DATA_DIR: dataDir,
      SVC_LEADER_CHECK_EVERY: '300ms',
      SVC_WEBHOOK_SWEEP_EVERY: '500ms',
      SVC_WEBHOOK_RETRY_EVERY: '300ms',
      SVC_EVENTS_STREAM_POLL_EVERY: '100ms',
      SVC_EVENTS_STREAM_HEARTBEAT: '300ms',
    });
    receiver = await startReceiver();
    const integration = await fetch(`${hub.url}/api/tenants/1/integrations`, { method: 'POST', headers: H, body: JSON.stringify({ name: 'kill', targetUrl: `${receiver.url}/kill`, eventTypes: ['org.created'], authMode: 'NONE' }) });
    expect(integration.status).toBe(201);

    const stream = openStream(`${hub.url}/api/platform/events/stream?topic=org.created`);
    await until('the stream to be open', () => stream.es.readyState === EventSource.OPEN, { timeoutMs: 20_000 });

    // Load: organisations created one after the other for the whole test, every answer recorded.
    const answers: Array<{ i: number; status: number | string; at: number }> = [];
    let loading = true;
    let n = 0;
    const load = (async () => {
      while (loading) {
        const i = n++;
        const status = await fetch(`${hub.url}/api/tenants/1/orgs`, { method: 'POST', headers: H, body: JSON.stringify({ code: `k-${i}`, name: `K ${i}` }), signal: AbortSignal.timeout(30_000) }).then(
          async (res) => {
            await res.arrayBuffer();
            return res.status;
          },
          (err: Error) => err.name,
        );
        answers.push({ i, status, at: Date.now() });
        await new Promise((r) => setTimeout(r, 20)); // the load's pace, not a check
      }
    })();
    await until('the load to run', () => answers.filter((a) => a.status === 201).length >= 10, { timeoutMs: 30_000 });

    const before = postmasterOf(dataDir);
    const killedAt = Date.now();
    process.kill(before, 'SIGKILL');
    const said = () => `exit ${hub.child.exitCode}; ${hub.output().slice(-4000)}`;
    await until('the hub to see its server exit', () => hub.output().includes('embedded PostgreSQL exited unexpectedly'), { timeoutMs: 30_000, detail: said });
    const ready = async () => (await fetch(`${hub.url}/q/health/ready`, { signal: AbortSignal.timeout(10_000) }).catch(() => undefined))?.status;
    await until('a new server and readiness back', async () => existsSync(join(dataDir, 'pg', 'postmaster.pid')) && postmasterOf(dataDir) !== before && (await ready()) === 200, {
      timeoutMs: 90_000,
      everyMs: 200,
      detail: said,
    });
    // Writes made after it are kept.
    await until('writes to succeed again', () => answers.some((a) => a.at > killedAt && a.status === 201) && answers.filter((a) => a.status === 201).length > answers.findIndex((a) => a.at > killedAt) + 5, { timeoutMs: 60_000, detail: said });
    loading = false;
    await load;
    expect(hub.child.exitCode).toBeNull(); // the same process throughout
    // Meanwhile only 201 or 503: never a 500, never a hang (a timeout).
    expect(answers.filter((a) => a.status !== 201 && a.status !== 503)).toEqual([]);
    expect(answers.some((a) => a.at > killedAt && a.status === 503)).toBe(true); // the load met the outage

    // Every organisation the hub answered 201 for is kept, and its event delivered and streamed once.
    const orgs = (await (await fetch(`${hub.url}/api/tenants/1/orgs`, { headers: H })).json()) as Array<{ code: string }>;
    const codes = new Set(orgs.map((o) => o.code));
    const created = answers.filter((a) => a.status === 201).map((a) => `k-${a.i}`);
    expect(created.filter((code) => !codes.has(code))).toEqual([]);
    // The outbox's org.created events, read back through a stream resumed from its start.
    const replay = openStream(`${hub.url}/api/platform/events/stream?topic=org.created&lastEventId=0`);
    await until('the replay to reach the last event streamed live', () => replay.received.length >= codes.size, { timeoutMs: 30_000 });
    replay.es.close();
    const eventIds = replay.received.slice(0, codes.size);
    expect(new Set(eventIds).size).toBe(codes.size);
    await until('every event delivered', () => eventIds.every((id) => receiver!.on('/kill').some((r) => r.headers['x-svc-event-id'] === id)), { timeoutMs: 60_000, detail: said });
    await until('every event streamed', () => eventIds.every((id) => stream.received.includes(id)), { timeoutMs: 60_000, detail: () => `${stream.opens.join('; ')}; streamed ${stream.received.length} of ${eventIds.length}` });
    expect(stream.opens).toEqual(['open after null']); // never reopened
    expect(new Set(stream.received).size).toBe(stream.received.length); // none twice
    stream.es.close();

    expect(await hub.stop()).toBe(0);
    // A clean stop leaves no PostgreSQL of the cluster.
    const left = execFileSync('ps', ['-eo', 'pid,args'], { encoding: 'utf8' }).split('\n').filter((line) => line.includes(join(dataDir, 'pg')));
    expect(left).toEqual([]);
    expect(isLive(before)).toBe(false);
  }, 240_000);
});

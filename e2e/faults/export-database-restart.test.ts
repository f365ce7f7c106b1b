import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type DemoSource, startDemoSource } from '../../src/demo-source/server.js';
import { startS3, type TestS3 } from '../../test/harness/s3.js';
import { type CommitRelay, startCommitRelay } from '../../test/harness/s3-relay.js';
import { startSshd, type TestSshd } from '../../test/harness/sshd.js';
import { type StallRelay, startStallRelay } from '../../test/harness/stall-relay.js';
import { until } from '../../test/harness/until.js';
import { endOutages, restartableServer } from './outages.js';
import { type ExportTarget, exportKey, exportTargets, partFiles, partnersExport, s3Destination, seedExportedPartners } from './partners.js';
import { type HubProcess, killAll, startHubProcess } from './processes.js';

/**
 * The hub's PostgreSQL stopped and started again while an export run streams its snapshot, to S3
 * and to SFTP (the real OpenSSH server), the upload held by a relay 4 MiB in while the database
 * stops, so that most of the snapshot is still to be read. What docs/exports.md states: reading the
 * snapshot failed, so the run fails `generation`, nothing published (the multipart upload aborted,
 * the temporary `.part` file removed); its end, which cannot be recorded while the database is away,
 * is recorded once it is back ("tries again every second"); the same process recovers (no restart)
 * and a retry of the run publishes the file, every row once.
 * And stopped while the file is being published (S3 has stored it, its answer held by a relay):
 * once the destination has published, the connection lost changes nothing, and the run is recorded
 * Completed with its receipt once the database is back (step 5 of "What a run does").
 */

const BUCKET = 'drops';
const H = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
let demo: DemoSource;
let s3: TestS3;
let commitRelay: CommitRelay;
let sshd: TestSshd;
const relays: StallRelay[] = [];

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 2400, log: () => undefined });
  s3 = await startS3({ region: 'eu-west-3' });
  s3.createBucket(BUCKET);
  commitRelay = await startCommitRelay(s3.endpoint, BUCKET);
  // A user of its own: one sshd harness per user at a time.
  sshd = await startSshd({ user: 'svc-sftp-fault-pg' });
  relays.push(await startStallRelay(Number(new URL(s3.endpoint).port)), await startStallRelay(sshd.port));
});

afterAll(async () => {
  await killAll();
  await endOutages();
  for (const relay of relays) await relay.close();
  await commitRelay?.close();
  await sshd?.stop();
  await s3?.stop();
  await demo?.close();
});

/** A destination of the export, and what the outage test looks at in it. */
interface Target extends ExportTarget {
  /** The upload under way, held by the relay before most of the snapshot is read. */
  midUpload(): boolean;
  /** Nothing left beside the final name: the multipart upload aborted, the `.part` file removed. */
  cleaned(): boolean;
}

const TARGETS: Record<'s3' | 'sftp', () => Target> = {
  s3: () => ({
    ...exportTargets(s3, sshd, relays, BUCKET).s3,
    // The first part under way (the relay holds it 4 MiB in), none with S3 yet.
    midUpload: () => s3.requests.some((r) => r.url.includes('partNumber=1')) && s3.listMultipartUploads(BUCKET)[0]?.parts === 0,
    cleaned: () => s3.listMultipartUploads(BUCKET).length === 0,
  }),
  sftp: () => ({
    ...exportTargets(s3, sshd, relays, BUCKET).sftp,
    // The .part file under way (the relay holds the connection after 4 MiB).
    midUpload: () => partFiles(sshd).some((name) => statSync(join(sshd.root, name)).size > 1024 * 1024),
    cleaned: () => partFiles(sshd).length === 0,
  }),
};

async function get(hub: HubProcess, path: string): Promise<Record<string, unknown>> {
  return (await (await fetch(`${hub.url}${path}`, { headers: H })).json()) as Record<string, unknown>;
}

/** The hub's log without its request lines. */
const said = (hub: HubProcess) => hub.output().split(/\n(?=\[)/).filter((line) => !line.includes('INFO: request')).join('\n').slice(-3000);

describe.each(['s3', 'sftp'] as const)('PostgreSQL stopped and restarted while an export streams to %s', (kind) => {
  it('the run fails generation with nothing published, its end recorded once the database is back; the same hub retries it to completion', async () => {
    const target = TARGETS[kind]();
    const fresh = await restartableServer();
    let server = fresh.server;
    const hub = await startHubProcess('all', server.url, {
      SVC_SCHEDULER_ENABLED: 'false',
      SVC_EXPORT_HEARTBEAT_EVERY: '300ms',
      SVC_LEADER_CHECK_EVERY: '300ms',
    });
    let owner = new pg.Client({ connectionString: server.url });
    await owner.connect();
    // About 40 MB, so that much of the snapshot is still unread while the upload is held (the hub
    // reads a part, 8 MiB, into memory before sending it, and socket buffers hold a few more).
    const rows = await seedExportedPartners(hub, owner, { url: demo.url, rows: 2400 }, s3, 300_000);
    for (const [name, value] of target.secrets()) expect((await fetch(`${hub.url}/api/platform/secrets`, { method: 'POST', headers: H, body: JSON.stringify({ name, value }) })).status).toBe(201);
    expect((await fetch(`${hub.url}/api/exports/apply`, { method: 'POST', headers: H, body: JSON.stringify(partnersExport(target.destination())) })).status).toBe(201);

    target.relay.stallAfter(4 * 1024 * 1024);
    const started = await fetch(`${hub.url}/api/exports/big/runs`, { method: 'POST', headers: H });
    expect(started.status).toBe(202);
    const runId = ((await started.json()) as { runId: string }).runId;
    const run = (await owner.query(`select artifact_time from exports.runs where id = $1`, [runId])).rows[0];
    const key = exportKey(run.artifact_time as Date);
    await until('the run to be mid-upload', () => target.midUpload(), { timeoutMs: 60_000, everyMs: 50, detail: () => said(hub) });
    await owner.end();

    // The database goes while the snapshot is being read; then the upload is let go on.
    await server.stop();
    const ready = async () => (await fetch(`${hub.url}/q/health/ready`).catch(() => undefined))?.status;
    await until('readiness to go down', async () => (await ready()) === 503, { timeoutMs: 20_000, everyMs: 100, detail: () => said(hub) });
    target.relay.resume();
    await until('the run to find the database gone, its end not recordable', () => said(hub).includes('its end could not be recorded (the database is unavailable)'), {
      timeoutMs: 30_000,
      everyMs: 100,
      detail: () => said(hub),
    });
    // Nothing published, nothing left beside the final name, while the database is still away.
    expect(target.published(key)).toBeUndefined();
    await until('the multipart upload aborted, the .part file removed', () => target.cleaned(), { timeoutMs: 10_000 });

    server = await fresh.restart();
    await until('readiness to come back', async () => (await ready()) === 200, { timeoutMs: 30_000, everyMs: 100, detail: () => said(hub) });
    const failed = await until('the run\'s end to be recorded', async () => {
      const r = await get(hub, `/api/exports/big/runs/${runId}`);
      return r.status !== 'Running' && r;
    }, { timeoutMs: 20_000, detail: () => said(hub) });
    expect(failed).toMatchObject({ status: 'Failed', failureCode: 'generation', sha256: null, failureReason: expect.stringMatching(/^reading or encoding the snapshot failed: .+; nothing was published$/) });
    expect(target.published(key)).toBeUndefined();

    // The same process, no restart: a retry publishes the file, every row once.
    const retried = await fetch(`${hub.url}/api/exports/big/runs/${runId}/retry`, { method: 'POST', headers: H });
    expect(retried.status).toBe(202);
    const retryId = ((await retried.json()) as { runId: string }).runId;
    const done = await until('the retry', async () => {
      const r = await get(hub, `/api/exports/big/runs/${retryId}`);
      return r.status !== 'Running' && r;
    }, { timeoutMs: 60_000, detail: () => said(hub) });
    expect(done).toMatchObject({ status: 'Completed', rowCount: rows, retryOf: runId, location: target.location(key) });
    const file = target.published(key)!;
    expect(createHash('sha256').update(file).digest('hex')).toBe(done.sha256);
    const lines = file.toString('utf8').trimEnd().split('\n');
    expect(lines).toHaveLength(rows + 1);
    expect(new Set(lines).size).toBe(lines.length);
    expect(target.cleaned()).toBe(true);
    expect(hub.child.exitCode).toBeNull(); // the same process throughout
    owner = new pg.Client({ connectionString: server.url });
    await owner.connect();
    const runs = await owner.query(`select status, failure_code from exports.runs order by started_at`);
    await owner.end();
    expect(runs.rows).toEqual([{ status: 'Failed', failure_code: 'generation' }, { status: 'Completed', failure_code: null }]);
    expect(await hub.stop()).toBe(0);
    await server.stop();
  }, 180_000);
});

describe('PostgreSQL stopped and restarted while an export publishes', () => {
  it('stopped while the file is being published: the run is recorded Completed with its receipt once the database is back', async () => {
    const fresh = await restartableServer();
    let server = fresh.server;
    const hub = await startHubProcess('all', server.url, { SVC_SCHEDULER_ENABLED: 'false', SVC_EXPORT_HEARTBEAT_EVERY: '300ms', SVC_LEADER_CHECK_EVERY: '300ms' });
    let owner = new pg.Client({ connectionString: server.url });
    await owner.connect();
    // The demo source's partners only: one PutObject, whose answer the relay holds.
    const rows = await seedExportedPartners(hub, owner, { url: demo.url, rows: 2400 }, s3, 0);
    await owner.end();
    const key = 'published.csv';
    expect((await fetch(`${hub.url}/api/exports/apply`, { method: 'POST', headers: H, body: JSON.stringify(partnersExport(s3Destination(commitRelay.endpoint, BUCKET, key))) })).status).toBe(201);
    const held = commitRelay.hold(key);
    const started = await fetch(`${hub.url}/api/exports/big/runs`, { method: 'POST', headers: H });
    expect(started.status).toBe(202);
    const runId = ((await started.json()) as { runId: string }).runId;
    await held.stored; // the file is at S3, the hub does not know it yet

    await server.stop();
    const ready = async () => (await fetch(`${hub.url}/q/health/ready`).catch(() => undefined))?.status;
    await until('readiness to go down', async () => (await ready()) === 503, { timeoutMs: 20_000, everyMs: 100, detail: () => said(hub) });
    held.release();
    await until('the run to have its receipt, its end not recordable', () => said(hub).includes('its end could not be recorded (the database is unavailable)'), {
      timeoutMs: 30_000,
      everyMs: 100,
      detail: () => said(hub),
    });

    server = await fresh.restart();
    await until('readiness to come back', async () => (await ready()) === 200, { timeoutMs: 30_000, everyMs: 100, detail: () => said(hub) });
    const done = await until("the run's end to be recorded", async () => {
      const r = await get(hub, `/api/exports/big/runs/${runId}`);
      return r.status !== 'Running' && r;
    }, { timeoutMs: 20_000, detail: () => said(hub) });
    const object = s3.getObject(BUCKET, key)!;
    expect(done).toMatchObject({ status: 'Completed', rowCount: rows, failureCode: null, location: `s3://${BUCKET}/${key}`, sha256: createHash('sha256').update(object.body).digest('hex') });
    expect(object.body.toString('utf8').trimEnd().split('\n')).toHaveLength(rows + 1);
    expect(hub.child.exitCode).toBeNull();
    owner = new pg.Client({ connectionString: server.url });
    await owner.connect();
    const runs = await owner.query('select status from exports.runs');
    await owner.end();
    expect(runs.rows).toEqual([{ status: 'Completed' }]);
    expect(await hub.stop()).toBe(0);
    await server.stop();
  }, 180_000);
});

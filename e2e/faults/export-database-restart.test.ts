import { createHash } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type EmbeddedDatabase, freePort, startEmbedded } from '../../src/db/embedded.js';
import { type DemoSource, startDemoSource } from '../../src/demo-source/server.js';
import { startS3, type TestS3 } from '../../test/harness/s3.js';
import { type CommitRelay, startCommitRelay } from '../../test/harness/s3-relay.js';
import { type StallRelay, startStallRelay } from '../../test/harness/stall-relay.js';
import { until } from '../../test/harness/until.js';
import { exportKey, partnersExport, s3Destination, seedExportedPartners } from './partners.js';
import { type HubProcess, killAll, startHubProcess } from './processes.js';

/**
 * The hub's PostgreSQL stopped and started again while an export run streams its snapshot to S3 (the
 * upload held by a relay 4 MiB into its first part while the database stops, so that most of the
 * snapshot is still to be read). What docs/exports.md states: reading the snapshot failed, so the
 * run fails `generation`, nothing published (the multipart upload aborted); its end, which cannot be
 * recorded while the database is away, is recorded once it is back ("tries again every second"); the
 * same process recovers (no restart) and a retry of the run publishes the file, every row once.
 * And stopped while the file is being published (S3 has stored it, its answer held by a relay):
 * once the destination has published, the connection lost changes nothing, and the run is recorded
 * Completed with its receipt once the database is back (step 5 of "What a run does").
 */

const BUCKET = 'drops';
const H = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
const dirs: string[] = [];
const servers: EmbeddedDatabase[] = [];
let demo: DemoSource;
let s3: TestS3;
let relay: StallRelay;
let commitRelay: CommitRelay;

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 2400, log: () => undefined });
  s3 = await startS3({ region: 'eu-west-3' });
  s3.createBucket(BUCKET);
  relay = await startStallRelay(Number(new URL(s3.endpoint).port));
  commitRelay = await startCommitRelay(s3.endpoint, BUCKET);
});

afterAll(async () => {
  await killAll();
  for (const server of servers) await server.stop();
  await relay?.close();
  await commitRelay?.close();
  await s3?.stop();
  await demo?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

async function startServer(options: Parameters<typeof startEmbedded>[0]): Promise<EmbeddedDatabase> {
  const started = await startEmbedded(options);
  servers.push(started);
  return started;
}

/** An embedded PostgreSQL of its own in a fresh directory, and its start again on the same port. */
async function freshServer(): Promise<{ server: EmbeddedDatabase; restart(): Promise<EmbeddedDatabase> }> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-fault-pg-'));
  chmodSync(dir, 0o755);
  dirs.push(dir);
  const port = await freePort();
  const server = await startServer({ dataDir: join(dir, 'data'), database: 'svc', port });
  return { server, restart: () => startServer({ dataDir: join(dir, 'data'), database: 'svc', port }) };
}

async function get(hub: HubProcess, path: string): Promise<Record<string, unknown>> {
  return (await (await fetch(`${hub.url}${path}`, { headers: H })).json()) as Record<string, unknown>;
}

/** The hub's log without its request lines. */
const said = (hub: HubProcess) => hub.output().split(/\n(?=\[)/).filter((line) => !line.includes('INFO: request')).join('\n').slice(-3000);

describe('PostgreSQL stopped and restarted while an export streams', () => {
  it('the run fails generation with nothing published, its end recorded once the database is back; the same hub retries it to completion', async () => {
    const fresh = await freshServer();
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
    expect((await fetch(`${hub.url}/api/exports/apply`, { method: 'POST', headers: H, body: JSON.stringify(partnersExport(s3Destination(relay.endpoint, BUCKET))) })).status).toBe(201);

    relay.stallAfter(4 * 1024 * 1024);
    const started = await fetch(`${hub.url}/api/exports/big/runs`, { method: 'POST', headers: H });
    expect(started.status).toBe(202);
    const runId = ((await started.json()) as { runId: string }).runId;
    const run = (await owner.query(`select artifact_time from exports.runs where id = $1`, [runId])).rows[0];
    const key = exportKey(run.artifact_time as Date);
    await until('the run to be mid-upload', () => s3.requests.some((r) => r.url.includes('partNumber=1')) && s3.listMultipartUploads(BUCKET)[0]?.parts === 0, {
      timeoutMs: 60_000,
      everyMs: 50,
      detail: () => said(hub),
    });
    await owner.end();

    // The database goes while the snapshot is being read; then the upload is let go on.
    await server.stop();
    const ready = async () => (await fetch(`${hub.url}/q/health/ready`).catch(() => undefined))?.status;
    await until('readiness to go down', async () => (await ready()) === 503, { timeoutMs: 20_000, everyMs: 100, detail: () => said(hub) });
    relay.resume();
    await until('the run to find the database gone, its end not recordable', () => said(hub).includes('its end could not be recorded (the database is unavailable)'), {
      timeoutMs: 30_000,
      everyMs: 100,
      detail: () => said(hub),
    });
    // Nothing published, the upload aborted, while the database is still away.
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
    await until('the multipart upload to be aborted', () => s3.listMultipartUploads(BUCKET).length === 0, { timeoutMs: 10_000 });

    server = await fresh.restart();
    await until('readiness to come back', async () => (await ready()) === 200, { timeoutMs: 30_000, everyMs: 100, detail: () => said(hub) });
    const failed = await until('the run\'s end to be recorded', async () => {
      const r = await get(hub, `/api/exports/big/runs/${runId}`);
      return r.status !== 'Running' && r;
    }, { timeoutMs: 20_000, detail: () => said(hub) });
    expect(failed).toMatchObject({ status: 'Failed', failureCode: 'generation', sha256: null, failureReason: expect.stringMatching(/^reading or encoding the snapshot failed: .+; nothing was published$/) });
    expect(s3.getObject(BUCKET, key)).toBeUndefined();

    // The same process, no restart: a retry publishes the file, every row once.
    const retried = await fetch(`${hub.url}/api/exports/big/runs/${runId}/retry`, { method: 'POST', headers: H });
    expect(retried.status).toBe(202);
    const retryId = ((await retried.json()) as { runId: string }).runId;
    const done = await until('the retry', async () => {
      const r = await get(hub, `/api/exports/big/runs/${retryId}`);
      return r.status !== 'Running' && r;
    }, { timeoutMs: 60_000, detail: () => said(hub) });
    expect(done).toMatchObject({ status: 'Completed', rowCount: rows, retryOf: runId, location: `s3://${BUCKET}/${key}` });
    const object = s3.getObject(BUCKET, key)!;
    expect(createHash('sha256').update(object.body).digest('hex')).toBe(done.sha256);
    const lines = object.body.toString('utf8').trimEnd().split('\n');
    expect(lines).toHaveLength(rows + 1);
    expect(new Set(lines).size).toBe(lines.length);
    expect(hub.child.exitCode).toBeNull(); // the same process throughout
    owner = new pg.Client({ connectionString: server.url });
    await owner.connect();
    const runs = await owner.query(`select status, failure_code from exports.runs order by started_at`);
    await owner.end();
    expect(runs.rows).toEqual([{ status: 'Failed', failure_code: 'generation' }, { status: 'Completed', failure_code: null }]);
    expect(await hub.stop()).toBe(0);
    await server.stop();
  }, 180_000);

  it('stopped while the file is being published: the run is recorded Completed with its receipt once the database is back', async () => {
    const fresh = await freshServer();
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

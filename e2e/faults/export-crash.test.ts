import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type DemoSource, startDemoSource } from '../../src/demo-source/server.js';
import { INTERRUPTED_REASON } from '../../src/exports/runs/ledger.js';
import { createTestDatabase } from '../../test/harness/database.js';
import { startS3, type TestS3 } from '../../test/harness/s3.js';
import { type StallRelay, startStallRelay } from '../../test/harness/stall-relay.js';
import { until } from '../../test/harness/until.js';
import { exportKey, partnersExport, seedExportedPartners } from './partners.js';
import { type HubProcess, killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of a real `svc-hub all` process in the middle of a scheduled export run to S3 (the S3
 * harness the export tests use, behind a TCP relay that stops passing bytes part-way through the
 * upload's second part, so the kill lands mid-publication whatever the machine's speed), then a new
 * process on the same database. What docs/exports.md and exports-destinations.md state:
 * - the interrupted-run sweep of the next process fails the run `interrupted` ("Interrupted runs");
 * - nothing is at the final name: the crash leaves at most an incomplete multipart upload, which the
 *   hub never cleans ("What a crash leaves behind");
 * - no automatic retry; a retry (same artifact time, so the same key) publishes the file, every row
 *   once; the slot is then delivered, and a second retry of the crashed run is 409 `already delivered`.
 */

const H = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
const BUCKET = 'drops';
const CLOCKS = {
  SVC_EXPORT_HEARTBEAT_EVERY: '300ms',
  SVC_EXPORT_RUN_STALE_AFTER: '2s',
  SVC_EXPORT_INTERRUPTED_SWEEP_EVERY: '500ms',
  SVC_LEADER_CHECK_EVERY: '300ms',
};

let demo: DemoSource;
let s3: TestS3;
let relay: StallRelay;
const owners: pg.Client[] = [];

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 2400, log: () => undefined });
  s3 = await startS3({ region: 'eu-west-3' });
  s3.createBucket(BUCKET);
  relay = await startStallRelay(Number(new URL(s3.endpoint).port));
});

afterAll(async () => {
  await killAll();
  for (const owner of owners) await owner.end();
  await relay?.close();
  await s3?.stop();
  await demo?.close();
});

async function call(hub: HubProcess, method: string, path: string, body?: unknown, type = 'application/json'): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${hub.url}${path}`, { method, headers: { ...H, 'content-type': type }, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  try {
    return { status: res.status, json: JSON.parse(text) };
  } catch {
    return { status: res.status, json: { text } };
  }
}

/** The hub's log without its request lines. */
function hubSaid(hub: HubProcess): string {
  return hub.output().split(/\n(?=\[)/).filter((line) => !line.includes('INFO: request')).join('\n').slice(-3000);
}

describe('kill -9 of the hub mid export run', () => {
  it('the run is swept interrupted, nothing is at the final name, a retry delivers the slot once', async () => {
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);
    // The first process's scheduler claims the current minute's slot at its next tick.
    const first = await startHubProcess('all', url, { ...CLOCKS, SVC_SCHEDULER_TICK: '500ms' });
    const rows = await seedExportedPartners(first, owner, { url: demo.url, rows: 2400 }, s3);
    // The upload is cut off part-way through its second part: the first part is with S3.
    relay.stallAfter(12 * 1024 * 1024);
    expect((await call(first, 'POST', '/api/exports/apply', partnersExport(relay.endpoint, BUCKET, '* * * * *'))).status).toBe(201);
    const running = await until('the scheduled run to be mid-upload', async () => {
      // The second part under way (it does not end: the relay holds it 4 MiB in), the first with S3.
      if (!s3.requests.some((r) => r.url.includes('partNumber=2'))) return undefined;
      const uploads = s3.listMultipartUploads(BUCKET);
      if (!(uploads.length === 1 && uploads[0]!.parts === 1)) return undefined;
      const { rows: runs } = await owner.query(`select id::text, status, slot, artifact_time from exports.runs`);
      return runs.length === 1 && runs[0];
    }, { timeoutMs: 60_000, everyMs: 50, detail: () => hubSaid(first) });
    expect(running).toMatchObject({ status: 'Running' });
    await first.crash();
    const runId = running.id as string;
    const key = exportKey(running.artifact_time as Date);
    expect(s3.getObject(BUCKET, key)).toBeUndefined();

    // The next process (scheduler off: this minute's slot is the crashed run's, and a new minute's
    // slot would be another run) sweeps the run; nothing retries it by itself.
    relay.resume();
    const second = await startHubProcess('all', url, { ...CLOCKS, SVC_SCHEDULER_ENABLED: 'false' });
    const swept = await until('the interrupted-run sweep', async () => {
      const run = (await call(second, 'GET', `/api/exports/big/runs/${runId}`)).json;
      return run.status !== 'Running' && run;
    }, { timeoutMs: 20_000, detail: () => hubSaid(second) });
    expect(swept).toMatchObject({ status: 'Failed', failureCode: 'interrupted', failureReason: INTERRUPTED_REASON, trigger: 'scheduled', sha256: null });
    // Nothing at the final name; the crash's incomplete multipart upload stays (the hub never cleans it).
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
    expect(s3.listMultipartUploads(BUCKET)).toEqual([expect.objectContaining({ key })]);
    expect((await owner.query('select count(*)::int as n from exports.runs')).rows[0].n).toBe(1);

    const retried = await call(second, 'POST', `/api/exports/big/runs/${runId}/retry`);
    expect(retried.status).toBe(202);
    const retryId = retried.json.runId as string;
    const done = await until('the retry', async () => {
      const run = (await call(second, 'GET', `/api/exports/big/runs/${retryId}`)).json;
      return run.status !== 'Running' && run;
    }, { timeoutMs: 60_000, detail: () => `${JSON.stringify(s3.requests.slice(-6))}; ${hubSaid(second)}` });
    expect(done).toMatchObject({ status: 'Completed', rowCount: rows, retryOf: runId, attempt: 2, slot: swept.slot, location: `s3://${BUCKET}/${key}` });
    const object = s3.getObject(BUCKET, key)!;
    expect(createHash('sha256').update(object.body).digest('hex')).toBe(done.sha256);
    const lines = object.body.toString('utf8').trimEnd().split('\n');
    expect(lines).toHaveLength(rows + 1); // the header, every row once
    expect(new Set(lines).size).toBe(lines.length);
    // The slot is delivered: retrying the crashed run again is refused, and nothing else was published.
    const again = await call(second, 'POST', `/api/exports/big/runs/${runId}/retry`);
    expect(again.status).toBe(409);
    expect(JSON.stringify(again.json)).toContain('already delivered');
    const completes = s3.requests.filter((r) => r.method === 'POST' && r.url.includes('uploadId=') && r.status === 200);
    expect(completes).toHaveLength(1);
    await second.stop();
  }, 180_000);
});

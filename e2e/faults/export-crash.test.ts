import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type DemoSource, startDemoSource } from '../../src/demo-source/server.js';
import { INTERRUPTED_REASON } from '../../src/exports/runs/ledger.js';
import { createTestDatabase } from '../../test/harness/database.js';
import { startS3, type TestS3 } from '../../test/harness/s3.js';
import { startSshd, type TestSshd } from '../../test/harness/sshd.js';
import { type StallRelay, startStallRelay } from '../../test/harness/stall-relay.js';
import { until } from '../../test/harness/until.js';
import { type ExportTarget, exportKey, exportTargets, partFiles, partnersExport, seedExportedPartners } from './partners.js';
import { type HubProcess, killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of a real `svc-hub all` process in the middle of a scheduled export run, to S3 (the S3
 * harness the export tests use) and to SFTP (the real OpenSSH server of test/harness/sshd.ts), each
 * behind a TCP relay that holds the upload part-way (so the kill lands mid-publication whatever the
 * machine's speed), then a new process on the same database. What docs/exports.md and
 * exports-destinations.md state:
 * - the interrupted-run sweep of the next process fails the run `interrupted` ("Interrupted runs");
 * - nothing is at the final name: the crash leaves at most an incomplete multipart upload (S3) or a
 *   `<name>.<uuid>.part` file next to it (SFTP), which the hub never cleans ("What a crash leaves behind");
 * - no automatic retry; a retry (same artifact time, so the same name) publishes the file, every row
 *   once; the slot is then delivered, and a second retry of the crashed run is 409 `already delivered`;
 * - a slot is claimed once ("Schedules"): the next process, its scheduler on and ticking in the
 *   crashed run's minute (before and after the sweep), runs that slot neither again nor twice, and
 *   runs the next minute's slot as any other (every row once).
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
let sshd: TestSshd;
const relays: StallRelay[] = [];
const owners: pg.Client[] = [];

/** A destination of the export, and what the crash test looks at in it. */
interface Target extends ExportTarget {
  /** Whether the upload is part-way (and held there by the relay). */
  midUpload(): boolean;
  /** What the crash is documented to leave behind, and nothing at the final name. */
  leftBehind(key: string): unknown;
}

const TARGETS: Record<'s3' | 'sftp', () => Target> = {
  s3: () => ({
    ...exportTargets(s3, sshd, relays, BUCKET).s3,
    // The second part under way (it does not end: the relay holds it 4 MiB in), the first with S3.
    midUpload: () => s3.requests.some((r) => r.url.includes('partNumber=2')) && s3.listMultipartUploads(BUCKET)[0]?.parts === 1,
    leftBehind: (key) => expect(s3.listMultipartUploads(BUCKET)).toEqual([expect.objectContaining({ key })]),
  }),
  sftp: () => ({
    ...exportTargets(s3, sshd, relays, BUCKET).sftp,
    // The .part file well under way (the relay holds the upload after 12 MiB of the connection).
    midUpload: () => partFiles(sshd).some((name) => statSync(join(sshd.root, name)).size > 4 * 1024 * 1024),
    leftBehind: (key) => {
      const parts = partFiles(sshd);
      expect(parts).toHaveLength(1);
      expect(parts[0]).toMatch(new RegExp(`^${key.replace('.', '\\.')}\\.[0-9a-f-]{36}\\.part$`));
    },
  }),
};

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 2400, log: () => undefined });
  s3 = await startS3({ region: 'eu-west-3' });
  s3.createBucket(BUCKET);
  // A user of its own: one sshd harness per user at a time.
  sshd = await startSshd({ user: 'svc-sftp-fault' });
  relays.push(await startStallRelay(Number(new URL(s3.endpoint).port)), await startStallRelay(sshd.port));
});

afterAll(async () => {
  await killAll();
  for (const owner of owners) await owner.end();
  for (const relay of relays) await relay.close();
  await sshd?.stop();
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

/** A published file: the run's SHA-256, the header and every row once. */
function expectEveryRowOnce(file: Buffer, run: Record<string, unknown>, rows: number) {
  expect(createHash('sha256').update(file).digest('hex')).toBe(run.sha256);
  const lines = file.toString('utf8').trimEnd().split('\n');
  expect(lines).toHaveLength(rows + 1);
  expect(new Set(lines).size).toBe(lines.length);
}

describe.each(['s3', 'sftp'] as const)('kill -9 of the hub mid export run to %s', (kind) => {
  it('the run is swept interrupted, nothing is at the final name, no scheduler runs its slot again (the next slot runs), a retry delivers the slot once', async () => {
    const target = TARGETS[kind]();
    const relay = target.relay;
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);
    // The first process's scheduler claims the current minute's slot at its next tick.
    const first = await startHubProcess('all', url, { ...CLOCKS, SVC_SCHEDULER_TICK: '500ms' });
    const rows = await seedExportedPartners(first, owner, { url: demo.url, rows: 2400 }, s3);
    for (const [name, value] of target.secrets()) expect((await call(first, 'POST', '/api/platform/secrets', { name, value })).status).toBe(201);
    // The whole crash, the next start and its sweep fit in the minute of the slot: the next
    // process's scheduler ticks in that minute, after the sweep too, while the slot is the latest.
    await until('a minute with 35 s left', () => new Date().getUTCSeconds() < 25, { timeoutMs: 40_000, everyMs: 200 });
    // The upload is held part-way: 12 MiB of it pass.
    relay.stallAfter(12 * 1024 * 1024);
    expect((await call(first, 'POST', '/api/exports/apply', partnersExport(target.destination(), '* * * * *'))).status).toBe(201);
    const running = await until('the scheduled run to be mid-upload', async () => {
      if (!target.midUpload()) return undefined;
      const { rows: runs } = await owner.query(`select id::text, status, slot, artifact_time from exports.runs`);
      return runs.length === 1 && runs[0];
    }, { timeoutMs: 60_000, everyMs: 50, detail: () => hubSaid(first) });
    expect(running).toMatchObject({ status: 'Running' });
    await first.crash();
    const runId = running.id as string;
    const key = exportKey(running.artifact_time as Date);
    expect(target.published(key)).toBeUndefined();

    // The next process, its scheduler on in the same minute: it sweeps the run; nothing retries it
    // by itself, nor claims its slot again (the slot is the crashed run's, claimed once).
    relay.resume();
    const second = await startHubProcess('all', url, { ...CLOCKS, SVC_SCHEDULER_TICK: '500ms' });
    const swept = await until('the interrupted-run sweep', async () => {
      const run = (await call(second, 'GET', `/api/exports/big/runs/${runId}`)).json;
      return run.status !== 'Running' && run;
    }, { timeoutMs: 20_000, detail: () => hubSaid(second) });
    expect(swept).toMatchObject({ status: 'Failed', failureCode: 'interrupted', failureReason: INTERRUPTED_REASON, trigger: 'scheduled', sha256: null });
    const slot = running.slot as Date;
    // The sweep came early enough in the slot's minute for the scheduler's ticks after it to find that
    // slot the latest one still (else this case would not check what it is for).
    expect(Date.parse(swept.endedAt as string)).toBeLessThan(slot.getTime() + 55_000);
    // Nothing at the final name; what the crash left stays (the hub never cleans it).
    expect(target.published(key)).toBeUndefined();
    target.leftBehind(key);
    const runsOf = async (at: Date) => (await owner.query('select id::text, status, attempt, retry_of::text from exports.runs where slot = $1 order by attempt', [at])).rows;
    expect(await runsOf(slot)).toEqual([expect.objectContaining({ id: runId, attempt: 1 })]);
    // Nothing claims the slot again (nor retries its run), while this process's scheduler ticks
    // through the rest of its minute: the next minute's slot is the first it runs, as any other,
    // a new first attempt, every row once under its own name.
    const nextSlot = new Date(slot.getTime() + 60_000);
    const next = await until("the next minute's slot run", async () => {
      const [run] = await runsOf(nextSlot);
      return run && run.status !== 'Running' && (await call(second, 'GET', `/api/exports/big/runs/${run.id}`)).json;
    }, { timeoutMs: 90_000, detail: () => hubSaid(second) });
    const nextKey = exportKey(nextSlot);
    expect(next).toMatchObject({ status: 'Completed', trigger: 'scheduled', attempt: 1, retryOf: null, rowCount: rows, slot: nextSlot.toISOString(), location: target.location(nextKey) });
    expectEveryRowOnce(target.published(nextKey)!, next, rows);
    expect(await runsOf(slot)).toEqual([expect.objectContaining({ id: runId, status: 'Failed', attempt: 1 })]);

    const retried = await call(second, 'POST', `/api/exports/big/runs/${runId}/retry`);
    expect(retried.status).toBe(202);
    const retryId = retried.json.runId as string;
    const done = await until('the retry', async () => {
      const run = (await call(second, 'GET', `/api/exports/big/runs/${retryId}`)).json;
      return run.status !== 'Running' && run;
    }, { timeoutMs: 60_000, detail: () => hubSaid(second) });
    expect(done).toMatchObject({ status: 'Completed', rowCount: rows, retryOf: runId, attempt: 2, slot: swept.slot, location: target.location(key) });
    expectEveryRowOnce(target.published(key)!, done, rows);
    // The slot is delivered: retrying the crashed run again is refused, and nothing else was published.
    const again = await call(second, 'POST', `/api/exports/big/runs/${runId}/retry`);
    expect(again.status).toBe(409);
    expect(JSON.stringify(again.json)).toContain('already delivered');
    expect(await runsOf(slot)).toEqual([expect.objectContaining({ id: runId, attempt: 1 }), expect.objectContaining({ id: retryId, attempt: 2, retry_of: runId })]);
    expect((await owner.query('select count(*)::int as n from exports.runs')).rows[0].n).toBe(3);
    target.leftBehind(key); // the crash's leftover, still the only one
    await second.stop();
  }, 240_000);
});

/**
 * The same kill -9, of a run a caller started (POST /api/exports/{name}/runs): the next process's
 * sweep fails it `interrupted` (it is not left Running), what the crash left stays beside the final
 * name and nothing is at it, and the next run (a new one, not a retry: its artifact time is its
 * request's, so another `${timestamp}` name) publishes every row once.
 */
describe.each(['s3', 'sftp'] as const)('kill -9 of the hub mid manual export run to %s', (kind) => {
  it('the run is swept interrupted, nothing is at its name; the next run publishes every row once', async () => {
    const target = TARGETS[kind]();
    const relay = target.relay;
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);
    // Earlier tests of this file share the bucket and the directory: look only at this run's name.
    const uploadsOf = (key: string) => s3.listMultipartUploads(BUCKET).filter((u) => u.key === key);
    const partsOf = (key: string) => partFiles(sshd).filter((name) => name.startsWith(`${key}.`));
    const first = await startHubProcess('all', url, { ...CLOCKS, SVC_SCHEDULER_ENABLED: 'false' });
    const rows = await seedExportedPartners(first, owner, { url: demo.url, rows: 2400 }, s3);
    for (const [name, value] of target.secrets()) expect((await call(first, 'POST', '/api/platform/secrets', { name, value })).status).toBe(201);
    expect((await call(first, 'POST', '/api/exports/apply', partnersExport(target.destination()))).status).toBe(201);
    // The upload is held part-way: 12 MiB of it pass.
    relay.stallAfter(12 * 1024 * 1024);
    const started = await call(first, 'POST', '/api/exports/big/runs');
    expect(started.status).toBe(202);
    const runId = started.json.runId as string;
    const key = exportKey(new Date((await call(first, 'GET', `/api/exports/big/runs/${runId}`)).json.artifactTime as string));
    await until('the run to be mid-upload', () =>
      kind === 's3'
        ? uploadsOf(key)[0]?.parts === 1 && s3.requests.some((r) => r.url.startsWith(`/${BUCKET}/${key}?`) && r.url.includes('partNumber=2'))
        : partsOf(key).some((name) => statSync(join(sshd.root, name)).size > 4 * 1024 * 1024),
      { timeoutMs: 60_000, everyMs: 50, detail: () => hubSaid(first) },
    );
    await first.crash();
    relay.resume();

    const second = await startHubProcess('all', url, { ...CLOCKS, SVC_SCHEDULER_ENABLED: 'false' });
    const swept = await until('the interrupted-run sweep', async () => {
      const run = (await call(second, 'GET', `/api/exports/big/runs/${runId}`)).json;
      return run.status !== 'Running' && run;
    }, { timeoutMs: 20_000, detail: () => hubSaid(second) });
    expect(swept).toMatchObject({ status: 'Failed', failureCode: 'interrupted', failureReason: INTERRUPTED_REASON, trigger: 'manual', sha256: null, location: null });
    expect(target.published(key)).toBeUndefined();
    if (kind === 's3') expect(uploadsOf(key)).toHaveLength(1);
    else expect(partsOf(key)).toHaveLength(1);

    const next = await call(second, 'POST', '/api/exports/big/runs');
    expect(next.status).toBe(202);
    const nextId = next.json.runId as string;
    const done = await until('the next run', async () => {
      const run = (await call(second, 'GET', `/api/exports/big/runs/${nextId}`)).json;
      return run.status !== 'Running' && run;
    }, { timeoutMs: 60_000, detail: () => hubSaid(second) });
    const nextKey = exportKey(new Date(done.artifactTime as string));
    expect(nextKey).not.toBe(key);
    expect(done).toMatchObject({ status: 'Completed', rowCount: rows, attempt: 1, retryOf: null, trigger: 'manual', location: target.location(nextKey) });
    const file = target.published(nextKey)!;
    expect(file.length).toBe(done.byteCount);
    expectEveryRowOnce(file, done, rows);
    // The crashed run's name stays empty; the next run left nothing beside its own.
    expect(target.published(key)).toBeUndefined();
    if (kind === 's3') expect(uploadsOf(nextKey)).toEqual([]);
    else expect(partsOf(nextKey)).toEqual([]);
    await second.stop();
  }, 180_000);
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { itemS3Export, seedItemExports } from '../../../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startS3, type TestS3 } from '../../../test/harness/s3.js';
import { describeRequiring } from '../../../test/harness/requires.js';
import { sshdProblem, startSshd, type TestSshd } from '../../../test/harness/sshd.js';
import { type StallRelay, startStallRelay } from '../../../test/harness/stall-relay.js';
import { until } from '../../../test/harness/until.js';

/**
 * A connection cut in the middle of an upload, through the hub's real export path (POST
 * /api/exports/{name}/runs, then POST …/retry), to a real OpenSSH server and to the S3 stand-in
 * (test/harness/s3.ts), each behind a TCP relay (test/harness/stall-relay.ts) that resets the
 * connection once so many bytes have gone through, or, for SFTP, with the sshd process serving the
 * session killed. What docs/exports.md and docs/exports-destinations.md promise: the run fails
 * `publication` at once, naming the connection; nothing appears at the final name (the file is never
 * half-written there); on SFTP the `.part` file the connection took with it is named in the reason;
 * on S3 a part is sent again by the client, and a part that cannot be sent fails the run with the
 * multipart upload aborted; the retry (same artifact time, so the same name) publishes every byte,
 * and the run record's rows, bytes and SHA-256 are the file's. The file is compared with the entity's
 * one-shot download (the same byte rules, rows in key order), read independently.
 */

const exec = promisify(execFile);

let hub: TestHub;
let owner: pg.Client;
let api: Client;
let s3: TestS3;
let sshd: TestSshd | undefined;
const T = 1;
const BUCKET = 'drops';
/** About 12 MB of CSV: on S3 a multipart upload of two parts (8 MiB and the rest). */
const ROWS = 480_000;
const MiB = 1024 * 1024;
let expected: Buffer;
const relays: StallRelay[] = [];

type Run = {
  id: string;
  status: string;
  attempt: number;
  retryOf: string | null;
  artifactTime: string;
  rowCount: number | null;
  byteCount: number | null;
  sha256: string | null;
  location: string | null;
  failureCode: string | null;
  failureReason: string | null;
};

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const stampOf = (run: Run) => run.artifactTime.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Export `name` of entity `item` (test/harness/export-manifests.ts) to `destination`: its CSV is the entity's one-shot download (every column in declared order, sorted by the key). */
function exportOf(name: string, destination: Record<string, unknown>) {
  const manifest = itemS3Export(name, s3.endpoint);
  return { ...manifest, spec: { ...manifest.spec, destination } };
}

async function settle(name: string, runId: string): Promise<Run> {
  return until(
    `run ${runId} of ${name} to end`,
    async () => {
      const run = (await api.get(`/api/exports/${name}/runs/${runId}`)).body as Run;
      return run.status !== 'Running' && run;
    },
    { timeoutMs: 60_000, everyMs: 50 },
  );
}

async function start(name: string): Promise<string> {
  const started = await api.post(`/api/exports/${name}/runs`);
  expect(started.status).toBe(202);
  return (started.body as { runId: string }).runId;
}

async function retry(name: string, failed: Run): Promise<Run> {
  const retried = await api.post(`/api/exports/${name}/runs/${failed.id}/retry`);
  expect(retried.status).toBe(202);
  return settle(name, (retried.body as { runId: string }).runId);
}

async function applied(manifest: unknown) {
  const res = await api.post('/api/exports/apply', manifest);
  expect({ status: res.status, body: res.body }).toMatchObject({ status: 201 });
}

/** The record of a Completed run is the file's: every row, its bytes, its SHA-256; the file is the download's bytes. */
function expectReceiptOf(run: Run, file: Buffer) {
  expect(run).toMatchObject({ status: 'Completed', failureCode: null, rowCount: ROWS, byteCount: file.length, sha256: sha(file) });
  expect(file.length).toBe(expected.length);
  expect(file.equals(expected)).toBe(true);
}

async function relay(port: number): Promise<StallRelay> {
  const r = await startStallRelay(port);
  relays.push(r);
  return r;
}

beforeAll(async () => {
  s3 = await startS3({ region: 'eu-west-3' });
  s3.createBucket(BUCKET);
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, T);
  await seedItemExports(hub, owner, api, s3, ROWS);
  const download = await fetch(`${hub.url}/api/exports/entities/item/download`, { headers: { 'X-Tenant-ID': String(T) } });
  expect(download.status).toBe(200);
  expected = Buffer.from(await download.arrayBuffer());
  expect(Number(download.headers.get('x-row-count'))).toBe(ROWS);
  expect(expected.length).toBeGreaterThan(10.5 * MiB);
}, 120_000);

afterAll(async () => {
  for (const r of relays) await r.close();
  await owner?.end();
  await hub?.stop();
  await sshd?.stop();
  await s3?.stop();
});

describeRequiring(sshdProblem(), 'OpenSSH', 'SFTP: the connection lost mid-upload', () => {
  beforeAll(async () => {
    sshd = await startSshd({ user: 'svc-sftp-cut' });
    expect((await api.post('/api/platform/secrets', { name: 'SFTP_PASSWORD', value: sshd.password })).status).toBe(201);
  });

  let counter = 0;
  /** A fresh directory the SFTP user owns. */
  function freshDir(): string {
    const dir = join(sshd!.root, `cut${++counter}`);
    mkdirSync(dir);
    const { uid, gid } = statSync(sshd!.root);
    chownSync(dir, uid, gid);
    return dir;
  }
  const sftp = (port: number, dir: string) => ({
    kind: 'sftp',
    host: '127.0.0.1',
    port,
    user: sshd!.user,
    path: `${dir}/big-\${timestamp}.csv`,
    password_env: 'SFTP_PASSWORD',
    host_key_fingerprint: sshd!.fingerprint,
  });
  const partFiles = (dir: string) => readdirSync(dir).filter((n) => n.endsWith('.part'));

  /** The failed run's reason, what is at the final name (nothing) and left beside it (the `.part` the reason names); then the retry. */
  async function expectCutThenRetry(name: string, dir: string, failed: Run, port: number, cause: string, before = '') {
    const file = `big-${stampOf(failed)}.csv`;
    expect(failed).toMatchObject({ status: 'Failed', failureCode: 'publication', location: null, sha256: null });
    const parts = partFiles(dir);
    // The connection went with the upload: the .part could not be removed, and the reason says where it is.
    expect(parts).toHaveLength(1);
    expect(parts[0]).toMatch(new RegExp(`^${escapeRe(file)}\\.[0-9a-f-]{36}\\.part$`));
    const part = `${dir}/${parts[0]}`;
    expect(failed.failureReason).toMatch(
      new RegExp(`^${before}the connection to 127\\.0\\.0\\.1:${port} failed while writing ${escapeRe(part)}${cause}; the partial file ${escapeRe(part)} could not be removed$`),
    );
    expect(existsSync(join(dir, file))).toBe(false);
    // Part of the file went, not all of it.
    expect(statSync(part).size).toBeLessThan(expected.length);

    const done = await retry(name, failed);
    expect(done).toMatchObject({ attempt: 2, retryOf: failed.id, location: `sftp://${sshd!.user}@127.0.0.1:${port}${dir}/${file}` });
    expectReceiptOf(done, readFileSync(join(dir, file)));
    // The retry left no .part of its own; the cut attempt's stays (the hub never cleans it).
    expect(partFiles(dir)).toEqual(parts);
  }

  it('a connection reset 4 MiB into the upload: Failed publication at once, nothing at the final name, the .part named; the retry publishes every byte', async () => {
    const r = await relay(sshd!.port);
    const dir = freshDir();
    await applied(exportOf('sftp-reset', sftp(r.port, dir)));
    r.cutAfter(4 * MiB);
    const failed = await settle('sftp-reset', await start('sftp-reset'));
    await r.cuts;
    await expectCutThenRetry('sftp-reset', dir, failed, r.port, ': read ECONNRESET');
  }, 120_000);

  it('the SFTP server process of the session killed mid-upload (its SSH connection stays): Failed publication at once, saying the session ended; the retry publishes every byte', async () => {
    const sessions = async () => {
      const { stdout } = await exec('pgrep', ['-f', `sshd: ${sshd!.user}@internal-sftp`]).catch(() => ({ stdout: '' }));
      return stdout.split('\n').filter(Boolean);
    };
    const before = new Set(await sessions());
    // The relay holds the upload 4 MiB in, so that the kill lands mid-upload whatever the machine's speed.
    const r = await relay(sshd!.port);
    const dir = freshDir();
    await applied(exportOf('sftp-killed', sftp(r.port, dir)));
    r.stallAfter(4 * MiB);
    const id = await start('sftp-killed');
    const session = await until('the upload under way, its session process', async () => {
      const parts = partFiles(dir);
      if (parts.length !== 1 || statSync(join(dir, parts[0]!)).size < MiB) return undefined;
      const fresh = (await sessions()).filter((pid) => !before.has(pid));
      return fresh.length === 1 && fresh[0];
    });
    const killedAt = performance.now();
    await exec('kill', ['-KILL', session]);
    r.resume();
    const failed = await settle('sftp-killed', id);
    // At once: the server closed the SFTP channel as its process died (its SSH connection, which
    // answers keepalives, stayed up), not after the 120 s an unanswered SFTP request is given.
    expect(performance.now() - killedAt).toBeLessThan(20_000);
    await expectCutThenRetry('sftp-killed', dir, failed, r.port, '', `the SFTP server of 127\\.0\\.0\\.1:${r.port} ended the session \\(its process exited\\), so the connection was cut: `);
  }, 120_000);
});

describe('S3: the connection lost mid-multipart upload', () => {
  const uploadsOf = (key: string) => s3.listMultipartUploads(BUCKET).filter((u) => u.key === key);
  /** The UploadPart requests of part `n` of `key` that reached the server, in order. */
  const partRequests = (key: string, n: number) =>
    s3.requests.filter((q) => {
      const url = new URL(q.url, 'http://s3');
      return q.method === 'PUT' && url.pathname === `/${BUCKET}/${key}` && url.searchParams.get('partNumber') === String(n);
    });

  it('a connection reset once in the middle of part 2: the part is sent again and the run completes, every byte once', async () => {
    const r = await relay(Number(new URL(s3.endpoint).port));
    await applied(itemS3Export('s3-reset-once', r.endpoint));
    // Part 1 (8 MiB) is stored; the connection goes 2 MiB into part 2.
    r.cutAfter(10 * MiB);
    const run = await settle('s3-reset-once', await start('s3-reset-once'));
    await r.cuts;
    const key = 's3-reset-once.csv';
    expect(run.location).toBe(`s3://${BUCKET}/${key}`);
    expectReceiptOf(run, s3.getObject(BUCKET, key)!.body);
    // Part 2 went twice: the cut attempt (never answered), then the one S3 stored.
    expect(partRequests(key, 2).map((q) => q.status)).toEqual([undefined, 200]);
    expect(uploadsOf(key)).toEqual([]);
  }, 120_000);

  it('part 2 never gets through: Failed publication naming the connection, nothing at the key, the upload aborted; the retry publishes every byte', async () => {
    const r = await relay(Number(new URL(s3.endpoint).port));
    await applied(itemS3Export('s3-reset', r.endpoint));
    // The connection goes 2 MiB into part 2, and so does every later request with a body over 1 MiB
    // (the client's own attempts at part 2); the abort, a bodiless request, gets through.
    r.cutAfter(10 * MiB, { thenOver: MiB });
    const failed = await settle('s3-reset', await start('s3-reset'));
    const key = 's3-reset.csv';
    expect(failed).toMatchObject({ status: 'Failed', failureCode: 'publication', location: null, sha256: null });
    // `write ECONNRESET` (or `read`) in a hub; under jest the SDK wraps the error of another realm, read as `ECONNRESET (no connection)`.
    expect(failed.failureReason).toMatch(new RegExp(`^could not reach ${escapeRe(r.endpoint)}: (?:read |write )?ECONNRESET\\b[^;]*$`));
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
    // Aborted (and the hub said so by not naming an upload left open).
    expect(uploadsOf(key)).toEqual([]);
    expect(s3.requests.filter((q) => q.method === 'DELETE' && q.url.startsWith(`/${BUCKET}/${key}?uploadId=`)).map((q) => q.status)).toEqual([204]);
    // Part 2 was tried three times (the client's retries), none stored; no Complete was sent.
    expect(partRequests(key, 2).length).toBe(3);
    expect(s3.requests.some((q) => q.method === 'POST' && q.url.startsWith(`/${BUCKET}/${key}?uploadId=`))).toBe(false);

    r.resume();
    const done = await retry('s3-reset', failed);
    expect(done).toMatchObject({ attempt: 2, retryOf: failed.id, location: `s3://${BUCKET}/${key}` });
    expectReceiptOf(done, s3.getObject(BUCKET, key)!.body);
    expect(uploadsOf(key)).toEqual([]);
  }, 120_000);
});

describe('S3: the connection lost during a single PutObject (a file up to 8 MiB)', () => {
  it('Failed publication saying the file may have been published (it was not: nothing at the key); the retry publishes every byte', async () => {
    const r = await relay(Number(new URL(s3.endpoint).port));
    // Only the id column: about 4.5 MB, one PutObject, the request that publishes (sent once, never again).
    const manifest = itemS3Export('s3-put-reset', r.endpoint);
    await applied({ ...manifest, spec: { ...manifest.spec, columns: ['id'] } });
    r.cutAfter(2 * MiB);
    const failed = await settle('s3-put-reset', await start('s3-put-reset'));
    await r.cuts;
    const key = 's3-put-reset.csv';
    expect(failed).toMatchObject({ status: 'Failed', failureCode: 'publication', location: null, sha256: null });
    // The client cannot tell a request cut before S3 had all of it from an answer lost after: the reason says what a retry tells.
    expect(failed.failureReason).toMatch(
      new RegExp(`^the answer to the request publishing s3://${BUCKET}/${escapeRe(key)} did not come from ${escapeRe(r.endpoint)} \\((?:read |write )?ECONNRESET(?: \\(no connection\\))?\\): the file may have been published\\. Retry it: a collision on retry means it was$`),
    );
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
    // Sent once: the committing request is never sent again.
    expect(s3.requests.filter((q) => q.method === 'PUT' && new URL(q.url, 'http://s3').pathname === `/${BUCKET}/${key}`)).toHaveLength(1);

    const done = await retry('s3-put-reset', failed);
    expect(done).toMatchObject({ status: 'Completed', attempt: 2, retryOf: failed.id, rowCount: ROWS, location: `s3://${BUCKET}/${key}` });
    const stored = s3.getObject(BUCKET, key)!;
    expect(stored.body.length).toBe(done.byteCount);
    expect(sha(stored.body)).toBe(done.sha256);
    expect(stored.metadata['svc-sha256']).toBe(done.sha256);
    // The download's first column, line for line.
    expect(stored.body.toString('utf8')).toBe(`${expected.toString('utf8').split('\r\n').slice(0, -1).map((line) => line.split(',')[0]).join('\r\n')}\r\n`);
  }, 120_000);
});

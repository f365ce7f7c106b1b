import { createHash, randomBytes } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, request as httpRequest, type Server, type ServerResponse } from 'node:http';
import { createServer } from 'node:net';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { bodyOf, sha256 } from '../../../test/harness/bytes.js';
import { startS3, type TestS3 } from '../../../test/harness/s3.js';
import { startCommitRelay } from '../../../test/harness/s3-relay.js';
import { until } from '../../../test/harness/until.js';
import { EgressPolicy } from '../../egress/policy.js';
import { LeftBehind, PublishError } from './destination.js';
import { startStallRelay } from '../../../test/harness/stall-relay.js';
import { S3Destination, type S3DestinationOptions } from './s3.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const MiB = 1024 * 1024;
const BUCKET = 'exports';

let s3: TestS3;
let counter = 0;

beforeAll(async () => {
  s3 = await startS3({ region: 'eu-west-3' });
  s3.createBucket(BUCKET);
});

afterAll(async () => {
  await s3?.stop();
});

function freshKey(name = 'partners.csv'): string {
  return `daily/${++counter}/${name}`;
}

function destination(key: string, over: Partial<S3DestinationOptions> = {}): S3Destination {
  return new S3Destination({
    bucket: BUCKET,
    key,
    region: s3.region,
    endpoint: s3.endpoint,
    accessKeyId: s3.accessKeyId,
    secretAccessKey: s3.secretAccessKey,
    egress: EgressPolicy.open(),
    ...over,
  });
}

function requestsSince(from: number): string[] {
  return s3.requests.slice(from).map((r) => `${r.method} ${r.url.replace(/\?.*$/, '')}${r.url.includes('uploadId') ? ' (multipart)' : ''}`);
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    (value) => {
      throw new Error(`expected a failure, got ${JSON.stringify(value)}`);
    },
    (err: unknown) => err,
  );
}

/**
 * A multipart publication (5 MiB and a byte, parts of 5 MiB) through a commit relay whose
 * CompleteMultipartUpload has no answer within requestTimeoutMs (1 s): its answer is held
 * (`answer`: S3 completes the upload), or the request itself (`request`: S3 gets it once
 * `release()`d). `prepare` is given the key first; `check` the publication's failure; the relay is
 * closed after it.
 */
async function completeUnanswered(
  hold: 'answer' | 'request',
  check: (seen: { err: PublishError; key: string; bytes: Buffer; from: number; endpoint: string; release(): void }) => Promise<void>,
  prepare: (key: string) => void = () => {},
): Promise<void> {
  const relay = await startCommitRelay(s3.endpoint, BUCKET);
  const key = freshKey();
  prepare(key);
  const held = hold === 'answer' ? relay.hold(key, true) : relay.holdRequest(key, true);
  try {
    const bytes = randomBytes(5 * MiB + 1);
    const from = s3.requests.length;
    const err = (await failure(
      destination(key, { endpoint: relay.endpoint, partSize: 5 * MiB, requestTimeoutMs: 1_000 }).publish(bodyOf(bytes), { digest: () => sha256(bytes) }),
    )) as PublishError;
    expect(err).toBeInstanceOf(PublishError);
    await check({ err, key, bytes, from, endpoint: relay.endpoint, release: held.release });
  } finally {
    held.release();
    await relay.close();
  }
}

describe('S3Destination against fauxqs', () => {
  it('publishes a body up to partSize as one conditional PUT carrying the SHA-256 as x-amz-meta-svc-sha256', async () => {
    const key = freshKey();
    const bytes = Buffer.from('"id","name"\r\n"1","Zoë"\r\n'.repeat(5000), 'utf8');
    const from = s3.requests.length;
    const receipt = await destination(key).publish(bodyOf(bytes, 1000), { digest: () => sha256(bytes) });
    const stored = s3.getObject(BUCKET, key)!;
    expect(stored.body.equals(bytes)).toBe(true);
    expect(stored.metadata['svc-sha256']).toBe(sha256(bytes));
    expect(receipt).toEqual({ location: `s3://${BUCKET}/${key}`, etag: createHash('md5').update(bytes).digest('hex') });
    expect(requestsSince(from)).toEqual([`HEAD /${BUCKET}/${key}`, `PUT /${BUCKET}/${key}`]);
  });

  it('publishes a body of exactly partSize as one PUT, and one byte more as a multipart upload', async () => {
    const partSize = 5 * MiB;
    const exact = randomBytes(partSize);
    const k1 = freshKey();
    await destination(k1, { partSize }).publish(bodyOf(exact), { digest: () => sha256(exact) });
    expect(s3.getObject(BUCKET, k1)!.metadata['svc-sha256']).toBe(sha256(exact));

    const over = randomBytes(partSize + 1);
    const k2 = freshKey();
    const from = s3.requests.length;
    const receipt = await destination(k2, { partSize }).publish(bodyOf(over), { digest: () => sha256(over) });
    const stored = s3.getObject(BUCKET, k2)!;
    expect(sha256(stored.body)).toBe(sha256(over));
    expect(receipt.etag).toMatch(/^[0-9a-f]{32}-2$/);
    expect(requestsSince(from)).toEqual([
      `HEAD /${BUCKET}/${k2}`,
      `POST /${BUCKET}/${k2}`,
      `PUT /${BUCKET}/${k2} (multipart)`,
      `PUT /${BUCKET}/${k2} (multipart)`,
      `POST /${BUCKET}/${k2} (multipart)`,
    ]);
  });

  it('publishes above the default 8 MiB as a multipart upload, byte for byte, with no upload left open', async () => {
    const key = freshKey();
    const bytes = randomBytes(8 * MiB + 3 * MiB + 5);
    const receipt = await destination(key).publish(bodyOf(bytes, 100_000), { digest: () => sha256(bytes) });
    const stored = s3.getObject(BUCKET, key)!;
    expect(stored.body.length).toBe(bytes.length);
    expect(sha256(stored.body)).toBe(sha256(bytes));
    expect(receipt.etag).toMatch(/-2$/);
    expect(receipt.location).toBe(`s3://${BUCKET}/${key}`);
    expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === key)).toEqual([]);
  });

  it('uploads three parts of a 5 MiB partSize', async () => {
    const key = freshKey();
    const bytes = randomBytes(12 * MiB + 3);
    const receipt = await destination(key, { partSize: 5 * MiB }).publish(bodyOf(bytes, 1 * MiB + 7), { digest: () => sha256(bytes) });
    expect(sha256(s3.getObject(BUCKET, key)!.body)).toBe(sha256(bytes));
    expect(receipt.etag).toMatch(/-3$/);
  });

  it('reads at most about two parts ahead of what the server has stored', async () => {
    const key = freshKey();
    const partSize = 5 * MiB;
    const chunk = 1 * MiB;
    const total = 6 * partSize + 123;
    let yielded = 0;
    let ahead = 0;
    const hash = createHash('sha256');
    const body = Readable.from(
      (async function* () {
        while (yielded < total) {
          const stored = s3.listMultipartUploads(BUCKET).find((u) => u.key === key)?.parts ?? 0;
          ahead = Math.max(ahead, yielded - stored * partSize);
          const bytes = randomBytes(Math.min(chunk, total - yielded));
          hash.update(bytes);
          yielded += bytes.length;
          yield bytes;
        }
      })(),
      { objectMode: false },
    );
    await destination(key, { partSize }).publish(body, { digest: () => '' });
    expect(sha256(s3.getObject(BUCKET, key)!.body)).toBe(hash.digest('hex'));
    // One part uploading, the next one filling (plus a chunk in the reader and one in the stream's buffer).
    expect(ahead).toBeLessThanOrEqual(2 * partSize + 2 * chunk);
    expect(ahead).toBeGreaterThan(partSize);
  });

  it('passes on the version id of a versioned bucket', async () => {
    s3.createBucket('versioned');
    s3.setVersioned('versioned');
    const bytes = Buffer.from('"a"\r\n');
    const receipt = await destination('v/file.csv', { bucket: 'versioned' }).publish(bodyOf(bytes), { digest: () => sha256(bytes) });
    expect(receipt.versionId).toMatch(/^[\w-]{8,}$/);
  });

  it('publishes an empty body as an empty object', async () => {
    const key = freshKey();
    await destination(key).publish(bodyOf(Buffer.alloc(0)), { digest: () => sha256(Buffer.alloc(0)) });
    expect(s3.getObject(BUCKET, key)!.body.length).toBe(0);
  });

  it('ends in collision on an existing key found by the pre-check, leaving it untouched and sending nothing', async () => {
    const key = freshKey();
    s3.putObject(BUCKET, key, 'earlier delivery');
    const body = bodyOf(Buffer.from('"new"\r\n'));
    const from = s3.requests.length;
    const err = (await failure(destination(key).publish(body, { digest: () => '' }))) as PublishError;
    expect(err).toBeInstanceOf(PublishError);
    expect(err.code).toBe('collision');
    expect(err.reason).toContain(`s3://${BUCKET}/${key}`);
    expect(s3.getObject(BUCKET, key)!.body.toString()).toBe('earlier delivery');
    expect(requestsSince(from)).toEqual([`HEAD /${BUCKET}/${key}`]);
    expect(body.destroyed).toBe(true);
  });

  it('ends in collision when the key appears after the pre-check: the conditional PUT is refused with 412', async () => {
    const key = freshKey();
    const body = Readable.from(
      (async function* () {
        yield Buffer.from('"new"\r\n');
        s3.putObject(BUCKET, key, 'the other writer');
      })(),
      { objectMode: false },
    );
    const from = s3.requests.length;
    const err = (await failure(destination(key).publish(body, { digest: () => 'x' }))) as PublishError;
    expect(err.code).toBe('collision');
    expect(err.reason).toContain('PreconditionFailed');
    expect(s3.getObject(BUCKET, key)!.body.toString()).toBe('the other writer');
    expect(s3.requests.slice(from).map((r) => `${r.method} ${r.status}`)).toEqual(['HEAD 404', 'PUT 412']);
  });

  it('ends in collision when the key appears during a multipart upload: Complete gets 412 and the upload is aborted', async () => {
    const key = freshKey();
    const partSize = 5 * MiB;
    const body = Readable.from(
      (async function* () {
        yield randomBytes(partSize);
        yield randomBytes(partSize);
        await until('the first part uploaded', () => s3.listMultipartUploads(BUCKET).find((u) => u.key === key && u.parts >= 1));
        s3.putObject(BUCKET, key, 'the other writer');
        yield randomBytes(10);
      })(),
      { objectMode: false },
    );
    const err = (await failure(destination(key, { partSize }).publish(body, { digest: () => 'x' }))) as PublishError;
    expect(err.code).toBe('collision');
    expect(s3.getObject(BUCKET, key)!.body.toString()).toBe('the other writer');
    expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === key)).toEqual([]);
  });

  it('counts 409 ConditionalRequestConflict (overlapping conditional writes) as collision', async () => {
    const key = freshKey();
    s3.conflictNext(BUCKET, key);
    const err = (await failure(destination(key).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
    expect(err.code).toBe('collision');
    expect(err.reason).toContain('ConditionalRequestConflict');
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
  });

  it('lets exactly one of 15 concurrent publications of one key win; the others end in collision', async () => {
    const key = freshKey();
    const n = 15;
    const from = s3.requests.length;
    // Every body waits until all pre-checks were answered, so all 15 conditional PUTs race.
    const prechecked = () => s3.requests.slice(from).filter((r) => r.method === 'HEAD' && r.status === 404).length >= n;
    const bodies = Array.from({ length: n }, (_, i) => Buffer.from(`"writer ${i}"\r\n`));
    const results = await Promise.allSettled(
      bodies.map((bytes) =>
        destination(key).publish(
          Readable.from(
            (async function* () {
              await until('every pre-check answered', prechecked);
              yield bytes;
            })(),
            { objectMode: false },
          ),
          { digest: () => sha256(bytes) },
        ),
      ),
    );
    const won = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []));
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(won).toHaveLength(1);
    expect(lost.map((r) => (r.reason as PublishError).code)).toEqual(Array(n - 1).fill('collision'));
    expect(s3.getObject(BUCKET, key)!.body.equals(bodies[won[0]!]!)).toBe(true);
    expect(s3.requests.slice(from).filter((r) => r.method === 'PUT').map((r) => r.status).sort()).toEqual([200, ...Array(n - 1).fill(412)]);
  });

  it('rethrows the body’s own error object mid-multipart and aborts the upload', async () => {
    const key = freshKey();
    const failure_ = new Error('the snapshot query failed');
    let sawUpload = false;
    const body = Readable.from(
      (async function* () {
        yield randomBytes(5 * MiB);
        yield randomBytes(1 * MiB);
        await until('a part uploaded', () => s3.listMultipartUploads(BUCKET).find((u) => u.key === key && u.parts >= 1));
        sawUpload = true;
        throw failure_;
      })(),
      { objectMode: false },
    );
    const from = s3.requests.length;
    const err = await failure(destination(key, { partSize: 5 * MiB }).publish(body, { digest: () => 'x' }));
    expect(err).toBe(failure_);
    expect(sawUpload).toBe(true);
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
    expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === key)).toEqual([]);
    expect(s3.requests.slice(from).map((r) => `${r.method} ${r.status}`)).toContain('DELETE 204');
  });

  it('a body failing while a part is being sent: the abort waits for that part (cancelled past the cleanup bound), never overtakes it', async () => {
    // S3 may store a part whose upload was in progress when the upload was aborted, after the
    // abort: storage no listing shows. A proxy in front of the store holds part 2 unanswered.
    const events: string[] = [];
    let held: { socket: import('node:net').Socket; closed: Promise<void> } | undefined;
    let arrived = () => {};
    const partHeld = new Promise<void>((resolve) => (arrived = resolve));
    const upstream = new URL(s3.endpoint);
    const proxy = createHttpServer(async (req, res) => {
      if (req.method === 'PUT' && /[?&]partNumber=2(&|$)/.test(req.url ?? '')) {
        events.push('part 2 arrived');
        // Read and dropped (so the client's close is heard), never answered.
        req.resume();
        const closed = new Promise<void>((resolve) => req.socket.once('close', resolve));
        held = { socket: req.socket, closed };
        void closed.then(() => {
          if (held?.socket === req.socket) events.push('part 2 cancelled');
          held = undefined;
        });
        arrived();
        return;
      }
      if (req.method === 'DELETE') {
        // A client that cancelled part 2 before sending this closed its connection first; the
        // proxy may hear of it a moment after this request, so it is given a moment (the bound is
        // only ever reached when part 2 is still in flight).
        const stuck = held;
        if (stuck) await Promise.race([stuck.closed, new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
        events.push(held ? 'abort while part 2 is in flight' : 'abort');
        held = undefined;
        stuck?.socket.destroy();
      }
      const forward = httpRequest({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      forward.on('error', () => res.destroy());
      req.pipe(forward);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const key = freshKey();
      const failure_ = new Error('the snapshot query failed');
      const body = Readable.from(
        (async function* () {
          yield randomBytes(5 * MiB);
          yield randomBytes(5 * MiB + 1);
          await partHeld;
          throw failure_;
        })(),
        { objectMode: false },
      );
      const endpoint = `http://127.0.0.1:${(proxy.address() as import('node:net').AddressInfo).port}`;
      const err = await failure(destination(key, { partSize: 5 * MiB, endpoint, cleanupMs: 300 }).publish(body, { digest: () => 'x' }));
      expect(err).toBe(failure_);
      expect(events).toEqual(['part 2 arrived', 'part 2 cancelled', 'abort']);
      expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === key)).toEqual([]);
      expect(s3.getObject(BUCKET, key)).toBeUndefined();
    } finally {
      proxy.closeAllConnections();
      await new Promise((resolve) => proxy.close(resolve));
    }
  });

  it('rethrows the body’s own error before anything was uploaded (single-part size)', async () => {
    const key = freshKey();
    const failure_ = new Error('encoding failed');
    const body = Readable.from(
      (async function* () {
        yield Buffer.from('"a"\r\n');
        throw failure_;
      })(),
      { objectMode: false },
    );
    expect(await failure(destination(key).publish(body, { digest: () => 'x' }))).toBe(failure_);
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
  });

  it('asks beforeCommit once every byte is uploaded, before the object appears; a refusal (an abort) publishes nothing', async () => {
    for (const size of [1000, 5 * MiB + 10]) {
      // Admitted: called once, after the last part, before the committing request.
      const key = freshKey();
      const bytes = randomBytes(size);
      const seen: string[] = [];
      const from = s3.requests.length;
      await destination(key, { partSize: 5 * MiB }).publish(bodyOf(bytes), {
        digest: () => sha256(bytes),
        beforeCommit: async () => {
          seen.push(...requestsSince(from));
        },
      });
      expect(seen).toEqual(requestsSince(from).slice(0, -1));
      expect(s3.getObject(BUCKET, key)).toBeDefined();
      // Refused: the signal aborted in it; its reason is thrown, no object, no upload left open.
      const refusedKey = freshKey();
      const controller = new AbortController();
      const reason = new Error('the run has ended meanwhile');
      const err = await failure(
        destination(refusedKey, { partSize: 5 * MiB }).publish(bodyOf(bytes), {
          digest: () => sha256(bytes),
          signal: controller.signal,
          beforeCommit: async () => controller.abort(reason),
        }),
      );
      expect(err).toBe(reason);
      expect(s3.getObject(BUCKET, refusedKey)).toBeUndefined();
      expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === refusedKey)).toEqual([]);
    }
  });

  it('stops on abort mid-multipart: throws the signal’s reason and aborts the upload', async () => {
    const key = freshKey();
    const controller = new AbortController();
    const reason = new Error('the hub is stopping');
    const body = Readable.from(
      (async function* () {
        yield randomBytes(5 * MiB + 10);
        await until('a part uploaded', () => s3.listMultipartUploads(BUCKET).find((u) => u.key === key && u.parts >= 1));
        controller.abort(reason);
        await new Promise(() => {}); // never ends by itself
      })(),
      { objectMode: false },
    );
    const err = await failure(destination(key, { partSize: 5 * MiB }).publish(body, { digest: () => 'x', signal: controller.signal }));
    expect(err).toBe(reason);
    expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === key)).toEqual([]);
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
    expect(body.destroyed).toBe(true);
  });

  it('an endpoint that stops answering mid-multipart: a stop ends the publication within the cleanup bound, naming the upload it could not abort', async () => {
    const relay = await startStallRelay(Number(new URL(s3.endpoint).port));
    try {
      const key = freshKey();
      const controller = new AbortController();
      const reason = new Error('the hub is stopping');
      const body = Readable.from(
        (async function* () {
          yield randomBytes(5 * MiB + 10);
          await until('a part uploaded', () => s3.listMultipartUploads(BUCKET).find((u) => u.key === key && u.parts >= 1));
          relay.stall();
          controller.abort(reason);
          await new Promise(() => {}); // never ends by itself
        })(),
        { objectMode: false },
      );
      const cleanupMs = 300;
      const started = performance.now();
      const err = await failure(destination(key, { partSize: 5 * MiB, endpoint: relay.endpoint, cleanupMs }).publish(body, { digest: () => 'x', signal: controller.signal }));
      const took = performance.now() - started;
      expect(err).toBeInstanceOf(LeftBehind);
      expect((err as LeftBehind).cause).toBe(reason);
      expect((err as LeftBehind).leftover).toMatch(/^the incomplete multipart upload \S+ could not be aborted \(no answer within 0\.3 s\)$/);
      // Left open, as the reason says (the endpoint never heard the abort).
      expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === key)).toHaveLength(1);
      expect(s3.getObject(BUCKET, key)).toBeUndefined();
      // One bound, not the request timeout (120 s) times the SDK's attempts.
      expect(took).toBeLessThan(10 * cleanupMs + 2_000);
    } finally {
      await relay.close();
    }
  });

  it('reports a wrong secret key as publication (SignatureDoesNotMatch), never showing the secret', async () => {
    const key = freshKey();
    const secret = randomBytes(30).toString('base64');
    const err = (await failure(destination(key, { secretAccessKey: secret }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
    expect(err).toBeInstanceOf(PublishError);
    expect(err.code).toBe('publication');
    expect(err.reason).toContain('access_key_env/secret_key_env');
    expect(err.reason).toContain('SignatureDoesNotMatch');
    expect(err.reason).not.toContain(secret);
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
  });

  it('reports an unknown access key as publication (InvalidAccessKeyId)', async () => {
    const key = freshKey();
    const err = (await failure(destination(key, { accessKeyId: 'AKIAUNKNOWN' }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
    expect(err.code).toBe('publication');
    expect(err.reason).toContain('InvalidAccessKeyId');
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
  });

  it('reports a wrong secret on a multipart upload as publication, with nothing left open', async () => {
    const key = freshKey();
    const bytes = randomBytes(5 * MiB + 1);
    const err = (await failure(destination(key, { partSize: 5 * MiB, secretAccessKey: 'wrong' }).publish(bodyOf(bytes), { digest: () => 'x' }))) as PublishError;
    expect(err.code).toBe('publication');
    expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === key)).toEqual([]);
  });

  it('names the bucket when it does not exist', async () => {
    const err = (await failure(destination('a.csv', { bucket: 'no-such-bucket' }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
    expect(err.code).toBe('publication');
    expect(err.reason).toBe(`bucket no-such-bucket does not exist at ${s3.endpoint}`);
  });

  it('names the region when the credential scope is for another one', async () => {
    const err = (await failure(destination(freshKey(), { region: 'us-west-2' }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
    expect(err.code).toBe('publication');
    expect(err.reason).toContain('region us-west-2');
  });

  it('refuses a part size S3 would refuse', () => {
    expect(() => destination('a.csv', { partSize: 1024 })).toThrow(RangeError);
  });

  it('refuses a key with a leading slash', () => {
    let thrown: unknown;
    try {
      destination('/daily/file.csv');
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(PublishError);
    expect((thrown as PublishError).code).toBe('publication');
    expect((thrown as PublishError).reason).toContain('/daily/file.csv');
  });

  it('refuses a loopback endpoint under deny-private before any request (IP literal and name)', async () => {
    const deny = new EgressPolicy({ denyPrivate: true });
    const from = s3.requests.length;
    const literal = (await failure(destination(freshKey(), { egress: deny }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
    expect(literal).toBeInstanceOf(PublishError);
    expect(literal.code).toBe('publication');
    expect(literal.reason).toContain('127.0.0.1 is a loopback address');
    const byName = (await failure(
      destination(freshKey(), { egress: deny, endpoint: s3.endpoint.replace('127.0.0.1', 'localhost') }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }),
    )) as PublishError;
    expect(byName.code).toBe('publication');
    expect(byName.reason).toContain('localhost is a loopback name');
    // A name the policy resolves to a refused address is refused at connection time (the agent's lookup).
    const rebinding = new EgressPolicy({ denyPrivate: true, resolve: async () => [{ address: '127.0.0.1', family: 4 }] });
    const resolved = (await failure(
      destination(freshKey(), { egress: rebinding, endpoint: s3.endpoint.replace('127.0.0.1', 'storehost') }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }),
    )) as PublishError;
    expect(resolved.code).toBe('publication');
    expect(resolved.reason).toContain('storehost resolves to 127.0.0.1, a loopback address');
    // Marker: a publication that is allowed reaches the server; only its requests are seen.
    const key = freshKey();
    await destination(key).publish(bodyOf(Buffer.from('m')), { digest: () => 'm' });
    expect(requestsSince(from)).toEqual([`HEAD /${BUCKET}/${key}`, `PUT /${BUCKET}/${key}`]);
  });

  it('follows no redirect: an endpoint answering 301, 302, 307 or 308 to another host fails publication, and that host receives nothing, even with no policy to refuse it', async () => {
    // The host a hostile endpoint points at (an internal one, say). With the policy on it would be
    // refused at connection as any (the agent's lookup); here nothing refuses it but the not following.
    const reached: string[] = [];
    const elsewhere = createHttpServer((req, res) => {
      reached.push(`${req.method} ${req.url}`);
      res.writeHead(200, { etag: '"e"' }).end();
    });
    await new Promise<void>((resolve) => elsewhere.listen(0, '127.0.0.2', () => resolve()));
    let status = 0;
    const redirecting = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(status, { location: `http://127.0.0.2:${(elsewhere.address() as { port: number }).port}${req.url}` }).end();
      });
    });
    await new Promise<void>((resolve) => redirecting.listen(0, '127.0.0.1', () => resolve()));
    try {
      for (status of [301, 302, 307, 308]) {
        const endpoint = `http://127.0.0.1:${(redirecting.address() as { port: number }).port}`;
        const err = (await failure(destination(freshKey(), { endpoint }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
        expect({ status, code: err.code, reason: err.reason }).toEqual({ status, code: 'publication', reason: expect.stringContaining(`HTTP ${status}`) });
      }
      expect(reached).toEqual([]);
    } finally {
      await Promise.all([redirecting, elsewhere].map((server) => new Promise((resolve) => server.close(resolve))));
    }
  });

  it('connects to the address the policy resolved (the agent lookup is what the connection uses)', async () => {
    const allowed = new EgressPolicy({ denyPrivate: true, allow: ['127.0.0.0/8'], resolve: async () => [{ address: '127.0.0.1', family: 4 }] });
    const key = freshKey();
    const bytes = Buffer.from('"via the policy"\r\n');
    await destination(key, { egress: allowed, endpoint: s3.endpoint.replace('127.0.0.1', 'storehost') }).publish(bodyOf(bytes), { digest: () => sha256(bytes) });
    expect(s3.getObject(BUCKET, key)!.body.equals(bytes)).toBe(true);
  });

  it('fails a request that is accepted and never answered, after requestTimeoutMs, naming the endpoint', async () => {
    // Accepts connections, reads whatever comes, never answers.
    const sockets = new Set<import('node:net').Socket>();
    const silent = createServer((socket) => {
      sockets.add(socket);
      socket.on('data', () => undefined);
      socket.on('error', () => undefined);
    });
    const port = await new Promise<number>((resolve) => silent.listen(0, '127.0.0.1', () => resolve((silent.address() as import('node:net').AddressInfo).port)));
    try {
      const endpoint = `http://127.0.0.1:${port}`;
      const requestTimeoutMs = 500;
      const started = performance.now();
      const err = (await failure(destination(freshKey(), { endpoint, requestTimeoutMs }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.code).toBe('publication');
      expect(err.reason).toBe(`could not reach ${endpoint}: no answer within 500 ms (requestTimeout), the request sent 3 times`);
      // Not held by a silence that never ends: a hang guard of ten times the three sends' waits.
      expect(performance.now() - started).toBeLessThan(10 * 3 * requestTimeoutMs);
      expect(sockets.size).toBeGreaterThan(0);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('a committing request unanswered after requestTimeoutMs: the reason says it was sent once (it is never sent again) and that the file may have been published (it was)', async () => {
    const relay = await startCommitRelay(s3.endpoint, BUCKET);
    const key = freshKey();
    const held = relay.hold(key);
    try {
      const from = s3.requests.length;
      const err = (await failure(destination(key, { endpoint: relay.endpoint, requestTimeoutMs: 1_000 }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.reason).toBe(
        `the answer to the request publishing s3://${BUCKET}/${key} did not come from ${relay.endpoint} (no answer within 1000 ms (requestTimeout), the request sent once): the file may have been published. Retry it: a collision on retry means it was`,
      );
      expect(requestsSince(from)).toEqual([`HEAD /${BUCKET}/${key}`, `PUT /${BUCKET}/${key}`]);
      expect(s3.getObject(BUCKET, key)).toBeDefined();
    } finally {
      held.release();
      await relay.close();
    }
  });

  it('a CompleteMultipartUpload unanswered after requestTimeoutMs: its abort then finds the upload gone (404), and the reason says the file was most likely published, naming nothing left behind', async () => {
    await completeUnanswered('answer', async ({ err, key, bytes, from, endpoint }) => {
      // Was: "...: the file may have been published. Retry it: ...; the incomplete multipart upload
      // ID could not be aborted (HTTP 404)", an upload that did not exist named as left behind.
      expect(err.reason).toBe(
        `the answer to the request publishing s3://${BUCKET}/${key} did not come from ${endpoint} (no answer within 1000 ms (requestTimeout), the request sent once), and the multipart upload was gone when it was then aborted (HTTP 404): the file was most likely published. Retry it: a collision on retry means it was`,
      );
      expect(err.leftover).toBeUndefined();
      expect(requestsSince(from).slice(-2)).toEqual([`POST /${BUCKET}/${key} (multipart)`, `DELETE /${BUCKET}/${key} (multipart)`]);
      expect(s3.getObject(BUCKET, key)?.body.equals(bytes)).toBe(true);
      expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === key)).toEqual([]);
    });
  }, 30_000);

  it('a CompleteMultipartUpload unanswered after requestTimeoutMs whose abort then succeeds: the reason says the file was not published (the Complete, reaching S3 after the abort, is refused NoSuchUpload)', async () => {
    // The Complete is held on its way: S3 has not completed the upload when the abort comes.
    await completeUnanswered('request', async ({ err, key, from, endpoint, release }) => {
      // Was: "…: the file may have been published. Retry it: a collision on retry means it was", for
      // an upload S3 had aborted (204), which can no longer be completed.
      expect(err.reason).toBe(
        `the answer to the request publishing s3://${BUCKET}/${key} did not come from ${endpoint} (no answer within 1000 ms (requestTimeout), the request sent once), and the multipart upload was then aborted, which S3 confirmed: an aborted upload is never completed, so the file was not published. Retry it`,
      );
      expect(err.leftover).toBeUndefined();
      expect(s3.requests.slice(from).find((r) => r.method === 'DELETE')?.status).toBe(204);
      expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === key)).toEqual([]);
      // The Complete reaches S3 now, after the abort: refused, and no object is made.
      release();
      const complete = () => s3.requests.slice(from).find((r) => r.method === 'POST' && r.url.includes('uploadId=') && r.status !== undefined);
      await until('the held CompleteMultipartUpload answered', () => complete() !== undefined);
      expect(complete()!.status).toBe(404);
      expect(s3.getObject(BUCKET, key)).toBeUndefined();
    });
  }, 30_000);

  it('a CompleteMultipartUpload unanswered whose abort is answered 404 only when sent again (the first answer lost): the reason says the file may have been published, not that it most likely was', async () => {
    await completeUnanswered(
      'request',
      async ({ err, key, from, endpoint, release }) => {
        // Was: "…, and the multipart upload was gone when it was then aborted (HTTP 404): the file was
        // most likely published", the 404 answering the abort's own first attempt.
        expect(err.reason).toBe(
          `the answer to the request publishing s3://${BUCKET}/${key} did not come from ${endpoint} (no answer within 1000 ms (requestTimeout), the request sent once), and the multipart upload was gone when its abort was sent again (HTTP 404; the answer to the first was lost, and that one may have aborted it): the file may have been published. Retry it: a collision on retry means it was`,
        );
        expect(err.leftover).toBeUndefined();
        // The first abort carried out and its connection cut (no answer recorded), the second answered 404.
        expect(s3.requests.slice(from).filter((r) => r.method === 'DELETE').map((r) => r.status)).toEqual([undefined, 404]);
        release();
        const complete = () => s3.requests.slice(from).find((r) => r.method === 'POST' && r.url.includes('uploadId=') && r.status !== undefined);
        await until('the held CompleteMultipartUpload answered', () => complete() !== undefined);
        expect(complete()!.status).toBe(404);
        expect(s3.getObject(BUCKET, key)).toBeUndefined();
      },
      (key) => s3.cutNextAbortAnswer(BUCKET, key),
    );
  }, 30_000);

  it('names the endpoint when nothing answers there', async () => {
    const port = await new Promise<number>((resolve) => {
      const server = createServer().listen(0, '127.0.0.1', () => {
        const address = server.address();
        server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
      });
    });
    const endpoint = `http://127.0.0.1:${port}`;
    const err = (await failure(destination(freshKey(), { endpoint }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
    expect(err.code).toBe('publication');
    expect(err.reason).toContain(endpoint);
    expect(err.reason).toContain('ECONNREFUSED');
  });
});


/**
 * An S3-compatible server of the tenant for multipart uploads of `k`: the HEAD answered 404,
 * CreateMultipartUpload (upload `u1`) and each part (500 InternalError while `refuseParts()`) as S3
 * does; any other request (CompleteMultipartUpload, AbortMultipartUpload) as `rest` answers it.
 */
async function multipartStore(
  rest: (req: IncomingMessage, res: ServerResponse) => void,
  refuseParts = () => false,
): Promise<{ server: Server; endpoint: string }> {
  const server = createHttpServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (req.method === 'HEAD') return void res.writeHead(404).end();
      res.setHeader('content-type', 'application/xml');
      if (req.method === 'POST' && url.searchParams.has('uploads')) {
        return void res.end('<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>u1</UploadId></InitiateMultipartUploadResult>');
      }
      if (req.method === 'PUT' && refuseParts()) {
        return void res.writeHead(500).end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>m</Message></Error>');
      }
      if (req.method === 'PUT') return void res.writeHead(200, { etag: '"p"' }).end();
      rest(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return { server, endpoint: `http://127.0.0.1:${(server.address() as { port: number }).port}` };
}

describe('S3Destination against an S3-compatible server of the tenant', () => {
  it("a receipt whose ETag holds a NUL or half a surrogate pair (XML character references in the answer to CompleteMultipartUpload) carries U+FFFD, which the run record's text column stores", async () => {
    // Multipart: the ETag and version id of CompleteMultipartUpload come in its XML answer, which the SDK decodes.
    const { server, endpoint } = await multipartStore((_req, res) => {
      res.writeHead(200, { 'x-amz-version-id': 'v1' });
      res.end('<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult><Location>l</Location><Bucket>b</Bucket><Key>k</Key><ETag>"e&#0;t&#xD800;ag"</ETag></CompleteMultipartUploadResult>');
    });
    try {
      const bytes = randomBytes(5 * MiB + 1);
      const receipt = await destination('k', { endpoint, partSize: 5 * MiB }).publish(bodyOf(bytes), { digest: () => sha256(bytes) });
      expect(receipt.etag).toBe('e\ufffdt\ufffdag');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }, 30_000);

  it('an upload no longer open when it is aborted (404 NoSuchUpload): after a CompleteMultipartUpload answered with an error, the reason says the file was most likely published; before it, nothing is named as left behind', async () => {
    // CompleteMultipartUpload answered 500 InternalError (or, with `refusePart`, the parts instead);
    // AbortMultipartUpload 404 NoSuchUpload.
    let refusePart = false;
    const error = (code: string) => `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>m</Message></Error>`;
    const { server, endpoint } = await multipartStore(
      (req, res) => void (req.method === 'DELETE' ? res.writeHead(404).end(error('NoSuchUpload')) : res.writeHead(500).end(error('InternalError'))),
      () => refusePart,
    );
    try {
      const bytes = randomBytes(5 * MiB + 1);
      const publish = () => failure(destination('k', { endpoint, partSize: 5 * MiB }).publish(bodyOf(bytes), { digest: () => sha256(bytes) })) as Promise<PublishError>;
      const completed = await publish();
      // Was: "S3 answered HTTP 500 while publishing …; the incomplete multipart upload u1 could not be aborted (HTTP 404)".
      expect(completed.reason).toBe(
        `S3 answered HTTP 500 InternalError while publishing s3://${BUCKET}/k, and the multipart upload was gone when it was then aborted (HTTP 404): the file was most likely published. Retry it: a collision on retry means it was`,
      );
      expect(completed.leftover).toBeUndefined();
      refusePart = true;
      const refused = await publish();
      expect(refused.reason).toBe(`S3 answered HTTP 500 InternalError while publishing s3://${BUCKET}/k`);
      expect(refused.leftover).toBeUndefined();
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }, 30_000);

  it("an error answer whose <Code> is no S3 error code (a line break, a terminal escape, words, 100 KB): the reason names the HTTP status, never the store's text", async () => {
    let code = '';
    const server = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.method === 'HEAD') return void res.writeHead(404).end();
        const status = code.startsWith('5') ? 500 : code.startsWith('3') ? 301 : code.startsWith('2') ? 412 : 403;
        res.writeHead(status, { 'content-type': 'application/xml' });
        res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code.slice(1)}</Code><Message>m</Message></Error>`);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    const endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const reasonFor = async (answer: string) => {
      code = answer;
      return ((await failure(destination('k', { endpoint }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError).reason;
    };
    try {
      // Was: each quoted whole into the reason (and so into the run record and its answers).
      expect(await reasonFor('4Denied\u001b[31m\r\nCall +1 555 0100 to renew your key')).toBe(
        `S3 refused the write to s3://${BUCKET}/k (HTTP 403): the credentials in access_key_env/secret_key_env were refused or may not write there`,
      );
      expect(await reasonFor(`5X${'y'.repeat(100_000)}`)).toBe(`S3 answered HTTP 500 while publishing s3://${BUCKET}/k`);
      expect(await reasonFor('3Moved to https://elsewhere.example')).toBe(`bucket ${BUCKET} is not in region ${s3.region} (HTTP 301)`);
      expect(await reasonFor('2Exists\u001b]0;owned\u0007')).toBe(`s3://${BUCKET}/k already exists (S3 412 to the conditional write); it was left untouched`);
      // An S3 error code, a compatible store's own included, is named as before.
      expect(await reasonFor('5XMinioStorageFull')).toBe(`S3 answered HTTP 500 XMinioStorageFull while publishing s3://${BUCKET}/k`);
      expect(await reasonFor('4AccessDenied')).toContain('(AccessDenied, HTTP 403)');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('a committing request whose answer comes a byte at a time: publication once commitAnswerMs have passed, saying the file may have been published; an answer slow but whole within it publishes', async () => {
    // Answers the HEAD 404; each PutObject with its headers at once, then a space every 200 ms, for ever (`trickle`) or until 600 ms have passed, then its end.
    let trickle = true;
    const server = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.method === 'HEAD') return void res.writeHead(404).end();
        res.writeHead(200, { etag: '"e"', 'content-length': '1000' });
        let sent = 0;
        const timer = setInterval(() => {
          if (!trickle && sent >= 3) {
            clearInterval(timer);
            return void res.end(' '.repeat(1000 - sent));
          }
          sent++;
          res.write(' ');
        }, 200);
        res.on('close', () => clearInterval(timer));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    try {
      const endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const commitAnswerMs = 2_000;
      const started = performance.now();
      const err = (await failure(destination('k', { endpoint, requestTimeoutMs: 1_000, commitAnswerMs }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.reason).toBe(
        `the answer to the request publishing s3://${BUCKET}/k did not come whole from ${endpoint} within 2 s (the request sent once; the connection was cut): the file may have been published. Retry it: a collision on retry means it was`,
      );
      // Cut at the bound (the message names it), not held by a body that never ends: a hang guard of four times it.
      expect(performance.now() - started).toBeLessThan(4 * commitAnswerMs);

      trickle = false;
      const receipt = await destination('k', { endpoint, requestTimeoutMs: 1_000, commitAnswerMs: 5_000 }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' });
      expect(receipt).toEqual({ location: `s3://${BUCKET}/k`, etag: 'e' });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }, 30_000);

  it('an answer longer than MAX_ANSWER_BYTES is not read further: to the committing request, publication saying the file may have been published; an error answer, publication naming its status', async () => {
    // Answers the HEAD 404, and the PutObject `status` with a body of 256 MiB of spaces, sent as fast as it is read.
    const TOTAL = 256 * MiB;
    let status = 200;
    const answers: Array<{ whole: boolean; closed: boolean }> = [];
    const server = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.method === 'HEAD') return void res.writeHead(404).end();
        res.writeHead(status, { etag: '"e"', 'content-type': 'application/xml', 'content-length': String(TOTAL) });
        const answer = { whole: false, closed: false };
        answers.push(answer);
        const chunk = Buffer.alloc(MiB, 0x20);
        let written = 0;
        const pump = () => {
          while (written < TOTAL && !res.destroyed) {
            written += chunk.length;
            if (!res.write(chunk)) return void res.once('drain', pump);
          }
          res.end();
        };
        res.on('finish', () => (answer.whole = true));
        res.on('close', () => (answer.closed = true));
        pump();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    try {
      const endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const published = (await failure(destination('k', { endpoint }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
      expect(published).toBeInstanceOf(PublishError);
      expect(published.reason).toBe(
        `the answer to the request publishing s3://${BUCKET}/k from ${endpoint} (HTTP 200) was longer than 1 MiB, which no S3 answer is, and was not read further: the file may have been published. Retry it: a collision on retry means it was`,
      );
      status = 500;
      const refused = (await failure(destination('k', { endpoint }).publish(bodyOf(Buffer.from('x')), { digest: () => 'x' }))) as PublishError;
      expect(refused.reason).toBe(`${endpoint} answered HTTP 500 with more than 1 MiB while publishing s3://${BUCKET}/k: no S3 answer is that long, and it was not read further`);
      // Neither answer was read to its end (the connection cut), let alone held whole in memory.
      await until('both answers closed', () => answers.length === 2 && answers.every((a) => a.closed));
      expect(answers.map((a) => a.whole)).toEqual([false, false]);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }, 30_000);

  it('a request (not the committing one) whose answer comes a byte at a time: sent again, then publication once each waited requestTimeoutMs after its headers', async () => {
    // Answers the HEAD 404, and CreateMultipartUpload with its headers at once, then a space every 100 ms, for ever.
    let asked = 0;
    const server = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.method === 'HEAD') return void res.writeHead(404).end();
        asked++;
        res.writeHead(200, { 'content-type': 'application/xml', 'content-length': '100000' });
        const timer = setInterval(() => res.write(' '), 100);
        res.on('close', () => clearInterval(timer));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    try {
      const endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const requestTimeoutMs = 1_000;
      const started = performance.now();
      const bytes = randomBytes(5 * MiB + 1);
      const err = (await failure(destination('k', { endpoint, partSize: 5 * MiB, requestTimeoutMs }).publish(bodyOf(bytes), { digest: () => sha256(bytes) }))) as PublishError;
      expect(err).toBeInstanceOf(PublishError);
      expect(err.reason).toBe(`could not reach ${endpoint}: no whole answer within 1000 ms (requestTimeout), the request sent 3 times`);
      expect(asked).toBe(3);
      // Three tries of about requestTimeoutMs each (and the SDK's back-off between them), not held by a body that never
      // ends: a hang guard of four times the three tries' waits.
      expect(performance.now() - started).toBeLessThan(4 * 3 * requestTimeoutMs);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }, 30_000);
});

import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/**
 * An S3-compatible server on 127.0.0.1 for tests: fauxqs 1.9.2 (pinned; 2.x needs Node 22), run
 * in-process through its `buildApp` with our own S3Store so the test can look inside. Its package
 * exports only its entry point, so dist/app.js and dist/s3/s3Store.js are imported by file URL.
 *
 * fauxqs itself is faithful on the parts of S3 the export destination uses: PutObject with user
 * metadata (`x-amz-meta-*`), HeadObject, S3-style multipart uploads (Create, UploadPart,
 * Complete with the part ETags checked and the 5 MiB minimum for every part but the last
 * enforced, Abort, the `md5-of-part-md5s-N` ETag), NoSuchBucket, path-style addressing. It has no
 * authentication, no conditional writes and no ListMultipartUploads, so this harness adds, in
 * fastify hooks in front of its routes:
 *
 * - Signature Version 4, checked like S3 does for the header-signed requests the SDK sends: an
 *   unknown access key id is answered 403 `InvalidAccessKeyId`, a signature not made with the
 *   secret key (the canonical request rebuilt from the method, raw path, query, signed headers
 *   and `x-amz-content-sha256`) 403 `SignatureDoesNotMatch`, a credential scope for another region
 *   400 `AuthorizationHeaderMalformed`, a request without one 403 `AccessDenied`; a hex
 *   `x-amz-content-sha256` that is not the body's SHA-256 is 400 `XAmzContentSHA256Mismatch`.
 * - Conditional writes: a PutObject or CompleteMultipartUpload with `If-None-Match: *` on a key
 *   that exists is answered 412 `PreconditionFailed` and changes nothing. The check runs in the
 *   hook and fauxqs's handler writes synchronously right after it, with no other request in
 *   between (one thread), so of N concurrent conditional writes of a key exactly one succeeds, as
 *   on S3. `conflictNext(bucket, key)` makes the next conditional write of a key answer 409
 *   `ConditionalRequestConflict`, what S3 answers when conditional writes overlap.
 * - `setVersioned(bucket)`: fauxqs has no versioning; a write to a bucket so marked is answered
 *   with an `x-amz-version-id` header (a fresh id), enough to show what a receipt does with it.
 *   Nothing else about versions is emulated.
 * - `refuseParts(bucket, keyPrefix, {from, status, code})`: UploadPart requests from a part number
 *   on answered with an S3 error (a part refused mid-upload), as S3 answers any refused request.
 * - `cutNextAbortAnswer(bucket, key)`: the next AbortMultipartUpload of a key is carried out and its
 *   connection cut instead of answered (an answer lost on its way back).
 *
 * `listMultipartUploads` reads fauxqs's store (it has no such route). Single requests above
 * 11 MiB are refused by fauxqs's body limit (413), so tests keep parts at or below that.
 */

export interface StoredObject {
  body: Buffer;
  /** User metadata, keys without the `x-amz-meta-` prefix, lower case. */
  metadata: Record<string, string>;
  etag: string;
}

export interface TestS3 {
  /** `http://127.0.0.1:<port>`: use path-style addressing. */
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  createBucket(name: string): void;
  /** Writes an object directly (not through HTTP): what another writer left there. */
  putObject(bucket: string, key: string, body: Buffer | string): void;
  getObject(bucket: string, key: string): StoredObject | undefined;
  listMultipartUploads(bucket: string): Array<{ key: string; uploadId: string; parts: number }>;
  setVersioned(bucket: string): void;
  /** The next conditional write of this key is answered 409 ConditionalRequestConflict. */
  conflictNext(bucket: string, key: string): void;
  /**
   * Every UploadPart numbered `from` or more of a key starting with `keyPrefix` is answered `status`
   * with error `code` (S3 refusing a part: 403 AccessDenied, 500 InternalError…) until the returned
   * function is called.
   */
  refuseParts(bucket: string, keyPrefix: string, refusal: { from: number; status: number; code: string }): () => void;
  /**
   * The next AbortMultipartUpload of this key is carried out, and its connection then cut instead
   * of answered (an answer lost on its way back): the client sends it again, and meets the upload
   * gone (404 NoSuchUpload).
   */
  cutNextAbortAnswer(bucket: string, key: string): void;
  /** Every request that reached the server, in order. */
  readonly requests: ReadonlyArray<{ method: string; url: string; status?: number }>;
  stop(): Promise<void>;
}

export interface S3Options {
  region?: string;
}

/** What this harness uses of fauxqs's S3Store (dist/s3/s3Store.d.ts). */
interface FauxStore {
  createBucket(name: string): void;
  hasBucket(name: string): boolean;
  putObject(bucket: string, key: string, body: Buffer, contentType?: string, metadata?: Record<string, string>): unknown;
  getObject(bucket: string, key: string): { body: Buffer; metadata: Record<string, string>; etag: string };
}

/** The multipart uploads fauxqs keeps (a private field of its S3Store). */
type FauxUploads = Map<string, { uploadId: string; bucket: string; key: string; parts: Map<number, unknown> }>;

interface HookRequest {
  id: string;
  method: string;
  url: string;
  raw: { url?: string; socket?: { destroy(): void } };
  headers: IncomingHttpHeaders;
  params: unknown;
  query: unknown;
  body: unknown;
}
interface HookReply {
  statusCode: number;
  code(status: number): HookReply;
  header(name: string, value: string): HookReply;
  send(payload?: string): HookReply;
}
interface FauxApp {
  addHook(name: 'onRequest' | 'preHandler', hook: (request: HookRequest, reply: HookReply) => Promise<unknown>): void;
  addHook(name: 'onResponse', hook: (request: HookRequest, reply: HookReply) => Promise<void>): void;
  addHook(name: 'onSend', hook: (request: HookRequest, reply: HookReply, payload: unknown) => Promise<unknown>): void;
  listen(options: { port: number; host: string }): Promise<string>;
  close(): Promise<void>;
}

const FAUXQS_DIST = new URL('../../node_modules/fauxqs/dist/', import.meta.url);

export async function startS3(options: S3Options = {}): Promise<TestS3> {
  const region = options.region ?? 'us-east-1';
  const { buildApp } = (await import(new URL('app.js', FAUXQS_DIST).href)) as { buildApp(options: object): FauxApp };
  const { S3Store } = (await import(new URL('s3/s3Store.js', FAUXQS_DIST).href)) as { S3Store: new () => FauxStore };
  const store = new S3Store();
  const uploads = (store as unknown as { multipartUploads: FauxUploads }).multipartUploads;
  const app = buildApp({ logger: false, stores: { s3Store: store } });

  const accessKeyId = `AKIA${randomBytes(8).toString('hex').toUpperCase()}`;
  const secretAccessKey = randomBytes(30).toString('base64');
  const versioned = new Set<string>();
  const conflicts = new Set<string>();
  const cutAborts = new Set<string>();
  const refusedParts = new Map<string, { bucket: string; keyPrefix: string; from: number; status: number; code: string }>();
  const requests: Array<{ method: string; url: string; status?: number }> = [];
  const seen = new Map<string, { method: string; url: string; status?: number }>();

  app.addHook('onRequest', async (request) => {
    const entry = { method: request.method, url: request.raw.url ?? request.url };
    requests.push(entry);
    seen.set(request.id, entry);
  });
  app.addHook('onResponse', async (request, reply) => {
    const entry = seen.get(request.id);
    if (entry) entry.status = reply.statusCode;
    seen.delete(request.id);
  });

  app.addHook('preHandler', async (request, reply) => {
    const refusal = checkSignature(request, { accessKeyId, secretAccessKey, region });
    if (refusal) return answer(request, reply, refusal.status, refusal.code, refusal.message);
    const target = objectTarget(request);
    const partNumber = Number(((request.query ?? {}) as Record<string, string | undefined>).partNumber);
    const refused = target?.partUpload ? [...refusedParts.values()].find((r) => r.bucket === target.bucket && target.key.startsWith(r.keyPrefix) && partNumber >= r.from) : undefined;
    if (refused) {
      return answer(request, reply, refused.status, refused.code, 'refused by the test');
    }
    if (!target || request.headers['if-none-match'] !== '*') return undefined;
    const isPut = request.method === 'PUT' && !target.partUpload && !request.headers['x-amz-copy-source'];
    const isComplete = request.method === 'POST' && target.uploadId !== undefined;
    if (!isPut && !isComplete) return undefined;
    const id = `${target.bucket}/${target.key}`;
    if (conflicts.delete(id)) {
      return answer(request, reply, 409, 'ConditionalRequestConflict', 'A conflicting conditional operation is currently in progress against this resource. Please try again.');
    }
    if (exists(store, target.bucket, target.key)) {
      return answer(request, reply, 412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', '<Condition>If-None-Match</Condition>');
    }
    return undefined;
  });

  app.addHook('onSend', async (request, reply, payload) => {
    const target = objectTarget(request);
    if (target && request.method === 'DELETE' && target.uploadId !== undefined && reply.statusCode === 204 && cutAborts.delete(`${target.bucket}/${target.key}`)) {
      request.raw.socket?.destroy();
      return payload;
    }
    if (!target || !versioned.has(target.bucket) || reply.statusCode !== 200) return payload;
    const isPut = request.method === 'PUT' && !target.partUpload;
    const isComplete = request.method === 'POST' && target.uploadId !== undefined;
    if (isPut || isComplete) reply.header('x-amz-version-id', randomBytes(12).toString('base64url'));
    return payload;
  });

  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    endpoint: new URL(address).origin,
    region,
    accessKeyId,
    secretAccessKey,
    createBucket: (name) => store.createBucket(name),
    putObject: (bucket, key, body) => {
      store.putObject(bucket, key, Buffer.from(body), 'text/plain');
    },
    getObject: (bucket, key) => {
      if (!exists(store, bucket, key)) return undefined;
      const obj = store.getObject(bucket, key);
      return { body: obj.body, metadata: { ...obj.metadata }, etag: obj.etag };
    },
    listMultipartUploads: (bucket) =>
      [...uploads.values()].filter((u) => u.bucket === bucket).map((u) => ({ key: u.key, uploadId: u.uploadId, parts: u.parts.size })),
    setVersioned: (bucket) => {
      versioned.add(bucket);
    },
    conflictNext: (bucket, key) => {
      conflicts.add(`${bucket}/${key}`);
    },
    cutNextAbortAnswer: (bucket, key) => {
      cutAborts.add(`${bucket}/${key}`);
    },
    refuseParts: (bucket, keyPrefix, refusal) => {
      const id = randomBytes(6).toString('hex');
      refusedParts.set(id, { bucket, keyPrefix, ...refusal });
      return () => refusedParts.delete(id);
    },
    requests,
    stop: () => app.close(),
  };
}

function exists(store: FauxStore, bucket: string, key: string): boolean {
  if (!store.hasBucket(bucket)) return false;
  try {
    store.getObject(bucket, key);
    return true;
  } catch {
    return false;
  }
}

/** The bucket and key of an object request (path style), with the multipart query parameters. */
function objectTarget(request: HookRequest): { bucket: string; key: string; uploadId?: string; partUpload: boolean } | undefined {
  const params = (request.params ?? {}) as Record<string, string | undefined>;
  const query = (request.query ?? {}) as Record<string, string | undefined>;
  const bucket = params.bucket;
  const key = params['*'];
  if (!bucket || !key) return undefined;
  return {
    bucket,
    key,
    ...(query.uploadId !== undefined ? { uploadId: query.uploadId } : {}),
    partUpload: query.uploadId !== undefined && query.partNumber !== undefined,
  };
}

function answer(request: HookRequest, reply: HookReply, status: number, code: string, message: string, extra = ''): HookReply {
  reply.code(status);
  if (request.method === 'HEAD') return reply.send();
  reply.header('content-type', 'application/xml');
  return reply.send(
    `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message>${extra}<RequestId>${randomBytes(8).toString('hex').toUpperCase()}</RequestId></Error>`,
  );
}

// --- Signature Version 4 (header form), as S3 checks it ----------------------------------------

const ALGORITHM = 'AWS4-HMAC-SHA256';

function escapeUri(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function sha256Hex(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

function hmac(key: string | Buffer, data: string): Buffer {
  return createHmac('sha256', key).update(data).digest();
}

function checkSignature(
  request: HookRequest,
  keys: { accessKeyId: string; secretAccessKey: string; region: string },
): { status: number; code: string; message: string } | undefined {
  const authorization = request.headers.authorization;
  if (typeof authorization !== 'string' || !authorization.startsWith(`${ALGORITHM} `)) {
    return { status: 403, code: 'AccessDenied', message: 'Access Denied' };
  }
  const fields = Object.fromEntries(
    authorization
      .slice(ALGORITHM.length + 1)
      .split(',')
      .map((part) => part.trim().split('=', 2) as [string, string]),
  );
  const credential = String(fields.Credential ?? '').split('/');
  const signedHeaders = String(fields.SignedHeaders ?? '');
  const signature = String(fields.Signature ?? '');
  if (credential.length !== 5 || !signedHeaders || !/^[0-9a-f]{64}$/.test(signature)) {
    return { status: 400, code: 'AuthorizationHeaderMalformed', message: 'The authorization header is malformed.' };
  }
  const [accessKey, date, scopeRegion, service, terminator] = credential as [string, string, string, string, string];
  if (accessKey !== keys.accessKeyId) {
    return { status: 403, code: 'InvalidAccessKeyId', message: 'The AWS Access Key Id you provided does not exist in our records.' };
  }
  if (service !== 's3' || terminator !== 'aws4_request' || scopeRegion !== keys.region) {
    return { status: 400, code: 'AuthorizationHeaderMalformed', message: `The authorization header is malformed; the region '${scopeRegion}' is wrong; expecting '${keys.region}'` };
  }
  const amzDate = request.headers['x-amz-date'];
  const payloadHash = request.headers['x-amz-content-sha256'];
  if (typeof amzDate !== 'string' || !amzDate.startsWith(date) || typeof payloadHash !== 'string') {
    return { status: 403, code: 'AccessDenied', message: 'Access Denied' };
  }
  const raw = request.raw.url ?? request.url;
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const query = q < 0 ? '' : raw.slice(q + 1);
  const canonicalQuery = query
    .split('&')
    .filter(Boolean)
    .map((pair) => {
      const eq = pair.indexOf('=');
      const name = decodeURIComponent(eq < 0 ? pair : pair.slice(0, eq));
      const value = eq < 0 ? '' : decodeURIComponent(pair.slice(eq + 1));
      return [escapeUri(name), escapeUri(value)] as const;
    })
    .sort(([a, av], [b, bv]) => (a === b ? (av < bv ? -1 : av > bv ? 1 : 0) : a < b ? -1 : 1))
    .map(([name, value]) => `${name}=${value}`)
    .join('&');
  const names = signedHeaders.split(';');
  const canonicalHeaders = names
    .map((name) => {
      const value = request.headers[name];
      const text = Array.isArray(value) ? value.join(',') : (value ?? '');
      return `${name}:${String(text).trim().replace(/\s+/g, ' ')}\n`;
    })
    .join('');
  const canonicalRequest = [request.method, path, canonicalQuery, canonicalHeaders, signedHeaders, payloadHash].join('\n');
  const stringToSign = [ALGORITHM, amzDate, `${date}/${scopeRegion}/s3/aws4_request`, sha256Hex(canonicalRequest)].join('\n');
  const signingKey = hmac(hmac(hmac(hmac(`AWS4${keys.secretAccessKey}`, date), scopeRegion), 's3'), 'aws4_request');
  const expected = createHmac('sha256', signingKey).update(stringToSign).digest();
  if (!timingSafeEqual(expected, Buffer.from(signature, 'hex'))) {
    return { status: 403, code: 'SignatureDoesNotMatch', message: 'The request signature we calculated does not match the signature you provided. Check your key and signing method.' };
  }
  if (/^[0-9a-f]{64}$/.test(payloadHash)) {
    const body = Buffer.isBuffer(request.body) ? request.body : request.body === undefined || request.body === null ? Buffer.alloc(0) : undefined;
    if (body && sha256Hex(body) !== payloadHash) {
      return { status: 400, code: 'XAmzContentSHA256Mismatch', message: "The provided 'x-amz-content-sha256' header does not match what was computed." };
    }
  }
  return undefined;
}

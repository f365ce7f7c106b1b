/**
 * The S3-compatible stand-in of the export benchmark (test/harness/s3.ts: fauxqs with conditional
 * writes and SigV4 checks) in a process of its own: fauxqs holds every object in memory (≈ 1 GB for
 * an export of 10 M rows, twice that while a multipart upload is completed), which must never count
 * in the RSS of the process that runs the export.
 *
 * Started with `fork()`; it creates the bucket `BENCH_S3_BUCKET` and answers `{kind: 'ready', …}`
 * with the endpoint and the keys. Requests on the IPC channel, each answered with the same `id`:
 *
 * - `{op: 'verify', id, bucket, prefix, key}`: what was stored under `prefix`, read back through
 *   the S3 API as any client would: ListObjectsV2 of the prefix (every key), the incomplete
 *   multipart uploads of the bucket, and GetObject of `key` streamed into a SHA-256 and a byte count.
 * - `{op: 'delete', id, bucket, key}`: DeleteObject (frees the object's memory before the next run).
 *
 * Closes when the parent goes away or on SIGTERM.
 */
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { startS3 } from '../../test/harness/s3.js';

export interface S3Ready {
  kind: 'ready';
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  bucket: string;
}

export type S3Request = { op: 'verify'; id: number; bucket: string; prefix: string; key: string } | { op: 'delete'; id: number; bucket: string; key: string };

export interface S3Stored {
  /** Every key under the prefix. */
  keys: string[];
  /** Incomplete multipart uploads left in the bucket. */
  openUploads: number;
  /** Of the object read back with GetObject; null when it is absent. */
  bytes: number | null;
  sha256: string | null;
  /** The object's user metadata `svc-sha256` (written by a single PutObject only). */
  metadataSha256: string | null;
}

export type S3Answer = { id: number; ok: true; stored?: S3Stored } | { id: number; ok: false; error: string };

const bucket = process.env.BENCH_S3_BUCKET ?? 'bench-exports';
const s3 = await startS3();
s3.createBucket(bucket);
const client = new S3Client({
  region: s3.region,
  endpoint: s3.endpoint,
  forcePathStyle: true,
  credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
  requestChecksumCalculation: 'WHEN_REQUIRED',
  responseChecksumValidation: 'WHEN_REQUIRED',
});

async function verify(request: Extract<S3Request, { op: 'verify' }>): Promise<S3Stored> {
  const keys: string[] = [];
  let token: string | undefined;
  do {
    const page = await client.send(new ListObjectsV2Command({ Bucket: request.bucket, Prefix: request.prefix, ContinuationToken: token }));
    for (const o of page.Contents ?? []) if (o.Key) keys.push(o.Key);
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  const openUploads = s3.listMultipartUploads(request.bucket).length;
  let bytes: number | null = null;
  let sha256: string | null = null;
  let metadataSha256: string | null = null;
  if (keys.includes(request.key)) {
    const out = await client.send(new GetObjectCommand({ Bucket: request.bucket, Key: request.key }));
    const hash = createHash('sha256');
    bytes = 0;
    for await (const chunk of out.Body as Readable) {
      hash.update(chunk as Buffer);
      bytes += (chunk as Buffer).length;
    }
    sha256 = hash.digest('hex');
    metadataSha256 = out.Metadata?.['svc-sha256'] ?? null;
  }
  return { keys, openUploads, bytes, sha256, metadataSha256 };
}

process.on('message', (message: S3Request) => {
  const work = message.op === 'verify' ? verify(message) : client.send(new DeleteObjectCommand({ Bucket: message.bucket, Key: message.key })).then(() => undefined);
  work.then(
    (stored) => process.send?.({ id: message.id, ok: true, ...(stored ? { stored } : {}) } satisfies S3Answer),
    (err: Error) => process.send?.({ id: message.id, ok: false, error: err.stack ?? err.message } satisfies S3Answer),
  );
});

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  client.destroy();
  s3.stop().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGTERM', stop);
process.on('disconnect', stop);
process.send?.({ kind: 'ready', endpoint: s3.endpoint, region: s3.region, accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, bucket } satisfies S3Ready);

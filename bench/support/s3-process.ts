/**
 * The S3-compatible stand-in of the export benchmark (test/harness/s3.ts: fauxqs with conditional
 * writes and SigV4 checks) in a process of its own: fauxqs holds every object in memory (≈ 1 GB for
 * an export of 10 M rows, twice that while a multipart upload is completed), which must never count
 * in the RSS of the process that runs the export.
 *
 * Started with `forkService` (./service-process.ts); it creates the bucket `BENCH_S3_BUCKET` and is
 * ready with the endpoint and the keys. Requests:
 *
 * - `{op: 'verify', bucket, prefix, key}`: what was stored under `prefix`, read back through
 *   the S3 API as any client would: ListObjectsV2 of the prefix (every key), the incomplete
 *   multipart uploads of the bucket, and GetObject of `key` streamed into a SHA-256 and a byte count.
 * - `{op: 'delete', bucket, key}`: DeleteObject (frees the object's memory before the next run).
 *
 * Closes when the parent goes away or on SIGTERM.
 */
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { startS3 } from '../../test/harness/s3.js';
import { standInClient } from './s3-client.js';
import { serveRequests } from './service-process.js';

/** What the stand-in's process is ready with. */
export interface S3Ready {
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  bucket: string;
}

export type S3Request = { op: 'verify'; bucket: string; prefix: string; key: string } | { op: 'delete'; bucket: string; key: string };

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

const bucket = process.env.BENCH_S3_BUCKET ?? 'bench-exports';
const s3 = await startS3();
s3.createBucket(bucket);
const client = standInClient(s3);

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

serveRequests<S3Request, S3Stored | undefined>(
  { endpoint: s3.endpoint, region: s3.region, accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, bucket } satisfies S3Ready,
  (request) => (request.op === 'verify' ? verify(request) : client.send(new DeleteObjectCommand({ Bucket: request.bucket, Key: request.key })).then(() => undefined)),
  async () => {
    client.destroy();
    await s3.stop();
  },
);

/**
 * The export benchmark's ceiling in a process of its own (started with `forkService`, with the
 * benchmark process's node flags and environment, so the same heap and allocator settings as the
 * hub's process): `COPY (the snapshot query) TO STDOUT` in a tenant transaction of the application
 * role (the hub's own `Database.withTenant`, the hub's snapshot settings), piped straight to the
 * destination. Its CPU time, RSS and VmHWM are this process's, measured here and answered with the
 * figures, so that nothing the ceiling leaves resident counts in the hub's process, nor the hub's in
 * the ceiling's.
 *
 * - SFTP: ssh2-sftp-client's `put` of the COPY stream (the destination's write-stream buffer and
 *   TCP_NODELAY).
 * - S3: the destination's requests, in its order, on clients configured as its own
 *   (src/exports/destinations/s3.ts): a HeadObject, then the raw COPY stream in parts of `partSize`
 *   in two buffers used in turn, one uploading while the next is read (a body that ends within the
 *   first part: one conditional PutObject instead), and a conditional CompleteMultipartUpload. The
 *   parts go through a keep-alive agent of the client's own, as the destination's do: the SDK's
 *   default handler would open a new connection for every part and wait for `100 Continue` before
 *   sending its body (the SDK asks for it above 2 MB), work the hub's upload does not do. The
 *   committing request goes, as the destination's, on a fresh connection, sent once.
 *
 * The snapshot query is built by the parent (it needs the entity's relation); the time runs from
 * the destination's connection to the end of the upload.
 */
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { type Readable, Transform } from 'node:stream';
import { CompleteMultipartUploadCommand, CreateMultipartUploadCommand, HeadObjectCommand, PutObjectCommand, S3Client, UploadPartCommand } from '@aws-sdk/client-s3';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import SftpClient from 'ssh2-sftp-client';
import { Database } from '../../src/db/database.js';
import { snapshotSettingsSql } from '../../src/exports/csv/query.js';
import { sshFingerprint } from '../../src/exports/destinations/sftp.js';
import { inThisProcess, type ProcessRun } from './measure.js';
import { serveRequests } from './service-process.js';

export type CeilingDestination =
  | { kind: 'sftp'; host: string; port: number; user: string; password: string; fingerprint: string; file: string; highWaterMark: number }
  | { kind: 's3'; endpoint: string; region: string; accessKeyId: string; secretAccessKey: string; bucket: string; key: string; partSize: number };

export interface CeilingRequest {
  /** The application role's connection URL. */
  appUrl: string;
  tenant: number;
  /** The snapshot query (`snapshotSql`), copied as CSV. */
  sql: string;
  destination: CeilingDestination;
  /** A V8 .cpuprofile of the run is written there. */
  profileFile?: string;
}

export type CeilingRun = Omit<ProcessRun<unknown>, 'value'> & { bytes: number; copiedRows: number };

let database: { url: string; db: Database } | undefined;

function tenantDatabase(appUrl: string): Database {
  if (database?.url !== appUrl) {
    void database?.db.close();
    database = { url: appUrl, db: new Database({ appUrl, workerUrl: appUrl, poolSize: 1 }) };
  }
  return database.db;
}

/**
 * The COPY stream of `request.sql` in a tenant transaction with the hub's snapshot settings, given to
 * `sink`, which answers the bytes it took. (No 'data' listener here: it would set the stream flowing
 * before the sink reads it, and the bytes it missed would be lost.)
 */
function copyTo(request: CeilingRequest, sink: (copy: Readable) => Promise<number>): Promise<{ bytes: number; copiedRows: number }> {
  return tenantDatabase(request.appUrl).withTenant(request.tenant, async (tx) => {
    await tx.query(snapshotSettingsSql());
    const copy = tx.copyTo!(`copy (${request.sql}) to stdout (format csv, force_quote *, delimiter ',', null '')`);
    const bytes = await sink(copy);
    if (!copy.readableEnded) await new Promise<void>((resolve, reject) => copy.once('end', resolve).once('error', reject));
    return { bytes, copiedRows: (copy as unknown as { rowCount: number }).rowCount };
  });
}

async function toSftp(request: CeilingRequest, to: Extract<CeilingDestination, { kind: 'sftp' }>) {
  const client = new SftpClient('bench-ceiling');
  await client.connect({ host: to.host, port: to.port, username: to.user, password: to.password, hostVerifier: (key: Buffer) => sshFingerprint(key) === to.fingerprint });
  // As the destination does: without TCP_NODELAY, Nagle's algorithm and delayed ACKs hold SFTP's
  // acknowledged writes back, and the ceiling would be a floor.
  (client as unknown as { client: { setNoDelay(noDelay: boolean): void } }).client.setNoDelay(true);
  try {
    return await copyTo(request, async (copy) => {
      // ssh2's write stream takes highWaterMark (as the destination's does); the type declarations omit it.
      const writeStreamOptions = { flags: 'w', mode: 0o640, highWaterMark: to.highWaterMark } as { flags: 'w'; mode: number };
      let bytes = 0;
      const counted = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          bytes += chunk.length;
          callback(null, chunk);
        },
      });
      await client.put(copy.pipe(counted), to.file, { writeStreamOptions });
      return bytes;
    });
  } finally {
    await client.end();
  }
}

type S3To = Extract<CeilingDestination, { kind: 's3' }>;

/**
 * The two S3 clients of the S3 destination (src/exports/destinations/s3.ts), configured as it
 * configures them, without the hub's code: requests on a keep-alive agent of their own (an agent
 * the handler is given is used as it is, each body sent at once), the destination's time limits
 * and checksum settings; the committing request on a client without keep-alive, sent once. (The
 * destination's agents also ask the outbound address policy for every name they resolve; the
 * stand-in's endpoint is an IP address, which no agent resolves.)
 */
function destinationClients(to: S3To): { client: S3Client; commitClient: S3Client } {
  const handler = (keepAlive: boolean) =>
    new NodeHttpHandler({
      httpAgent: new HttpAgent({ keepAlive }),
      httpsAgent: new HttpsAgent({ keepAlive }),
      connectionTimeout: 10_000,
      requestTimeout: 120_000,
      throwOnRequestTimeout: true,
    });
  const config = {
    region: to.region,
    endpoint: to.endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: to.accessKeyId, secretAccessKey: to.secretAccessKey },
    requestChecksumCalculation: 'WHEN_REQUIRED' as const,
    responseChecksumValidation: 'WHEN_REQUIRED' as const,
  };
  return { client: new S3Client({ ...config, requestHandler: handler(true) }), commitClient: new S3Client({ ...config, requestHandler: handler(false), maxAttempts: 1 }) };
}

async function toS3(request: CeilingRequest, to: S3To) {
  const { client, commitClient } = destinationClients(to);
  const contentType = 'text/csv; charset=utf-8';
  try {
    return await copyTo(request, async (copy) => {
      // As the destination checks before reading (the COPY already streaming): the key is absent.
      const present = await client.send(new HeadObjectCommand({ Bucket: to.bucket, Key: to.key })).then(
        () => true,
        (err: { $metadata?: { httpStatusCode?: number } }) => {
          if (err.$metadata?.httpStatusCode === undefined) throw err;
          return false;
        },
      );
      if (present) throw new Error(`${to.key} exists already in ${to.bucket}`);
      const parts: Array<{ PartNumber: number; ETag: string }> = [];
      let uploadId: string | undefined;
      let inflight: Promise<void> | undefined;
      const upload = (partNumber: number, body: Buffer) =>
        client.send(new UploadPartCommand({ Bucket: to.bucket, Key: to.key, UploadId: uploadId, PartNumber: partNumber, Body: body, ContentLength: body.length })).then((out) => {
          parts.push({ PartNumber: partNumber, ETag: out.ETag! });
        });
      // As the destination reads parts: two part buffers used in turn, a full part sent once a
      // byte follows it (the upload created then), the part before waited for first.
      const buffers = [Buffer.allocUnsafe(to.partSize), Buffer.allocUnsafe(to.partSize)];
      let turn = 0;
      let filled = 0;
      let partNumber = 0;
      const send = async () => {
        if (inflight) await inflight;
        uploadId ??= (await client.send(new CreateMultipartUploadCommand({ Bucket: to.bucket, Key: to.key, ContentType: contentType }))).UploadId!;
        inflight = upload(++partNumber, buffers[turn]!.subarray(0, filled));
        inflight.catch(() => {}); // awaited before the next part or at the end, which rethrows
        turn ^= 1;
        filled = 0;
      };
      let bytes = 0;
      for await (const chunk of copy) {
        bytes += (chunk as Buffer).length;
        let rest = chunk as Buffer;
        while (rest.length > 0) {
          if (filled === to.partSize) await send();
          const take = Math.min(to.partSize - filled, rest.length);
          buffers[turn]!.set(take === rest.length ? rest : rest.subarray(0, take), filled);
          filled += take;
          rest = rest.subarray(take);
        }
      }
      if (partNumber === 0) {
        // The whole body within one part: one conditional PutObject, as the destination sends it.
        const body = buffers[turn]!.subarray(0, filled);
        await commitClient.send(new PutObjectCommand({ Bucket: to.bucket, Key: to.key, Body: body, ContentLength: body.length, ContentType: contentType, IfNoneMatch: '*' }));
        return bytes;
      }
      if (filled > 0) await send();
      await inflight;
      parts.sort((a, b) => a.PartNumber - b.PartNumber);
      await commitClient.send(new CompleteMultipartUploadCommand({ Bucket: to.bucket, Key: to.key, UploadId: uploadId, MultipartUpload: { Parts: parts }, IfNoneMatch: '*' }));
      return bytes;
    });
  } finally {
    client.destroy();
    commitClient.destroy();
  }
}

serveRequests<CeilingRequest, CeilingRun>(
  {},
  async (request) => {
    const to = request.destination;
    const { value, ...figures } = await inThisProcess(request.profileFile, `the ${to.kind} ceiling`, () => (to.kind === 'sftp' ? toSftp(request, to) : toS3(request, to)));
    return { ...figures, ...value };
  },
  async () => {
    await database?.db.close();
  },
);

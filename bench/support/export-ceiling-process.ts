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
 * - S3: the destination's multipart upload of the raw COPY stream: parts of `partSize` in two
 *   buffers used in turn, one uploading while the next is read; a conditional
 *   CompleteMultipartUpload.
 *
 * The snapshot query is built by the parent (it needs the entity's relation); the time runs from
 * the destination's connection to the end of the upload.
 */
import { type Readable, Transform } from 'node:stream';
import { CompleteMultipartUploadCommand, CreateMultipartUploadCommand, UploadPartCommand } from '@aws-sdk/client-s3';
import SftpClient from 'ssh2-sftp-client';
import { Database } from '../../src/db/database.js';
import { snapshotSettingsSql } from '../../src/exports/csv/query.js';
import { sshFingerprint } from '../../src/exports/destinations/sftp.js';
import { inThisProcess, type ProcessRun } from './measure.js';
import { standInClient } from './s3-client.js';
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

async function toS3(request: CeilingRequest, to: Extract<CeilingDestination, { kind: 's3' }>) {
  const client = standInClient(to);
  try {
    return await copyTo(request, async (copy) => {
      const created = await client.send(new CreateMultipartUploadCommand({ Bucket: to.bucket, Key: to.key, ContentType: 'text/csv; charset=utf-8' }));
      const uploadId = created.UploadId!;
      const parts: Array<{ PartNumber: number; ETag: string }> = [];
      let inflight: Promise<void> | undefined;
      const upload = (partNumber: number, body: Buffer) =>
        client.send(new UploadPartCommand({ Bucket: to.bucket, Key: to.key, UploadId: uploadId, PartNumber: partNumber, Body: body, ContentLength: body.length })).then((out) => {
          parts.push({ PartNumber: partNumber, ETag: out.ETag! });
        });
      // As the destination reads parts: two part buffers used in turn, a full part sent once a
      // byte follows it, the part before waited for first.
      const buffers = [Buffer.allocUnsafe(to.partSize), Buffer.allocUnsafe(to.partSize)];
      let turn = 0;
      let filled = 0;
      let partNumber = 0;
      const send = async () => {
        if (inflight) await inflight;
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
      if (filled > 0 || partNumber === 0) await send();
      await inflight;
      parts.sort((a, b) => a.PartNumber - b.PartNumber);
      await client.send(new CompleteMultipartUploadCommand({ Bucket: to.bucket, Key: to.key, UploadId: uploadId, MultipartUpload: { Parts: parts }, IfNoneMatch: '*' }));
      return bytes;
    });
  } finally {
    client.destroy();
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

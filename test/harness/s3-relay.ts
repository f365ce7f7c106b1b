import { type AddressInfo, connect, createServer } from 'node:net';

/**
 * A TCP relay in front of the S3 stand-in (test/harness/s3.ts) that can hold S3's answer to the
 * request publishing one object (its PutObject, or the CompleteMultipartUpload of a multipart
 * upload): the request goes through and S3 stores the object, but its answer waits until
 * released. The moment between "the file has appeared" and "the hub knows it" is then as long as
 * a test needs (a publication whose last request is in flight).
 */
export interface CommitRelay {
  /** `http://127.0.0.1:<port>`: use it as the export's S3 endpoint. */
  endpoint: string;
  /**
   * Holds the answer to the next PUT of `bucket/key` (with `multipart`, the next POST completing an
   * upload of it): `stored` once S3 has answered it (the object exists).
   */
  hold(key: string, multipart?: boolean): { stored: Promise<void>; release(): void };
  close(): Promise<void>;
}

export async function startCommitRelay(s3Endpoint: string, bucket: string): Promise<CommitRelay> {
  let hold: { request: string; stored: () => void; released: Promise<void> } | undefined;
  const upstream = new URL(s3Endpoint);
  const relay = createServer((client) => {
    const server = connect(Number(upstream.port), upstream.hostname);
    let held: Promise<void> | undefined;
    client.once('data', (first) => {
      const h = hold;
      if (h && first.toString('latin1').startsWith(h.request)) {
        hold = undefined;
        held = h.released;
        server.once('data', () => h.stored());
      }
      server.write(first);
      client.pipe(server);
    });
    server.on('data', (chunk) => {
      if (held) void held.then(() => client.write(chunk));
      else client.write(chunk);
    });
    server.on('end', () => void (held ?? Promise.resolve()).then(() => client.end()));
    client.on('error', () => server.destroy());
    server.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', () => resolve()));
  return {
    endpoint: `http://127.0.0.1:${(relay.address() as AddressInfo).port}`,
    hold(key, multipart = false) {
      let stored!: () => void;
      let release!: () => void;
      const reached = new Promise<void>((resolve) => (stored = resolve));
      hold = { request: multipart ? `POST /${bucket}/${key}?uploadId=` : `PUT /${bucket}/${key}?`, stored, released: new Promise<void>((resolve) => (release = resolve)) };
      return { stored: reached, release };
    },
    close: () => new Promise<void>((resolve) => relay.close(() => resolve())),
  };
}

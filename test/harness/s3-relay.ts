import { type AddressInfo, connect, createServer } from 'node:net';

/**
 * A TCP relay in front of the S3 stand-in (test/harness/s3.ts) that can hold S3's answer to the
 * request publishing one object (its PutObject, or the CompleteMultipartUpload of a multipart
 * upload): the request goes through and S3 stores the object, but its answer waits until
 * released. The moment between "the file has appeared" and "the hub knows it" is then as long as
 * a test needs (a publication whose last request is in flight). Or it holds that request itself
 * (`holdRequest`): S3 receives it only once released, as when a request is delayed on its way (the
 * client gives up waiting, and S3 handles the request afterwards).
 */
export interface CommitRelay {
  /** `http://127.0.0.1:<port>`: use it as the export's S3 endpoint. */
  endpoint: string;
  /**
   * Holds the answer to the next PUT of `bucket/key` (with `multipart`, the next POST completing an
   * upload of it): `stored` once S3 has answered it (the object exists).
   */
  hold(key: string, multipart?: boolean): { stored: Promise<void>; release(): void };
  /**
   * Holds the next such request on its way: none of its bytes reach S3 until `release()`, and
   * then all of them do, even if the client has closed its connection meanwhile. `received` once
   * its first bytes have reached the relay (the client has sent it).
   */
  holdRequest(key: string, multipart?: boolean): { received: Promise<void>; release(): void };
  close(): Promise<void>;
}

interface Hold {
  request: string;
  /** Hold the request (not the answer). */
  upstream: boolean;
  /** The request was seen (`holdRequest`) or answered by S3 (`hold`). */
  reached: () => void;
  released: Promise<void>;
}

export async function startCommitRelay(s3Endpoint: string, bucket: string): Promise<CommitRelay> {
  let hold: Hold | undefined;
  const upstream = new URL(s3Endpoint);
  const relay = createServer((client) => {
    const server = connect(Number(upstream.port), upstream.hostname);
    let held: Promise<void> | undefined;
    client.once('data', (first) => {
      const h = hold;
      const matches = h !== undefined && first.toString('latin1').startsWith(h.request);
      if (matches) hold = undefined;
      if (matches && h.upstream) {
        // Every byte of the request kept until released, then sent on; the client's end is not
        // passed on (S3 would drop a request whose connection is half closed before answering it).
        const kept: Buffer[] = [first];
        const keep = (chunk: Buffer) => kept.push(chunk);
        client.on('data', keep);
        h.reached();
        void h.released.then(() => {
          client.off('data', keep);
          for (const chunk of kept) server.write(chunk);
          client.on('data', (chunk: Buffer) => server.write(chunk));
        });
        return;
      }
      if (matches) {
        held = h.released;
        server.once('data', () => h.reached());
      }
      server.write(first);
      client.pipe(server);
    });
    server.on('data', (chunk) => {
      if (client.destroyed) return;
      if (held) void held.then(() => client.write(chunk));
      else client.write(chunk);
    });
    server.on('end', () => void (held ?? Promise.resolve()).then(() => client.end()));
    client.on('error', () => server.destroy());
    server.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', () => resolve()));
  const next = (key: string, multipart: boolean, upstreamHold: boolean) => {
    let reached!: () => void;
    let release!: () => void;
    const seen = new Promise<void>((resolve) => (reached = resolve));
    hold = {
      request: multipart ? `POST /${bucket}/${key}?uploadId=` : `PUT /${bucket}/${key}?`,
      upstream: upstreamHold,
      reached,
      released: new Promise<void>((resolve) => (release = resolve)),
    };
    return { seen, release };
  };
  return {
    endpoint: `http://127.0.0.1:${(relay.address() as AddressInfo).port}`,
    hold(key, multipart = false) {
      const { seen, release } = next(key, multipart, false);
      return { stored: seen, release };
    },
    holdRequest(key, multipart = false) {
      const { seen, release } = next(key, multipart, true);
      return { received: seen, release };
    },
    close: () => new Promise<void>((resolve) => relay.close(() => resolve())),
  };
}

import { type AddressInfo, connect, createServer, type Socket } from 'node:net';

/**
 * A TCP relay in front of a real server (OpenSSH, the S3 stand-in) that can stop passing bytes, in
 * both directions, while keeping every connection open: the server, as its client sees it, has
 * stopped answering (a process stopped, a network path lost without a reset). What is sent after
 * `stall()` is read and dropped; `resume()` lets bytes pass again (connections opened from then on
 * work: the server is back). `cut()` closes every connection at once (a connection lost);
 * `dropAnswers()` lets requests through to the server and drops its answers (an answer lost);
 * `cutAfter(bytes)` resets every connection once that many more bytes have gone to the server (a
 * connection lost in the middle of an upload).
 */
export interface StallRelay {
  readonly port: number;
  /** `http://127.0.0.1:<port>`. */
  readonly endpoint: string;
  /** From now on nothing passes, either way; connections stay open. */
  stall(): void;
  /** From now on bytes pass again (what was dropped meanwhile stays lost, what `stallAfter` held passes; a `stallAfter` not reached yet is called off). */
  resume(): void;
  /**
   * Lets `bytes` more bytes pass from clients to the server, then holds the rest: from then on the
   * relay reads nothing more from its clients (their writes back up, as to a server that stopped
   * reading), nothing is dropped, and `resume()` passes what was held.
   */
  stallAfter(bytes: number): void;
  /** Connections the relay has taken from clients so far. */
  readonly connections: number;
  /** From now on the server's answers are dropped; what the client sends still reaches the server. */
  dropAnswers(): void;
  /** Cuts every connection now (both sides see it closed). */
  cut(): void;
  /**
   * Lets `bytes` more bytes pass from clients to the server (all connections together), then resets
   * every connection (TCP RST to both sides: the client sees ECONNRESET, the server a connection
   * lost); the rest of the chunk that crossed the mark never reaches the server, nor need the bytes
   * just before it. Connections opened
   * later pass, unless `thenOver` is given: then, until `resume()`, a connection is also reset once
   * it has sent more than `thenOver` bytes with no byte from the server in between (a request whose
   * body is larger never arrives, a client's retries of it included; a small request and its
   * answer, such as an abort, pass). `cuts` resolves at the first reset.
   */
  cutAfter(bytes: number, options?: { thenOver?: number }): void;
  /** Resolves once a `cutAfter` has reset the connections. */
  readonly cuts: Promise<void>;
  close(): Promise<void>;
}

export async function startStallRelay(upstreamPort: number, upstreamHost = '127.0.0.1'): Promise<StallRelay> {
  let stalled = false;
  let answering = true;
  const sockets = new Set<Socket>();
  let connections = 0;
  let budget: number | undefined;
  let holding = false;
  const held: Array<() => void> = [];
  /** `cutAfter`: bytes left before the cut, and the per-connection bound that follows it. */
  let cutBudget: number | undefined;
  let cutOver: number | undefined;
  let cutOverOn = false;
  const unanswered = new WeakMap<Socket, number>();
  let cutDone!: () => void;
  let cuts = new Promise<void>((resolve) => (cutDone = resolve));
  const reset = (socket: Socket) => {
    if (!socket.destroyed) socket.resetAndDestroy();
  };
  const hold = (client: Socket, server: Socket, chunk: Buffer) => {
    client.pause();
    held.push(() => {
      server.write(chunk);
      client.resume();
    });
  };
  const pass = (client: Socket, server: Socket, chunk: Buffer) => {
    if (stalled) return;
    if (cutBudget !== undefined) {
      if (chunk.length >= cutBudget) {
        server.write(chunk.subarray(0, cutBudget));
        cutBudget = undefined;
        cutOverOn = cutOver !== undefined;
        for (const socket of sockets) reset(socket);
        cutDone();
        return;
      }
      cutBudget -= chunk.length;
    } else if (cutOverOn && cutOver !== undefined) {
      const sent = (unanswered.get(client) ?? 0) + chunk.length;
      unanswered.set(client, sent);
      if (sent > cutOver) {
        reset(client);
        reset(server);
        return;
      }
    }
    if (holding) return hold(client, server, chunk);
    if (budget !== undefined && chunk.length >= budget) {
      server.write(chunk.subarray(0, budget));
      hold(client, server, chunk.subarray(budget));
      budget = undefined;
      holding = true;
      return;
    }
    if (budget !== undefined) budget -= chunk.length;
    server.write(chunk);
  };
  const relay = createServer((client) => {
    connections += 1;
    const server = connect(upstreamPort, upstreamHost);
    for (const socket of [client, server]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => undefined);
    }
    client.on('data', (chunk: Buffer) => pass(client, server, chunk));
    server.on('data', (chunk) => {
      unanswered.set(client, 0);
      if (!stalled && answering) client.write(chunk);
    });
    client.on('end', () => void (stalled || server.end()));
    server.on('end', () => void (stalled || client.end()));
    // A side lost without a close (reset, its process killed with data unread) resets the other.
    client.on('error', () => void (stalled || reset(server)));
    server.on('error', () => void (stalled || reset(client)));
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', () => resolve()));
  const port = (relay.address() as AddressInfo).port;
  return {
    port,
    endpoint: `http://127.0.0.1:${port}`,
    stall() {
      stalled = true;
    },
    resume() {
      stalled = false;
      budget = undefined;
      holding = false;
      cutBudget = undefined;
      cutOver = undefined;
      cutOverOn = false;
      for (const release of held.splice(0)) release();
    },
    stallAfter(bytes) {
      budget = bytes;
    },
    get connections() {
      return connections;
    },
    dropAnswers() {
      answering = false;
    },
    cut() {
      for (const socket of sockets) socket.destroy();
    },
    cutAfter(bytes, options = {}) {
      cutBudget = bytes;
      cutOver = options.thenOver;
      cutOverOn = false;
      cuts = new Promise<void>((resolve) => (cutDone = resolve));
    },
    get cuts() {
      return cuts;
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => relay.close(() => resolve()));
    },
  };
}

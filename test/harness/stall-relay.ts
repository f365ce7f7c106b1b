import { type AddressInfo, connect, createServer, type Socket } from 'node:net';

/**
 * A TCP relay in front of a real server (OpenSSH, the S3 stand-in) that can stop passing bytes, in
 * both directions, while keeping every connection open: the server, as its client sees it, has
 * stopped answering (a process stopped, a network path lost without a reset). What is sent after
 * `stall()` is read and dropped; `resume()` lets bytes pass again (connections opened from then on
 * work: the server is back). `cut()` closes every connection at once (a connection lost);
 * `dropAnswers()` lets requests through to the server and drops its answers (an answer lost).
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
  const hold = (client: Socket, server: Socket, chunk: Buffer) => {
    client.pause();
    held.push(() => {
      server.write(chunk);
      client.resume();
    });
  };
  const pass = (client: Socket, server: Socket, chunk: Buffer) => {
    if (stalled) return;
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
    server.on('data', (chunk) => void (stalled || !answering || client.write(chunk)));
    client.on('end', () => void (stalled || server.end()));
    server.on('end', () => void (stalled || client.end()));
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
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => relay.close(() => resolve()));
    },
  };
}

import { createServer, type AddressInfo, type Socket } from 'node:net';

/**
 * A TCP listener on loopback that accepts connections and never answers (a destination that hangs):
 * `sockets` are the connections open now, `accepted()` those it took ever, `received()` what they sent
 * (as text: a request line shows whose it is).
 */
export interface SilentEndpoint {
  url: string;
  sockets: Set<Socket>;
  accepted(): number;
  received(): string;
  close(): Promise<void>;
}

export async function startSilentEndpoint(): Promise<SilentEndpoint> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  let received = '';
  const server = createServer((socket) => {
    sockets.add(socket);
    accepted++;
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1');
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    sockets,
    accepted: () => accepted,
    received: () => received,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type Koa from 'koa';

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  /** Stops accepting, lets in-flight requests finish for at most graceMs, then cuts what is left. */
  close(graceMs: number): Promise<void>;
}

export async function listen(app: Koa, host: string, port: number): Promise<RunningServer> {
  const server: Server = createServer(app.callback());
  server.keepAliveTimeout = 5_000;
  const sockets = new Set<Socket>();
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${shown === '0.0.0.0' ? '127.0.0.1' : shown}:${address.port}`;
  let closing: Promise<void> | undefined;
  return {
    url,
    port: address.port,
    close(graceMs: number) {
      closing ??= new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          for (const socket of sockets) socket.destroy();
        }, graceMs);
        timer.unref();
        // Connections kept alive after their last response would hold close() open until they time
        // out; so would one that never sent a byte (a client's or a browser's pre-opened connection),
        // which Node's closeIdleConnections leaves open: until its client closes it, or the grace.
        const closeIdle = () => {
          server.closeIdleConnections();
          for (const socket of sockets) if (socket.bytesRead === 0) socket.destroy();
        };
        const sweep = setInterval(closeIdle, 50);
        server.close(() => {
          clearTimeout(timer);
          clearInterval(sweep);
          resolve();
        });
        closeIdle();
      });
      return closing;
    },
  };
}

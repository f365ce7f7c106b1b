/**
 * A TCP echo server on 127.0.0.1 in its own process, for `probeMachine` (measure.ts): it sends its
 * port over IPC and echoes every byte back at once.
 */
import { createServer } from 'node:net';

const server = createServer((socket) => {
  socket.setNoDelay(true);
  socket.on('data', (data) => socket.write(data));
  socket.on('error', () => undefined);
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.send?.({ port: typeof address === 'object' && address ? address.port : 0 });
});
process.on('disconnect', () => process.exit(0));

import { describe, expect, it } from '@jest/globals';
import Koa from 'koa';
import { connect, type Socket } from 'node:net';
import { deferred } from '../test/harness/deferred.js';
import { listen } from './server.js';

/** A raw connection to the server, open. */
async function connection(port: number): Promise<Socket> {
  const socket = connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  return socket;
}

/** 'closed' once close() resolved, 'still open' 10 s on: the grace given is an hour, so only the server ended the wait. */
function closedWithin(closing: Promise<void>): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    closing.then(() => 'closed'),
    new Promise<string>((resolve) => {
      timer = setTimeout(() => resolve('still open'), 10_000);
    }),
  ]).finally(() => clearTimeout(timer));
}

describe('the HTTP server\'s close', () => {
  it('does not wait for a connection that never sent a byte (a client\'s or a browser\'s pre-opened one): it is closed at once', async () => {
    const server = await listen(new Koa().use((ctx) => {
      ctx.body = 'ok';
    }), '127.0.0.1', 0);
    const idle = await connection(server.port);
    const gone = new Promise<void>((resolve) => idle.once('close', () => resolve()));
    try {
      expect(await closedWithin(server.close(3_600_000))).toBe('closed');
      await gone;
    } finally {
      idle.destroy();
    }
  });

  it('lets a request in flight finish, its answer sent, before it closes', async () => {
    const held = deferred();
    const inHandler = deferred();
    const app = new Koa().use(async (ctx) => {
      inHandler.resolve();
      await held.promise;
      ctx.body = 'answered';
    });
    const server = await listen(app, '127.0.0.1', 0);
    const socket = await connection(server.port);
    let answer = '';
    socket.on('data', (chunk: Buffer) => {
      answer += chunk.toString('utf8');
    });
    try {
      socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      await inHandler.promise;
      const closing = closedWithin(server.close(3_600_000));
      held.resolve();
      expect(await closing).toBe('closed');
      expect(answer).toMatch(/^HTTP\/1\.1 200 OK[\s\S]*\r\n\r\nanswered$/);
    } finally {
      socket.destroy();
    }
  });
});

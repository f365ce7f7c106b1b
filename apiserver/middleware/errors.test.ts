import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import Koa from 'koa';
import { captureLogs, type LogCapture } from '../../test/harness/log-capture.js';
import { accessLog } from './access-log.js';
import { errorMapper } from './errors.js';
import { requestContext } from './request-context.js';

/**
 * The hub's first three middlewares, in the hub's order, in front of handlers whose bodies Koa
 * cannot (or can) serialise: what the client gets and what the log says must agree.
 */
let logs: LogCapture;
let server: Server;
let base: string;

beforeAll(async () => {
  logs = captureLogs('debug');
  const app = new Koa();
  app.silent = true;
  app.use(requestContext);
  app.use(accessLog);
  app.use(errorMapper);
  app.use(async (ctx) => {
    if (ctx.path === '/bigint') ctx.body = { count: 1n };
    else if (ctx.path === '/cycle') {
      const body: Record<string, unknown> = { name: 'loop' };
      body.self = body;
      ctx.body = body;
    } else if (ctx.path === '/typed') {
      ctx.body = { ok: true };
      ctx.type = 'application/problem+json';
    } else if (ctx.path === '/created') {
      ctx.status = 201;
      ctx.body = [{ id: 1 }];
    } else if (ctx.path === '/text') ctx.body = 'plain words';
  });
  server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  logs.restore();
});

function accessLine(requestId: string | null): Record<string, unknown> | undefined {
  return logs.lines().find((l) => l.msg === 'request' && l.reqId === requestId);
}

describe('a body that cannot be serialised', () => {
  it.each(['/bigint', '/cycle'])('%s: a JSON 500 with the request id, the failure logged, and an access line that says 500', async (path) => {
    const res = await fetch(`${base}${path}`);
    expect(res.status).toBe(500);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const requestId = res.headers.get('x-request-id');
    expect(await res.json()).toEqual({ error: 'internal error', requestId });
    expect(accessLine(requestId)).toMatchObject({ method: 'GET', path, status: 500 });
    expect(logs.lines().some((l) => l.msg === 'request failed' && l.reqId === requestId)).toBe(true);
  });
});

describe('bodies that can', () => {
  it('keep their status, their content type and their bytes', async () => {
    const typed = await fetch(`${base}/typed`);
    expect(typed.status).toBe(200);
    expect(typed.headers.get('content-type')).toBe('application/problem+json');
    expect(await typed.text()).toBe('{"ok":true}');
    expect(typed.headers.get('content-length')).toBe('11');

    const created = await fetch(`${base}/created`);
    expect(created.status).toBe(201);
    expect(created.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await created.json()).toEqual([{ id: 1 }]);
    expect(accessLine(created.headers.get('x-request-id'))).toMatchObject({ status: 201 });

    const text = await fetch(`${base}/text`);
    expect(text.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(await text.text()).toBe('plain words');

    const head = await fetch(`${base}/created`, { method: 'HEAD' });
    expect(head.status).toBe(201);
    expect(head.headers.get('content-type')).toMatch(/^application\/json/);
  });
});

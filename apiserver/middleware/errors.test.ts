import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import Koa from 'koa';
import pg from 'pg';
import { createTestDatabase } from '../../test/harness/database.js';
import { captureLogs, type LogCapture } from '../../test/harness/log-capture.js';
import { requestFrame } from './frame.js';

/**
 * The hub's frame (request context, access log, error mapping) in front of handlers whose bodies Koa
 * cannot (or can) serialise: what the client gets and what the log says must agree.
 */
let logs: LogCapture;
let server: Server;
let base: string;

beforeAll(async () => {
  logs = captureLogs('debug');
  const app = new Koa();
  app.silent = true;
  app.use(requestFrame);
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
    else if (ctx.path === '/deadlock') await deadlock();
    else if (ctx.path === '/undefined-column') await statement('create temp table c (a int); select b from c');
    else if (ctx.path === '/undefined-function') await statement('select no_such_function(1)');
    else if (ctx.path === '/undefined-table') await statement('select * from no_such_table');
    else if (ctx.path === '/refused') await statement('select $1::int', [`given-${VALUE}`]);
    else if (ctx.path === '/duplicate') await statement(`create temp table u (v text unique); insert into u values ('${VALUE}'), ('${VALUE}')`);
  });
  server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  logs.restore();
});

/**
 * Two transactions on a real PostgreSQL that each lock a row the other then wants: the server ends
 * one of them (40P01), whose error is rethrown here, as a route's statement would throw it.
 */
async function deadlock(): Promise<void> {
  const url = await createTestDatabase('deadlock');
  const [a, b] = [new pg.Client({ connectionString: url }), new pg.Client({ connectionString: url })];
  await Promise.all([a.connect(), b.connect()]);
  try {
    await a.query('create table t (id int primary key); insert into t values (1), (2)');
    await a.query('begin');
    await b.query('begin');
    await a.query('update t set id = id where id = 1');
    await b.query('update t set id = id where id = 2');
    const settled = await Promise.allSettled([a.query('update t set id = id where id = 2'), b.query('update t set id = id where id = 1')]);
    await Promise.all([a.query('rollback'), b.query('rollback')]);
    const failed = settled.find((r) => r.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
  } finally {
    await Promise.all([a.end(), b.end()]);
  }
}

/** A value a tenant sent or an upstream record held: never in the hub's log. */
const VALUE = 'tenant-value-8xK';

/** `sql` on a real PostgreSQL: its error is thrown as a route's statement would throw it. */
async function statement(sql: string, params: unknown[] = []): Promise<void> {
  const client = new pg.Client({ connectionString: await createTestDatabase('refusal') });
  await client.connect();
  try {
    await client.query(sql, params);
  } finally {
    await client.end();
  }
}

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

describe('a transaction the database rolled back to break a deadlock', () => {
  it('is a 503 with Retry-After saying to retry, not a 500', async () => {
    const res = await fetch(`${base}/deadlock`);
    expect({ status: res.status, retryAfter: res.headers.get('retry-after'), body: await res.json() }).toEqual({
      status: 503,
      retryAfter: '1',
      body: {
        error: "the database rolled the request's transaction back to resolve a conflict with another transaction (deadlock detected, database error 40P01)",
        hint: 'nothing that transaction wrote was kept: retry the request',
      },
    });
    expect(accessLine(res.headers.get('x-request-id'))).toMatchObject({ path: '/deadlock', status: 503 });
  });
});

describe('a PostgreSQL error quoting a value of the request', () => {
  it('a refused value (22P02) is a 400 whose log line has the code, not the value', async () => {
    const res = await fetch(`${base}/refused`);
    expect(res.status).toBe(400);
    const requestId = res.headers.get('x-request-id');
    const line = logs.lines().find((l) => l.msg === 'database refused a value of the request' && l.reqId === requestId);
    // Was: err: 'invalid input syntax for type integer: "given-tenant-value-8xK"'.
    expect(line).toMatchObject({ code: '22P02', err: 'invalid input syntax for type integer: "…"' });
    expect(logs.raw()).not.toContain(VALUE);
  });

  it('a unique violation (a 500 here) is logged with its constraint and table, the key value masked', async () => {
    const res = await fetch(`${base}/duplicate`);
    expect(res.status).toBe(500);
    const requestId = res.headers.get('x-request-id');
    const line = logs.lines().find((l) => l.msg === 'request failed' && l.reqId === requestId);
    // Was: detail 'Key (v)=(tenant-value-8xK) already exists.'
    expect(line?.err).toMatchObject({ code: '23505', constraint: 'u_v_key', table: 'u', detail: 'Key (v)=(…) already exists.' });
    expect(logs.raw()).not.toContain(VALUE);
  });
});

describe('what the statements name and the database lacks', () => {
  it.each([
    ['/undefined-table', '42P01'],
    ['/undefined-column', '42703'],
    ['/undefined-function', '42883'],
  ])('%s (%s): a 503 saying to migrate, the database words in the log', async (path, code) => {
    const res = await fetch(`${base}${path}`);
    // Was: a 500 for 42703 and 42883.
    expect({ status: res.status, body: await res.json() }).toEqual({
      status: 503,
      body: { error: 'database not migrated: run svc-hub migrate', hint: 'see GET /api/platform/migrations' },
    });
    const requestId = res.headers.get('x-request-id');
    expect(logs.lines().find((l) => l.reqId === requestId && l.level === 'warn')).toMatchObject({ code, msg: 'the database lacks a table, column or function the request needs' });
    expect(accessLine(requestId)).toMatchObject({ path, status: 503 });
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

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { createTestDatabase } from '../../test/harness/database.js';
import { captureLogs, type LogCapture } from '../../test/harness/log-capture.js';
import { databaseErrorFields, loggableMessage } from './database-errors.js';
import { logger } from './logger.js';

/**
 * Errors a real PostgreSQL raises over a value a tenant or an upstream record chose: the log lines
 * written with them (`{err}` through the logger's serializer, or the fields of one) keep the code and
 * the names, never the value.
 */
const SECRET = 'tenant-data-7Q2';

let client: pg.Client;
let logs: LogCapture;

beforeAll(async () => {
  client = new pg.Client({ connectionString: await createTestDatabase('dberr') });
  await client.connect();
  await client.query(`
    create table parent (id int primary key);
    create table t (
      id serial primary key,
      email text not null unique,
      note text check (note <> 'forbidden-${SECRET}'),
      parent int references parent (id),
      other text not null default 'x'
    );
    insert into t (email) values ('taken-${SECRET}');`);
  logs = captureLogs('debug');
});

afterAll(async () => {
  logs.restore();
  await client.end();
});

async function failure(sql: string, params: unknown[] = []): Promise<Error> {
  try {
    await client.query(sql, params);
  } catch (err) {
    return err as Error;
  }
  throw new Error(`no error from ${sql}`);
}

/** The error's line as the logger writes it, with `{err}` and with `databaseErrorFields`. */
function logged(err: Error): string {
  const before = logs.raw().length;
  logger().error({ err }, 'statement failed');
  logger().info(databaseErrorFields(err), 'statement refused');
  return logs.raw().slice(before);
}

describe('a PostgreSQL error that quotes a value', () => {
  it.each([
    ['22P02 invalid text for an integer', 'select $1::int', [SECRET], '22P02', 'invalid input syntax for type integer: "…"'],
    ['22P02 a value holding quotes and newlines', 'select $1::int', [`x"${SECRET}\n"y\nz`], '22P02', 'invalid input syntax for type integer: "…"'],
    ['22P02 invalid JSON (the document in where)', 'select $1::jsonb', [`{"a": "${SECRET}`], '22P02', 'invalid input syntax for type json'],
    ['22003 a number out of range', 'select $1::text::int', ['99999999999'], '22003', 'value "…" is out of range for type integer'],
    ['22007 a date', 'select $1::date', [SECRET], '22007', 'invalid input syntax for type date: "…"'],
  ])('%s: logged with its code and without the value', async (_what, sql, params, code, message) => {
    const err = await failure(sql, params);
    expect((err as unknown as { code: string }).code).toBe(code);
    const text = logged(err);
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain('99999999999');
    const [full, fields] = text.trim().split('\n').map((l) => JSON.parse(l));
    expect(full.err).toMatchObject({ code, message });
    expect(full.err.stack).toContain(message);
    expect(fields).toMatchObject({ code, err: message });
    expect(loggableMessage(err)).toBe(message);
  });

  it.each([
    ['23505 a unique violation', `insert into t (email) values ('taken-${SECRET}')`, '23505', { constraint: 't_email_key', detail: 'Key (email)=(…) already exists.' }],
    ['23514 a check violation', `insert into t (email, note) values ('a', 'forbidden-${SECRET}')`, '23514', { constraint: 't_note_check', detail: 'Failing row contains (…).' }],
    ['23502 a not-null violation', `insert into t (email, other) values ('${SECRET}', null)`, '23502', { column: 'other', detail: 'Failing row contains (…).' }],
    ['23503 a foreign key violation', `insert into t (email, parent) values ('${SECRET}', 424242)`, '23503', { constraint: 't_parent_fkey', detail: 'Key (parent)=(…) is not present in table "parent".' }],
  ])('%s: the constraint and column kept, the values of its detail masked', async (_what, sql, code, kept) => {
    const err = await failure(sql);
    expect((err as unknown as { detail: string }).detail).toMatch(/\(.*(7Q2|424242)/);
    const text = logged(err);
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain('424242');
    const [full, fields] = text.trim().split('\n').map((l) => JSON.parse(l));
    expect(full.err).toMatchObject({ code, table: 't', ...kept, message: err.message });
    const { detail: _detail, ...names } = kept;
    expect(fields).toMatchObject({ code, table: 't', ...names, err: err.message });
  });

  it('a value quoted by an error a trigger raised in PL/pgSQL is masked in its context too, and a cause is masked as the error', async () => {
    const err = await failure(`do $$ begin perform '${SECRET}'::int; end $$`);
    const wrapped = new Error('could not write the chunk', { cause: err });
    const text = logged(wrapped);
    expect((err as unknown as { where: string }).where).toContain('PL/pgSQL');
    expect(text).not.toContain(SECRET);
    expect(JSON.parse(text.split('\n')[0]!).err.message).toBe('could not write the chunk: invalid input syntax for type integer: "…"');
    // The error itself is not changed: the caller's handling still sees the database's words.
    expect(err.message).toContain(SECRET);
  });

  it('leaves other errors as they are: an undefined table names it', async () => {
    const err = await failure('select * from no_such_table');
    expect(loggableMessage(err)).toBe('relation "no_such_table" does not exist');
    expect(JSON.parse(logged(err).split('\n')[0]!).err.message).toBe('relation "no_such_table" does not exist');
  });
});

describe('a PostgreSQL error quoting a value, held by another error or logged without a message', () => {
  type Line = Record<string, unknown> & { msg?: string; err: { message?: string; aggregateErrors?: unknown; first?: unknown } };

  /** The JSON lines written by `write`. */
  function lines(write: () => void): Line[] {
    const before = logs.raw().length;
    write();
    const text = logs.raw().slice(before);
    expect(text).not.toContain(SECRET);
    return text.trim().split('\n').map((l) => JSON.parse(l));
  }

  it('the members of an AggregateError (Promise.any) are masked as the error itself', async () => {
    const err = await Promise.any([client.query('select $1::int', [SECRET]), client.query('select $1::date', [`d-${SECRET}`])]).then(
      () => new Error('a query answered'),
      (e: unknown) => e as Error,
    );
    expect(err).toBeInstanceOf(AggregateError);
    const [line] = lines(() => logger().error({ err }, 'every attempt failed'));
    expect(line!.err.aggregateErrors).toMatchObject([
      { code: '22P02', message: 'invalid input syntax for type integer: "…"' },
      { code: '22007', message: 'invalid input syntax for type date: "…"' },
    ]);
    // …as a cause of an error, too.
    const [wrapped] = lines(() => logger().error({ err: new Error('could not connect', { cause: err }) }, 'start failed'));
    expect(wrapped!.err.message).toBe('could not connect: All promises were rejected');
  });

  it('an error held under another property of an error (which the serializer writes out) is masked', async () => {
    const pgErr = await failure('select $1::int', [SECRET]);
    const [line] = lines(() => logger().warn({ err: Object.assign(new Error('the batch failed'), { first: pgErr, all: [pgErr] }) }, 'batch failed'));
    expect(line!.err.first).toMatchObject({ code: '22P02', message: 'invalid input syntax for type integer: "…"' });
  });

  it("logged alone or under err without a message, the line's message (which pino takes from the error) is masked", async () => {
    const err = await failure(`insert into t (email, note) values ('b', 'forbidden-${SECRET}')`);
    const conversion = await failure('select $1::int', [SECRET]);
    const [alone, underErr, withMessage] = lines(() => {
      logger().error(conversion);
      logger().warn({ err: conversion });
      logger().warn({ err }, 'kept as given');
    });
    expect([alone!.msg, underErr!.msg, withMessage!.msg]).toEqual(['invalid input syntax for type integer: "…"', 'invalid input syntax for type integer: "…"', 'kept as given']);
    expect(alone!.err).toMatchObject({ code: '22P02', message: 'invalid input syntax for type integer: "…"' });
  });

  it('an error under a key other than err is written as an error, masked (pino would write its fields as they are)', async () => {
    const err = await failure(`insert into t (email) values ('taken-${SECRET}')`);
    const [line] = lines(() => logger().warn({ error: err, attempt: 2 }, 'insert failed'));
    expect(line).toMatchObject({ attempt: 2, error: { type: 'DatabaseError', code: '23505', detail: 'Key (email)=(…) already exists.', message: err.message } });
  });
});

describe('errors held deeper than the top level of a logged object', () => {
  /** A credential in an address an error quotes (a driver's connection string, a URL fetch refused). */
  const PASSWORD = 'pw-Zk81-not-for-logs';
  const addressError = () => new Error(`could not reach postgres://svc:${PASSWORD}@db.internal:5432/hub nor https://u:${PASSWORD}@h.example/x?token=${PASSWORD}`);

  /** The JSON line written by `write`, which holds neither the row value nor the password. */
  // biome-ignore lint/suspicious/noExplicitAny: a parsed JSON line, read field by field
  function line(write: () => void): Record<string, any> {
    const before = logs.raw().length;
    write();
    const text = logs.raw().slice(before);
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain(PASSWORD);
    const lines = text.trim().split('\n');
    expect(lines).toHaveLength(1);
    return JSON.parse(lines[0]!);
  }

  const unique = () => failure(`insert into t (email) values ('taken-${SECRET}')`);
  const maskedUnique = { type: 'DatabaseError', code: '23505', constraint: 't_email_key', detail: 'Key (email)=(…) already exists.' };
  const maskedAddress = { type: 'Error', message: 'could not reach postgres://***@db.internal:5432/hub nor https://***@h.example/x?token=***' };

  it('at depth 2 and 3, under any key, written as the err serializer writes one, masked', async () => {
    const pgErr = await unique();
    // Was: {"result":{"err":{…,"detail":"Key (email)=(taken-tenant-data-7Q2) already exists.",…}}}
    const two = line(() => logger().warn({ result: { err: pgErr, attempts: 2 } }, 'insert failed'));
    expect(two.result).toMatchObject({ attempts: 2, err: { ...maskedUnique, message: pgErr.message } });
    expect(two.result.err.stack).toContain('duplicate key value violates unique constraint');
    const three = line(() => logger().warn({ outcome: { attempt: { error: addressError() } } }, 'connect failed'));
    expect(three.outcome.attempt.error).toMatchObject(maskedAddress);
    expect(three.outcome.attempt.error.stack).toContain('postgres://***@db.internal');
    expect(line(() => logger().warn({ a: { b: { c: { d: { e: pgErr } } } } }, 'deep')).a.b.c.d.e).toMatchObject(maskedUnique);
  });

  it('in lists, and in objects in lists', async () => {
    const pgErr = await unique();
    const written = line(() => logger().warn({ errors: [pgErr, addressError()], batch: { failures: [{ row: 1, err: pgErr }] } }, 'batch failed'));
    expect(written.errors).toMatchObject([maskedUnique, maskedAddress]);
    expect(written.batch.failures).toMatchObject([{ row: 1, err: maskedUnique }]);
  });

  it('in a cause chain, of the logged error and of one held deeper, and in what an error holds', async () => {
    const pgErr = await unique();
    const chained = () => new Error('the write failed', { cause: new Error('the batch failed', { cause: addressError() }) });
    const top = line(() => logger().error({ err: chained() }, 'failed'));
    expect(top.err.message).toBe(`the write failed: the batch failed: ${maskedAddress.message}`);
    expect(top.err.stack).toContain('caused by: Error: could not reach postgres://***@');
    const deep = line(() => logger().error({ job: { last: chained() } }, 'failed'));
    expect(deep.job.last.message).toBe(top.err.message);
    // The serializer writes an error's enumerable fields as they are: an error in an object there is masked too.
    const held = line(() => logger().error({ err: Object.assign(new Error('the batch failed'), { response: { first: pgErr, all: [{ e: pgErr }] } }) }, 'failed'));
    expect(held.err.response.first).toMatchObject({ code: '23505', detail: 'Key (email)=(…) already exists.' });
    expect(held.err.response.all[0].e).toMatchObject({ code: '23505', detail: 'Key (email)=(…) already exists.' });
  });

  it('a cycle (an object holding itself, an error its own cause) is written once, masked, without end', async () => {
    const pgErr = await unique();
    const looped = addressError();
    (looped as { cause?: unknown }).cause = looped;
    const node: Record<string, unknown> = { name: 'n', err: pgErr, other: looped };
    for (let i = 0; i < 50; i++) node[`self${i}`] = node;
    const written = line(() => logger().warn({ node, list: [node, node] }, 'cycle'));
    expect(written.node).toMatchObject({ name: 'n', err: maskedUnique, other: { message: `${maskedAddress.message}: ${maskedAddress.message}: ...` }, self0: '[Circular]' });
    expect(written.list[1].self49).toBe('[Circular]');
  });

  it('objects without errors are written as they are; deeper than ten levels as [Object]', () => {
    const when = new Date('2026-12-05T10:00:00Z');
    const value = { a: { b: { c: [1, { d: 'x', url: 'https://h.example/?q=1' }], when } }, list: [[1, 2], []], n: null };
    const written = line(() => logger().info({ value, count: 3 }, 'plain'));
    expect(written.value).toEqual(JSON.parse(JSON.stringify(value)));
    expect(written.count).toBe(3);
    let deep: Record<string, unknown> = { err: new Error(`postgres://svc:${PASSWORD}@db`) };
    for (let i = 0; i < 12; i++) deep = { next: deep };
    let at = line(() => logger().info({ deep }, 'deep')).deep;
    for (let i = 0; i < 9; i++) at = at.next;
    expect(at.next).toBe('[Object]');
  });
});

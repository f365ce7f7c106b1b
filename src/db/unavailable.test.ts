import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { describe, expect, it } from '@jest/globals';
import { isDatabaseUnavailable, isUnavailableOrBusy } from './unavailable.js';

/** Which errors read as "the database cannot be reached right now" (a 503), from real sockets and files. */

function connectError(options: { path: string } | { host: string; port: number }): Promise<Error> {
  return new Promise((resolve) => {
    const socket = connect(options as never);
    socket.once('connect', () => {
      socket.destroy();
      resolve(new Error('connected'));
    });
    socket.once('error', resolve);
  });
}

describe('isDatabaseUnavailable', () => {
  it('a Unix socket whose server is away (its file gone) is unavailable, as a refused TCP port is', async () => {
    const gone = await connectError({ path: '/nonexistent-dir/.s.PGSQL.5432' });
    expect((gone as NodeJS.ErrnoException).code).toBe('ENOENT');
    expect(isDatabaseUnavailable(gone)).toBe(true);
    expect(isDatabaseUnavailable(await connectError({ host: '127.0.0.1', port: 1 }))).toBe(true);
  });

  it('a missing file is not the database being away (it stays a 500)', () => {
    let missing: unknown;
    try {
      readFileSync('/nonexistent-dir/file');
    } catch (err) {
      missing = err;
    }
    expect((missing as NodeJS.ErrnoException).code).toBe('ENOENT');
    expect(isDatabaseUnavailable(missing)).toBe(false);
  });
});

describe('isUnavailableOrBusy', () => {
  const pg = (code: string) => Object.assign(new Error(`database error ${code}`), { code, severity: 'ERROR' });

  it('the database or the network away or busy: connection, rollback, resources, operator, system errors and lock or idle timeouts, however deep the cause', async () => {
    for (const code of ['08006', '40001', '40P01', '53100', '53300', '57014', '57P01', '58030', '25P03', '55P03']) expect([code, isUnavailableOrBusy(pg(code))]).toEqual([code, true]);
    expect(isUnavailableOrBusy(await connectError({ host: '127.0.0.1', port: 1 }))).toBe(true);
    expect(isUnavailableOrBusy(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isUnavailableOrBusy(new Error('timeout exceeded when trying to connect'))).toBe(true);
    expect(isUnavailableOrBusy(new Error('fetch failed', { cause: Object.assign(new Error('connect ETIMEDOUT'), { code: 'ETIMEDOUT' }) }))).toBe(true);
    expect(isUnavailableOrBusy(new Error('fetch failed', { cause: Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' }) }))).toBe(true);
    expect(isUnavailableOrBusy(new Error('wrapped', { cause: pg('57P01') }))).toBe(true);
    expect(isUnavailableOrBusy(new AggregateError([pg('08001')], 'every address failed'))).toBe(true);
    expect(isUnavailableOrBusy(new DOMException('The operation was aborted due to timeout', 'TimeoutError'))).toBe(true);
  });

  it("a failure the same work meets again at every try is not: a bug, a value refused, a constraint, a missing grant or table, a read-only database", () => {
    expect(isUnavailableOrBusy(new TypeError("Cannot read properties of undefined (reading 'x')"))).toBe(false);
    for (const code of ['22P02', '23505', '42501', '42P01', '25006', 'XX000']) expect([code, isUnavailableOrBusy(pg(code))]).toEqual([code, false]);
    expect(isUnavailableOrBusy(new Error('template failed'))).toBe(false);
    expect(isUnavailableOrBusy(undefined)).toBe(false);
    expect(isUnavailableOrBusy('a string')).toBe(false);
  });
});

import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { describe, expect, it } from '@jest/globals';
import { isDatabaseUnavailable } from './unavailable.js';

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

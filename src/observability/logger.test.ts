import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it, jest } from '@jest/globals';
import pino from 'pino';
import { until } from '../../test/harness/until.js';
import { createLogger, isoTime, primitivesUnredacted, REDACT_PATHS } from './logger.js';

/** The dev profile's readable lines (pino-pretty), written into memory. */
function prettyLogger() {
  let raw = '';
  const destination = new Writable({
    write(chunk, _encoding, done) {
      raw += chunk.toString();
      done();
    },
  });
  return { log: createLogger({ level: 'info', json: false, destination }), raw: () => raw };
}

describe('the dev profile readable lines', () => {
  it('escape a newline and a terminal escape sequence a message, a key or a value holds: one record, one line of its own', async () => {
    const { log, raw } = prettyLogger();
    const forged = '[05:00:00.000] ERROR: forged line';
    log.info({ connector: `c1\n${forged}`, [`key\n${forged}`]: 1 }, `run of c1\n${forged} \u001b[31mred\u001b[0m\r`);
    log.info({ path: '/a\u202eb\u009bc' }, 'bidi and C1');
    log.info('second');
    await until('the records', () => raw().includes('second'));
    const lines = raw().split('\n');
    // Was: the message's newline started a line of its own that read as an ERROR line (and pino-pretty
    // dropped the ESC but printed "[31mred").
    expect(lines.filter((l) => l.startsWith('[05:00:00.000]'))).toEqual([]);
    expect(lines.filter((l) => /^\[[0-9:.]+\] INFO/.test(l))).toHaveLength(3);
    expect(raw()).toContain('run of c1\\n[05:00:00.000] ERROR: forged line \\u001b[31mred\\u001b[0m\\r');
    expect(raw()).toContain('key\\n[05:00:00.000] ERROR: forged line');
    expect(raw()).not.toContain('\u001b');
    // A value is printed as JSON: escaped as it was.
    expect(raw()).toContain('connector: "c1\\n[05:00:00.000] ERROR: forged line"');
    // JSON leaves a bidi override and a C1 control (CSI) as they are: escaped too.
    expect(raw()).toContain('path: "/a\\u202eb\\u009bc"');
    expect(raw()).not.toMatch(/[\u202e\u009b]/);
  });

  it('keep an error stack on its indented lines', async () => {
    const { log, raw } = prettyLogger();
    log.error({ err: new Error('it broke') }, 'failed');
    await until('the record', () => raw().includes('failed'));
    expect(raw()).toMatch(/\n {4}err: \{\n/);
    expect(raw()).toMatch(/\n {10}Error: it broke\n {14}at /);
  });
});

describe('a child logger\'s bindings', () => {
  it('are masked as a log call\'s object is: a bound error at any depth, a credential in a bound address', async () => {
    let raw = '';
    const destination = new Writable({
      write(chunk, _encoding, done) {
        raw += chunk.toString();
        done();
      },
    });
    const log = createLogger({ level: 'info', json: true, destination });
    // A PostgreSQL error (it has a severity) of a class whose texts quote values: its detail quotes the row.
    const refused = Object.assign(new Error('duplicate key value violates unique constraint "users_email"'), {
      severity: 'ERROR',
      code: '23505',
      detail: 'Key (email)=(ann@example.com) already exists.',
    });
    const child = log.child({
      source: 'https://svc:Child-pa55@db.internal.example/hub?token=t0ps3cret',
      nested: { attempt: { error: refused, via: ['postgres://app:Other-pa55@db:5432/hub'] } },
      err: new Error('connect to https://u:Err-pa55@h.example/ failed'),
    });
    child.info('bound');
    await until('the line', () => raw.includes('bound'));
    const line = JSON.parse(raw) as Record<string, unknown>;
    // Was: the addresses as given, and the nested error written as JSON writes it: its enumerable fields, the detail quoting the row.
    expect(raw).not.toMatch(/Child-pa55|Other-pa55|Err-pa55|t0ps3cret|ann@example\.com/);
    expect(line.source).toBe('https://***@db.internal.example/hub?token=***');
    expect(line.nested).toMatchObject({ attempt: { error: { type: 'Error', message: 'duplicate key value violates unique constraint "users_email"', detail: 'Key (email)=(…) already exists.' }, via: ['postgres://***@db:5432/hub'] } });
    expect(line.err).toMatchObject({ message: 'connect to https://***@h.example/ failed' });
    // A grandchild's bindings too; the parent's stay as they were.
    raw = '';
    child.child({ target: 'https://a:Grand-pa55@x.example/' }).info('grandchild');
    await until('the line', () => raw.includes('grandchild'));
    expect(raw).not.toContain('Grand-pa55');
    expect(JSON.parse(raw)).toMatchObject({ target: 'https://***@x.example/', source: 'https://***@db.internal.example/hub?token=***' });
  });
});

describe('writing a line', () => {
  /** Lines written synchronously into a list by a pino logger redacting the hub's paths, with `primitivesUnredacted` or without. */
  function linesOf(shortcut: boolean, write: (log: pino.Logger) => void): string[] {
    const lines: string[] = [];
    const log = pino({ base: undefined, timestamp: false, redact: { paths: REDACT_PATHS, censor: '[REDACTED]' } }, { write: (line: string) => lines.push(line) });
    if (shortcut) primitivesUnredacted(log);
    write(log);
    return lines;
  }

  it('writes every value and message as the redaction of the paths starting with `*` wrote it', () => {
    const values: unknown[] = [
      'GET', '/api/bff/v1/me', '', 'quote " backslash \\ slash /', 'line\nbreak\u0000\u001b[31m\u007f\u2028', 'é ✓ 😀', '\ud800 lone \udfff',
      'x'.repeat(100), `long "${'y'.repeat(60)}" \ud83d`, 0, -0, 1.3, 1e21, -1e-7, Number.MAX_SAFE_INTEGER, Number.NaN, Number.POSITIVE_INFINITY,
      true, false, null, 10n, { password: 'hunter2-hunter2', user: 'ann' }, { token: 't', nested: { secret: 's' } }, ['a', { value: 'v' }],
      { value: 'v', masterKey: 'k' }, new Date(0), { toJSON: () => ({ secret: 'kept-by-toJSON' }) }, Object.create({ password: 'inherited' }),
    ];
    const write = (log: pino.Logger) => {
      for (const value of values) {
        log.info({ field: value, other: value }, 'message');
        log.info({ password: value, token: value, req: { headers: { authorization: value, other: value } }, headers: { authorization: value } });
        if (typeof value === 'string') log.info(value);
        log.child({ bound: value }).info({ status: 200, ms: 1.3 }, 'request');
      }
      log.info({ method: 'GET', path: '/api/bff/v1/me', status: 200, ms: 1.3 }, 'request %s %j', 'arg', { password: 'p-in-arg' });
    };
    const before = linesOf(false, write);
    expect(before.length).toBeGreaterThan(values.length * 3);
    expect(linesOf(true, write)).toEqual(before);
  });

  it('writes the time as pino\'s isoTime writes it', () => {
    const times = [0, 5, 50, 999, 1_000, 1_001, 1_765_000_000_123, 1_765_000_000_123, 1_765_000_000_999, 1_765_000_001_000, 1_765_000_000_007, -1, -1_001, 253_402_300_799_999, 253_402_300_800_000];
    const now = jest.spyOn(Date, 'now');
    try {
      for (const time of times) {
        now.mockReturnValue(time);
        expect([time, isoTime()]).toEqual([time, pino.stdTimeFunctions.isoTime()]);
      }
    } finally {
      now.mockRestore();
    }
  });
});

describe('standard output', () => {
  // The hub's last lines, then process.exit (bin/svc-hub.js), as a stop ends. libuv's thread pool is
  // given one thread, kept busy: a write handed to it waits there, as it may on a loaded machine.
  const script = (json: boolean) => `
    import { pbkdf2 } from 'node:crypto';
    import { createLogger, logger, setLogger } from ${JSON.stringify(new URL('./logger.ts', import.meta.url).href)};
    setLogger(createLogger({ level: 'info', json: ${json} }));
    pbkdf2('password', 'salt', 5_000_000, 32, 'sha256', () => undefined);
    logger().info('embedded PostgreSQL stopped');
    logger().info('stopped');
    process.exit(0);
  `;

  it.each([
    ['JSON lines', true],
    ['readable lines', false],
  ])('%s: a process that exits right after logging has written every line, in order', (_name, json) => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-log-exit-'));
    try {
      const file = join(dir, 'log');
      const fd = openSync(file, 'w');
      const result = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(json)], {
        env: { PATH: process.env.PATH, HOME: process.env.HOME, UV_THREADPOOL_SIZE: '1' },
        stdio: ['ignore', fd, fd],
        timeout: 30_000,
      });
      closeSync(fd);
      expect(result.status).toBe(0);
      const lines = readFileSync(file, 'utf8').split('\n').filter((line) => line.trim());
      // Was: only `stopped` (the line before it still waiting for the thread pool when the process
      // exited), or the two swapped.
      expect(lines).toHaveLength(2);
      expect(lines[0]).toContain('embedded PostgreSQL stopped');
      expect(lines[1]).toMatch(/\bstopped"?\}?$/);
      expect(lines[1]).not.toContain('PostgreSQL');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

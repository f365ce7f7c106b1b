import { Writable } from 'node:stream';
import { createLogger, setLogger } from '../../src/observability/logger.js';

export interface LogCapture {
  /** Every JSON line written so far, parsed. */
  lines(): Array<Record<string, unknown>>;
  /** Everything written so far, as written. */
  raw(): string;
  /** Puts the silent test logger back. */
  restore(): void;
}

/** Replaces the process logger with one writing JSON lines (at `level`) into memory. */
export function captureLogs(level = 'debug'): LogCapture {
  let raw = '';
  const destination = new Writable({
    write(chunk, _encoding, done) {
      raw += chunk.toString();
      done();
    },
  });
  setLogger(createLogger({ level, json: true, destination }));
  return {
    lines: () =>
      raw
        .split('\n')
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as Record<string, unknown>),
    raw: () => raw,
    restore: () => setLogger(createLogger({ level: process.env.SVC_TEST_LOG ?? 'silent', json: true })),
  };
}

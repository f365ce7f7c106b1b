import { Writable } from 'node:stream';
import { describe, expect, it } from '@jest/globals';
import { until } from '../../test/harness/until.js';
import { createLogger } from './logger.js';

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

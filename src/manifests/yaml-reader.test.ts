import { afterAll, describe, expect, it } from '@jest/globals';
import { readYamlDocument, readYamlManifest } from './yaml-body.js';
import { YAML_READS_PER_OWNER, YamlReader, YamlReaderBusy, YamlReadStopped } from './yaml-reader.js';

/**
 * The YAML reader: tenants' YAML read on a thread of its own (a real worker thread, started from the TypeScript source
 * through tsx as the build starts the compiled one), with a time limit and a heap of its own.
 */

const readers: YamlReader[] = [];
const reader = (heapMb?: number, startLimitMs?: number) => {
  const r = new YamlReader(heapMb, startLimitMs);
  readers.push(r);
  return r;
};
afterAll(async () => {
  await Promise.all(readers.map((r) => r.close()));
});

const opts = (limitMs: number, owner: string, maxJsonBytes = 10 * 1024 * 1024) => ({ limitMs, owner, maxJsonBytes });

/**
 * Slow to read for its length: one sequence item per line, as many as fit in `kb` up to 110,000, wider for a larger
 * `kb`: within the bounds a manifest's tokens are held to (scanYamlTokens), so that it is read, not refused from them.
 */
const slow = (kb: number) => {
  const items = Math.min(110_000, Math.floor((kb * 1024) / 5));
  return `items:\n${`- ${'1'.repeat(Math.max(2, Math.floor((kb * 1024) / items) - 3))}\n`.repeat(items)}`;
};

describe('the YAML reader', () => {
  it('reads on its thread what the same function reads on this one: values, refusals and errors alike', async () => {
    const r = reader();
    const texts = [
      'apiVersion: v1\nkind: Connector\nmetadata: {name: a}\nspec: {n: 0x10, on: yes, t: 2024-01-01, k: [1, "1"]}\n',
      'a: 1\na: 2\n', // a key twice, named by its path
      'a: {1: x, "1": y}\n', // kubectl's keys: one key twice
      'a: .inf\n', // not finite: refused as kubectl refuses it
      'a: !!binary aGk=\n', // a tag kubectl reads otherwise
      'a: [1, 2\n', // not YAML
      `a: ${'['.repeat(70)}${']'.repeat(70)}\n`, // compact nesting past the cap
      '', // nothing
      '- just\n- a list\n',
      'a: &a [*a]\n', // a value that contains itself: no JSON carries it
    ];
    for (const text of texts) expect({ text, read: await r.manifest(text, 'body', opts(10_000, 't1')) }).toEqual({ text, read: readYamlManifest(text, 'body') });
    for (const text of ['openapi: 3.0.0\npaths: {}\n', 'a: [1, 2\n', `a: ${'{a: '.repeat(70)}1${'}'.repeat(70)}\n`, 'a: &a {b: *a}\n']) {
      expect({ text, read: await r.document(text, opts(10_000, 't1')) }).toEqual({ text, read: readYamlDocument(text) });
    }
    expect(await r.manifest('a: 1\na: 2\n', 'body', opts(10_000, 't1'))).toEqual({ problem: { message: expect.stringContaining('given twice'), field: 'body.a', hint: expect.any(String) } });
    expect(await r.manifest('a: &a [*a]\n', 'body', opts(10_000, 't1'))).toEqual({ problem: { message: expect.stringContaining('the alias *a is inside the value its anchor &a names'), field: 'body' } });
    expect(await r.document('a: &a {b: *a}\n', opts(10_000, 't1'))).toEqual({ problem: { message: expect.stringContaining('the alias *a is inside the value its anchor &a names') } });
  }, 60_000);

  it('gives up a read past its time limit, and the next read gets a new thread', async () => {
    const r = reader();
    await r.manifest('warm: up\n', 'body', opts(10_000, 't1')); // the thread's start is not a read's time
    const started = performance.now();
    const stopped = await r.manifest(slow(256), 'body', opts(100, 't1')).catch((err: unknown) => err);
    const tookMs = performance.now() - started;
    expect(stopped).toBeInstanceOf(YamlReadStopped);
    expect(stopped).toMatchObject({ reason: 'time', message: 'took longer than svc.http.yaml-read-timeout (100ms) to read' });
    // Given up at the limit, not when the text was read (about 1.2 s of a core for 256 KiB).
    const whole = performance.now();
    expect(await r.manifest(slow(256), 'body', opts(60_000, 't1'))).toHaveProperty('json');
    const wholeMs = performance.now() - whole;
    expect({ tookMs, wholeMs, early: tookMs < wholeMs / 2 }).toMatchObject({ early: true });
    expect(await r.manifest('after: [1]\n', 'body', opts(10_000, 't1'))).toEqual({ json: '{"after":[1]}' });
  }, 120_000);

  it('reads one text at a time, each limit counted from when its read starts, not while it waits', async () => {
    const r = reader();
    await r.manifest('warm: up\n', 'body', opts(10_000, 't1'));
    const whole = performance.now();
    await r.manifest(slow(64), 'body', opts(60_000, 'a'));
    const oneMs = performance.now() - whole;
    // The first takes about three times oneMs, the second half of it and is allowed twice oneMs: it waits behind the
    // first longer than its limit, then is read well in time.
    const first = r.manifest(slow(192), 'body', opts(60_000, 'a'));
    const second = r.manifest(slow(32), 'body', opts(Math.ceil(oneMs * 2), 'b'));
    await expect(first).resolves.toHaveProperty('json');
    await expect(second).resolves.toHaveProperty('json');
  }, 120_000);

  it(`takes ${YAML_READS_PER_OWNER} texts of one owner at once, and another owner's beside them`, async () => {
    const r = reader();
    const held = Array.from({ length: YAML_READS_PER_OWNER }, () => r.manifest(slow(32), 'body', opts(60_000, 'hostile')));
    await expect(r.manifest('a: 1\n', 'body', opts(60_000, 'hostile'))).rejects.toBeInstanceOf(YamlReaderBusy);
    expect(await r.manifest('b: 2\n', 'body', opts(60_000, 'other'))).toEqual({ json: '{"b":2}' });
    for (const read of held) await expect(read).resolves.toHaveProperty('json');
    // Answered reads are no longer held.
    expect(await r.manifest('a: 1\n', 'body', opts(60_000, 'hostile'))).toEqual({ json: '{"a":1}' });
  }, 120_000);

  it('gives up a text that needs more than its heap, and the next read gets a new thread', async () => {
    const r = reader(32);
    const stopped = await r.manifest(slow(1024), 'body', opts(120_000, 't1')).catch((err: unknown) => err);
    expect(stopped).toBeInstanceOf(YamlReadStopped);
    expect(stopped).toMatchObject({ reason: 'memory', message: 'needed more memory to read than the YAML reader has (32 MB)' });
    expect(await r.manifest('after: [1]\n', 'body', opts(10_000, 't1'))).toEqual({ json: '{"after":[1]}' });
  }, 120_000);

  it('refuses the reads waiting for a thread that does not get ready in time, and the next read starts a thread again', async () => {
    const r = reader(undefined, 1);
    const waiting = [r.manifest('a: 1\n', 'body', opts(10_000, 'x')), r.manifest('b: 1\n', 'body', opts(10_000, 'y'))];
    for (const read of waiting) await expect(read).rejects.toThrow('the YAML reader did not start: not ready within 1ms of its start');
    await expect(r.manifest('c: 1\n', 'body', opts(10_000, 'x'))).rejects.toThrow('did not start');
  }, 60_000);

  it('lets owners take turns: another owner\'s text is read before the second of one that sent two', async () => {
    const r = reader();
    await r.manifest('warm: up\n', 'body', opts(10_000, 'x'));
    const answered: string[] = [];
    const note = (name: string) => (read: unknown) => {
      answered.push(name);
      return read;
    };
    const reads = [
      r.manifest(slow(128), 'body', opts(60_000, 'hostile')).then(note('hostile 1')),
      r.manifest(slow(128), 'body', opts(60_000, 'hostile')).then(note('hostile 2')),
      r.manifest('small: 1\n', 'body', opts(60_000, 'other')).then(note('other')),
    ];
    await Promise.all(reads);
    expect(answered).toEqual(['hostile 1', 'other', 'hostile 2']);
  }, 120_000);

  it('refuses a value that aliases make larger than the JSON a body may hold', async () => {
    const r = reader();
    // 50 aliases of one 40,000-character text: 2 MB of JSON from 40 KB of YAML.
    const text = `a: &a "${'x'.repeat(40_000)}"\nb: [${Array.from({ length: 50 }, () => '*a').join(', ')}]\n`;
    expect(await r.manifest(text, 'body', opts(10_000, 't1', 1024 * 1024))).toEqual({
      problem: { message: 'body (YAML) reads as more JSON than the 1,048,576 bytes a body may hold (svc.http.body-limit): its aliases repeat what they name', hint: expect.any(String), tooLarge: true },
    });
    expect(await r.manifest(text, 'body', opts(10_000, 't1', 4 * 1024 * 1024))).toHaveProperty('json');
    expect(await r.document(text, opts(10_000, 't1', 1024 * 1024))).toMatchObject({ problem: { tooLarge: true } });
  }, 60_000);

  it('refuses the reads under way and waiting when closed (the hub stopping), and those sent after', async () => {
    const r = reader();
    await r.manifest('warm: up\n', 'body', opts(10_000, 'x'));
    const reads = [r.manifest(slow(256), 'body', opts(60_000, 'a')), r.manifest('b: 1\n', 'body', opts(60_000, 'b'))].map((read) => read.catch((err: unknown) => err));
    await r.close();
    for (const read of reads) expect(await read).toMatchObject({ reason: 'closed', message: 'was not read: the hub is stopping' });
    await expect(r.manifest('c: 1\n', 'body', opts(10_000, 'a'))).rejects.toMatchObject({ reason: 'closed' });
  }, 60_000);
});

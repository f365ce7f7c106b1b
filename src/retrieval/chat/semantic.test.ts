import { describe, expect, it } from '@jest/globals';
import { groundedTags } from './semantic.js';

describe('groundedTags', () => {
  const a = 'a'.repeat(64);
  const b = 'b'.repeat(64);

  it('keeps the tags of retrieved rows, drops the others with the space before them', () => {
    expect(groundedTags(`x [row:${a}] y [row:${b}].`, new Set([a]))).toBe(`x [row:${a}] y.`);
    expect(groundedTags(`[row:${b}][row:${a}] [row:] [row:${a} ]`, new Set([a]))).toBe(`[row:${a}] [row:${a} ]`);
    expect(groundedTags('no tags [doc:system]', new Set())).toBe('no tags [doc:system]');
  });

  it('reads a tag naming several rows, or written with spaces, as citations too: one naming no retrieved row never stays', () => {
    const retrieved = new Set([a]);
    // Models often group their citations in one bracket: an invented hash there stayed, pointing at a row never retrieved.
    expect(groundedTags(`x [row:${a}, row:${b}].`, retrieved)).toBe(`x [row:${a}].`);
    expect(groundedTags(`x [row:${b}; ${a}].`, retrieved)).toBe(`x [row:${a}].`);
    expect(groundedTags(`x [row: ${b}].`, retrieved)).toBe('x.');
    expect(groundedTags(`x [ROW:${b}] y [Row: ${b} , row:${b}].`, retrieved)).toBe('x y.');
    // A bracket whose every hash was retrieved stays as written.
    expect(groundedTags(`x [row:${a}, row:${a}].`, retrieved)).toBe(`x [row:${a}, row:${a}].`);
    expect(groundedTags(`x [row: ${a}].`, retrieved)).toBe(`x [row: ${a}].`);
  });

  it('reads a 16 MiB answer of unclosed tags at once (an unbounded hash would rescan to the end at each one)', () => {
    const answer = '[row:'.repeat(16 * 1024 * 1024 / 5);
    const started = performance.now();
    expect(groundedTags(answer, new Set())).toBe(answer);
    const long = `[row:${'x'.repeat(199)}`.repeat(16 * 1024 * 1024 / 204);
    expect(groundedTags(long, new Set())).toBe(long);
    const longer = `[row:${'x, '.repeat(333)}`.repeat(16 * 1024 * 1024 / 1004);
    expect(groundedTags(longer, new Set())).toBe(longer);
    expect(performance.now() - started).toBeLessThan(2000);
  });
});

import { describe, expect, it } from '@jest/globals';
import { columnsOf, field, printable, table } from './output.js';

/** svc's plain tables: cells are measured, cut and padded in terminal columns (CJK and emoji take two). */

describe('table', () => {
  it('aligns columns holding CJK and emoji, and cuts long cells without halving a wide character', () => {
    const rows = [
      { name: '顧客', scope: 'crm', note: 'ok' },
      { name: 'partner', scope: 'sales', note: '接続がタイムアウトしました' },
      { name: '🚀 launch', scope: '営業', note: '👍👍👍👍👍👍' },
    ];
    const out = table(rows, [field('NAME', 'name'), field('SCOPE', 'scope'), field('NOTE', 'note', 6)]).trimEnd().split('\n');
    expect(out).toEqual([
      'NAME       SCOPE  NOTE',
      '顧客       crm    ok',
      'partner    sales  接続…',
      '🚀 launch  営業   👍👍…',
    ]);
    // SCOPE and NOTE begin at the same terminal column on every line
    for (const [line, scope, note] of [[out[1]!, 'crm', 'ok'], [out[2]!, 'sales', '接続'], [out[3]!, '営業', '👍']] as const) {
      expect(columnsOf(line.slice(0, line.indexOf(scope)))).toBe(11);
      expect(columnsOf(line.slice(0, line.indexOf(note)))).toBe(18);
    }
    expect(columnsOf('顧客')).toBe(4);
    expect(columnsOf('👍')).toBe(2);
  });

  it('shows control characters as \\x1b, \\x07, … (a terminal would obey them, and columns would not line up)', () => {
    const rows = [
      { name: 'plain', note: 'ok', at: 'x' },
      // an escape sequence that colours and clears the screen, a bell, an OSC title, C1's CSI
      { name: 'red \x1b[31mRED\x1b[0m\x1b[2J \x07 \x1b]0;title\x07 \x9b1m \x7f', note: 'ok', at: 'y' },
    ];
    const out = table(rows, [field('NAME', 'name'), field('NOTE', 'note'), field('AT', 'at')]);
    expect(printable(out)).toBe(out); // nothing left to show otherwise
    const lines = out.trimEnd().split('\n');
    expect(lines[2]).toBe('red \\x1b[31mRED\\x1b[0m\\x1b[2J \\x07 \\x1b]0;title\\x07 \\x9b1m \\x7f  ok    y');
    expect(lines.map((l) => columnsOf(l.slice(0, l.search(/ok|NOTE/))))).toEqual([lines[2]!.indexOf('ok'), lines[2]!.indexOf('ok'), lines[2]!.indexOf('ok')]);
    // tabs and newlines are whitespace in a cell, kept in other text
    expect(printable('a\tb\nc\rd\x00')).toBe('a\tb\nc\\x0dd\\x00');
  });
});


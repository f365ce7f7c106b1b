import { describe, expect, it } from '@jest/globals';
import { clipTo, columnsOf, elideMiddle, field, json, printable, table } from './output.js';

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

  it('shows invisible format characters as \\u202e, \\u200b, … (a bidi override would make one name read as another)', () => {
    // "invoice\u202Efdp.exe" reads as invoiceexe.pdf; an isolate, a zero-width space, marks, joiners, a tag
    const rows = [
      { name: 'invoice\u202Efdp.exe', note: 'ok' },
      { name: 'ad\u200Bmin \u2066x\u2069 \u200E\u200F\u061C\u2060\u200C \u202A\u202B\u202D\u202C \u{E0041}', note: 'ok' },
      { name: 'plain', note: 'ok' },
    ];
    const out = table(rows, [field('NAME', 'name'), field('NOTE', 'note')]);
    expect(printable(out)).toBe(out);
    const lines = out.trimEnd().split('\n');
    expect(lines[1]).toBe(`invoice\\u202efdp.exe${' '.repeat(lines[2]!.indexOf('ok') - 'invoice\\u202efdp.exe'.length)}ok`);
    expect(lines[2]).toBe('ad\\u200bmin \\u2066x\\u2069 \\u200e\\u200f\\u061c\\u2060\\u200c \\u202a\\u202b\\u202d\\u202c \\u{e0041}  ok');
    // NOTE starts at the same column on every line: what is shown is what is counted
    expect(new Set(lines.map((l) => columnsOf(l.slice(0, l.search(/ok$|NOTE/)))))).toEqual(new Set([lines[2]!.indexOf('ok')]));
    // an emoji's own joiners stay: a ZWJ sequence and a subdivision flag; a joiner elsewhere is shown
    const family = '\u{1F468}\u200D\u{1F469}\u200D\u{1F467}';
    const england = '\u{1F3F4}\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F}';
    expect(printable(`${family} ${england} a\u200Db \u{1F600}\u200D`)).toBe(`${family} ${england} a\\u200db \u{1F600}\\u200d`);
    expect(printable('\u{1F600}\u200D\u202Ex')).toBe('\u{1F600}\\u200d\\u202ex');
    // a BOM (whitespace to JavaScript, so a space in a cell) is shown in other text
    expect(printable('\uFEFFname: x')).toBe('\\ufeffname: x');
    // printable letters of any script are left alone
    expect(printable('顧客 Ünïcödé עברית العربية')).toBe('顧客 Ünïcödé עברית العربية');
  });

  it('cuts a cell before an escape it shows (\\u202e, \\x1b, \\u{e0041}) or after it, never inside it', () => {
    const rows = [{ note: 'ab\u202Ecd' }, { note: 'a\x1b[2J' }, { note: 'abcd\u{E0041}' }];
    const cut = (max: number) => table(rows, [field('NOTE', 'note', max)]).trimEnd().split('\n').slice(1);
    // Was: 'ab\\…', 'a\\x…'; 'ab\\u20…', 'abcd\\u…'; 'abcd\\u{e…': half an escape reads as other text.
    expect(cut(4)).toEqual(['ab…', 'a…', 'abc…']);
    expect(cut(7)).toEqual(['ab…', 'a\\x1b[…', 'abcd…']);
    expect(cut(9)).toEqual(['ab\\u202e…', 'a\\x1b[2J', 'abcd…']);
    expect(cut(13)).toEqual(['ab\\u202ecd', 'a\\x1b[2J', 'abcd\\u{e0041}']);
    // The TUI's header elides a URL in its middle the same way (was: 'ab\\u…ghij', 'http…eh/x').
    expect(elideMiddle(printable('ab\u202Ecdefghij'), 9)).toBe('ab…efghij');
    expect(elideMiddle(printable('http://\u202Eh/x'), 9)).toBe('http…h/x');
    // A backslash the text holds is cut as any character when no escape follows it.
    expect(clipTo('a\\x1zz', 4)).toBe('a\\x…');
  });
});


describe('json', () => {
  it('escapes DEL, the C1 controls and format characters as \\u escapes: the same value, nothing a terminal obeys or reorders', () => {
    const value = { name: 'a\u009b2Jb\u007fc\u202eevil\u2066d\u200be', tag: 'x\u{e0041}y', plain: 'héllo 👩‍💻 名前', n: 3 };
    const text = json(value);
    expect(text).not.toMatch(/[\u007f-\u009f]|\p{Cf}/u);
    expect(text).toContain('a\\u009b2Jb\\u007fc\\u202eevil\\u2066d\\u200be');
    expect(text).toContain('x\\udb40\\udc41y');
    // Still JSON, read back as the same value, keys in order.
    expect(JSON.parse(text)).toEqual(value);
    expect(Object.keys(JSON.parse(text))).toEqual(['name', 'tag', 'plain', 'n']);
    expect(text.endsWith('}\n')).toBe(true);
  });
});

import { describe, expect, it } from '@jest/globals';
import { columnsOf, field, table } from './output.js';

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
});

import { describe, expect, it } from '@jest/globals';
import { snapshotSettingsSql, snapshotSql } from './query.js';

describe('snapshotSql', () => {
  it('selects the columns by position and sorts by the order columns, then the others in declared order, byte-wise with NULLs last', () => {
    expect(snapshotSql('select * from t', ['a', 'b', 'c'], ['c'])).toBe(
      'select e."a" as c1, e."b" as c2, e."c" as c3 from (select * from t) as e order by e."c" collate "C" nulls last, e."a" collate "C" nulls last, e."b" collate "C" nulls last',
    );
  });

  it('quotes identifiers', () => {
    expect(snapshotSql('select 1', ['we"ird', 'Mixed Case'], ['Mixed Case'])).toBe(
      'select e."we""ird" as c1, e."Mixed Case" as c2 from (select 1) as e order by e."Mixed Case" collate "C" nulls last, e."we""ird" collate "C" nulls last',
    );
  });

  it('refuses no columns, duplicates and order columns that are not columns', () => {
    expect(() => snapshotSql('select 1', [], [])).toThrow('at least one column');
    expect(() => snapshotSql('select 1', ['a', 'a'], [])).toThrow('unique');
    expect(() => snapshotSql('select 1', ['a'], ['a', 'a'])).toThrow('unique');
    expect(() => snapshotSql('select 1', ['a'], ['b'])).toThrow('order column "b"');
  });
});

describe('snapshotSettingsSql', () => {
  it('sets the text formats locally and answers the server encoding', () => {
    expect(snapshotSettingsSql()).toBe(
      "select set_config('client_encoding', 'UTF8', true), set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO, YMD', true), set_config('IntervalStyle', 'postgres', true), set_config('extra_float_digits', '1', true), set_config('bytea_output', 'hex', true), set_config('lc_monetary', 'C', true), current_setting('server_encoding') as server_encoding",
    );
  });
});

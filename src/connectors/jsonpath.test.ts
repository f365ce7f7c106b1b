import { describe, expect, it } from '@jest/globals';
import { queryCount, queryFirst, queryFlag, queryItems } from './jsonpath.js';

describe('jsonpath wrapper', () => {
  const body = { data: [{ id: 1 }, { id: 2 }, { id: 3 }], has_more: false, total: '3', edges: [{ node: { id: 'a' } }] };

  it('reads records at response_path', () => {
    expect(queryItems(body, '$.data')).toEqual(body.data);
    expect(queryItems(body, '$.edges[*].node')).toEqual([{ id: 'a' }]);
    expect(queryItems([1, 2], '$')).toEqual([1, 2]);
    expect(queryItems({ one: { id: 9 } }, '$.one')).toEqual([{ id: 9 }]);
    expect(queryItems(body, '$.nothing')).toEqual([]);
    expect(queryItems({ data: null }, '$.data')).toEqual([]);
    expect(queryItems(null, '$.data')).toEqual([]);
  });

  it('a path ending in a selector of members ([*], .*, a filter, a slice, a union) gives the values it selects as records, also when it selects one array', () => {
    // Rows sent as arrays (a spreadsheet's `values`), the last page holding one: one record, as on the pages before it.
    expect(queryItems({ rows: [['a', 1]] }, '$.rows[*]')).toEqual([['a', 1]]);
    expect(queryItems({ rows: [['a', 1], ['b', 2]] }, '$.rows[*]')).toEqual([['a', 1], ['b', 2]]);
    expect(queryItems({ rows: [['a', 1]] }, '$.rows.*')).toEqual([['a', 1]]);
    expect(queryItems({ rows: [['a', 1], ['b']] }, '$.rows[?(@.length > 1)]')).toEqual([['a', 1]]);
    expect(queryItems({ rows: [['a', 1], ['b', 2]] }, '$.rows[-1:]')).toEqual([['b', 2]]);
    expect(queryItems({ rows: [['a', 1], ['b', 2]] }, '$.rows[0,5]')).toEqual([['a', 1]]);
    // An array of one object: that object.
    expect(queryItems({ rows: [{ id: 1 }] }, '$.rows[*]')).toEqual([{ id: 1 }]);
    // One object where an array was expected: a wildcard selects its member values (JSONPath); `$.rows` takes it whole.
    expect(queryItems({ rows: { id: 1, name: 'a' } }, '$.rows[*]')).toEqual([1, 'a']);
    expect(queryItems({ rows: { id: 1, name: 'a' } }, '$.rows')).toEqual([{ id: 1, name: 'a' }]);
    // A path ending in a name still gives the elements of the one array it finds (`$..results` wherever it is).
    expect(queryItems({ page: { results: [{ id: 1 }, { id: 2 }] } }, '$..results')).toEqual([{ id: 1 }, { id: 2 }]);
    expect(queryItems({ rows: [[{ id: 1 }, { id: 2 }]] }, '$.rows[0]')).toEqual([{ id: 1 }, { id: 2 }]);
    // A name in quotes is text: `['a:b']` is no slice.
    expect(queryItems({ 'a:b': [{ id: 1 }, { id: 2 }] }, "$['a:b']")).toEqual([{ id: 1 }, { id: 2 }]);
  });

  it('reads cursors, counts and flags', () => {
    expect(queryFirst(body, '$.data[-1:].id')).toBe(3);
    expect(queryCount(body, '$.total')).toBe(3);
    expect(queryCount(body, '$.has_more')).toBeUndefined();
    expect(queryFlag(body, '$.has_more')).toBe(false);
    expect(queryFlag({ more: 'true' }, '$.more')).toBe(true);
    expect(queryFlag({ more: null }, '$.more')).toBe(false);
    expect(queryFlag({}, '$.more')).toBeUndefined();
  });
});

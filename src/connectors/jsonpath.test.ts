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

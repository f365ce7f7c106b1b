import { describe, expect, it } from '@jest/globals';
import { closest } from './closest.js';

describe('closest', () => {
  it.each([
    ['partner_id', ['partner_idd', 'name', 'city'], 'partner_idd'],
    ['partner_id', ['partnre_id', 'name'], 'partnre_id'],
    ['city', ['cty', 'name'], 'cty'],
    ['nmae', ['name', 'city'], 'name'],
    ['gte', ['get', 'ls'], 'get'],
    ['limt', ['limit', 'json'], 'limit'],
  ])('%s among %j is %s', (word, candidates, expected) => {
    expect(closest(word, candidates)).toBe(expected);
  });

  it.each([
    ['partner_id', ['name', 'city']],
    ['abc', ['xyz']],
    ['cat', ['bat', 'hat']],
    ['name', ['name']],
    // Two letters are not a word to guess from: `rm` is not a misspelt `ls`.
    ['rm', ['ls', 'get']],
    ['abcd', ['abxy']],
  ])('%s among %j has none', (word, candidates) => {
    expect(closest(word, candidates)).toBeUndefined();
  });
});

import { describe, expect, it } from '@jest/globals';
import { statementName } from './database.js';
import { textOfShape } from './keyset.js';

describe('textOfShape', () => {
  it('builds a text once per shape and answers that same string afterwards', () => {
    const texts = new Map<string, string>();
    let built = 0;
    const build = (where: string) => () => {
      built += 1;
      return `select * from t where ${where} ${'and true '.repeat(200)}`;
    };
    const first = textOfShape(texts, 'a = $1', build('a = $1'));
    const again = textOfShape(texts, 'a = $1', build('a = $1'));
    const other = textOfShape(texts, 'b = $1', build('b = $1'));
    expect(again).toBe(first);
    expect(other).not.toBe(first);
    expect(built).toBe(2);
    // The name of the statement follows the text, whichever call made it.
    expect(statementName(again)).toBe(statementName(build('a = $1')()));
  });
});

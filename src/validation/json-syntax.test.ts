import { describe, expect, it } from '@jest/globals';
import { jsonSyntaxErrorAt, jsonSyntaxMessage } from './json-syntax.js';

function parseError(text: string): Error {
  try {
    JSON.parse(text);
  } catch (err) {
    return err as Error;
  }
  throw new Error(`parsed: ${text}`);
}

describe('jsonSyntaxMessage', () => {
  it.each([
    ['{"name":"k","value":hunter2-secret-value}', 20],
    ['{"value": sk_live_abcdef}', 10],
    ['["ok", ghp_0123456789abcdef]', 7],
    [`{"description":"${'x'.repeat(200)}","value":topsecret-value-here}`, 226],
    ['{"value": "fine"} sk_live_trailing', 18],
    ['{"value":tru}', 9],
    ['{"value":"a",}', 13],
    ['{"value":"a" "b"}', 13],
    ['{"a":1,"value":[1,]}', 18],
    ['{"tokens":["a",,"sk_live_x"]}', 15],
  ])('quotes nothing of %s and names position %d', (text, position) => {
    const message = jsonSyntaxMessage(text, parseError(text));
    for (const word of ['hunter2', 'sk_live', 'ghp_', 'topsecret', 'tru']) expect(message).not.toContain(word);
    expect(message).toMatch(new RegExp(`at position ${position}$`));
  });

  it("keeps V8's own message when it names a position only", () => {
    for (const text of ['{"a":1,}', '{"a" 1}', '[1 2]', '"abc', '{"a":"\u0001"}', '{"a":"\\x"}', '', '{"a":']) {
      expect(jsonSyntaxMessage(text, parseError(text))).toBe(parseError(text).message);
    }
  });

  it('finds the first fault where V8 names a position, and nothing in JSON', () => {
    const faulty = ['{"a":1,}', '{"a" 1}', '[1 2]', '{"a":1 "b":2}', '"abc', '{"a":"\u0001"}', '{"a":"\\x"}', '{"a":"\\u12g4"}', '[1] 2', '{,}', '[01]', '{"a":1}}', '[[[]]'];
    for (const text of faulty) {
      const v8 = /at position (\d+)/.exec(parseError(text).message);
      const at = jsonSyntaxErrorAt(text);
      expect({ text, at: at === undefined ? undefined : Math.min(at, text.length) }).toEqual({ text, at: v8 ? Number(v8[1]) : text.length });
    }
    for (const text of ['{}', '[]', ' {"a":[1,-2.5e+3,true,false,null,"x\\u00e9\\n"]} ', '"s"', '0', `${'['.repeat(5000)}${']'.repeat(5000)}`]) {
      expect(jsonSyntaxErrorAt(text)).toBeUndefined();
    }
  });
});

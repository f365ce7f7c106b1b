import { describe, expect, it } from '@jest/globals';
import { unstorableText } from '../validation/input-limits.js';
import { RENDERED_MESSAGE_MAX, renderMessage } from './template.js';

describe('message templates', () => {
  const event = { id: 42, type: 'connector.run.completed', tenantId: 1, payload: { run_id: 'r1', records_out: 1500, tables: { 'ext.a': 3 }, ok: true, none: null, nested: { deep: 'x' } } };

  it('renders strings as is, other values as JSON, unknown paths as the empty string', () => {
    expect(renderMessage('Run {{payload.run_id}} wrote {{ payload.records_out }} rows', event)).toBe('Run r1 wrote 1500 rows');
    expect(renderMessage('{{payload.tables}} {{payload.ok}} {{payload.none}} {{payload.nested.deep}}', event)).toBe('{"ext.a":3} true null x');
    expect(renderMessage('[{{payload.missing}}][{{payload.run_id.length}}][{{nope}}]', event)).toBe('[][][]');
    expect(renderMessage('{{type}} #{{id}} of tenant {{tenantId}}', event)).toBe('connector.run.completed #42 of tenant 1');
    expect(renderMessage('no placeholders, {{ not a path }}', event)).toBe('no placeholders, {{ not a path }}');
  });

  it(`keeps at most ${RENDERED_MESSAGE_MAX} characters, saying where it cut: a template naming a large payload many times`, () => {
    const large = { ...event, payload: { text: 'x'.repeat(5000) } };
    const rendered = renderMessage('{{payload}} '.repeat(180), large);
    expect(rendered).toBe(`${`${JSON.stringify(large.payload)} `.repeat(180).slice(0, RENDERED_MESSAGE_MAX)}… (cut at 16,384 characters)`);
    // Under the limit, as rendered before.
    expect(renderMessage('{{payload.text}}|{{payload.text}}', large)).toBe(`${'x'.repeat(5000)}|${'x'.repeat(5000)}`);
  });

  it('never cuts between the two halves of a surrogate pair: the message is stored as JSON, which refuses a lone half', () => {
    // 'a' and 99 emoji (199 UTF-16 units): the 16,384th unit of 125 copies is the first half of an emoji.
    const name = `a${'\u{1F600}'.repeat(99)}`;
    const rendered = renderMessage('{{payload.name}}'.repeat(125), { ...event, payload: { name } });
    expect(unstorableText(rendered)).toBeUndefined();
    expect(rendered).toBe(`${name.repeat(125).slice(0, RENDERED_MESSAGE_MAX - 1)}… (cut at 16,384 characters)`);
    // A cut that falls between two characters keeps all 16,384.
    const even = renderMessage('{{payload.name}}'.repeat(125), { ...event, payload: { name: '\u{1F600}'.repeat(100) } });
    expect(even).toBe(`${'\u{1F600}'.repeat(100 * 125).slice(0, RENDERED_MESSAGE_MAX)}… (cut at 16,384 characters)`);
  });
});

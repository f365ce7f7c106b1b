import { describe, expect, it } from '@jest/globals';
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
});

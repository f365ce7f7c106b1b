import { describe, expect, it } from '@jest/globals';
import { ValidationError } from '../errors.js';
import { checkTemplate, RENDERED_MAX, renderTemplate, subjectLine, type TemplateContext } from './templates.js';

const ctx: TemplateContext = {
  type: 'org.created',
  id: 42,
  tenantId: 7,
  createdAt: new Date('2025-03-04T05:06:07.089Z'),
  rule: 'ops',
  payload: { orgId: 9, name: 'Acme <b>', tables: { a: 1 }, list: [1, 2], none: null, flag: false },
};

describe('e-mail templates', () => {
  it('render every placeholder, with spaces inside the braces allowed', () => {
    expect(renderTemplate('{{type}} #{{ id }} t{{tenantId}} at {{createdAt}} by {{rule}}', ctx)).toBe('org.created #42 t7 at 2025-03-04T05:06:07.089Z by ops');
    expect(renderTemplate('{{payload.orgId}} {{payload.name}} {{payload.flag}}', ctx)).toBe('9 Acme <b> false');
  });

  it('render objects and lists as JSON, missing and null fields as nothing', () => {
    expect(renderTemplate('{{payload.tables}}|{{payload.list}}|{{payload.list.1}}|{{payload.tables.a}}', ctx)).toBe('{"a":1}|[1,2]|2|1');
    expect(renderTemplate('[{{payload.missing}}][{{payload.none}}][{{payload.orgId.deeper}}]', ctx)).toBe('[][][]');
    expect(renderTemplate('{{payload}}', ctx)).toBe(JSON.stringify(ctx.payload));
  });

  it('never reach inherited properties', () => {
    expect(renderTemplate('[{{payload.constructor}}][{{payload.__proto__}}][{{payload.toString}}]', ctx)).toBe('[][][]');
  });

  it('leave text without placeholders, and single braces, alone', () => {
    expect(renderTemplate('plain {text} }} here', ctx)).toBe('plain {text} }} here');
  });

  it('refuse unknown placeholders and unclosed braces, naming the field', () => {
    for (const bad of ['{{payloads.x}}', '{{ event }}', '{{type | upper}}', '{{}}', '{{payload.}}', '{{payload..a}}', 'Hello {{type', 'a {{ {{type}}']) {
      let error: unknown;
      try {
        checkTemplate(bad, 'subject');
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe('subject');
    }
    expect(() => checkTemplate('{{type}}: {{ payload.org_id }} {{payload.a-b.c}} {}', 'body')).not.toThrow();
  });

  it('make a subject one header line', () => {
    expect(subjectLine(' a\r\nBcc: x@y.z\tb ')).toBe('a Bcc: x@y.z b');
    // Every line break Unicode has: a bare CR or LF, VT, FF, NEL and the line and paragraph separators.
    expect(subjectLine('a\rb\nc\vd\fe\u0085f\u2028g\u2029h')).toBe('a b c d e f g h');
    expect(subjectLine('x'.repeat(2000))).toHaveLength(998);
    // Never half of an emoji at the cut (it would be sent as U+FFFD): one character fewer.
    expect(subjectLine(`${'x'.repeat(997)}😀😀`)).toBe('x'.repeat(997));
    expect(subjectLine(`${'x'.repeat(996)}😀😀`)).toBe(`${'x'.repeat(996)}😀`);
  });

  it('cut what a template renders at RENDERED_MAX characters, the cut said: a body naming a large payload 1,800 times does not carry 1,800 copies', () => {
    const large: TemplateContext = { ...ctx, payload: { message: 'm'.repeat(16 * 1024) } };
    const body = '{{payload}}'.repeat(1800);
    expect(() => checkTemplate(body, 'body')).not.toThrow();
    const rendered = renderTemplate(body, large);
    expect(rendered).toHaveLength(RENDERED_MAX + ` (cut at ${RENDERED_MAX.toLocaleString('en-US')} characters)`.length + 1);
    expect(rendered.endsWith(`… (cut at ${RENDERED_MAX.toLocaleString('en-US')} characters)`)).toBe(true);
    expect(rendered.startsWith(JSON.stringify(large.payload).repeat(3))).toBe(true);
    // Under the limit nothing changes.
    expect(renderTemplate('{{payload.message}}|{{payload.message}}', large)).toBe(`${'m'.repeat(16 * 1024)}|${'m'.repeat(16 * 1024)}`);
  });
});

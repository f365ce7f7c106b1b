import { describe, expect, it } from '@jest/globals';
import { captureLogs } from '../../test/harness/log-capture.js';
import { runWithContext } from './context.js';
import { logger, registerOperationSecret } from './logger.js';
import { redactSecrets, secretForms } from './secret-forms.js';

/** A value with every character class the encodings treat differently. */
const SECRET = `Sk9!'(x)*~ "q\\/é+&=Zz`;

describe('secret forms', () => {
  it('masks the value as it comes back URL encoded, in a form body, in a parsed next link, JSON or HTML escaped, or in base64', () => {
    const echoes = [
      SECRET,
      encodeURIComponent(SECRET),
      new URLSearchParams({ t: SECRET }).toString(),
      new URL(`https://source.example/page?p=2&t=${encodeURIComponent(SECRET)}`).href,
      JSON.stringify({ token: SECRET }),
      JSON.stringify({ token: SECRET }).replaceAll('/', '\\/').replace('é', '\\u00e9'), // PHP's json_encode
      `<p title="${SECRET.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/'/g, '&#39;').replace(/</g, '&lt;')}">`,
      `<t>${SECRET.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/'/g, '&apos;').replace(/</g, '&lt;').replace(/>/g, '&gt;')}</t>`, // XML, as a SOAP envelope writes it
      SECRET.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`),
      SECRET.replace(/[&<>"']/g, (c) => `&#x${c.charCodeAt(0).toString(16)};`),
      Buffer.from(SECRET).toString('base64'),
      Buffer.from(SECRET).toString('base64url'),
    ];
    for (const echo of echoes) {
      const masked = redactSecrets(`upstream said: ${echo}`, [SECRET]);
      expect(masked).toContain('[REDACTED]');
      for (const form of secretForms(SECRET)) expect(masked).not.toContain(form);
    }
  });

  it('leaves text alone that holds no form of it, and skips values shorter than the bound', () => {
    expect(redactSecrets('nothing to see: Sk9 q Zz', [SECRET])).toBe('nothing to see: Sk9 q Zz');
    expect(redactSecrets('the plan is basic', ['basic'], 6)).toBe('the plan is basic');
    expect(redactSecrets('abc, base64 YWJj', ['abc'])).toBe('abc, base64 YWJj');
    expect(secretForms('abcd').every((form) => form.length >= 4)).toBe(true);
  });
});

describe('the log scrubber', () => {
  it('scrubs every form of a secret of the unit of work from its lines', () => {
    const logs = captureLogs('info');
    try {
      runWithContext({ job: 'forms' }, () => {
        registerOperationSecret(SECRET);
        logger().warn({ position: `page 2 ${new URL(`https://s.example/?t=${encodeURIComponent(SECRET)}`).href}` }, `form ${new URLSearchParams({ t: SECRET })} base64 ${Buffer.from(SECRET).toString('base64')}`);
      });
      const written = logs.raw();
      expect(written).toContain('[REDACTED]');
      for (const form of secretForms(SECRET)) expect(written).not.toContain(form);
      expect(written).not.toContain('Sk9');
    } finally {
      logs.restore();
    }
  });
});

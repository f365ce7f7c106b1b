import { describe, expect, it } from '@jest/globals';
import { captureLogs } from '../../test/harness/log-capture.js';
import { runWithContext } from './context.js';
import { logger, registerOperationSecret } from './logger.js';
import { redactSecrets } from './secret-forms.js';

/** A value with every character class the encodings treat differently. */
const SECRET = `Sk9!'(x)*~ "q\\/é+&=Zz`;

/**
 * How common libraries write `secret` back (what the masking must leave none of): as it is, as
 * `encodeURIComponent`, a form body and a parsed URL's query write it, JSON-escaped as
 * JSON.stringify, PHP (`\/`) and Python's ASCII mode (`\u00e9`) write it, HTML/XML-escaped in five
 * spellings, and base64 (standard and URL-safe, without padding). Those of 4 characters or more.
 */
function secretForms(secret: string): string[] {
  const json = JSON.stringify(secret).slice(1, -1);
  const asciiJson = json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  const base64 = Buffer.from(secret, 'utf8').toString('base64').replace(/=+$/, '');
  const query = (text: string) => new URL(`http://x/?${text}`).search.slice(1);
  const markup = [
    { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' },
    { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' },
    { '&': '&#38;', '<': '&#60;', '>': '&#62;', '"': '&#34;', "'": '&#39;' },
    { '&': '&#x26;', '<': '&#x3c;', '>': '&#x3e;', '"': '&#x22;', "'": '&#x27;' },
    { '&': '&#38;', '<': '&#60;', '>': '&#62;', '"': '&#34;', "'": '&#x27;' },
  ] as Array<Record<string, string>>;
  const forms = new Set([
    secret,
    encodeURIComponent(secret),
    new URLSearchParams({ v: secret }).toString().slice(2),
    query(secret.replaceAll('%', '%25').replaceAll('#', '%23').replaceAll('&', '%26')),
    query(encodeURIComponent(secret)),
    json,
    json.replaceAll('/', '\\/'),
    asciiJson,
    asciiJson.replaceAll('/', '\\/'),
    ...markup.map((entities) => secret.replace(/[&<>"']/g, (c) => entities[c]!)),
    base64,
    base64.replaceAll('+', '-').replaceAll('/', '_'),
  ]);
  return [...forms].filter((form) => form.length >= 4);
}

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

  it('masks the value however an escaper spells its characters, and spelled half one way, half another', () => {
    const markup = `p'ss"<w>&rd-TOKEN-1234`;
    const url = 'a~b!c/d(x)*é ü';
    const echoes: Array<[string, string]> = [
      [markup, `p'ss"&lt;w&gt;&amp;rd-TOKEN-1234`], // XML text, minimal escaping (.NET XmlWriter, Java, lxml)
      [markup, `p'ss&quot;&lt;w&gt;&amp;rd-TOKEN-1234`], // an XML attribute
      [markup, `p&#x27;ss&quot;&lt;w&gt;&amp;rd-TOKEN-1234`], // Python's html.escape
      [markup, `p&#39;ss&#34;&lt;w&gt;&amp;rd-TOKEN-1234`], // Go's html.EscapeString, Jinja2
      [markup, `p&#X0027;ss&#0034;&lt;w&gt;&amp;rd-TOKEN-1234`], // leading zeros, a capital X
      [markup, `p'ss"\\u003cw\\u003e\\u0026rd-TOKEN-1234`], // Go's encoding/json
      [markup, `p\\u0027ss\\u0022\\u003Cw\\u003E\\u0026rd-TOKEN-1234`], // .NET System.Text.Json
      [markup, `p%27ss%22%3cw%3e%26rd-TOKEN-1234`], // lower-case percent escapes
      [url, 'a~b%21c%2Fd%28x%29%2A%C3%A9%20%C3%BC'], // Python's quote(safe=''), PHP's rawurlencode
      [url, 'a%7Eb%21c%2fd%28x%29%2a%c3%a9+%c3%bc'], // a form body, lower case
      [url, 'a~b!c\\/d(x)*\\u00E9 \\u00fc'], // JSON with escaped slash and upper- and lower-case \u
    ];
    for (const [secret, echo] of echoes) expect({ echo, masked: redactSecrets(`upstream said: ${echo} (end)`, [secret]) }).toEqual({ echo, masked: 'upstream said: [REDACTED] (end)' });
    // Ordinary text that shares the value's letters is left alone.
    expect(redactSecrets('rd-TOKEN and p ss w', [markup])).toBe('rd-TOKEN and p ss w');
  });

  it('masks the value run into other text, and in the base64 of a longer text wherever it starts in it', () => {
    expect(redactSecrets(`xyz${SECRET}abc`, [SECRET])).toBe('xyz[REDACTED]abc');
    for (const before of ['', 'x', 'xy', 'xyz', '{"token":"']) {
      for (const after of ['', 'a', 'ab', 'abc"}']) {
        const text = Buffer.from(`${before}${SECRET}${after}`);
        for (const encoded of [text.toString('base64'), text.toString('base64url')]) {
          const masked = redactSecrets(`upstream said: ${encoded}`, [SECRET]);
          expect(masked).toContain('[REDACTED]');
          // What is left around it decodes to none of the value's middle (a byte or two of its ends may stay readable).
          for (const part of masked.slice('upstream said: '.length).split('[REDACTED]')) expect(Buffer.from(part, 'base64').toString('latin1')).not.toContain('x)*~');
        }
      }
    }
  });

  it('a secret inside another does not cut the longer one apart, whatever their order', () => {
    for (const secrets of [['1234', 'tok_1234_ABCDEFGHSECRETVALUE'], ['tok_1234_ABCDEFGHSECRETVALUE', '1234']]) {
      expect(redactSecrets('Authorization: Bearer tok_1234_ABCDEFGHSECRETVALUE', secrets)).toBe('Authorization: Bearer [REDACTED]');
      expect(redactSecrets(`x=${encodeURIComponent('pa ss/word&more')}`, secrets.map((s) => (s === '1234' ? 'pa ss' : 'pa ss/word&more')))).toBe('x=[REDACTED]');
    }
  });

  it('leaves text alone that holds no form of it, and skips values shorter than the bound', () => {
    expect(redactSecrets('nothing to see: Sk9 q Zz', [SECRET])).toBe('nothing to see: Sk9 q Zz');
    expect(redactSecrets('the plan is basic', ['basic'], 6)).toBe('the plan is basic');
    expect(redactSecrets('abc, base64 YWJj', ['abc'])).toBe('abc, base64 YWJj');
  });
});

describe('a long value', () => {
  // One group of alternatives per escapable character made V8 give up past about 8,000 of them
  // ("Invalid regular expression: … Stack overflow", a message spelling the value): every log line
  // of a request storing such a secret threw, and the request answered a bare 500.
  const LONG = `${SECRET}${'&'.repeat(10_000)}${SECRET.repeat(100)}`;

  it('is masked in the forms common escapers write, in time linear in its length, without throwing', () => {
    const text = `before ${secretForms(LONG).join(' | ')} after`;
    const masked = redactSecrets(text, [LONG], 6);
    for (const form of secretForms(LONG)) expect(masked).not.toContain(form);
    expect(masked).toMatch(/^before \[REDACTED\]( \| \[REDACTED\])+ after$/);
    // Measured against itself, not the wall clock: a value `times` as long (its matcher built anew,
    // as for a secret seen for the first time) in all its forms, masked, the fastest of three.
    let fresh = 0;
    const firstMask = (times: number) => {
      let best = Number.POSITIVE_INFINITY;
      for (let round = 0; round < 3; round++) {
        const value = `${fresh++}${SECRET}${'&'.repeat(10_000 * times)}${SECRET.repeat(100 * times)}`;
        const forms = `before ${secretForms(value).join(' | ')} after`;
        const started = performance.now();
        expect(redactSecrets(forms, [value], 6)).not.toContain(value);
        best = Math.min(best, performance.now() - started);
      }
      return best;
    };
    // Eight times as long: linear work takes about eight times as long, quadratic sixty-four.
    const once = firstMask(1);
    expect(firstMask(8)).toBeLessThan(24 * once);
  });

  it('leaves the log line of its unit of work written and masked', () => {
    const logs = captureLogs('info');
    try {
      runWithContext({ job: 'long' }, () => {
        registerOperationSecret(LONG);
        logger().warn(`value ${LONG} and ${encodeURIComponent(LONG)}`);
      });
      expect(logs.lines()).toEqual([expect.objectContaining({ msg: 'value [REDACTED] and [REDACTED]' })]);
    } finally {
      logs.restore();
    }
  });
});

describe('short texts and many secrets', () => {
  it('a text shorter than the shortest secret form is left as it is; one as long is masked', () => {
    expect(redactSecrets('ok', ['okay-a-long-secret'])).toBe('ok');
    expect(redactSecrets('abc', ['abcd'])).toBe('abc');
    expect(redactSecrets('abcd', ['abcd'])).toBe('[REDACTED]');
    expect(redactSecrets('a b', ['a b'], 3)).toBe('[REDACTED]');
    expect(redactSecrets('a+b', ['a b'], 3)).toBe('[REDACTED]');
  });

  it('masks after more secrets than the matchers kept (the cache starts again), at each minimum length', () => {
    for (let i = 0; i < 1_100; i++) expect(redactSecrets(`said secret-${i}-value`, [`secret-${i}-value`], i % 2 === 0 ? 4 : 8)).toBe('said [REDACTED]');
    expect(redactSecrets('said secret-0-value', ['secret-0-value'], 4)).toBe('said [REDACTED]');
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

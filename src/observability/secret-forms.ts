/**
 * Masking a secret value in text the hub did not write (an upstream's error body quoting the
 * request, a log line carrying such a body, a next link) in the forms it may come back in: as it
 * is, URL or form encoded, escaped inside a JSON string, escaped as HTML or XML, or in base64
 * (standard and URL-safe, without padding; alone, or at any offset in the base64 of a longer text),
 * each escaped character spelled as any escaper spells it. A value shorter than `minLength` is left alone: it would blank out ordinary words. A value
 * split across lines, cut into pieces, or escaped twice is not recognised.
 */

/**
 * What finds a secret in text: a pattern in which every character that is not an ASCII letter or
 * digit may be spelled as any escaper spells it (so a value escaped by one library's rules, or by
 * another's, or half one way, is found): as it is; percent-encoded, in either case (`%2F`, `%2f`;
 * a space also as `+`); as a JSON escape (`\"`, `\/`, `\u00e9`, `\u003C` in either case); as an HTML or
 * XML character reference (`&amp;`, `&apos;`, `&#39;`, `&#x27;`, `&#X27;`, with leading zeros or
 * not). Letters and digits are never escaped by these, so the longest run of them is looked for
 * first (`anchor`): text without it cannot hold the secret in any of those forms. Base64 forms
 * are looked for as they are (`literals`).
 */
interface Matcher {
  anchor: string | undefined;
  /** Undefined for a value with more than MAX_SPELLED escapable characters: its `literals` say it all. */
  pattern: RegExp | undefined;
  literals: string[];
}

/**
 * The most characters other than ASCII letters and digits a value may have to be looked for in
 * every spelling. The pattern holds one group of alternatives per such character: V8 compiles it
 * in about 0.1 ms per group and gives up ("Invalid regular expression: … Stack overflow", the
 * message spelling the whole value) past about 8,000. A longer value (a stored secret may have
 * 65,536 characters) is looked for in the forms common escapers write whole (`literalForms`).
 */
const MAX_SPELLED = 256;

/** Matchers by minimum length, then secret: no key string to build per call (a delivery's answer is masked per attempt). */
const matchers = new Map<number, Map<string, Matcher>>();
let matcherCount = 0;

function matcherOf(secret: string, minLength: number): Matcher {
  let ofLength = matchers.get(minLength);
  if (!ofLength) {
    ofLength = new Map();
    matchers.set(minLength, ofLength);
  }
  let matcher = ofLength.get(secret);
  if (!matcher) {
    const base64 = Buffer.from(secret, 'utf8').toString('base64').replace(/=+$/, '');
    matcher = {
      anchor: (secret.match(/[A-Za-z0-9]+/g) ?? []).reduce<string | undefined>((longest, run) => (run.length > (longest?.length ?? 0) ? run : longest), undefined),
      pattern: escapable(secret) > MAX_SPELLED ? undefined : new RegExp([...secret].map(spellings).join(''), 'g'),
      literals: [base64, ...base64Cores(secret)].flatMap((form) => [form, form.replaceAll('+', '-').replaceAll('/', '_')]),
    };
    if (!matcher.pattern) matcher.literals.push(...literalForms(secret));
    matcher.literals = [...new Set(matcher.literals)].filter((form) => form.length >= minLength);
    if (matcher.anchor !== undefined && matcher.anchor.length < 3) matcher.anchor = undefined;
    if (matcherCount >= 1_000) {
      for (const other of matchers.values()) other.clear();
      matcherCount = 0;
    }
    ofLength.set(secret, matcher);
    matcherCount++;
  }
  return matcher;
}

/**
 * What the base64 of any text holding `secret` holds of it, wherever the secret starts: base64 writes 3 bytes as 4
 * characters, so the secret's bytes fall on one of 3 alignments, and each gives the characters its bytes alone decide
 * (those of the bytes around it, the first and last character or two, left out). The base64 of the secret alone
 * (`base64`, its last character also read from the zero bits after it) is not found in that of a longer text unless
 * the secret's length is a multiple of 3 and it starts at a multiple of 3.
 */
function base64Cores(secret: string): string[] {
  const bytes = Buffer.from(secret, 'utf8');
  const cores: string[] = [];
  for (let before = 0; before < 3; before++) {
    const text = Buffer.concat([Buffer.alloc(before), bytes]).toString('base64');
    // Character j is bits 6j..6j+5 of the text: wholly the secret's from bit 8·before to 8·(before + length).
    cores.push(text.slice(Math.ceil((8 * before) / 6), Math.floor((8 * (before + bytes.length)) / 6)));
  }
  return cores;
}

/** How many characters of `secret` are not ASCII letters or digits (those an escaper may rewrite). */
function escapable(secret: string): number {
  let n = 0;
  for (const ch of secret) if (!/^[A-Za-z0-9]$/.test(ch)) n++;
  return n;
}

/**
 * A long value as common escapers write it whole, longest first: as it is, `encodeURIComponent` (hex
 * digits in either case), a form body, a parsed URL's query, JSON.stringify (with `\/`, and in ASCII with `\u00e9`), and HTML or XML
 * escaped with named, decimal or hexadecimal references. A value spelled half one way, half
 * another, is not recognised.
 */
function literalForms(secret: string): string[] {
  const uri = encodeURIComponent(secret);
  const json = JSON.stringify(secret).slice(1, -1);
  const asciiJson = json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  const markup = (entities: Record<string, string>) => secret.replace(/[&<>"']/g, (c) => entities[c]!);
  return [
    secret,
    uri,
    uri.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase()),
    new URLSearchParams({ v: secret }).toString().slice(2),
    new URL(`http://x/?${secret.replaceAll('%', '%25').replaceAll('#', '%23').replaceAll('&', '%26')}`).search.slice(1),
    new URL(`http://x/?${uri}`).search.slice(1),
    json,
    json.replaceAll('/', '\\/'),
    asciiJson,
    asciiJson.replaceAll('/', '\\/'),
    markup({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }),
    markup({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' }),
    markup({ '&': '&#38;', '<': '&#60;', '>': '&#62;', '"': '&#34;', "'": '&#39;' }),
    markup({ '&': '&#x26;', '<': '&#x3c;', '>': '&#x3e;', '"': '&#x22;', "'": '&#x27;' }),
    markup({ '&': '&#x26;', '<': '&#x3C;', '>': '&#x3E;', '"': '&#x22;', "'": '&#x27;' }),
    markup({ '&': '&#38;', '<': '&#60;', '>': '&#62;', '"': '&#34;', "'": '&#x27;' }),
  ].sort(longestFirst);
}

/** A regular expression's source matching a literal backslash. */
const BACKSLASH = '\\\\';
const JSON_SHORT: Record<string, string> = { '"': '"', '\\': BACKSLASH, '/': '/', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't' };
const NAMED: Record<string, string[]> = { '&': ['&amp;'], '<': ['&lt;'], '>': ['&gt;'], '"': ['&quot;'], "'": ['&apos;'] };

/** `n` in hexadecimal, at least `width` digits, each letter matching either case. */
function hexDigits(n: number, width = 1): string {
  return n
    .toString(16)
    .padStart(width, '0')
    .replace(/[a-f]/g, (d) => `[${d}${d.toUpperCase()}]`);
}

/** The alternatives one character (a code point) may be spelled as, as a regular expression's source. */
function spellings(ch: string): string {
  const raw = ch.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
  if (/^[A-Za-z0-9]$/.test(ch)) return raw;
  const code = ch.codePointAt(0)!;
  const ways = [raw];
  ways.push([...Buffer.from(ch, 'utf8')].map((byte) => `%${hexDigits(byte, 2)}`).join(''));
  if (ch === ' ') ways.push('\\+');
  const units = ch.length === 1 ? [ch.charCodeAt(0)] : [ch.charCodeAt(0), ch.charCodeAt(1)];
  ways.push(units.map((unit) => `${BACKSLASH}u${hexDigits(unit, 4)}`).join(''));
  if (JSON_SHORT[ch] !== undefined) ways.push(`${BACKSLASH}${JSON_SHORT[ch] === BACKSLASH ? BACKSLASH : JSON_SHORT[ch]}`);
  ways.push(`&#0*${code};`, `&#[xX]0*${hexDigits(code)};`, ...(NAMED[ch] ?? []));
  return `(?:${ways.join('|')})`;
}

/** Orders secrets longest first (`redactSecrets`' order). */
export const longestFirst = (a: string, b: string): number => b.length - a.length;

/**
 * `text` with every form of every secret replaced by `[REDACTED]`. The longest secrets first: a
 * shorter one inside a longer one (a client id inside its token) would otherwise cut the longer one
 * apart and leave the rest of it readable.
 */
export function redactSecrets(text: string, secrets: Iterable<string>, minLength = 4): string {
  // Every form of a secret is at least `minLength` long (shorter secrets are left alone): a shorter
  // text (a webhook receiver's `ok`) holds none.
  if (text.length < minLength) return text;
  let out = text;
  const list = Array.isArray(secrets) ? (secrets as readonly string[]) : [...secrets];
  // A list already longest first (the log scrubber's) is used as it is: no copy, no sort per call.
  const ordered = list.every((secret, i) => i === 0 || list[i - 1]!.length >= secret.length) ? list : [...list].sort(longestFirst);
  for (const secret of ordered) {
    if (secret.length < minLength) continue;
    const matcher = matcherOf(secret, minLength);
    if (matcher.pattern && (matcher.anchor === undefined || out.includes(matcher.anchor))) out = out.replace(matcher.pattern, '[REDACTED]');
    for (const form of matcher.literals) if (out.includes(form)) out = out.split(form).join('[REDACTED]');
  }
  return out;
}

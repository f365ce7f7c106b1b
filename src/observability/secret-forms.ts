/**
 * The forms in which a secret value may come back in text the hub did not write (an upstream's
 * error body quoting the request, a log line carrying such a body, a next link): as it is; URL
 * encoded as `encodeURIComponent`, a form body and a WHATWG URL's query write it; escaped inside a
 * JSON string as JSON.stringify, PHP (`\/`) and Python's ASCII mode (`\u00e9`) write it; HTML or
 * XML escaped (an apostrophe as `&#39;` or as `&apos;`, as the SOAP envelope writes it, or every
 * escaped character as a decimal or a hexadecimal reference); and base64 (standard and URL-safe, without padding). Shorter than `minLength`, a form is
 * left out: it would blank out ordinary words. A value split across lines, or cut into pieces, is
 * not recognised.
 */
export function secretForms(secret: string, minLength = 4): string[] {
  const key = `${minLength}:${secret}`;
  let forms = computed.get(key);
  if (!forms) {
    forms = formsOf(secret, minLength);
    if (computed.size >= 1_000) computed.clear();
    computed.set(key, forms);
  }
  return forms;
}

/** Forms already worked out (every log line is scrubbed of every secret of its unit of work). */
const computed = new Map<string, string[]>();

function formsOf(secret: string, minLength: number): string[] {
  const json = JSON.stringify(secret).slice(1, -1);
  const asciiJson = json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  const base64 = Buffer.from(secret, 'utf8').toString('base64').replace(/=+$/, '');
  const forms = new Set([
    secret,
    encodeURIComponent(secret),
    new URLSearchParams({ v: secret }).toString().slice(2),
    whatwgQuery(secret.replaceAll('%', '%25').replaceAll('#', '%23').replaceAll('&', '%26')),
    whatwgQuery(encodeURIComponent(secret)),
    json,
    json.replaceAll('/', '\\/'),
    asciiJson,
    asciiJson.replaceAll('/', '\\/'),
    ...Object.values(MARKUP).map((entities) => secret.replace(/[&<>"']/g, (c) => entities[c]!)),
    base64,
    base64.replaceAll('+', '-').replaceAll('/', '_'),
  ]);
  return [...forms].filter((form): form is string => form !== undefined && form.length >= minLength);
}

/** How markup escapes `& < > " '`: HTML's usual spelling, XML's (`&apos;`), all decimal, all hexadecimal, and the mix of decimal and `&#x27;` some HTML escapers write. */
const MARKUP: Record<string, Record<string, string>> = {
  html: { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' },
  xml: { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' },
  decimal: { '&': '&#38;', '<': '&#60;', '>': '&#62;', '"': '&#34;', "'": '&#39;' },
  hex: { '&': '&#x26;', '<': '&#x3c;', '>': '&#x3e;', '"': '&#x22;', "'": '&#x27;' },
  mixed: { '&': '&#38;', '<': '&#60;', '>': '&#62;', '"': '&#34;', "'": '&#x27;' },
};

/** Query text as a WHATWG URL writes it back (a next link the hub parsed: `'` becomes `%27`, a space `%20`). */
function whatwgQuery(query: string): string | undefined {
  try {
    return new URL(`http://x/?${query}`).search.slice(1);
  } catch {
    return undefined;
  }
}

/** `text` with every form of every secret replaced by `[REDACTED]`. */
export function redactSecrets(text: string, secrets: Iterable<string>, minLength = 4): string {
  let out = text;
  for (const secret of secrets) {
    if (secret.length < minLength) continue;
    for (const form of secretForms(secret, minLength)) if (out.includes(form)) out = out.split(form).join('[REDACTED]');
  }
  return out;
}

/**
 * Why a text is not JSON, in words that quote none of it. V8's `JSON.parse` names an unexpected
 * token with an excerpt of the text around it (`Unexpected token 'h', "{"value":hunter2}" is not
 * valid JSON`): for a request body that excerpt is the caller's data, a secret's value sent
 * unquoted (`{"value": $TOKEN}` from a shell) among it, and a refusal must not hand it back (a
 * client, proxy or CI log keeps answers). Its other messages name a position only and are kept.
 */
export function jsonSyntaxMessage(text: string, err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  if (!/is not valid JSON$/.test(message)) return message;
  const at = jsonSyntaxErrorAt(text);
  return at === undefined || at >= text.length ? 'Unexpected end of JSON input' : `Unexpected character in JSON at position ${at}`;
}

/** JSON's insignificant whitespace: space, tab, line feed, carriage return. */
const isSpace = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/** A number, `true`, `false` or `null` at the sticky index. */
const SCALAR = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null/y;

/** What an escape may name after the backslash (besides `u` and four hex digits). */
const ESCAPES = new Set([0x22, 0x5c, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74]);

const isHex = (c: number) => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

/** The index after the string that opens at `start` (a `"`), or `-(position of the fault) - 1`. */
function stringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) return i + 1;
    if (c < 0x20) return -i - 1;
    if (c === 0x5c) {
      const e = text.charCodeAt(i + 1);
      if (e === 0x75) {
        for (let k = 2; k < 6; k++) if (!isHex(text.charCodeAt(i + k))) return -(Math.min(i + k, text.length)) - 1;
        i += 5;
      } else if (ESCAPES.has(e)) i++;
      else return -(Math.min(i + 1, text.length)) - 1;
    }
  }
  return -text.length - 1;
}

/**
 * The position of the first character at which `text` stops being JSON (its length when it ends
 * too early), or undefined when it is JSON. One pass, no recursion (a deep text costs no stack).
 */
export function jsonSyntaxErrorAt(text: string): number | undefined {
  const open: number[] = [];
  type State = 'value' | 'valueOrClose' | 'keyOrClose' | 'key' | 'colon' | 'after';
  let state: State = 'value';
  let i = 0;
  for (;;) {
    while (i < text.length && isSpace(text.charCodeAt(i))) i++;
    if (i >= text.length) return state === 'after' && open.length === 0 ? undefined : text.length;
    const c = text.charCodeAt(i);
    if (state === 'after') {
      const top = open.at(-1);
      if (top === undefined) return i;
      if (c === 0x2c) {
        state = top === 0x7b ? 'key' : 'value';
        i++;
      } else if (c === (top === 0x7b ? 0x7d : 0x5d)) {
        open.pop();
        i++;
      } else return i;
      continue;
    }
    if (state === 'colon') {
      if (c !== 0x3a) return i;
      state = 'value';
      i++;
      continue;
    }
    if ((state === 'keyOrClose' && c === 0x7d) || (state === 'valueOrClose' && c === 0x5d)) {
      open.pop();
      state = 'after';
      i++;
      continue;
    }
    if (state === 'key' || state === 'keyOrClose') {
      if (c !== 0x22) return i;
      const end = stringEnd(text, i);
      if (end < 0) return -end - 1;
      state = 'colon';
      i = end;
      continue;
    }
    // A value.
    if (c === 0x7b || c === 0x5b) {
      open.push(c);
      state = c === 0x7b ? 'keyOrClose' : 'valueOrClose';
      i++;
    } else if (c === 0x22) {
      const end = stringEnd(text, i);
      if (end < 0) return -end - 1;
      state = 'after';
      i = end;
    } else {
      SCALAR.lastIndex = i;
      if (!SCALAR.test(text)) return i;
      state = 'after';
      i = SCALAR.lastIndex;
    }
  }
}

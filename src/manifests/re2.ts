/**
 * A manifest schema's `pattern` as a CRD carries it. Kubernetes compiles a CRD's patterns with Go's
 * regexp (RE2), the hub with JavaScript's, and the two read some of the same text differently: `\s`
 * is the ASCII whitespace `\t\n\f\r ` in RE2, where JavaScript also matches `\v`, the non-breaking
 * and other Unicode spaces, the line and paragraph separators and the byte-order mark; `.` in RE2
 * stops at `\n` only, in JavaScript also at `\r`, U+2028 and U+2029. A CRD pattern written as the
 * hub's (`^\S{1,100}$`) took a scope holding a non-breaking space that the hub then refused.
 * `re2Pattern` writes those constructs out as RE2 reads them to mean what JavaScript means, so that
 * kubectl refuses what the hub refuses (test/crds.test.ts compares the two readings).
 */

/** The characters JavaScript's `\s` matches, as RE2 writes them in a character class. */
const JS_WHITESPACE = '\\t\\n\\v\\f\\r\\x20\\x{00A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}';
/** What JavaScript's `.` does not match (no `s` flag), as RE2 writes it in a negated class. */
const JS_LINE_ENDS = '\\n\\r\\x{2028}\\x{2029}';

/** A JavaScript pattern (as the hub compiles it, with the `u` flag) in RE2 syntax, meaning the same. */
export function re2Pattern(pattern: string): string {
  let out = '';
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '\\') {
      const next = pattern[i + 1] ?? '';
      i++;
      if (next === 's') out += inClass ? JS_WHITESPACE : `[${JS_WHITESPACE}]`;
      else if (next === 'S' && !inClass) out += `[^${JS_WHITESPACE}]`;
      else if (next === 'S' || next === 'u' || next === 'c' || next === 'k' || /[1-9]/.test(next)) {
        throw new Error(`the pattern ${JSON.stringify(pattern)} has \\${next}${inClass && next === 'S' ? ' in a character class' : ''}, which re2Pattern does not write for RE2`);
      } else out += `\\${next}`;
    } else if (c === '[' && !inClass) {
      inClass = true;
      out += c;
    } else if (c === ']' && inClass) {
      inClass = false;
      out += c;
    } else if (c === '.' && !inClass) out += `[^${JS_LINE_ENDS}]`;
    else out += c;
  }
  return out;
}

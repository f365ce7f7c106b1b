import { pieceEnd } from './validation/input-limits.js';
/**
 * Fills a template's placeholders (`slots`, a global pattern whose first group names the value, `textOf` its text),
 * each name's value made once however often the template names it, and keeps at most `max`
 * characters: a short template naming a large value many times would otherwise make a text of
 * megabytes per event. What is past the limit is cut, the cut said. Used by e-mail rules
 * (src/email/templates.ts) and process messages (src/processes/template.ts).
 */
export function renderBounded(template: string, slots: RegExp, textOf: (name: string) => string, max: number): string {
  const rendered = new Map<string, string>();
  let out = '';
  let from = 0;
  for (const match of template.matchAll(slots)) {
    const name = match[1]!.trim();
    let value = rendered.get(name);
    if (value === undefined) {
      value = textOf(name);
      rendered.set(name, value);
    }
    out += template.slice(from, match.index) + value;
    from = match.index + match[0].length;
    if (out.length > max) return cut(out, max);
  }
  out += template.slice(from);
  return out.length > max ? cut(out, max) : out;
}

/**
 * The first `max` characters, one fewer when the last would be the first half of a surrogate pair (an emoji, any
 * character past U+FFFF): kept alone it could not be stored (a decision's message is written as JSON, which PostgreSQL
 * refuses with a lone surrogate in it, failing the process consumer's batch at every pass) nor sent as UTF-8.
 */
function cut(text: string, max: number): string {
  return `${text.slice(0, pieceEnd(text, 0, max))}… (cut at ${max.toLocaleString('en-US')} characters)`;
}

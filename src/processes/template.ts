/**
 * A process's `message`: `{{path}}` placeholders filled from the event (docs/processes.md). A path
 * is dotted from the event: `payload.run_id`, `type`, `tenantId`, `id`. A string renders as is, any
 * other value as JSON, an unknown path as the empty string.
 */

const PLACEHOLDER = /\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}/g;

/**
 * The most characters a rendered message keeps. A template of at most 2,000 characters may name the
 * whole payload a hundred times and more (`{{payload}}` is 11 characters): each decision event, and
 * each inbox entry, would carry as many copies. What is past the limit is cut, the cut said.
 */
export const RENDERED_MESSAGE_MAX = 16 * 1024;

export function renderMessage(template: string, event: Record<string, unknown>): string {
  // Each path rendered once, however often the template names it.
  const rendered = new Map<string, string>();
  const textAt = (path: string): string => {
    let value: unknown = event;
    for (const part of path.split('.')) {
      if (value === null || typeof value !== 'object' || !Object.hasOwn(value, part)) return '';
      value = (value as Record<string, unknown>)[part];
    }
    if (value === undefined) return '';
    return typeof value === 'string' ? value : JSON.stringify(value);
  };
  let out = '';
  let from = 0;
  for (const match of template.matchAll(PLACEHOLDER)) {
    const path = match[1]!;
    let text = rendered.get(path);
    if (text === undefined) {
      text = textAt(path);
      rendered.set(path, text);
    }
    out += template.slice(from, match.index) + text;
    from = match.index + match[0].length;
    if (out.length > RENDERED_MESSAGE_MAX) return cut(out);
  }
  out += template.slice(from);
  return out.length > RENDERED_MESSAGE_MAX ? cut(out) : out;
}

const cut = (text: string) => `${text.slice(0, RENDERED_MESSAGE_MAX)}… (cut at ${RENDERED_MESSAGE_MAX.toLocaleString('en-US')} characters)`;

import { ValidationError } from '../errors.js';
import { renderBounded } from '../template-render.js';
import { pieceEnd } from '../validation/input-limits.js';

/**
 * The subject and body templates of e-mail rules (docs/email.md). Text with `{{ placeholder }}`
 * slots, nothing else: no expressions, no loops, no HTML, no code. The placeholders are
 *
 *   {{type}}          the event type            {{id}}         the outbox event id
 *   {{tenantId}}      the tenant id             {{createdAt}}  when the event was written (ISO-8601 UTC)
 *   {{rule}}          the rule's name           {{payload}}    the whole payload as JSON
 *   {{payload.a.b}}   one payload field (a path of field names; objects and lists render as JSON)
 *
 * Spaces inside the braces are allowed. A template with any other placeholder, or with a `{{`
 * that is never closed, is refused when the rule is saved, so a typo cannot pass silently; a
 * payload field the event does not carry renders empty (types are matched by pattern, so which
 * fields exist is only known when an event arrives).
 */

export const PLACEHOLDERS = ['type', 'id', 'tenantId', 'createdAt', 'rule', 'payload', 'payload.<field>[.<field>…]'] as const;

const SLOT = /\{\{([\s\S]*?)\}\}/g;
const NAME = /^(type|id|tenantId|createdAt|rule|payload(?:\.[A-Za-z0-9_-]+)*)$/;

/** What a template is rendered from. */
export interface TemplateContext {
  type: string;
  id: number;
  tenantId: number;
  createdAt: Date;
  rule: string;
  payload: Record<string, unknown>;
}

/** Refuses a template with an unknown placeholder or an unclosed `{{`, naming the field. */
export function checkTemplate(template: string, field: string): void {
  let rest = '';
  let last = 0;
  for (const match of template.matchAll(SLOT)) {
    const inner = match[1]!.trim();
    if (inner.includes('{{')) throw unclosed(field);
    if (!NAME.test(inner)) {
      throw new ValidationError(`${field}: unknown placeholder {{${inner}}}`, field, `placeholders: ${PLACEHOLDERS.map((p) => `{{${p}}}`).join(', ')}`);
    }
    rest += template.slice(last, match.index);
    last = match.index + match[0].length;
  }
  rest += template.slice(last);
  if (rest.includes('{{')) throw unclosed(field);
}

function unclosed(field: string): ValidationError {
  return new ValidationError(`${field}: a {{ is never closed with }}`, field, 'every {{ starts a placeholder such as {{type}}');
}

/**
 * The most characters a rendered template keeps. A body of at most 20,000 characters may name the
 * whole payload some 1,800 times (`{{payload}}` is 11 characters): with a payload of a few kilobytes
 * (a decision's message alone may hold 16,384 characters) every message would carry tens of
 * megabytes. What is past the limit is cut, the cut said; rendering stops there.
 */
export const RENDERED_MAX = 256 * 1024;

/**
 * Renders a checked template, each placeholder rendered once however often it is named, cut at
 * RENDERED_MAX characters. Unknown names (a template saved before a check existed) render empty.
 */
export function renderTemplate(template: string, ctx: TemplateContext): string {
  return renderBounded(template, SLOT, (name) => placeholder(name, ctx), RENDERED_MAX);
}

function placeholder(name: string, ctx: TemplateContext): string {
  if (!NAME.test(name)) return '';
  switch (name) {
    case 'type':
      return ctx.type;
    case 'id':
      return String(ctx.id);
    case 'tenantId':
      return String(ctx.tenantId);
    case 'createdAt':
      return ctx.createdAt.toISOString();
    case 'rule':
      return ctx.rule;
    case 'payload':
      return JSON.stringify(ctx.payload);
    default:
      return text(lookup(ctx.payload, name.split('.').slice(1)));
  }
}

/** A payload field by path; only the payload's own fields (never inherited ones such as `constructor`). */
function lookup(root: unknown, path: string[]): unknown {
  let value = root;
  for (const key of path) {
    if (value === null || typeof value !== 'object' || !Object.hasOwn(value, key)) return undefined;
    value = (value as Record<string, unknown>)[key];
  }
  return value;
}

function text(value: unknown): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/**
 * A rendered subject as one header line: line breaks become spaces (every one Unicode has: CR, LF,
 * VT, FF, NEL, U+2028 and U+2029, which a mail client shows as a break once the header is decoded),
 * and tabs; at most 998 characters, never half of a surrogate pair at the cut (pieceEnd).
 */
export function subjectLine(rendered: string): string {
  const line = rendered.replace(/[\r\n\t\v\f\u0085\u2028\u2029]+/g, ' ').trim();
  return line.slice(0, pieceEnd(line, 0, 998));
}

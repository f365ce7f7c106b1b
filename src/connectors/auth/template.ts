import { TemplateError } from '../engine/errors.js';
import { isNamedValue } from './names.js';

/**
 * `{{env:NAME}}`, spaces allowed inside the braces and around NAME. Whatever stands between `env:`
 * and the closing braces is taken as the name, so that a name of the wrong form (`{{env:2:X}}`) is
 * refused at apply and fails a read: it is never sent upstream as written.
 */
const TEMPLATE = /\{\{\s*env:\s*([\s\S]*?)\s*\}\}/g;

export type EnvLookup = (name: string) => string | undefined;

/**
 * Replaces every `{{env:NAME}}` in `text` with the value `env` gives for NAME (values resolved
 * beforehand by the connector's credential resolver: the tenant's stored secret, then an allowed
 * environment variable; `secret:NAME` the stored secret only). A name that did not resolve, or that
 * is not a name at all, fails the read naming it and where it was used: sending a request with a
 * hole in it would read the wrong data quietly.
 */
export function resolveTemplate(text: string, env: EnvLookup, where: string): string {
  return text.replace(TEMPLATE, (_match, name: string) => {
    const value = isNamedValue(name) ? env(name) : undefined;
    if (value === undefined) throw new TemplateError(name, where);
    return value;
  });
}

/** Resolves templates in every string (keys included) of a JSON value; other values are kept. */
export function resolveTemplates(value: unknown, env: EnvLookup, where: string): unknown {
  if (typeof value === 'string') return resolveTemplate(value, env, where);
  if (Array.isArray(value)) return value.map((v) => resolveTemplates(v, env, where));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[resolveTemplate(k, env, where)] = resolveTemplates(v, env, where);
    return out;
  }
  return value;
}

/** The text with every template taken out (what a manifest states literally). */
export function withoutTemplates(text: string): string {
  return text.replace(TEMPLATE, '');
}

/** Whether a text carries a template at all. */
export function hasTemplate(text: string): boolean {
  TEMPLATE.lastIndex = 0;
  const found = TEMPLATE.test(text);
  TEMPLATE.lastIndex = 0;
  return found;
}

/** The names every `{{env:NAME}}` of a JSON value (strings and keys) refers to; only names of the right form. */
export function templateNames(value: unknown, into: Set<string> = new Set()): Set<string> {
  if (typeof value === 'string') {
    for (const match of value.matchAll(TEMPLATE)) if (isNamedValue(match[1]!)) into.add(match[1]!);
  } else if (Array.isArray(value)) {
    for (const v of value) templateNames(v, into);
  } else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      templateNames(k, into);
      templateNames(v, into);
    }
  }
  return into;
}

/** What stands in each `{{env:…}}` of a text whose name is not of the form of a name (NAMED_VALUE_PATTERN). */
export function malformedTemplateNames(text: string): string[] {
  return [...text.matchAll(TEMPLATE)].map((match) => match[1]!).filter((name) => !isNamedValue(name));
}

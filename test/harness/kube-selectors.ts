/**
 * Part of the SCRIPTED KUBERNETES API STAND-IN (test/harness/kube-api.ts): label and field selectors
 * of list and watch, parsed as kube-apiserver parses them (a malformed one is a 400).
 */

type Labels = Record<string, string> | undefined;
export type LabelPredicate = (labels: Labels) => boolean;

export class SelectorError extends Error {}

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Whether `key` is a qualified name (`[prefix/]name`), what label keys must be. */
export function isQualifiedName(key: string): boolean {
  const parts = key.split('/');
  const name = parts.length === 2 ? parts[1]! : parts[0]!;
  const prefix = parts.length === 2 ? parts[0]! : undefined;
  return !(parts.length > 2 || !name || name.length > 63 || !NAME_PART.test(name) || (prefix !== undefined && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))));
}

/** Whether `value` is a valid label value. */
export const isLabelValue = (value: string): boolean => value.length <= 63 && LABEL_VALUE.test(value);

function checkKey(key: string): string {
  if (!isQualifiedName(key)) {
    throw new SelectorError(`unable to parse requirement: invalid label key "${key}": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`);
  }
  return key;
}

function checkValue(value: string): string {
  if (!isLabelValue(value)) {
    throw new SelectorError(`unable to parse requirement: invalid label value: "${value}": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`);
  }
  return value;
}

/** Splits on the commas outside parentheses. */
function requirements(selector: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of selector) {
    if (ch === '(') depth += 1;
    if (ch === ')') depth -= 1;
    if (ch === ',' && depth === 0) {
      out.push(current);
      current = '';
    } else current += ch;
  }
  if (depth !== 0) throw new SelectorError(`unable to parse requirement: unbalanced parentheses in "${selector}"`);
  out.push(current);
  return out.map((r) => r.trim());
}

/** `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`, `k<1`; a comma is AND. */
export function parseLabelSelector(selector: string | undefined): LabelPredicate {
  if (selector === undefined || selector.trim() === '') return () => true;
  const preds = requirements(selector).map((req): LabelPredicate => {
    if (req === '') throw new SelectorError(`unable to parse requirement: found '', expected: identifier in "${selector}"`);
    let m = /^!\s*([^\s=!<>(),]+)$/.exec(req);
    if (m) {
      const key = checkKey(m[1]!);
      return (labels) => labels?.[key] === undefined;
    }
    m = /^([^\s=!<>(),]+)\s+(in|notin)\s*\(([^()]*)\)$/.exec(req);
    if (m) {
      const key = checkKey(m[1]!);
      const values = m[3]!.split(',').map((v) => checkValue(v.trim()));
      if (m[2] === 'in') return (labels) => labels?.[key] !== undefined && values.includes(labels[key]!);
      return (labels) => labels?.[key] === undefined || !values.includes(labels[key]!);
    }
    m = /^([^\s=!<>(),]+)\s*(==|=|!=)\s*([^\s=!<>(),]*)$/.exec(req);
    if (m) {
      const key = checkKey(m[1]!);
      const value = checkValue(m[3]!);
      if (m[2] === '!=') return (labels) => labels?.[key] !== value;
      return (labels) => labels?.[key] === value;
    }
    m = /^([^\s=!<>(),]+)\s*([<>])\s*(-?\d+)$/.exec(req);
    if (m) {
      const key = checkKey(m[1]!);
      const bound = Number(m[3]);
      const gt = m[2] === '>';
      return (labels) => {
        const v = labels?.[key];
        if (v === undefined || !/^-?\d+$/.test(v)) return false;
        return gt ? Number(v) > bound : Number(v) < bound;
      };
    }
    m = /^([^\s=!<>(),]+)$/.exec(req);
    if (m) {
      const key = checkKey(m[1]!);
      return (labels) => labels?.[key] !== undefined;
    }
    throw new SelectorError(`unable to parse requirement: cannot parse "${req}"`);
  });
  return (labels) => preds.every((p) => p(labels));
}

export type ObjectPredicate = (o: Record<string, unknown>) => boolean;

const pathValue = (o: Record<string, unknown>, path: string): string => {
  let v: unknown = o;
  for (const part of path.split('.')) v = v && typeof v === 'object' ? (v as Record<string, unknown>)[part] : undefined;
  return v === undefined || v === null ? '' : String(v);
};

/** `f=v`, `f==v`, `f!=v` over the fields `supported` (metadata.name, metadata.namespace, …); a comma is AND. */
export function parseFieldSelector(selector: string | undefined, supported: string[]): ObjectPredicate {
  if (selector === undefined || selector.trim() === '') return () => true;
  const preds = selector.split(',').map((req): ObjectPredicate => {
    const m = /^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$/.exec(req);
    if (!m) throw new SelectorError(`invalid selector: '${selector}'; can't understand '${req}'`);
    const [, field, op, value] = m as unknown as [string, string, string, string];
    if (!supported.includes(field)) throw new SelectorError(`field label not supported: ${field}`);
    return op === '!=' ? (o) => pathValue(o, field) !== value : (o) => pathValue(o, field) === value;
  });
  return (o) => preds.every((p) => p(o));
}

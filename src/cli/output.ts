import { stringify } from 'yaml';
import { KUBECTL_YAML } from '../manifests/yaml.js';

/** The one output formatter of `svc`: aligned tables and YAML details for people, JSON for scripts. */

export type Row = Record<string, unknown>;

export interface Column {
  header: string;
  value: (row: Row) => unknown;
  /** Longer cells are cut with an ellipsis (messages, descriptions). */
  max?: number;
}

/** A column showing one field of the record. */
export function field(header: string, key: string, max?: number): Column {
  return { header, value: (row) => row[key], max };
}

export function table(rows: Row[], columns: Column[]): string {
  const cells = rows.map((row) => columns.map((c) => clip(cell(c.value(row)), c.max)));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((r) => r[i]!.length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => (i === values.length - 1 ? v : v.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return `${[line(columns.map((c) => c.header)), ...cells.map(line)].join('\n')}\n`;
}

/** One value as a table cell: `-` for nothing, lists joined with commas, objects as JSON. */
export function cell(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-';
  if (Array.isArray(value)) return value.length ? value.map((v) => (typeof v === 'object' ? JSON.stringify(v) : String(v))).join(',') : '-';
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value).replace(/\s+/g, ' ');
}

/** A record for people: its fields as YAML, nested values included. */
export function detail(value: unknown): string {
  return stringify(value, { ...KUBECTL_YAML, lineWidth: 0 });
}

/** For scripts: the hub's JSON, same content and key order, indented by two spaces. */
export function json(value: unknown): string {
  return `${JSON.stringify(value ?? null, null, 2)}\n`;
}

function clip(text: string, max: number | undefined): string {
  return max && text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

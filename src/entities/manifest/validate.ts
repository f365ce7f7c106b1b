import type { ErrorObject } from 'ajv/dist/2020.js';
import type { Issue } from '../../validation/schema-errors.js';
import { addSchemaErrors, compiledOnce, Issues, isObject, type Json, manifestObject, schemaError } from '../../manifests/checking.js';
import { parseMapping } from '../mapping.js';
import type { EntityColumn, EntityColumnType, EntitySource } from '../types.js';
import { entityManifestSchema } from './schema.js';

/**
 * Checks an Entity manifest and normalises it to the model the store keeps (types.ts): the JSON
 * Schema first (every structural error at once), then the rules that span fields. Every issue
 * names its field as a path (`spec.sources[1].columns.email`). Pure: no database; whether a source
 * table exists and has the mapped columns is checked by the store, in the tenant's transaction.
 */

export type { Issue };

/** Column names the fused relation uses for itself (relation.ts). */
export const RESERVED_COLUMNS: readonly string[] = ['_entity_id', '_conflicts', '_resolution'];

/** A checked manifest: everything of EntityDef but the id the store assigns. */
export interface EntityDraft {
  /** metadata.name, lower-case. */
  name: string;
  scopes: string[];
  key: string;
  columns: EntityColumn[];
  sources: EntitySource[];
}

export interface EntityCheck {
  errors: Issue[];
  warnings: Issue[];
  /** Present when there is no error. */
  entity?: EntityDraft;
}

const schemaCheck = compiledOnce(entityManifestSchema);


const quoted = (v: unknown) => JSON.stringify(v);

/** `spec.sources[1].columns.email`; a key that is not an identifier is quoted (`columns["a b"]`). */
export const mappingField = (i: number, column: string): string =>
  /^[A-Za-z_][A-Za-z0-9_]*$/.test(column) ? `spec.sources[${i}].columns.${column}` : `spec.sources[${i}].columns[${quoted(column)}]`;

export function checkEntityManifest(given: unknown): EntityCheck {
  const errors = new Issues();
  const warnings: Issue[] = [];
  const input = manifestObject(given, errors, 'apiVersion, kind, metadata, spec', entityManifestSchema);
  if (!input) return { errors: errors.list, warnings };

  reservedNames(input, errors);
  const check = schemaCheck();
  if (!check(input)) addSchemaErrors(errors, check.errors, translate);
  if (errors.count) return { errors: errors.list, warnings };

  const entity = normalise(input, errors, warnings);
  return errors.count ? { errors: errors.list, warnings } : { errors: [], warnings, entity };
}

/** The reserved names get their own text, before the schema's generic "must be a lower-case column name". */
function reservedNames(input: Json, errors: Issues): void {
  const spec = input.spec;
  if (!isObject(spec) || !Array.isArray(spec.columns)) return;
  spec.columns.forEach((c, i) => {
    if (isObject(c) && typeof c.name === 'string' && RESERVED_COLUMNS.includes(c.name)) {
      errors.add(`spec.columns[${i}].name`, `spec.columns[${i}].name ${c.name} is reserved: the fused relation has its own column of that name (${RESERVED_COLUMNS.join(', ')})`);
    }
  });
}

const translate = (e: ErrorObject): [string, string] => schemaError(e);

interface RawColumn {
  name: string;
  type: EntityColumnType;
  label?: string;
  description?: string;
  examples?: string[];
  values?: string[];
}

/** The manifest has passed the schema: every present field has its type. */
function normalise(input: Json, errors: Issues, warnings: Issue[]): EntityDraft | undefined {
  const name = (input.metadata as { name: string }).name.toLowerCase();
  const spec = input.spec as { scope: string | string[]; key: string; columns: RawColumn[]; sources: Array<{ table: string; key: string; columns: Record<string, string> }> };
  const scopes = [...new Set(typeof spec.scope === 'string' ? [spec.scope] : spec.scope)];

  const columns: EntityColumn[] = [];
  const position = new Map<string, number>();
  spec.columns.forEach((c, i) => {
    const first = position.get(c.name);
    if (first !== undefined) {
      errors.add(`spec.columns[${i}].name`, `duplicate column ${quoted(c.name)}: spec.columns[${first}] has it too`);
      return;
    }
    position.set(c.name, i);
    const column: EntityColumn = { name: c.name, type: c.type };
    if (c.label !== undefined) column.label = c.label;
    if (c.description !== undefined) column.description = c.description;
    if (c.examples !== undefined) column.examples = c.examples;
    if (c.values !== undefined) {
      column.values = [...new Set(c.values)];
      c.examples?.forEach((example, j) => {
        if (!column.values!.includes(example)) warnings.push({ field: `spec.columns[${i}].examples[${j}]`, message: `${quoted(example)} is not one of spec.columns[${i}].values` });
      });
    }
    columns.push(column);
  });

  if (!position.has(spec.key)) {
    errors.add('spec.key', `spec.key ${quoted(spec.key)} must name one of spec.columns (${columns.map((c) => c.name).join(', ')})`);
  }

  const mapped = new Set<string>();
  const tables = new Map<string, number>();
  const sources: EntitySource[] = spec.sources.map((s, i) => {
    const first = tables.get(s.table);
    if (first !== undefined) errors.add(`spec.sources[${i}].table`, `duplicate source table ${s.table}: spec.sources[${first}] reads it too (map every column of a table in one source)`);
    else tables.set(s.table, i);

    const key = parseMapping(s.key);
    if ('problem' in key) errors.add(`spec.sources[${i}].key`, `spec.sources[${i}].key ${quoted(s.key)} ${key.problem}`);

    for (const [column, mapping] of Object.entries(s.columns)) {
      const field = mappingField(i, column);
      if (!position.has(column)) {
        errors.add(field, `${field}: ${quoted(column)} is not one of spec.columns (${columns.map((c) => c.name).join(', ')})`);
        continue;
      }
      const parsed = parseMapping(mapping);
      if ('problem' in parsed) {
        errors.add(field, `${field} ${quoted(mapping)} ${parsed.problem}`);
        continue;
      }
      if (column === spec.key && mapping !== s.key) {
        errors.add(field, `${field} maps the key column ${spec.key}, so it must be spec.sources[${i}].key (${quoted(s.key)}): an entity's key value is its source's key`);
        continue;
      }
      mapped.add(column);
    }
    return { table: s.table, key: s.key, columns: { ...s.columns } };
  });

  spec.columns.forEach((c, i) => {
    if (c.name === spec.key || mapped.has(c.name) || position.get(c.name) !== i) return;
    errors.add(`spec.columns[${i}].name`, `column ${c.name} is mapped by no source: name it in the columns of at least one of spec.sources`);
  });

  if (errors.count) return undefined;
  return { name, scopes, key: spec.key, columns, sources };
}

/**
 * The model of an Entity as stored and read (src/entities/store.ts re-exports these): what the
 * manifest normalises to (manifest/validate.ts) and what the fused relation is built from
 * (relation.ts).
 */

export type EntityColumnType = 'text' | 'bigint' | 'numeric' | 'timestamptz' | 'boolean';

export interface EntityColumn {
  name: string;
  type: EntityColumnType;
  label?: string;
  description?: string;
  examples?: string[];
  /** The declared value domain. */
  values?: string[];
}

export interface EntitySource {
  /** `ext.<name>` */
  table: string;
  /** A column of the table or a JSONPath into `data` holding the key. */
  key: string;
  /** Canonical column -> a column of the table or a JSONPath into `data`. */
  columns: Record<string, string>;
}

export interface EntityDef {
  id: string;
  name: string;
  scopes: string[];
  key: string;
  columns: EntityColumn[];
  sources: EntitySource[];
}

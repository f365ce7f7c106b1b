/**
 * The normalised export the runner reads (stored as `exports.exports.spec`): the manifest after
 * validation, defaults filled, the name and entity lower-cased.
 */

export interface SftpTarget {
  kind: 'sftp';
  host: string;
  port: number;
  user: string;
  /** Remote file path, tokens unresolved. */
  path: string;
  key_env?: string;
  password_env?: string;
  host_key_fingerprint: string;
}

export interface S3Target {
  kind: 's3';
  bucket: string;
  /** Tokens unresolved; '' when absent. */
  prefix: string;
  filename: string;
  region: string;
  endpoint?: string;
  access_key_env: string;
  secret_key_env: string;
}

export type ExportTarget = SftpTarget | S3Target;

export interface ExportFormat {
  kind: 'csv';
  delimiter: string;
  encoding: 'UTF-8';
  header: boolean;
}

export interface ExportSpec {
  name: string;
  scope: string;
  /** Lower-cased entity name. */
  entity: string;
  columns: string[];
  order: string[];
  format: ExportFormat;
  destination: ExportTarget;
  mode: 'snapshot';
  schedule?: string;
}

export const FAILURE_CODES = ['definition', 'generation', 'publication', 'collision', 'interrupted', 'record'] as const;
export type FailureCode = (typeof FAILURE_CODES)[number];

/** Defaults of spec 3. */
export const DEFAULT_SFTP_PORT = 22;
export const DEFAULT_S3_REGION = 'eu-west-3';
export const DEFAULT_ACCESS_KEY_ENV = 'AWS_ACCESS_KEY_ID';
export const DEFAULT_SECRET_KEY_ENV = 'AWS_SECRET_ACCESS_KEY';
/** Columns of an entity that are bookkeeping, never exported. */
export const RESERVED_COLUMNS = ['_entity_id', '_conflicts', '_resolution'] as const;
/** The longest file name (one path segment) most file systems take, in bytes of UTF-8. */
export const NAME_MAX = 255;

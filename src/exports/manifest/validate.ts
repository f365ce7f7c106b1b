import { isIP } from 'node:net';
import { domainToASCII } from 'node:url';
import type { ErrorObject } from 'ajv/dist/2020.js';
import { cronProblem, hasUserinfo } from '../../connectors/manifest/validate.js';
import { type EgressPolicy, parseAddress, unconnectablePort } from '../../egress/policy.js';
import { closest } from '../../validation/closest.js';
import { CONTROL_CHARACTER } from '../../validation/names.js';
import type { Issue } from '../../validation/schema-errors.js';
import { addSchemaErrors, compiledOnce, Issues, isObject, type Json, manifestObject, schemaError } from '../../manifests/checking.js';
import { resolvedByteLength, unknownToken } from '../tokens.js';
import {
  DEFAULT_ACCESS_KEY_ENV,
  DEFAULT_S3_REGION,
  DEFAULT_SECRET_KEY_ENV,
  DEFAULT_SFTP_PORT,
  NAME_MAX,
  type ExportSpec,
  type ExportTarget,
  RESERVED_COLUMNS,
} from '../types.js';
import { exportManifestSchema } from './schema.js';

/**
 * Checks an Export manifest (spec 3 "Export manifest"): the JSON Schema first (schema.ts), then
 * the rules spanning fields: the fields of each destination kind, exactly one SFTP credential, the
 * refused inline credentials (each message names the `*_env` field to use), the delimiter, column
 * duplicates and reserved names, the order taken from the columns, the cron and the file-name
 * tokens. What needs the entity (its columns and scopes) is checked by `checkAgainstEntity` once the
 * entity is loaded. Every error names its field.
 */

export type { Issue };

export interface ExportCheck {
  errors: Issue[];
  warnings: Issue[];
  /** The normalised export, when there is no error. */
  spec?: ExportSpec;
}

/** Unknown sort columns given a "misspelt?" hint, at most: each hint compares the name with every column. */
const MAX_ORDER_HINTS = 5;

const schemaCheck = compiledOnce(exportManifestSchema);



/** Inline credentials spec 3 refuses, and the `*_env` field each belongs in. */
const INLINE_CREDENTIALS: Record<string, string> = {
  password: 'password_env',
  private_key: 'key_env',
  access_key: 'access_key_env',
  secret_key: 'secret_key_env',
};

const SFTP_FIELDS = ['kind', 'host', 'port', 'user', 'path', 'key_env', 'password_env', 'host_key_fingerprint'];
const S3_FIELDS = ['kind', 'bucket', 'prefix', 'filename', 'region', 'endpoint', 'access_key_env', 'secret_key_env'];

const DESTINATION = 'spec.destination';

/** The longest object key S3 takes, in UTF-8 bytes (S3-compatible stores take the same). */
export const MAX_S3_KEY_BYTES = 1024;

/**
 * `egress`: the outbound address policy. A destination address it refuses without resolving a name
 * (the S3 endpoint's host or the SFTP host: an IP literal in any spelling, `localhost`, a metadata
 * name) is a warning, not an error: runs fail at connect until `svc.egress.allow` admits it.
 */
export function checkExportManifest(given: unknown, options: { egress?: EgressPolicy } = {}): ExportCheck {
  const errors = new Issues();
  const warnings: Issue[] = [];
  const input = manifestObject(given, errors, 'apiVersion, kind, metadata, spec', exportManifestSchema);
  if (!input) return { errors: errors.list, warnings };
  // Refusals whose wording spec 3 fixes come before the schema's generic "not a known field".
  const destination = isObject(input.spec) ? input.spec.destination : undefined;
  if (isObject(destination)) {
    for (const [field, instead] of Object.entries(INLINE_CREDENTIALS)) {
      if (Object.hasOwn(destination, field)) {
        errors.add(
          `${DESTINATION}.${field}`,
          `${DESTINATION}.${field} is refused: a manifest never holds a credential; store it as a secret (POST /api/platform/secrets) and name that secret in ${DESTINATION}.${instead}`,
        );
      }
    }
    otherKindFields(destination, errors);
  }
  const check = schemaCheck();
  if (!check(input)) addSchemaErrors(errors, check.errors, translate);
  if (errors.list.length) return { errors: errors.list, warnings };

  const spec = normalise(input, errors, warnings);
  if (errors.list.length || !spec) return { errors: errors.list, warnings };
  const refused = options.egress && destinationWarning(options.egress, spec.destination);
  if (refused) warnings.push(refused);
  return { errors: [], warnings, spec };
}

/** The policy's refusal of the address a destination connects to, as a warning naming its field. */
export function destinationWarning(egress: EgressPolicy, d: ExportTarget): Issue | undefined {
  const [field, host] = d.kind === 'sftp' ? ['host', d.host] : ['endpoint', d.endpoint === undefined ? undefined : new URL(d.endpoint).hostname];
  const message = host === undefined ? undefined : egress.applyWarning(host);
  return message === undefined ? undefined : { field: `${DESTINATION}.${field}`, message };
}

/** The longest label of a host name (RFC 1035). */
const MAX_LABEL = 63;
const HOST_LABEL = /^[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?$/;
const SPACE_OR_CONTROL = /[\s\p{Cc}\p{Zl}\p{Zp}]/u;

/**
 * Why `user` is not an SFTP login (the message names spec.destination.user), or undefined. A
 * password (`user:password`) would be shown in every run's location (`sftp://user@host:port/…`) and
 * sent as part of the login name; a host (`user@host`) belongs in its own field; spaces and control
 * characters are no login's. No message repeats the value (it may hold a password).
 */
function sftpUserProblem(user: string): string | undefined {
  const field = `${DESTINATION}.user`;
  if (SPACE_OR_CONTROL.test(user)) return `${field} may not hold spaces or control characters`;
  if (user.includes(':')) return `${field} may not hold a password (user:password): give the password in password_env`;
  if (user.includes('@')) return `${field} may not hold a host (user@host): give it in ${DESTINATION}.host`;
  return undefined;
}

/**
 * Why `host` is not an SFTP host as ssh takes one (the message names spec.destination.host), or
 * undefined: a DNS name (dot-separated labels of letters, digits, hyphens and underscores, a
 * trailing dot allowed) or an IP address, IPv6 bare (`::1`, as `ssh ::1` and a `HostName` take it:
 * ssh does not resolve `[::1]`). The user, the port and the path have fields of their own; no
 * message repeats the value (it may hold a password).
 */
export function sftpHostProblem(host: string): string | undefined {
  const field = `${DESTINATION}.host`;
  if (SPACE_OR_CONTROL.test(host)) return `${field} may not hold spaces or control characters`;
  if (host.includes('@')) return `${field} may not hold a user (user@host): give the user in ${DESTINATION}.user and the password in password_env`;
  if (host.includes('://')) return `${field} is a host name or address, not a URL: give the port in ${DESTINATION}.port and the path in ${DESTINATION}.path`;
  if (host.includes('/')) return `${field} may not hold a path: give it in ${DESTINATION}.path`;
  const bracketed = /^\[([^\]]*)\](?::\d*)?$/.exec(host);
  if (bracketed && isIP(bracketed[1]!) === 6) return `${field} writes an IPv6 address in brackets: give it bare, as ssh takes it (::1), and the port in ${DESTINATION}.port`;
  if (host.includes(':')) {
    if (isIP(host) === 6) return undefined;
    return /^[^:]+:\d*$/.test(host) ? `${field} may not hold a port (host:port): give it in ${DESTINATION}.port` : `${field} is not an IPv6 address`;
  }
  if (/[^\x21-\x7e]/.test(host)) {
    const ascii = domainToASCII(host);
    return `${field} must be written in ASCII${ascii ? `: an internationalised name in its xn-- form (${ascii})` : ''}`;
  }
  const labels = (host.endsWith('.') ? host.slice(0, -1) : host).split('.');
  if (!labels.every((label) => label.length <= MAX_LABEL && HOST_LABEL.test(label))) {
    return `${field} must be a host name (dot-separated labels of 1 to ${MAX_LABEL} letters, digits, hyphens and underscores, none starting or ending with a hyphen) or an IP address`;
  }
  if (labels.every((label) => /^[0-9]+$/.test(label)) && parseAddress(host) === undefined) return `${field} is not an IPv4 address (four numbers from 0 to 255)`;
  return undefined;
}

/**
 * Why `endpoint` is not the URL of an S3-compatible store (the message names
 * spec.destination.endpoint), or undefined: http or https, no user information (credentials are
 * stored secrets), no query and no fragment (requests are made below its path: what follows a `?`
 * or `#` would be dropped or sent with every request), no space or control character, a port that
 * can be connected to.
 */
export function s3EndpointProblem(endpoint: string): string | undefined {
  const field = `${DESTINATION}.endpoint`;
  if (SPACE_OR_CONTROL.test(endpoint)) return `${field} may not hold spaces or control characters`;
  let url: URL | undefined;
  try {
    url = new URL(endpoint);
  } catch {
    url = undefined;
  }
  if (!url || !['http:', 'https:'].includes(url.protocol)) return `${field} must be an http or https URL`;
  if (hasUserinfo(endpoint)) return `${field} may not carry credentials: name stored secrets in access_key_env and secret_key_env`;
  if (endpoint.includes('?') || endpoint.includes('#')) return `${field} may not hold a query (?…) or a fragment (#…): give the store's URL alone (scheme, host, port and, if it has one, path)`;
  const port = unconnectablePort(url);
  return port && `${field}: ${port}`;
}

/**
 * The CSV delimiter and the destination's address of a stored export, checked as apply checks them
 * now (an export applied before a rule keeps loading, and its run fails naming what to fix): the
 * issue, or undefined. A bracketed IPv6 SFTP host, which connected before apply refused it, is taken
 * bare (`bareHost`).
 */
export function storedIssue(spec: Pick<ExportSpec, 'format' | 'destination'>): Issue | undefined {
  const delimiter = delimiterProblem(spec.format.delimiter);
  if (delimiter) return { field: DELIMITER, message: delimiter };
  const d = spec.destination;
  const [field, message] = d.kind === 'sftp' ? ['host', sftpHostProblem(bareHost(d.host))] : ['endpoint', d.endpoint === undefined ? undefined : s3EndpointProblem(d.endpoint)];
  return message === undefined ? undefined : { field: `${DESTINATION}.${field}`, message };
}

const DELIMITER = 'spec.format.delimiter';

/** What is wrong with a CSV delimiter: one character, not a double quote, a line break, NUL or the byte-order mark; undefined when it will do. */
function delimiterProblem(delimiter: string): string | undefined {
  if (characters(delimiter).length !== 1) return `${DELIMITER} must be exactly one character, got ${characters(delimiter).length}: ${JSON.stringify(delimiter)}`;
  if (['"', '\n', '\r', '\u0000'].includes(delimiter)) return `${DELIMITER} may not be a double quote, a line break or NUL`;
  if (delimiter === '\ufeff') return `${DELIMITER} may not be U+FEFF, the byte-order mark: a file would start with it when its first value is NULL, and readers drop it`;
  return undefined;
}

/** An SFTP host as stored, a bracketed IPv6 address (`[::1]`) without its brackets. */
export function bareHost(host: string): string {
  const inner = /^\[(.*)\]$/.exec(host)?.[1];
  return inner !== undefined && isIP(inner) === 6 ? inner : host;
}

const translate = (e: ErrorObject): [string, string] => schemaError(e);

/** The characters of a string (code points, so an astral character counts once). */
const characters = (text: string) => [...text];

function normalise(input: Json, errors: Issues, warnings: Issue[]): ExportSpec | undefined {
  const metadata = input.metadata as { name: string };
  const spec = input.spec as Json;
  const columns = spec.columns as string[];
  const order = spec.order as string[];
  const format = spec.format as { kind: 'csv'; delimiter?: string; encoding?: 'UTF-8'; header?: boolean };

  const seen = new Set<string>();
  columns.forEach((column, i) => {
    const field = `spec.columns[${i}]`;
    if ((RESERVED_COLUMNS as readonly string[]).includes(column.toLowerCase())) {
      errors.add(field, `${field} ${column} is a bookkeeping column of the entity and is never exported (refused: ${RESERVED_COLUMNS.join(', ')})`);
    } else if (seen.has(column)) {
      errors.add(field, `${field} ${column} is listed twice: each column appears once in the file`);
    }
    seen.add(column);
  });
  const ordered = new Set<string>();
  // Hints for the first few unknown sort columns only: each compares the name with every column (1,600 of
  // each, 63 characters long, took minutes of the event loop).
  let hints = 0;
  order.forEach((column, i) => {
    const field = `spec.order[${i}]`;
    if (!seen.has(column)) {
      // A column misspelt in spec.columns shows here first: point at it.
      const near = hints++ < MAX_ORDER_HINTS ? closest(column, seen) : undefined;
      const hint = near === undefined ? '' : ` (spec.columns has ${near}: is one of the two misspelt?)`;
      errors.add(field, `${field} ${column} is not one of spec.columns: sort columns are taken from the exported columns${hint}`);
    }
    else if (ordered.has(column)) errors.add(field, `${field} ${column} is listed twice`);
    ordered.add(column);
  });

  const delimiter = format.delimiter ?? ',';
  const badDelimiter = delimiterProblem(delimiter);
  if (badDelimiter) errors.add(DELIMITER, badDelimiter);

  const schedule = spec.schedule as string | undefined;
  if (schedule !== undefined) {
    const problem = cronProblem(schedule);
    if (problem) errors.add('spec.schedule', `spec.schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, UTC): ${problem}`);
  }

  const target = normaliseDestination(spec.destination as Json, errors, warnings);
  if (errors.list.length || !target) return undefined;
  return {
    name: metadata.name.toLowerCase(),
    scope: spec.scope as string,
    entity: (spec.source as { entity: string }).entity.toLowerCase(),
    columns,
    order,
    format: { kind: 'csv', delimiter, encoding: 'UTF-8', header: format.header ?? true },
    destination: target,
    mode: 'snapshot',
    ...(schedule !== undefined ? { schedule } : {}),
  };
}

/**
 * A remote path, prefix or file name: known tokens only, every `${` closed, no control character (a
 * line break would name a file nobody can type), and no `.` or `..` segment (the name is used as
 * written: a `..` would leave the directory or prefix it names).
 */
function checkName(field: string, value: string, errors: Issues): void {
  const bad = unknownToken(value);
  if (bad) errors.add(field, `${field} holds the unknown token ${bad}: the tokens are \${date} and \${timestamp}`);
  else if (/\$\{[^}]*$/.test(value)) errors.add(field, `${field} holds \${ without a closing }: the tokens are \${date} and \${timestamp}`);
  else if (CONTROL_CHARACTER.test(value)) errors.add(field, `${field} may not hold control characters (a line break, a tab)`);
  else if (value.split('/').some((segment) => segment === '.' || segment === '..')) errors.add(field, `${field} may not hold . or .. segments: name the directory and the file as they are`);
}

/**
 * A field of the other destination kind (`bucket` on SFTP): named as such before the schema checks
 * its value, so `bucket: b` on SFTP is "not a field of sftp destinations", not "at least 3 characters".
 * Keys of neither kind are the schema's (an unknown field).
 */
function otherKindFields(d: Json, errors: Issues): void {
  const kind = d.kind;
  if (kind !== 'sftp' && kind !== 's3') return;
  const [allowed, other] = kind === 'sftp' ? [SFTP_FIELDS, S3_FIELDS] : [S3_FIELDS, SFTP_FIELDS];
  for (const key of Object.keys(d)) {
    if (!allowed.includes(key) && other.includes(key)) errors.add(`${DESTINATION}.${key}`, `${DESTINATION}.${key} is not a field of ${kind} destinations (they take ${allowed.join(', ')})`);
  }
}

function normaliseDestination(d: Json, errors: Issues, warnings: Issue[]): ExportTarget | undefined {
  const kind = d.kind as 'sftp' | 's3';
  const required = kind === 'sftp' ? ['host', 'user', 'path', 'host_key_fingerprint'] : ['bucket', 'filename'];
  for (const key of required) if (d[key] === undefined) errors.add(`${DESTINATION}.${key}`, `${DESTINATION}.${key} is required for ${kind} destinations`);

  if (kind === 'sftp') {
    const credentials = ['key_env', 'password_env'].filter((k) => d[k] !== undefined);
    if (credentials.length !== 1) {
      errors.add(
        credentials.length ? `${DESTINATION}.password_env` : `${DESTINATION}.key_env`,
        `exactly one of ${DESTINATION}.key_env and ${DESTINATION}.password_env is required (${credentials.length ? 'both are set' : 'neither is set'})`,
      );
    }
    const path = d.path as string | undefined;
    if (path !== undefined) {
      checkName(`${DESTINATION}.path`, path, errors);
      if (path.endsWith('/')) errors.add(`${DESTINATION}.path`, `${DESTINATION}.path must name a file, not a directory (it ends with /)`);
      // Not refused: the limit is the server's file system's (255 bytes on most; an SFTP front of an
      // object store takes longer names), so a run tries it, and its failure says why.
      const longest = Math.max(...path.split('/').map(resolvedByteLength));
      if (longest > NAME_MAX) {
        warnings.push({
          field: `${DESTINATION}.path`,
          message: `a name in ${DESTINATION}.path is ${longest} bytes of UTF-8 once its tokens resolve: most file systems take at most ${NAME_MAX}, and runs to such a server fail`,
        });
      }
    }
    const host = d.host as string | undefined;
    const hostProblem = host === undefined ? undefined : sftpHostProblem(host);
    if (hostProblem) errors.add(`${DESTINATION}.host`, hostProblem);
    const user = d.user as string | undefined;
    const userProblem = user === undefined ? undefined : sftpUserProblem(user);
    if (userProblem) errors.add(`${DESTINATION}.user`, userProblem);
    if (errors.list.length) return undefined;
    return {
      kind,
      host: host!,
      port: (d.port as number | undefined) ?? DEFAULT_SFTP_PORT,
      user: d.user as string,
      path: path!,
      ...(d.key_env !== undefined ? { key_env: d.key_env as string } : { password_env: d.password_env as string }),
      host_key_fingerprint: d.host_key_fingerprint as string,
    };
  }

  const prefix = (d.prefix as string | undefined) ?? '';
  const filename = d.filename as string | undefined;
  if (/^\d+\.\d+\.\d+\.\d+$/.test((d.bucket as string | undefined) ?? '')) errors.add(`${DESTINATION}.bucket`, `${DESTINATION}.bucket may not be an IP address (S3's bucket naming rules)`);
  checkName(`${DESTINATION}.prefix`, prefix, errors);
  if (filename !== undefined) checkName(`${DESTINATION}.filename`, filename, errors);
  if (prefix.startsWith('/') || (!prefix && filename?.startsWith('/'))) {
    errors.add(prefix ? `${DESTINATION}.prefix` : `${DESTINATION}.filename`, 'the object key (prefix plus filename) may not start with /');
  }
  if (filename?.endsWith('/')) errors.add(`${DESTINATION}.filename`, `${DESTINATION}.filename must name an object, not end with /`);
  const keyBytes = resolvedByteLength(prefix) + resolvedByteLength(filename ?? '');
  if (keyBytes > MAX_S3_KEY_BYTES) {
    errors.add(
      resolvedByteLength(prefix) > MAX_S3_KEY_BYTES ? `${DESTINATION}.prefix` : `${DESTINATION}.filename`,
      `the object key (prefix plus filename, tokens resolved) would be ${keyBytes} bytes of UTF-8: S3 takes keys of at most ${MAX_S3_KEY_BYTES} bytes`,
    );
  }
  const endpoint = d.endpoint as string | undefined;
  if (endpoint !== undefined) {
    const problem = s3EndpointProblem(endpoint);
    if (problem) errors.add(`${DESTINATION}.endpoint`, problem);
    else if (new URL(endpoint).protocol === 'http:') warnings.push({ field: `${DESTINATION}.endpoint`, message: 'a plain http endpoint sends the file unencrypted' });
  }
  if (errors.list.length) return undefined;
  return {
    kind,
    bucket: d.bucket as string,
    prefix,
    filename: filename!,
    region: (d.region as string | undefined) ?? DEFAULT_S3_REGION,
    ...(endpoint !== undefined ? { endpoint } : {}),
    access_key_env: (d.access_key_env as string | undefined) ?? DEFAULT_ACCESS_KEY_ENV,
    secret_key_env: (d.secret_key_env as string | undefined) ?? DEFAULT_SECRET_KEY_ENV,
  };
}

/** What an export needs of its entity. */
export interface EntityShape {
  name: string;
  scopes: string[];
  columns: string[];
}

/**
 * The rules that need the entity: its scopes must include spec.scope, and every column must be one
 * of its canonical columns (case-insensitive names are not matched: a column is named as declared).
 * Returns the issues (field-named), empty when the export fits the entity.
 */
export function checkAgainstEntity(spec: ExportSpec, entity: EntityShape | undefined): Issue[] {
  if (!entity) return [{ field: 'spec.source.entity', message: `spec.source.entity ${spec.entity} is not an entity of this tenant` }];
  const issues: Issue[] = [];
  if (!entity.scopes.includes(spec.scope)) {
    issues.push({ field: 'spec.scope', message: `spec.scope ${spec.scope} is not a scope entity ${entity.name} declares (${entity.scopes.join(', ') || 'none'})` });
  }
  const known = new Set(entity.columns);
  spec.columns.forEach((column, i) => {
    if (!known.has(column)) issues.push({ field: `spec.columns[${i}]`, message: `spec.columns[${i}] ${column} is not a canonical column of entity ${entity.name} (${entity.columns.join(', ')})` });
  });
  return issues;
}

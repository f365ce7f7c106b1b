import { appsManifestSchema, said, SLUG_PATTERN } from '../../manifests/checking.js';
import { SECRET_NAME_PATTERN } from '../../platform/secrets/store.js';

/**
 * THE JSON Schema (draft 2020-12) of an `apps.svc.io/v1` Export manifest (spec 3 "Export
 * manifest"): the one place its shape is written. The apply path checks manifests against it with
 * ajv (validate.ts); the CRD generator and the OpenAPI document reuse the same object. Plain JSON,
 * structural-schema keywords only, so that it compiles under ajv's strict mode and is a valid CRD
 * schema.
 *
 * Unlike a connector's, an export's spec is closed: spec 3 makes every unknown key an error. The
 * destination is one object holding the fields of both kinds; which fields a kind takes, the
 * exactly-one-of credential rule and the refused inline credentials are checked in validate.ts,
 * with messages naming the field.
 */

export const API_VERSION = 'apps.svc.io/v1';
export const KIND = 'Export';

/** A slug: lower-case letters, digits and dashes (upper case is accepted and stored lower-case). */
export const EXPORT_NAME_PATTERN = SLUG_PATTERN;
/**
 * What `ssh-keygen -lf` prints for a key: `SHA256:` and 43 base64 characters without padding; the
 * prefix in lower case and one `=` of padding are accepted too, as the run compares them
 * (src/exports/destinations/sftp.ts, `normaliseFingerprint`).
 */
export const FINGERPRINT_PATTERN = '^(SHA256|sha256):[A-Za-z0-9+/]{43}=?$';

type Schema = Record<string, unknown>;

const secretName = (description: string): Schema =>
  said(
    { type: 'string', pattern: SECRET_NAME_PATTERN, description: `${description} The name of a secret stored in the tenant (POST /api/platform/secrets), never the value.` },
    'must be the name of a stored secret (letters, digits, `_`, `.` and `-`, at most 128 characters), never the value itself',
  );

const withTokens = 'May hold the tokens `${date}` (YYYY-MM-DD) and `${timestamp}` (YYYYMMDDTHHMMSSZ), resolved in UTC against the run\'s artifact time.';

const destination: Schema = {
  type: 'object',
  required: ['kind'],
  additionalProperties: false,
  description: 'Where the file goes: `kind: sftp` (host, port, user, path, key_env or password_env, host_key_fingerprint) or `kind: s3` (bucket, prefix, filename, region, endpoint, access_key_env, secret_key_env).',
  properties: {
    kind: { type: 'string', enum: ['sftp', 's3'] },
    host: { type: 'string', minLength: 1, maxLength: 253, description: 'sftp: the server\'s host name or IP address as ssh takes it: a DNS name, or an IP address with an IPv6 one bare (`2001:db8::1`, no brackets); the user, the port and the path go in their own fields.' },
    port: { type: 'integer', minimum: 1, maximum: 65535, description: 'sftp: default 22.' },
    user: { type: 'string', minLength: 1, maxLength: 255, description: 'sftp: the login.' },
    path: { type: 'string', minLength: 1, maxLength: 1024, description: `sftp: the remote file path; its directory must exist. A name in it longer than 255 bytes of UTF-8 once its tokens resolve is warned of at apply (most file systems refuse it). ${withTokens}` },
    key_env: secretName('sftp: the private key (OpenSSH or PEM) for public-key login; exactly one of key_env and password_env.'),
    password_env: secretName('sftp: the password; exactly one of key_env and password_env.'),
    host_key_fingerprint: said(
      { type: 'string', pattern: FINGERPRINT_PATTERN, description: 'sftp: the server\'s host key fingerprint as `ssh-keygen -lf <key>` prints it (`SHA256:…`); always verified before logging in.' },
      'must be a SHA-256 host key fingerprint as `ssh-keygen -lf` prints it: SHA256: followed by 43 base64 characters (sha256: and a trailing = accepted)',
    ),
    bucket: said(
      { type: 'string', minLength: 3, maxLength: 63, pattern: '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$', description: 's3: the bucket, named by S3\'s rules (3 to 63 lower-case letters, digits, dots and hyphens, a letter or digit at each end and around each dot, not an IP address).' },
      'must be an S3 bucket name: 3 to 63 lower-case letters, digits, dots and hyphens, with a letter or digit at each end and around each dot',
    ),
    prefix: { type: 'string', maxLength: 1024, description: `s3: the key prefix (default empty); the object key is prefix plus filename, may not start with \`/\`, and may be at most 1,024 bytes of UTF-8 once its tokens resolve (S3's limit). ${withTokens}` },
    filename: { type: 'string', minLength: 1, maxLength: 1024, description: `s3: the file name after the prefix (prefix plus filename: at most 1,024 bytes of UTF-8, tokens resolved). ${withTokens}` },
    region: said(
      { type: 'string', pattern: '^[a-z0-9][a-z0-9-]{0,63}$', description: 's3: default `eu-west-3` (lower-case letters, digits and hyphens, as `us-east-1`).' },
      'must be a region name: lower-case letters, digits and hyphens (eu-west-3, us-east-1)',
    ),
    endpoint: { type: 'string', minLength: 1, maxLength: 2048, description: 's3: the http or https URL of an S3-compatible store (path-style addressing), without credentials, query or fragment; omit for AWS.' },
    access_key_env: secretName('s3: the access key id (default `AWS_ACCESS_KEY_ID`).'),
    secret_key_env: secretName('s3: the secret access key (default `AWS_SECRET_ACCESS_KEY`).'),
  },
};

const columnName = said({ type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]{0,62}$' }, 'must be a canonical column name of the entity');

const spec: Schema = {
  type: 'object',
  required: ['scope', 'source', 'columns', 'order', 'format', 'destination', 'mode'],
  additionalProperties: false,
  properties: {
    scope: said({ type: 'string', pattern: '^\\S{1,100}$', description: 'A scope the entity declares and the caller holds.' }, 'must be a scope tag without whitespace'),
    source: {
      type: 'object',
      required: ['entity'],
      additionalProperties: false,
      properties: { entity: { type: 'string', minLength: 1, maxLength: 63, description: 'An existing entity (case-insensitive).' } },
    },
    columns: { type: 'array', minItems: 1, maxItems: 1600, items: columnName, description: 'Canonical columns of the entity, in file order, no duplicates.' },
    order: { type: 'array', minItems: 1, maxItems: 1600, items: columnName, description: 'Sort columns, taken from spec.columns; rows then sort by the remaining columns.' },
    format: {
      type: 'object',
      required: ['kind'],
      additionalProperties: false,
      properties: {
        kind: { type: 'string', enum: ['csv'] },
        delimiter: { type: 'string', minLength: 1, maxLength: 2, description: 'One character, default `,`; not a double quote, a line break, NUL or U+FEFF (the byte-order mark).' },
        encoding: { type: 'string', enum: ['UTF-8'] },
        header: { type: 'boolean', description: 'Default true.' },
      },
    },
    destination,
    mode: { type: 'string', enum: ['snapshot'] },
    schedule: { type: 'string', minLength: 1, maxLength: 200, description: '5-field cron, UTC.' },
  },
};

export const exportManifestSchema: Schema = appsManifestSchema(KIND, 'An export manifest: the same bytes go to POST /api/exports/apply or to kubectl apply.', spec);

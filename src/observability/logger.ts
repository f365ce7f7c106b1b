import pino, { type DestinationStream, type Logger } from 'pino';
import pretty from 'pino-pretty';
import { LOG_LEVELS } from '../config/properties.js';
import { currentContext } from './context.js';
import { loggableError } from './database-errors.js';
import { longestFirst, redactSecrets } from './secret-forms.js';

export type { Logger } from 'pino';

/**
 * The hub's own credentials (master key, database passwords, the SMTP password, tokens of its own
 * configuration): never in any log line. Registered as they become known; every serialized line is
 * scrubbed of them before it is written.
 */
const hubSecrets = new Set<string>();
/** The same, longest first (the order masking needs), kept as they are registered rather than sorted per line. */
let hubSecretsByLength: string[] = [];

/** Shorter values would blank out ordinary words. */
const MIN_SECRET_LENGTH = 6;

/** A credential of the hub itself (its configuration, its database): scrubbed from every line. */
export function registerSecret(value: string | undefined): void {
  if (!value || value.length < MIN_SECRET_LENGTH || hubSecrets.has(value)) return;
  hubSecrets.add(value);
  hubSecretsByLength = [...hubSecrets].sort(longestFirst);
}

/**
 * A value the hub holds on a tenant's behalf for the current unit of work (a tenant secret it has
 * just decrypted, a connector credential): scrubbed from the lines this request or job writes, and
 * from no other. Tenant secret text is never a global pattern: a tenant could otherwise choose a
 * common word as a secret value and blank it out of every other tenant's log lines. Outside any
 * unit of work there is nothing to scope it to, and it is not registered.
 */
export function registerOperationSecret(value: string | undefined): void {
  if (!value || value.length < MIN_SECRET_LENGTH) return;
  const ctx = currentContext();
  if (!ctx) return;
  ctx.secrets ??= new Set();
  ctx.secrets.add(value);
}

function scrub(line: string): string {
  // Each secret in every form it may take in a line (src/observability/secret-forms.ts).
  // The hub's and the unit of work's secrets in one pass: a shorter one must not cut a longer one apart first.
  const operation = currentContext()?.secrets;
  const out = redactSecrets(line, operation?.size ? [...hubSecretsByLength, ...operation].sort(longestFirst) : hubSecretsByLength, MIN_SECRET_LENGTH);
  // Bearer tokens and basic credentials, wherever they appear in text.
  return out.replace(/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}/g, '$1 [REDACTED]');
}

/** Keys whose values are removed wherever they appear in a logged object. */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-api-key"]',
  'res.headers["set-cookie"]',
  'headers.authorization',
  '*.password',
  '*.secret',
  '*.token',
  '*.value',
  '*.masterKey',
  'password',
  'secret',
  'token',
  'authorization',
];

export interface LoggerOptions {
  level: string;
  /** JSON lines (prod) or readable lines (dev). */
  json: boolean;
  destination?: DestinationStream;
}

export function createLogger(options: LoggerOptions): Logger {
  const destination = options.destination ?? (options.json ? pino.destination(1) : pretty({ colorize: process.stdout.isTTY, destination: 1 }));
  return pino(
    {
      level: options.level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
      // A PostgreSQL error is logged without the values its texts quote (src/observability/database-errors.ts).
      serializers: { err: (err: unknown) => pino.stdSerializers.err(loggableError(err) as Error) },
      formatters: { level: (label) => ({ level: label }) },
      mixin() {
        const ctx = currentContext();
        if (!ctx) return {};
        const out: Record<string, string> = {};
        if (ctx.tenantId !== undefined) out.tenant = ctx.tenantId;
        if (ctx.requestId) out.reqId = ctx.requestId;
        if (ctx.userId) out.user = ctx.userId;
        if (ctx.job) out.job = ctx.job;
        return out;
      },
      hooks: { streamWrite: scrub },
    },
    destination,
  );
}

/** The process logger until configuration is read: SVC_LOG_LEVEL when it names a level (the configuration refuses any other value, naming svc.log.level). */
const EARLY_LEVEL = process.env.SVC_LOG_LEVEL?.trim();
let root: Logger = createLogger({ level: EARLY_LEVEL && (LOG_LEVELS as readonly string[]).includes(EARLY_LEVEL) ? EARLY_LEVEL : 'info', json: true });

/** The process logger; main() replaces it once configuration is known. */
export function logger(): Logger {
  return root;
}

export function setLogger(next: Logger): void {
  root = next;
}

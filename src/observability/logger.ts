import pino, { type DestinationStream, type Logger } from 'pino';
import pretty from 'pino-pretty';
import { LOG_LEVELS } from '../config/properties.js';
import { storableText } from '../validation/input-limits.js';
import { currentContext } from './context.js';
import { type ErrorWalk, loggableError, loggableMessage, MAX_LOGGED_DEPTH, newErrorWalk, withLoggableErrors } from './database-errors.js';
import { loggableText } from './url-redaction.js';
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

function scrub(line: string, hubOwn = true): string {
  // Each secret in every form it may take in a line (src/observability/secret-forms.ts).
  // The hub's and the unit of work's secrets in one pass: a shorter one must not cut a longer one apart first.
  const operation = currentContext()?.secrets;
  const hub = hubOwn ? hubSecretsByLength : [];
  const out = redactSecrets(line, operation?.size ? [...hub, ...operation].sort(longestFirst) : hub, MIN_SECRET_LENGTH);
  // Bearer tokens and basic credentials, wherever they appear in text.
  return out.replace(/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}/g, '$1 [REDACTED]');
}

/**
 * An error's text as the hub may store it and answer it later (a run's `errorMessage` and its
 * event's `error_message`, an export run's `failureReason`, the retrieval indexer's `last_error`
 * and `embed_error`, a delivery attempt's `error`): masked exactly as a log line is, by the same code. The
 * values a PostgreSQL error quotes and the credentials of an address it holds (`loggableMessage`),
 * then the hub's own secrets and those of the current unit of work (a connector's token, a tenant
 * secret it just read) in every form they may take, and Bearer and Basic credentials (`scrub`).
 * What locates the fault (a status code, names, positions) stays. A NUL or half a surrogate pair in
 * it (quoted from what a remote server answered: an S3 error code written `&#0;`) is U+FFFD, which
 * PostgreSQL stores: the statement writing such a text failed, and with it the end of the run.
 */
export function storableMessage(err: unknown): string {
  return storableText(scrub(loggableMessage(err)));
}

/**
 * The stored text of a failed exchange with a tenant's own counterpart (a connector's source, an
 * export's destination: what it answered, quoted), masked as `storableMessage` masks but for the hub's own secrets. The
 * hub never sends those to a tenant's counterpart, so it can only quote what the tenant chose;
 * masking them there would answer the tenant which of its guesses is one of them (`welcome1
 * [REDACTED] letmein`). The unit of work's secrets (the connector's token the source may echo),
 * credentials in addresses and Bearer and Basic credentials are masked as before.
 */
export function storableUpstreamMessage(err: unknown): string {
  return storableText(scrub(loggableMessage(err), false));
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
  /** Where the lines go (JSON or readable, as `json` says); standard output when not given. */
  destination?: DestinationStream;
}

/**
 * Control characters (C0, DEL, C1), which a terminal acts on, and the invisible format characters
 * (Unicode's Cf: bidi overrides, which reorder what follows them, zero-width characters), and the
 * two Unicode line separators.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what it finds
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]|\p{Cf}/gu;
const NAMED_ESCAPES: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** `text` with every such character written as its escape (`\n`, `\u001b`, `\u202e`): one line, no terminal sequence. */
function escapeControls(text: string): string {
  return text.replace(CONTROL, (c) => NAMED_ESCAPES[c] ?? `\\u${c.codePointAt(0)!.toString(16).padStart(4, '0')}`);
}

/**
 * A JSON line made safe for pino-pretty (the dev profile's readable lines): it prints the message
 * and the top-level keys as they are, where a newline (a connector name or a request path holds
 * one) would start what reads as another log line, and drops an ESC but leaves the rest of its
 * sequence; it prints other values as JSON, which leaves DEL, the C1 controls and the format
 * characters as they are. Every key and string is escaped here, pino-pretty shows the escapes as
 * they are; only an error's stack keeps its lines, which pino-pretty indents under its key.
 */
function prettySafe(line: string): string {
  // JSON writes a C0 control character as an escape: a line without a backslash or a character of
  // the other kinds (written as they are) holds none.
  if (!line.includes('\\') && !/[\u007f-\u009f\u2028\u2029]|\p{Cf}/u.test(line)) return line;
  try {
    return `${JSON.stringify(escapedValue(JSON.parse(line), ''))}\n`;
  } catch {
    return line;
  }
}

function escapedValue(value: unknown, key: string): unknown {
  if (typeof value === 'string') return key === 'stack' ? value.split('\n').map(escapeControls).join('\n') : escapeControls(value);
  if (Array.isArray(value)) return value.map((v) => escapedValue(v, ''));
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [escapeControls(k), escapedValue(v, k)]));
}

/** An error as the `err` serializer writes it: without the values a PostgreSQL error quotes, nor an address's credentials (src/observability/database-errors.ts). */
function serializeError(err: unknown, depth = 0, walk: ErrorWalk = newErrorWalk()): unknown {
  const loggable = loggableError(err, depth, walk);
  return loggable instanceof Error ? pino.stdSerializers.err(loggable) : loggable;
}

/**
 * The logged object with every error it holds, at any depth (in objects and lists under any key,
 * database-errors.ts's `withLoggableErrors`), written as the `err` serializer writes one: pino
 * applies it to the key `err` only, and writes an error elsewhere as JSON, that is its enumerable
 * fields (a PostgreSQL error's `detail`, `where`: the values it quotes). An error under `err` is
 * left to the serializer. A line of plain values (most of them) is given back as it is, with no walk.
 */
function errorsSerialized(object: Record<string, unknown>): Record<string, unknown> {
  let out = object;
  let walk: ErrorWalk | undefined;
  for (const key of Object.keys(object)) {
    const value = object[key];
    if (typeof value !== 'object' || value === null || (key === 'err' && value instanceof Error)) continue;
    if (!walk) {
      walk = newErrorWalk();
      walk.ancestors.push(object);
    }
    const loggable = withLoggableErrors(value, 1, walk, serializeError);
    if (loggable === value) continue;
    if (out === object) out = { ...object };
    out[key] = loggable;
  }
  return out;
}

/**
 * A child logger's bindings (`logger.child({...})`, written once into every line of the child) as
 * a log call's object is written: every error in them at any depth as the `err` serializer writes
 * one (`errorsSerialized`; pino applies the serializer to a bound `err` only, and writes an error
 * elsewhere as its enumerable fields: a PostgreSQL error's `detail`, which quotes values), and, since
 * bindings are made once per child rather than per line, every text in them (to MAX_LOGGED_DEPTH)
 * with the credentials of an address it holds masked (`loggableText`: a bound request URL's
 * `user:pass@` and query values).
 */
function bindingsMasked(bindings: Record<string, unknown>): Record<string, unknown> {
  return textsMasked(errorsSerialized(bindings), 0) as Record<string, unknown>;
}

function textsMasked(value: unknown, depth: number): unknown {
  if (typeof value === 'string') return loggableText(value);
  if (typeof value !== 'object' || value === null || depth > MAX_LOGGED_DEPTH) return value;
  if (Array.isArray(value)) return value.map((item) => textsMasked(item, depth + 1));
  if (Object.getPrototypeOf(value) !== Object.prototype) return value;
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, textsMasked(item, depth + 1)]));
}

/**
 * The error whose message pino would take as the line's message: the only argument an error
 * (`log.error(err)`), or an object with one under `err` and no message (`log.error({ err })`).
 */
function messageFromError(args: unknown[]): Error | undefined {
  if (args.length !== 1) return undefined;
  const [only] = args;
  if (only instanceof Error) return only;
  if (typeof only !== 'object' || only === null) return undefined;
  const { err, msg } = only as { err?: unknown; msg?: unknown };
  return err instanceof Error && msg === undefined ? err : undefined;
}

/** The second `isoTimePrefix` was made for (milliseconds since the epoch, divided by 1,000, rounded down) and the line's time up to its milliseconds. */
let isoTimeSecond = Number.NaN;
let isoTimePrefix = '';

/**
 * The line's `time`, written as pino's `isoTime` writes it (`,"time":"2026-01-02T03:04:05.678Z"`):
 * the date and time up to the second made once a second, not a `Date` and its whole ISO text per line.
 */
export function isoTime(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== isoTimeSecond) {
    isoTimeSecond = second;
    isoTimePrefix = `,"time":"${new Date(second * 1000).toISOString().slice(0, -4)}`;
  }
  const ms = now - second * 1000;
  return `${isoTimePrefix}${ms < 10 ? '00' : ms < 100 ? '0' : ''}${ms}Z"`;
}

export function createLogger(options: LoggerOptions): Logger {
  // Standard output is written synchronously, each line as it is logged (docs/operations.md "Logs").
  // Written asynchronously (a write handed to libuv's thread pool), a line could still be on its way
  // when the process exits: pino's exit handler then wrote the lines buffered behind it first, or the
  // line was lost (a stop's last lines read `stopped`, then `embedded PostgreSQL stopped`). One line
  // a request at info: a write each costs little.
  const destination = options.json
    ? (options.destination ?? pino.destination({ dest: 1, sync: true }))
    : pretty({ colorize: !options.destination && process.stdout.isTTY, destination: options.destination ?? 1, sync: true });
  const log = pino(
    {
      level: options.level,
      base: undefined,
      timestamp: isoTime,
      redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
      // A PostgreSQL error is logged without the values its texts quote (src/observability/database-errors.ts).
      serializers: { err: (err: unknown) => serializeError(err) },
      formatters: { level: (label) => ({ level: label }), log: errorsSerialized },
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
      hooks: {
        // An error logged without a message gives pino its own message as the line's, unmasked: the masked one is given instead.
        logMethod(args, method) {
          const err = messageFromError(args);
          return err ? method.apply(this, [args[0] as object, loggableMessage(err)]) : method.apply(this, args);
        },
        streamWrite: options.json ? scrub : (line) => prettySafe(scrub(line)),
      },
    },
    destination,
  );
  primitivesUnredacted(log);
  // pino gives a child's bindings to no formatter (`formatters.bindings` sees the root's `base`
  // only): they are masked on their way in. Every child inherits this `child` from the root.
  const child = log.child;
  log.child = function (this: Logger, bindings, childOptions) {
    return child.call(this, bindingsMasked(bindings), childOptions);
  } as Logger['child'];
  return log;
}

/**
 * `log` (a pino logger with `redact` paths) writing a value that is no object (a string, a number,
 * a boolean, null) as JSON at once, as its redaction would write it. pino writes every top-level
 * value of a line, and its message, through the redactor of the paths that start with `*`
 * (`*.password`, …, REDACT_PATHS) when no path starts with its key: for such a value that walk
 * (the paths taken apart, each looked up in it, then `JSON.stringify`) finds nothing to redact and
 * was the largest part of writing a line (an access line's seven fields and message). An object
 * still goes through it. The stringifiers are shared by every child that sets no `redact` of its own.
 */
export function primitivesUnredacted(log: Logger): void {
  const stringifiers = (log as unknown as Record<symbol, Record<symbol, Stringifier | undefined>>)[pino.symbols.stringifiersSym];
  const wildcard = stringifiers?.[pino.symbols.wildcardFirstSym];
  if (!stringifiers || !wildcard) return;
  stringifiers[pino.symbols.wildcardFirstSym] = (value, safe) => {
    switch (typeof value) {
      case 'string':
      case 'number':
      case 'boolean':
        return JSON.stringify(value);
      default:
        return value === null ? 'null' : wildcard(value, safe);
    }
  };
}

type Stringifier = (value: unknown, stringifySafe?: unknown) => string | undefined;

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

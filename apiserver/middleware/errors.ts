import { JsonText } from '../../src/db/json-text.js';
import type { Context } from 'koa';
import { HubError } from '../../src/errors.js';
import { databaseErrorFields, loggableMessage } from '../../src/observability/database-errors.js';
import { logger } from '../../src/observability/logger.js';
import { isConnectionWaitTimeout, isDatabaseUnavailable } from '../../src/db/unavailable.js';
import { describeRefusal, refusedValueCode } from '../../src/validation/database-refusals.js';

/**
 * The one error mapping: every thrown error becomes the status and body the spec fixes. HubErrors
 * render themselves; Koa's own HTTP errors (malformed JSON, body too large) keep their status with
 * a JSON message; PostgreSQL's refusals of a value (classes 22 and 54) are a 400; a 503 when the
 * database cannot be reached (src/db/unavailable.ts) or rolled a transaction back to break a
 * deadlock or serialisation conflict (40P01, 40001: retrying may pass); anything else is
 * a 500 with no detail (the stack goes to the log, never the client). Called by the hub's frame
 * (apiserver/middleware/frame.ts) with what the rest of the request threw.
 */
export function answerError(ctx: Context, err: unknown): void {
  const kind = errorKind(err);
  if (kind === 'hub') {
    const rendered = (err as HubError).render();
    ctx.status = rendered.status;
    for (const [name, value] of Object.entries(rendered.headers ?? {})) ctx.set(name, value);
    if (!rendered.body) {
      // Koa turns a null body into a 204 when set after a status (and into "null" under a JSON
      // type): clear the type, then the body, then set the status again.
      ctx.remove('Content-Type');
      ctx.body = null;
      ctx.status = rendered.status;
      ctx.length = 0;
    } else if ('text' in rendered.body) {
      ctx.type = 'text/plain; charset=utf-8';
      ctx.body = rendered.body.text;
    } else {
      ctx.body = rendered.body.json;
    }
    return;
  }
  if (kind === 'client') {
    ctx.status = (err as { status: number }).status;
    ctx.body = { error: (err as Error).message };
    return;
  }
  if (kind === 'refused') {
    // The database's words without the value they may quote (a tenant's data): the code and the names locate it.
    logger().info(databaseErrorFields(err), 'database refused a value of the request');
    ctx.status = 400;
    ctx.body = refusedByDatabase(err);
    return;
  }
  if (kind === 'unavailable') {
    // Stopped, restarting or out of connections: the request can be retried once it is back
    // (readiness says when); not a defect of the hub, so no stack in the log.
    logger().warn({ err: loggableMessage(err) }, 'database unavailable');
    ctx.status = 503;
    ctx.set('Retry-After', '1');
    ctx.body = {
      error: 'database unavailable',
      hint: isConnectionWaitTimeout(err)
        ? 'no database connection became free in time (svc.datasource.connect-timeout): the database is not answering, or every connection of the pool is busy; retry shortly'
        : 'retry shortly; GET /q/health/ready says when it is back',
    };
    return;
  }
  if (kind === 'rolledBack') {
    // PostgreSQL ended the transaction to break a deadlock or a serialisation conflict with
    // another (class 40): its work is undone, and the same request sent again may pass.
    const code = (err as { code: string }).code;
    logger().warn({ code, err: loggableMessage(err) }, 'database rolled a transaction of the request back');
    ctx.status = 503;
    ctx.set('Retry-After', '1');
    ctx.body = {
      error: `the database rolled the request's transaction back to resolve a conflict with another transaction (${code === '40P01' ? 'deadlock detected' : 'could not serialize'}, database error ${code})`,
      hint: 'nothing that transaction wrote was kept: retry the request',
    };
    return;
  }
  if (kind === 'notMigrated') {
    // The database's words name what is missing (`column "x" does not exist`): for the operator.
    logger().warn({ code: (err as { code: string }).code, err: loggableMessage(err) }, 'the database lacks a table, column or function the request needs');
    ctx.status = 503;
    ctx.body = { error: 'database not migrated: run svc-hub migrate', hint: 'see GET /api/platform/migrations' };
    return;
  }
  logger().error({ err }, 'request failed');
  ctx.status = 500;
  ctx.body = { error: 'internal error', requestId: ctx.state.requestId };
}

type ErrorKind = 'hub' | 'client' | 'refused' | 'unavailable' | 'rolledBack' | 'notMigrated' | 'internal';

/** What a thrown error is, in the order `answerError` answers it: the classification is this module's alone. */
function errorKind(err: unknown): ErrorKind {
  if (err instanceof HubError) return 'hub';
  if (exposedClientError(err)) return 'client';
  if (refusedValueCode(err)) return 'refused';
  if (isDatabaseUnavailable(err)) return 'unavailable';
  if (rolledBack(err)) return 'rolledBack';
  if (notMigrated(err)) return 'notMigrated';
  return 'internal';
}

/** The status `answerError` answers a thrown error with (the audit trail records the same). */
export function errorStatus(err: unknown): number {
  const kind = errorKind(err);
  if (kind === 'hub') return (err as HubError).render().status;
  if (kind === 'client') return (err as { status: number }).status;
  return { refused: 400, unavailable: 503, rolledBack: 503, notMigrated: 503, internal: 500 }[kind];
}

/** Whether `answerError` would answer `err` as the database being unreachable (its 503 `database unavailable`). */
export function databaseUnreachable(err: unknown): boolean {
  return errorKind(err) === 'unavailable';
}

/** Koa's own HTTP errors (malformed JSON, body too large): a 4xx whose message is the client's to see. */
function exposedClientError(err: unknown): boolean {
  const { status, expose } = err as { status?: number; expose?: boolean };
  return typeof status === 'number' && status >= 400 && status < 500 && expose === true;
}

/** A transaction PostgreSQL rolled back to break a deadlock (40P01) or a serialisation conflict (40001). */
function rolledBack(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return code === '40P01' || code === '40001';
}

/**
 * What the hub's statements name and the database lacks: an undefined table (42P01), column (42703)
 * or function (42883). The hub runs on a database whose migrations are pending, half applied, or
 * altered by hand.
 */
const NOT_MIGRATED_CODES = new Set(['42P01', '42703', '42883']);

function notMigrated(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && NOT_MIGRATED_CODES.has(code);
}

/**
 * Koa turns an object body into JSON only once every middleware has returned, outside this mapper
 * and the access log: a body that cannot be serialised (a string past V8's limit, a BigInt) was a
 * 500 nobody logged under an access line saying 200. Serialised here, such a failure is mapped,
 * logged and counted like any other. The Content-Type Koa set for the object stays. A list the
 * database serialised (`JsonText`) is sent as it is, as JSON.
 */
export function serialiseJsonBody(ctx: Context): void {
  const body: unknown = ctx.body;
  if (body instanceof JsonText) {
    answerJsonText(ctx, body);
    return;
  }
  if (body === null || typeof body !== 'object' || ctx.method === 'HEAD' || !ctx.writable) return;
  if (Buffer.isBuffer(body) || body instanceof Blob || body instanceof ReadableStream || body instanceof Response) return;
  if (typeof (body as { pipe?: unknown }).pipe === 'function') return;
  ctx.body = JSON.stringify(body);
}

/**
 * A list serialised by the database (src/db/json-text.ts) as the answer, as it is: its text under
 * JSON's media type (the header set as Koa's `ctx.type` would set it, without looking the type up).
 */
export function answerJsonText(ctx: Context, body: JsonText): void {
  ctx.set('Content-Type', 'application/json; charset=utf-8');
  ctx.body = body.text;
}

/** A PostgreSQL refusal of a value (src/validation/database-refusals.ts) as the caller's 400 `{error, hint}`. */
function refusedByDatabase(err: unknown): { error: string; hint: string } | undefined {
  const code = refusedValueCode(err);
  return code ? { error: describeRefusal(code), hint: 'check the values sent: their types, ranges and characters' } : undefined;
}

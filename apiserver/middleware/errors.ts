import type { Context, Next } from 'koa';
import { HubError } from '../../src/errors.js';
import { logger } from '../../src/observability/logger.js';

/**
 * The one error mapper: every thrown error becomes the status and body the spec fixes. HubErrors
 * render themselves; Koa's own HTTP errors (malformed JSON, body too large) keep their status with
 * a JSON message; PostgreSQL's refusals of a value (classes 22 and 54) are a 400; anything else is
 * a 500 with no detail (the stack goes to the log, never the client).
 */
export async function errorMapper(ctx: Context, next: Next): Promise<void> {
  try {
    await next();
  } catch (err) {
    if (err instanceof HubError) {
      const rendered = err.render();
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
    const status = (err as { status?: number; expose?: boolean }).status;
    if (typeof status === 'number' && status >= 400 && status < 500 && (err as { expose?: boolean }).expose) {
      ctx.status = status;
      ctx.body = { error: (err as Error).message };
      return;
    }
    const refused = refusedByDatabase(err);
    if (refused) {
      logger().info({ code: (err as { code?: string }).code, err: (err as Error).message }, 'database refused a value of the request');
      ctx.status = 400;
      ctx.body = refused;
      return;
    }
    if ((err as { code?: string }).code === '42P01') {
      // A table that does not exist yet: the hub runs on a database whose migrations are pending.
      ctx.status = 503;
      ctx.body = { error: 'database not migrated: run svc-hub migrate', hint: 'see GET /api/platform/migrations' };
      return;
    }
    logger().error({ err }, 'request failed');
    ctx.status = 500;
    ctx.body = { error: 'internal error', requestId: ctx.state.requestId };
  }
}

/**
 * PostgreSQL errors that say a value of the request cannot be stored or compared, not that the hub
 * failed: class 22 (data exception: invalid text 22P02, untranslatable character 22P05, character
 * not in repertoire 22021, numeric out of range 22003, datetime 22007/22008, string too long 22001)
 * and class 54 (program limit exceeded: an index row too large 54000, too complex 54001). They are
 * the caller's 400 `{error, hint}`; the database's own text is not repeated (it may quote stored data).
 */
export function refusedByDatabase(err: unknown): { error: string; hint: string } | undefined {
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string' || !/^(22|54)[0-9A-Z]{3}$/.test(code) || !(err instanceof Error) || !('severity' in err)) return undefined;
  const what: Record<string, string> = {
    '22P02': 'a value is not valid for its type',
    '22P05': 'a value holds a character the database cannot store',
    '22021': 'a value holds a character the database cannot store',
    '22003': 'a number is out of range',
    '22007': 'a date or time is not valid',
    '22008': 'a date or time is out of range',
    '22001': 'a value is too long',
    '54000': 'a value is too large to be stored or indexed',
    '54001': 'a value is too complex',
  };
  return { error: `${what[code] ?? 'a value cannot be stored'} (database error ${code})`, hint: 'check the values sent: their types, ranges and characters' };
}

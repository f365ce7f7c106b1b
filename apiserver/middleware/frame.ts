import type { Context, Middleware, Next } from 'koa';
import { logRequest } from './access-log.js';
import { answerError, serialiseJsonBody } from './errors.js';
import { inRequestContext } from './request-context.js';

/**
 * What every request goes through around the routes, in this order (outermost first): its id and
 * logging context (and span, with tracing on), its access line once it has ended, the error mapping
 * of anything the rest threw (the JSON body turned into its text here, so that a body that cannot be
 * serialised is a mapped and logged 500), and the body of an answer no route gave (a 404 or 405).
 * One middleware, not four: each step of Koa's chain costs every request a promise, a bound function
 * and, with the logging context's AsyncLocalStorage, an async hook's work.
 */
export const requestFrame: Middleware = inRequestContext(served);

async function served(ctx: Context, next: Next): Promise<void> {
  const started = process.hrtime.bigint();
  try {
    await next();
    answerUnanswered(ctx);
    serialiseJsonBody(ctx);
  } catch (err) {
    answerError(ctx, err);
  } finally {
    logRequest(ctx, started);
  }
}

/**
 * What no route answered: an unknown path is a 404 `{error: "not found"}`, a path served for other
 * methods a 405 `{error}` naming them (the router sets the status and `Allow` once everything
 * downstream has run, so the body is written here, after it).
 */
function answerUnanswered(ctx: Context): void {
  if (ctx.body !== undefined) return;
  if (ctx.status === 404) {
    ctx.status = 404;
    ctx.body = { error: 'not found' };
  } else if (ctx.status === 405) {
    ctx.body = { error: `method ${ctx.method} is not allowed on this path; it takes ${ctx.response.get('Allow') || 'no method'}` };
  }
}

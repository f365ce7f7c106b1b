import { randomUUID } from 'node:crypto';
import type { Context, Middleware, Next } from 'koa';
import { runWithContext } from '../../src/observability/context.js';
import type { Span } from '@opentelemetry/api';
import { context, extractContext, inSpan, SpanKind, tracingOn } from '../../src/observability/tracing.js';

const REQUEST_ID = /^[\w.:-]{1,128}$/;

/**
 * `inner`, run in the request's context: every request gets an id (`X-Request-Id`, taken from the
 * caller when it is sane), a logging context that later middleware fills with the tenant, and a server
 * span continuing the caller's `traceparent`. One middleware instead of two in a row (the hub's
 * frame, apiserver/middleware/frame.ts): no step of Koa's chain and no closure per request between them.
 */
export function inRequestContext(inner: Middleware): Middleware {
  return (ctx: Context, next: Next) => {
    const given = ctx.get('X-Request-Id');
    const requestId = REQUEST_ID.test(given) ? given : randomUUID();
    ctx.state.requestId = requestId;
    ctx.set('X-Request-Id', requestId);
    // With tracing off there is no caller's context to continue and no span to name: the rest of the request alone.
    if (!tracingOn()) return runWithContext({ requestId }, inner, ctx, next);
    return runWithContext({ requestId }, traced, ctx, next, inner);
  };
}

function traced(ctx: Context, next: Next, inner: Middleware): Promise<void> {
  return context.with(extractContext(ctx.headers), () =>
    // Named by the method until the route is known (OpenTelemetry's rule for HTTP server spans):
    // the path as sent is the caller's to make up, and a span name per path (every 404 its own)
    // grows a tracing backend's list of operations without end. The path is `url.path`.
    inSpan(
      ctx.method,
      { 'http.request.method': ctx.method, 'url.path': ctx.path },
      async (span: Span) => {
        await inner(ctx, next);
        const routePath = ctx.state.routePath as string | undefined;
        if (routePath) span.updateName(`${ctx.method} ${routePath}`);
        span.setAttribute('http.response.status_code', ctx.status);
        if (routePath) span.setAttribute('http.route', routePath);
      },
      SpanKind.SERVER,
    ),
  );
}

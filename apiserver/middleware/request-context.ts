import { randomUUID } from 'node:crypto';
import type { Context, Next } from 'koa';
import { runWithContext } from '../../src/observability/context.js';
import type { Span } from '@opentelemetry/api';
import { context, extractContext, inSpan, SpanKind, tracingOn } from '../../src/observability/tracing.js';

const REQUEST_ID = /^[\w.:-]{1,128}$/;

/**
 * Gives every request an id (`X-Request-Id`, taken from the caller when it is sane), a logging
 * context that later middleware fills with the tenant, and a server span continuing the caller's
 * `traceparent`.
 */
export async function requestContext(ctx: Context, next: Next): Promise<void> {
  const given = ctx.get('X-Request-Id');
  const requestId = REQUEST_ID.test(given) ? given : randomUUID();
  ctx.state.requestId = requestId;
  ctx.set('X-Request-Id', requestId);
  const handle = async (span: Span) => {
    await next();
    const routePath = ctx.state.routePath as string | undefined;
    if (routePath) span.updateName(`${ctx.method} ${routePath}`);
    span.setAttribute('http.response.status_code', ctx.status);
    if (routePath) span.setAttribute('http.route', routePath);
  };
  await runWithContext({ requestId }, () =>
    // With tracing off there is no caller's context to continue and no span to name: the rest of the request alone.
    tracingOn()
      ? context.with(extractContext(ctx.headers), () =>
          // Named by the method until the route is known (OpenTelemetry's rule for HTTP server spans):
          // the path as sent is the caller's to make up, and a span name per path (every 404 its own)
          // grows a tracing backend's list of operations without end. The path is `url.path`.
          inSpan(ctx.method, { 'http.request.method': ctx.method, 'url.path': ctx.path }, handle, SpanKind.SERVER),
        )
      : next(),
  );
}

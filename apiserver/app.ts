import Koa from 'koa';
import type { AreaServices } from '../src/runtime/services.js';
import type { RouteDecl } from './route.js';
import { bodyBytesReader } from './body-bytes.js';
import { requestFrame } from './middleware/frame.js';
import { openApiDocument } from './openapi.js';
import { mountRoutes } from './router.js';
import { dispatchOf } from './route-index.js';
import { bffRoutes } from './routes/bff/bff.js';
import { connectorRunRoutes } from './routes/connectors/connector-runs.js';
import { connectorToolRoutes } from './routes/connectors/connector-tools.js';
import { runRoutes } from './routes/connectors/runs.js';
import { consoleRoutes } from './routes/operations/console.js';
import { operationRoutes } from './routes/operations/operations.js';
import { eventStreamRoutes } from './routes/events/event-stream.js';
import { eventRoutes } from './routes/events/events.js';
import { platformRoutes } from './routes/platform/platform.js';
import { auditRoutes } from './routes/platform/audit.js';
import { defaultScopeRoutes } from './routes/platform/default-scope.js';
import { adminRoutes } from './routes/admin/admin.js';
import { hookRoutes } from './routes/platform/hooks.js';
import { secretRoutes } from './routes/platform/secrets.js';
import { ragRoutes } from './routes/retrieval/rag.js';
import { exportRoutes } from './routes/exports/exports.js';
import { connectorRoutes } from './routes/connectors/connectors.js';
import { emailRuleRoutes } from './routes/email/email-rules.js';
import { entityRoutes } from './routes/entities/entities.js';
import { processRoutes } from './routes/processes/processes.js';
import { workflowRoutes } from './routes/workflows/workflows.js';
import { integrationRoutes } from './routes/webhooks/integrations.js';
import { deliveryRoutes } from './routes/webhooks/deliveries.js';

/** Every route of the API; an area adds its file's declarations here. */
export function allRoutes(): RouteDecl[] {
  return [...operationRoutes, ...platformRoutes, ...auditRoutes, ...defaultScopeRoutes, ...bffRoutes, ...eventRoutes, ...eventStreamRoutes, ...secretRoutes, ...hookRoutes, ...adminRoutes, ...connectorRoutes, ...entityRoutes, ...workflowRoutes, ...processRoutes, ...emailRuleRoutes, ...integrationRoutes, ...deliveryRoutes, ...runRoutes, ...connectorRunRoutes, ...connectorToolRoutes, ...ragRoutes, ...exportRoutes];
}

export interface ApiOptions {
  version: string;
  /** Extra declarations (tests mount probes through the real pipeline). */
  extraRoutes?: RouteDecl[];
  /** Serve these instead of allRoutes() (`svc-hub dispatch` serves only the operations routes). */
  routes?: RouteDecl[];
  /** Tests: told of every answer once the middleware has made it (status, type, body), before it is sent. */
  observe?: (ctx: Koa.Context) => void;
}

/**
 * The route table the router mounts: the API's declarations (or `options.routes`), the extras, and
 * the console's own (/q/openapi, /q/swagger-ui). The route fuzzer (test/fuzz) drives this same list.
 */
export function routeTable(options: Pick<ApiOptions, 'routes' | 'extraRoutes'>, document: () => Record<string, unknown>): RouteDecl[] {
  // A process serving only the operations routes (`svc-hub dispatch`, the operator) has no API to describe: no console.
  return [...(options.routes ?? allRoutes()), ...(options.extraRoutes ?? []), ...(options.routes ? [] : consoleRoutes(document))];
}

/**
 * The Koa application. Middleware, top to bottom: the request's frame (request id + trace span, access
 * log, the error mapping, the body of a 404 or 405: apiserver/middleware/frame.ts), the routes (each
 * with its gate, then its body read, then validation).
 */
export function createApi(services: AreaServices, options: ApiOptions): Koa {
  const routes = [...(options.routes ?? allRoutes()), ...(options.extraRoutes ?? [])];
  let document: Record<string, unknown> | undefined;
  const documentOnce = () => {
    document ??= openApiDocument(routes, { version: options.version, devBypass: services.config.bool('svc.security.dev-bypass') });
    return document;
  };
  const app = new Koa({ proxy: false });
  app.silent = true; // the error mapper logs; Koa's default handler would print stacks to stderr
  const observe = options.observe;
  if (observe) {
    app.use(async (ctx, next) => {
      await next();
      observe(ctx);
    });
  }
  // What a client is told: the limit, so that it knows what to send instead.
  const tooLarge = `body too large: more than the ${services.config.bytes('svc.http.body-limit').toLocaleString('en-US')} bytes a body may hold (svc.http.body-limit)`;
  app.use(requestFrame);
  // A body that cannot be read: a 413 past the limit, else a 400 saying why.
  const refuseBody = (err: Error, ctx: Koa.Context): never =>
    ctx.throw(/too large/i.test(err.message) ? 413 : 400, /too large/i.test(err.message) ? tooLarge : `body is not valid: ${err.message}`);
  // Read by the router once the caller is authenticated and passed the route's gate and rate limit, for a route that
  // takes a body: an anonymous caller could otherwise make the hub read and hold svc.http.body-limit per request. Its
  // bytes as they arrive (apiserver/body-bytes.ts), in a text media type only, up to the limit (decompressed, for a
  // compressed body); a client gone before the end of it ends the request.
  const readBody = bodyBytesReader(services.config.bytes('svc.http.body-limit'), refuseBody);
  const router = mountRoutes(routeTable(options, documentOnce), services, readBody);
  app.use(dispatchOf(router) as Koa.Middleware);
  app.use(router.allowedMethods());
  return app;
}

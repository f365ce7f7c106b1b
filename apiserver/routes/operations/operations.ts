import { loggableMessage } from '../../../src/observability/database-errors.js';
import { logger } from '../../../src/observability/logger.js';
import { registry } from '../../../src/observability/metrics.js';
import { route, type RouteDecl } from '../../route.js';

type Check = { name: string; status: 'UP' | 'DOWN'; data?: Record<string, unknown> };

const healthSchema = {
  type: 'object',
  required: ['status', 'checks'],
  properties: {
    status: { enum: ['UP', 'DOWN'] },
    checks: {
      type: 'array',
      items: { type: 'object', required: ['name', 'status'], properties: { name: { type: 'string' }, status: { enum: ['UP', 'DOWN'] }, data: { type: 'object' } } },
    },
  },
};

const healthResponses = {
  200: { description: 'UP', schema: healthSchema },
  503: { description: 'DOWN, with the failing checks', schema: healthSchema },
};

function answer(ctx: { status: number }, checks: Check[]) {
  const up = checks.every((c) => c.status === 'UP');
  ctx.status = up ? 200 : 503;
  return { status: up ? 'UP' : 'DOWN', checks };
}

type Services = Parameters<RouteDecl['handler']>[0]['services'];

async function readinessChecks(services: Services): Promise<Check[]> {
  const added = (services.readinessChecks ?? []).map((check) => check());
  return [...(await sharedStorageChecks(services)), ...added];
}

/** The database checks under way, by hub: a probe that arrives meanwhile takes their answer. */
const storageChecking = new WeakMap<Services, Promise<Check[]>>();

/**
 * The database checks, one run at a time per hub: probes arriving while one runs share it, so that
 * the callers of `/q/health*` (no authentication) take at most one connection of the pool, however
 * many they send at once. Each check gives up after `svc.health.database-timeout`, so none holds the
 * probes after it.
 */
function sharedStorageChecks(services: Services): Promise<Check[]> {
  let running = storageChecking.get(services);
  if (!running) {
    running = storageChecks(services).finally(() => storageChecking.delete(services));
    storageChecking.set(services, running);
  }
  return running;
}

/** The hub's own timeout message (no address, no user name in it): shown as it is. */
const OWN_TIMEOUT = /^the database did not answer within \d+ ms$/;
/** When each failure text was last logged: a flood of probes during an outage logs it once a minute. */
const failureLogged = new Map<string, number>();

/**
 * What a failed check shows to the callers of `/q/health*`, who need no credentials: the hub's own
 * timeout text, else `shown`; the driver's message (`connect ECONNREFUSED 10.0.3.7:5432`, `getaddrinfo
 * ENOTFOUND db.internal`, `password authentication failed for user "svc"`) names addresses and users
 * of the deployment, so it goes to the log (warn, once a minute per text) instead.
 */
function publicFailure(err: unknown, check: string, shown: string): string {
  const message = err instanceof Error ? err.message : String(err);
  if (OWN_TIMEOUT.test(message)) return message;
  const now = Date.now();
  if ((failureLogged.get(message) ?? 0) <= now - 60_000) {
    if (failureLogged.size > 100) failureLogged.clear();
    failureLogged.set(message, now);
    logger().warn({ check, err: loggableMessage(err) }, `health check ${check} failed: ${shown}`);
  }
  return shown;
}

async function storageChecks(services: Services): Promise<Check[]> {
  try {
    await services.ping();
  } catch (err) {
    return [
      { name: 'database', status: 'DOWN', data: { error: publicFailure(err, 'database', 'database unreachable') } },
      { name: 'migrations', status: 'DOWN', data: { error: 'database unreachable' } },
    ];
  }
  try {
    const status = await services.migrationStatus(services.config.duration('svc.health.database-timeout'));
    const pending = status.reduce((n, s) => n + s.pending, 0);
    return [
      { name: 'database', status: 'UP' },
      { name: 'migrations', status: pending === 0 ? 'UP' : 'DOWN', data: { pending } },
    ];
  } catch (err) {
    return [
      { name: 'database', status: 'UP' },
      { name: 'migrations', status: 'DOWN', data: { error: publicFailure(err, 'migrations', 'the migration history cannot be read') } },
    ];
  }
}

export const operationRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/q/health', operationId: 'health', summary: 'Overall health with all checks', tags: ['Operations'], auth: 'public',
    responses: healthResponses,
    handler: async ({ services, ctx }) => answer(ctx, [{ name: 'liveness', status: 'UP' }, ...(await readinessChecks(services))]),
  }),
  route({
    method: 'GET', path: '/q/health/live', operationId: 'healthLive', summary: 'Liveness: the process answers', tags: ['Operations'], auth: 'public',
    responses: healthResponses,
    handler: ({ ctx }) => answer(ctx, [{ name: 'liveness', status: 'UP' }]),
  }),
  route({
    method: 'GET', path: '/q/health/ready', operationId: 'healthReady', summary: 'Readiness: database reachable, migrations done, and the checks the role adds (the operator: reconciling while it leads)', tags: ['Operations'], auth: 'public',
    responses: healthResponses,
    handler: async ({ services, ctx }) => answer(ctx, await readinessChecks(services)),
  }),
  route({
    method: 'GET', path: '/q/metrics', operationId: 'metrics', summary: 'Metrics in the Prometheus text exposition format', tags: ['Operations'], auth: 'public',
    responses: { 200: { description: 'Text exposition format', contentType: 'text/plain', schema: { type: 'string' } } },
    handler: async ({ ctx }) => {
      ctx.type = registry.contentType;
      ctx.body = await registry.metrics();
      return undefined;
    },
  }),
];

import type { Context, Next } from 'koa';
import { logger } from '../../src/observability/logger.js';

/** One line per request, after it ends: method, path, status, duration. Never headers or bodies. */
export async function accessLog(ctx: Context, next: Next): Promise<void> {
  const started = process.hrtime.bigint();
  try {
    await next();
  } finally {
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    const line = { method: ctx.method, path: ctx.path, status: ctx.status, ms: Math.round(ms * 10) / 10 };
    if (ctx.path.startsWith('/q/')) logger().debug(line, 'request');
    else logger().info(line, 'request');
  }
}

import type { Context, Next } from 'koa';
import { logger } from '../../src/observability/logger.js';

/** The most of a path a line keeps: a path of 16 KiB (Node's header limit) would be a 16 KiB line. */
export const LOGGED_PATH_MAX = 2_048;

/** One line per request, after it ends: method, path, status, duration. Never headers or bodies. */
export async function accessLog(ctx: Context, next: Next): Promise<void> {
  const started = process.hrtime.bigint();
  try {
    await next();
  } finally {
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    const path = ctx.path.length > LOGGED_PATH_MAX ? `${ctx.path.slice(0, LOGGED_PATH_MAX)}… (${ctx.path.length} characters)` : ctx.path;
    const line = { method: ctx.method, path, status: ctx.status, ms: Math.round(ms * 10) / 10 };
    if (ctx.path.startsWith('/q/')) logger().debug(line, 'request');
    else logger().info(line, 'request');
  }
}

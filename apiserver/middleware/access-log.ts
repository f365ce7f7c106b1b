import type { Context } from 'koa';
import { logger } from '../../src/observability/logger.js';

/** The most of a path a line keeps: a path of 16 KiB (Node's header limit) would be a 16 KiB line. */
export const LOGGED_PATH_MAX = 2_048;

/**
 * One line per request, after it ends: method, path, status, duration since `startedNs`
 * (`process.hrtime.bigint()` when it began). Never headers or bodies.
 */
export function logRequest(ctx: Context, startedNs: bigint): void {
  const ms = Number(process.hrtime.bigint() - startedNs) / 1e6;
  const full = ctx.path;
  const path = full.length > LOGGED_PATH_MAX ? `${full.slice(0, LOGGED_PATH_MAX)}… (${full.length} characters)` : full;
  const line = { method: ctx.method, path, status: ctx.status, ms: Math.round(ms * 10) / 10 };
  if (full.startsWith('/q/')) logger().debug(line, 'request');
  else logger().info(line, 'request');
}

import { Readable } from 'node:stream';
import type Koa from 'koa';
import { routeTable } from '../../apiserver/app.js';
import type { RouteDecl } from '../../apiserver/route.js';
import type { Now } from '../../src/clock/clock.js';
import { Config } from '../../src/config/config.js';
import { startHub, type Hub } from '../../cmd/compose.js';
import { createTestDatabase } from './database.js';
import { DeclaredAnswers, mediaType } from './declared-answers.js';

export interface TestHub extends Hub {
  url: string;
  ownerUrl: string;
  config: Config;
}

type Overrides = Record<string, string | number | boolean>;

/** Test configuration: nothing from the developer's environment, a fresh database, a free port. */
export async function testConfig(overrides: Overrides = {}): Promise<Config> {
  const ownerUrl = (overrides['svc.datasource.url'] as string | undefined) ?? (await createTestDatabase());
  return Config.load({
    env: {},
    overrides: { 'svc.datasource.url': ownerUrl, 'svc.http.port': 0, 'svc.log.level': 'silent', ...overrides },
  });
}

/**
 * A hub on a free loopback port over a fresh database (dev bypass unless an issuer is given).
 * Every answer it gives is held to its OpenAPI document (`declaredOnly`): stopping it fails, listing
 * them, when one was not as declared.
 */
export async function startTestHub(overrides: Overrides = {}, extraRoutes?: RouteDecl[], options: { background?: boolean; now?: Now } = {}): Promise<TestHub> {
  const config = await testConfig(overrides);
  const judge = declaredOnly(extraRoutes);
  const hub = await startHub(config, { api: true, background: options.background ?? false, extraRoutes, now: options.now, observe: judge.observe });
  const stop = hub.stop.bind(hub);
  return Object.assign(hub, {
    url: hub.url!,
    ownerUrl: config.string('svc.datasource.url'),
    config,
    async stop() {
      await stop();
      judge.verdict();
    },
  });
}

/**
 * A judge of a hub's answers against the OpenAPI document of its route table (test/harness/declared-answers.ts,
 * as the fuzzer's and the tenancy matrix's): every answer of every suite that starts a test hub, the
 * success answers of realistic requests included. A streamed body (an event stream, a CSV download)
 * is judged by its status and media type only. `verdict()` throws, naming each answer that was not
 * as declared (at most 20).
 */
export function declaredOnly(extraRoutes?: RouteDecl[]): { observe: (ctx: Koa.Context) => void; verdict: () => void } {
  const declared = new DeclaredAnswers(routeTable({ extraRoutes }, () => ({})));
  const problems: string[] = [];
  const probes = new Set(extraRoutes ?? []);
  return {
    observe(ctx) {
      const decl = declared.operationFor(ctx.method, ctx.path);
      // No route of the table (an unknown path), a suite's own probe route (its declarations are the
      // suite's business, not the product's), or a client gone before its answer: not judged.
      if (!decl || probes.has(decl) || ctx.req.socket.destroyed) return;
      const body = ctx.body;
      const text = body === undefined || body === null || body instanceof Readable ? '' : Buffer.isBuffer(body) ? body.toString('utf8') : typeof body === 'string' ? body : JSON.stringify(body);
      const problem = declared.problem(decl, ctx.path, { status: ctx.status, type: mediaType(ctx.response.get('Content-Type')), body: text });
      if (problem && problems.length < 20) problems.push(`${ctx.method} ${ctx.path}: ${problem} (${decl.method} ${decl.path}): ${text.slice(0, 300)}`);
    },
    verdict() {
      if (problems.length) throw new Error(`answers not as the OpenAPI document declares them:\n${problems.join('\n')}`);
    },
  };
}

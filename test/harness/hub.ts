import type { RouteDecl } from '../../apiserver/route.js';
import type { Now } from '../../src/clock/clock.js';
import { Config } from '../../src/config/config.js';
import { startHub, type Hub } from '../../cmd/compose.js';
import { createTestDatabase } from './database.js';

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

/** A hub on a free loopback port over a fresh database (dev bypass unless an issuer is given). */
export async function startTestHub(overrides: Overrides = {}, extraRoutes?: RouteDecl[], options: { background?: boolean; now?: Now } = {}): Promise<TestHub> {
  const config = await testConfig(overrides);
  const hub = await startHub(config, { api: true, background: options.background ?? false, extraRoutes, now: options.now });
  return Object.assign(hub, { url: hub.url!, ownerUrl: config.string('svc.datasource.url'), config });
}

import { credentialsFromEnv } from '../../../demo-source/credentials.js';
import { type DemoSource, startDemoSource } from '../../../demo-source/server.js';
import { TokenBucket } from '../../rate-limit.js';
import type { Auth, ConnectorSpec, EndpointSpec, Page, Pagination } from '../../types.js';
import { type EngineContext, readEndpoint } from '../read.js';

/** The demo source's fixed credentials (its defaults, whatever DEMO_* says in this environment). */
const DEMO_CREDENTIALS = credentialsFromEnv({});

/**
 * The engine's fixture: the demo source on 127.0.0.1 (a free port) with its test-only fault routes
 * and request recorder, over `rows` partner records, with the fixed demo credentials.
 */
export function startFixtureSource(rows = 95): Promise<DemoSource> {
  return startDemoSource({ port: 0, host: '127.0.0.1', rows, log: () => {}, credentials: DEMO_CREDENTIALS, faults: true, record: true });
}

/** Connector auth for each scheme the demo source asks for; engineContext resolves their *_env names. */
export const DEMO_AUTH = {
  basic: { kind: 'basic', username: DEMO_CREDENTIALS.username, password_env: 'DEMO_PASSWORD' },
  bearer: { kind: 'bearer', token_env: 'DEMO_BEARER_TOKEN' },
  apiKey: { kind: 'api-key', in: 'header', name: 'X-API-Key', value_env: 'DEMO_API_KEY' },
} as const satisfies Record<string, Auth>;

const DEMO_SECRETS: Record<string, string> = {
  DEMO_PASSWORD: DEMO_CREDENTIALS.password,
  DEMO_BEARER_TOKEN: DEMO_CREDENTIALS.bearerToken,
  DEMO_API_KEY: DEMO_CREDENTIALS.apiKey,
};

/** A connector model for the engine's tests. */
export function connectorSpec(baseUrl: string, overrides: Partial<ConnectorSpec> = {}): ConnectorSpec {
  return {
    id: '00000000-0000-4000-8000-000000000001',
    name: 'test-source',
    tenantId: 1,
    connectorType: 'rest-generic',
    scopes: ['partners'],
    baseUrl,
    auth: { kind: 'none' },
    rateLimit: { count: 1000, windowMs: 1000 },
    graphqlPath: '/graphql',
    headers: [],
    endpoints: [],
    ...overrides,
  };
}

export function endpointSpec(path: string, pagination: Pagination, overrides: Partial<EndpointSpec> = {}): EndpointSpec {
  return {
    id: 'partners',
    uuid: '00000000-0000-4000-8000-000000000002',
    enabled: true,
    method: 'GET',
    path,
    graphql: false,
    pagination,
    incremental: { mode: 'full' },
    target: { kind: 'hybrid', table: 'ext.partners', unique_key: '$.id', promote: [] },
    ...overrides,
  };
}

/**
 * A context with fast retries, a generous bucket and a fixed credential map: `values`, plus the demo
 * source's secrets under the names DEMO_AUTH uses (DEMO_PASSWORD, DEMO_BEARER_TOKEN, DEMO_API_KEY).
 */
export function engineContext(values: Record<string, string> = {}, overrides: Partial<EngineContext> = {}): EngineContext {
  const known: Record<string, string> = { ...DEMO_SECRETS, ...values };
  return {
    resolveCredential: async (name) => (Object.hasOwn(known, name) ? known[name] : undefined),
    limiter: new TokenBucket({ count: 1000, windowMs: 1000 }),
    retry: { attempts: 5, baseDelayMs: 5, maxDelayMs: 20 },
    ...overrides,
  };
}

/** Reads every page; answers the pages and the error the read ended with, if any. */
export async function readAll(connector: ConnectorSpec, endpoint: EndpointSpec, ctx: EngineContext): Promise<{ pages: Page[]; items: unknown[]; error?: Error }> {
  const pages: Page[] = [];
  try {
    for await (const page of readEndpoint(connector, endpoint, ctx)) pages.push(page);
    return { pages, items: pages.flatMap((p) => p.items) };
  } catch (err) {
    return { pages, items: pages.flatMap((p) => p.items), error: err as Error };
  }
}

/** The ids of records read, in order. */
export function ids(items: unknown[]): number[] {
  return items.map((i) => (i as { id: number }).id);
}

export function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i + 1);
}

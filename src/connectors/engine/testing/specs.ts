import { TokenBucket } from '../../rate-limit.js';
import type { ConnectorSpec, EndpointSpec, Page, Pagination } from '../../types.js';
import { type EngineContext, readEndpoint } from '../read.js';

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

/** A context with fast retries, a generous bucket and a fixed environment/credential map. */
export function engineContext(values: Record<string, string> = {}, overrides: Partial<EngineContext> = {}): EngineContext {
  return {
    resolveCredential: async (name) => values[name],
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

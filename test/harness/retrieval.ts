import { indexedAnything, type RetrievalServices } from '../../src/retrieval/services.js';

/**
 * A connector of the demo source's `/open/partners` (offset pages of 50) into `table`, tagged with
 * `scopes`: what the retrieval suites ingest and search.
 */
export function demoPartnersConnector(name: string, scopes: string[], table: string, baseUrl: string): Record<string, unknown> {
  return {
    apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', scopes,
    spec: {
      base_url: baseUrl,
      endpoints: [{
        id: 'all', path: '/open/partners',
        pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, response_path: '$.data', total_path: '$.total' },
        target: { kind: 'hybrid', table, unique_key: '$.id', promote: [{ name: 'name', path: '$.name', type: 'text' }, { name: 'country', path: '$.country', type: 'text' }, { name: 'city', path: '$.city', type: 'text' }] },
      }],
    },
  };
}

/** Indexer passes (each bounded in time) until nothing is left to index. */
export async function indexAll(retrieval: Pick<RetrievalServices, 'indexPass'>): Promise<void> {
  for (;;) {
    // A pass whose time ran out while it copied stored vectors (a busy machine) embedded nothing, yet left work.
    if (!indexedAnything(await retrieval.indexPass())) return;
  }
}

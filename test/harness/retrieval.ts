import { randomUUID } from 'node:crypto';
import type pg from 'pg';
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

/**
 * A connector `name` of tenant `tenantId` declaring `scope`, registered as the writer of `tables`
 * (`ext.<name>`), as an applied connector and its runs leave them (owner SQL, no manifest behind it):
 * for a suite that stores a schema card by hand, since the analytic doors read no card of a scope
 * nothing of the tenant declares (docs/retrieval.md, "Analytic chat").
 */
export async function declaringConnector(owner: Pick<pg.Client, 'query'>, tenantId: number, name: string, scope: string, tables: string[] = []): Promise<void> {
  const id = randomUUID();
  await owner.query(`insert into connectors.connectors (id, tenant_id, name, connector_type, scopes, manifest, spec) values ($1, $2, $3, 'rest-generic', array[$4], '{}', '{}')`, [id, tenantId, name, scope]);
  for (const table of tables) {
    await owner.query('insert into connectors.ext_tables (tenant_id, connector_id, endpoint_uuid, table_name) values ($1, $2, $3, $4)', [tenantId, id, randomUUID(), table]);
  }
}

/** Indexer passes (each bounded in time) until nothing is left to index. */
export async function indexAll(retrieval: Pick<RetrievalServices, 'indexPass'>): Promise<void> {
  for (;;) {
    // A pass whose time ran out while it copied stored vectors (a busy machine) embedded nothing, yet left work.
    if (!indexedAnything(await retrieval.indexPass())) return;
  }
}

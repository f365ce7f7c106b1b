/** Manifests and answers shared by the scope-bound callers' suites (apiserver/routes/connectors/scope-bound-writes, scope-bound-reads). */
import type { Client } from './api-client.js';

export const SCOPE_REFUSED = { status: 403, body: { error: 'scope not granted' } };

/** A rest-generic connector of these scopes with one endpoint `rows` into `table` (default `ext.<name>_rows`). */
export const connector = (name: string, scopes: string[], table = `ext.${name.replace(/-/g, '_')}_rows`) => ({
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name },
  connector_type: 'rest-generic',
  scopes,
  spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'rows', path: '/rows', target: { table, unique_key: '$.id' } }] },
});

/** An entity of these scopes keyed `id`, read from `table`'s `external_id`. */
export const entity = (name: string, scope: string | string[], table: string) => ({
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name },
  spec: { scope, key: 'id', columns: [{ name: 'id', type: 'text' }], sources: [{ table, key: 'external_id', columns: { id: 'external_id' } }] },
});

/** A workflow over entity `entityName` (state column `id`), of `scope` when given (else the entity's first). */
export const workflow = (name: string, entityName: string, scope?: string) => ({
  apiVersion: 'apps.svc.io/v1',
  kind: 'Workflow',
  metadata: { name },
  spec: { entity: entityName, ...(scope ? { scope } : {}), stateColumn: 'id', states: ['open', 'closed'] },
});

/** The dev-bypass headers of a new user of tenant `tenantId` bound to `scopes`, created through `api` (an unbound caller). */
export async function boundUser(api: Client, tenantId: number, login: string, scopes: string[]): Promise<Record<string, string>> {
  const created = await api.post(`/api/tenants/${tenantId}/users`, { login, name: login });
  const userId = (created.body as { id: number }).id;
  const set = await api.put(`/api/tenants/${tenantId}/users/${userId}/scopes`, { scopes });
  if (set.status !== 200) throw new Error(`binding ${login} to ${scopes.join(', ')} answered ${set.status}: ${set.text}`);
  return { 'X-Tenant-ID': String(tenantId), 'X-User-ID': String(userId) };
}

/**
 * Through `api` (an unbound caller), over the tables of connectors `erp` and `crm`: entities
 * `erp-partner`, `crm-partner` and `shared-partner` (of both scopes, over crm's table), and workflows
 * `erp-flow`, `crm-flow` and `shared-flow` (of scope crm over shared-partner: its sweep announces
 * erp's records too).
 */
export async function applyDomainWorkflows(api: Client): Promise<void> {
  const applied = [
    await api.post('/api/entities/apply', entity('erp-partner', 'erp', 'ext.erp_rows')),
    await api.post('/api/entities/apply', entity('crm-partner', 'crm', 'ext.crm_rows')),
    await api.post('/api/entities/apply', entity('shared-partner', ['crm', 'erp'], 'ext.crm_rows')),
    await api.post('/api/workflows/apply', workflow('erp-flow', 'erp-partner')),
    await api.post('/api/workflows/apply', workflow('crm-flow', 'crm-partner')),
    await api.post('/api/workflows/apply', workflow('shared-flow', 'shared-partner', 'crm')),
  ];
  const refused = applied.find((r) => r.status !== 201);
  if (refused) throw new Error(`applying the domain workflows answered ${refused.status}: ${refused.text}`);
}

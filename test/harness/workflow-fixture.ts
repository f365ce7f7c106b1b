import { expect } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import type { TestHub } from './hub.js';

const CONNECTOR = '00000000-0000-0000-0000-00000000000c';
const ENDPOINT = '00000000-0000-0000-0000-00000000000e';

export interface SweptWorkflow {
  /** The source table and entity name (`ext.<name>_partners`, entity `<name>`), the workflow `<name>-status`. */
  name: string;
  /** Records of tenant 1, keyed and with the status of these SQL expressions of `g` (1 … records). */
  records: number;
  key: string;
  status: string;
  states: string[];
  dormancy: { after: string; states: string[] };
  /** The tenant (default 1), which must exist. */
  tenant?: number;
}

/**
 * A workflow for the dormancy sweep's tests, through the API of a hub over tenant 1 (or `tenant`): a source table
 * of `records` rows (written by the owner), an entity over it keyed by `external_id`, and a workflow
 * on its `status` column.
 */
export async function applySweptWorkflow(hub: TestHub, owner: pg.Client, w: SweptWorkflow): Promise<void> {
  const tenant = w.tenant ?? 1;
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': String(tenant), 'Content-Type': 'application/yaml' }, body: stringify(body) });
    expect(res.status).toBe(201);
  };
  const table = `${w.name}_partners`;
  await hub.services.connectors.ext.ensureTable(tenant, `ext.${table}`, [{ name: 'status', path: '$.status', type: 'text' }]);
  await owner.query(
    `insert into ext_t${tenant}.${table} (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status)
     select ${tenant}, ${w.key}, md5(g::text), '{}', $1, $2, ${w.status} from generate_series(1, $3) g`,
    [CONNECTOR, ENDPOINT, w.records],
  );
  const columns = [
    { name: 'id', type: 'text' },
    { name: 'status', type: 'text' },
  ];
  await post('/api/entities/apply', { apiVersion: 'apps.svc.io/v1', kind: 'Entity', metadata: { name: w.name }, spec: { scope: 'crm', key: 'id', columns, sources: [{ table: `ext.${table}`, key: 'external_id', columns: { id: 'external_id', status: 'status' } }] } });
  await post('/api/workflows/apply', {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Workflow',
    metadata: { name: `${w.name}-status` },
    spec: { entity: w.name, stateColumn: 'status', states: w.states, dormancy: w.dormancy },
  });
}

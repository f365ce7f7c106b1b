import { expect } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { until } from '../../test/harness/until.js';
import type { HubProcess } from './processes.js';

/**
 * A tenant-1 table of partners in a hub process, the way a tenant gets one: the demo source's
 * partners (`rows` of them) through a connector run into `ext.<table>` with one promoted column, then
 * `extra` more rows written by the owner (keys `x1`…, the column `value`, an SQL expression of `i`),
 * so that a run, an export or a sweep over it lasts long enough to be killed part-way.
 * Returns the number of rows.
 */
export async function seedPartners(
  hub: HubProcess,
  owner: pg.Client,
  demo: { url: string; rows: number },
  table: string,
  column: 'name' | 'country',
  extra: { rows: number; value: string },
): Promise<number> {
  const send = async (path: string, body: unknown, type = 'application/json') => {
    const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'content-type': type }, body: typeof body === 'string' ? body : JSON.stringify(body) });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  };
  expect((await send('/api/platform/secrets', { name: 'DEMO_PASSWORD', value: 'demo-password' })).status).toBe(201);
  const connector = stringify({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name: table.replaceAll('_', '-') },
    connector_type: 'rest-generic',
    spec: {
      base_url: demo.url,
      auth: { kind: 'basic', username: 'demo', password_env: 'DEMO_PASSWORD' },
      default_rate_limit: '1000/s',
      endpoints: [
        {
          id: 'partners',
          path: '/offset/partners',
          pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 200, response_path: '$.data', total_path: '$.total' },
          target: { kind: 'hybrid', table: `ext.${table}`, unique_key: '$.id', promote: [{ name: column, path: `$.${column}`, type: 'text' }] },
        },
      ],
    },
  });
  expect((await send('/api/connectors/apply', connector, 'application/yaml')).status).toBe(201);
  const runId = ((await send(`/api/connectors/${table.replaceAll('_', '-')}/runs`, {})).json.runs as Array<{ id: string }>)[0]!.id;
  const run = await until('the connector run', async () => {
    const r = (await (await fetch(`${hub.url}/api/platform/runs/${runId}`, { headers: { 'X-Tenant-ID': '1' } })).json()) as { status: string };
    return r.status !== 'Running' && r;
  }, { timeoutMs: 30_000 });
  expect(run).toMatchObject({ status: 'Completed' });
  await owner.query(
    `insert into ext_t1.${table} (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, ${column})
       select 1, 'x' || i, 'h' || i, '{}', c.connector_id, c.endpoint_id, ${extra.value}
         from generate_series(1, $1::int) as i, (select connector_id, endpoint_id from ext_t1.${table} limit 1) as c`,
    [extra.rows],
  );
  return demo.rows + extra.rows;
}

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

/** CSV rows an exported partner takes: about 130 bytes, so that 150,000 make some 20 MB (three parts of 8 MiB). */
export const EXPORTED_EXTRA = 150_000;

/**
 * Tenant 1 ready to export entity `partner` to S3: `ext.big_partners` (the demo source's partners
 * and `extra` rows of long names, EXPORTED_EXTRA unless told), the entity over it, the S3 secrets
 * `S3_KEY` and `S3_SECRET`. Returns the number of rows.
 */
export async function seedExportedPartners(
  hub: HubProcess,
  owner: pg.Client,
  demo: { url: string; rows: number },
  s3: { accessKeyId: string; secretAccessKey: string },
  extra = EXPORTED_EXTRA,
): Promise<number> {
  const send = async (path: string, body: unknown) =>
    (await fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'content-type': 'application/json' }, body: JSON.stringify(body) })).status;
  for (const [name, value] of [['S3_KEY', s3.accessKeyId], ['S3_SECRET', s3.secretAccessKey]]) expect(await send('/api/platform/secrets', { name, value })).toBe(201);
  const rows = await seedPartners(hub, owner, demo, 'big_partners', 'name', { rows: extra, value: "repeat('n', 120) || i" });
  const entity = {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name: 'partner' },
    spec: { scope: 'crm', key: 'id', columns: [{ name: 'id', type: 'text' }, { name: 'name', type: 'text' }], sources: [{ table: 'ext.big_partners', key: 'external_id', columns: { id: 'external_id', name: 'name' } }] },
  };
  expect(await send('/api/entities/apply', entity)).toBe(201);
  return rows;
}

/** Export `big` of entity `partner` to `destination`. */
export function partnersExport(destination: Record<string, unknown>, schedule?: string) {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Export',
    metadata: { name: 'big' },
    spec: { scope: 'crm', source: { entity: 'partner' }, columns: ['id', 'name'], order: ['id'], format: { kind: 'csv' }, destination, mode: 'snapshot', ...(schedule ? { schedule } : {}) },
  };
}

/** The S3 destination of partnersExport: bucket `bucket` at `endpoint`, the secrets seedExportedPartners stores. */
export function s3Destination(
  endpoint: string,
  bucket: string,
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the manifest's file-name token, not a template string
  filename = 'big-${timestamp}.csv',
): Record<string, unknown> {
  return { kind: 's3', bucket, filename, endpoint, region: 'eu-west-3', access_key_env: 'S3_KEY', secret_key_env: 'S3_SECRET' };
}

/** The key `big-${timestamp}.csv` names for an artifact time. */
export const exportKey = (artifactTime: Date) => `big-${artifactTime.toISOString().replace(/[-:]/g, '').replace(/\.\d+/, '')}.csv`;

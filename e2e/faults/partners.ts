import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import type { TestS3 } from '../../test/harness/s3.js';
import type { TestSshd } from '../../test/harness/sshd.js';
import type { StallRelay } from '../../test/harness/stall-relay.js';
import { until } from '../../test/harness/until.js';
import { type HubProcess, startHubProcess } from './processes.js';

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

/** Where an export fault publishes, behind a relay (test/harness/stall-relay.ts) that can hold the upload. */
export interface ExportTarget {
  relay: StallRelay;
  destination(): Record<string, unknown>;
  /** Secrets to store beside those of seedExportedPartners. */
  secrets(): Array<[string, string]>;
  /** The published file `key`, when it is there. */
  published(key: string): Buffer | undefined;
  /** The run's `location` for `key`. */
  location(key: string): string;
}

/** The `.part` files in the sshd harness's root. */
export const partFiles = (sshd: TestSshd) => readdirSync(sshd.root).filter((name) => name.endsWith('.part'));

/**
 * partnersExport's two destinations: S3 (`bucket` of the S3 harness, through `relays[0]`) and SFTP
 * (`big-${timestamp}.csv` in the sshd harness's root, through `relays[1]`, the password in secret
 * `SFTP_PASSWORD`).
 */
export function exportTargets(s3: TestS3, sshd: TestSshd, relays: StallRelay[], bucket: string): Record<'s3' | 'sftp', ExportTarget> {
  return {
    s3: {
      relay: relays[0]!,
      destination: () => s3Destination(relays[0]!.endpoint, bucket),
      secrets: () => [],
      published: (key) => s3.getObject(bucket, key)?.body,
      location: (key) => `s3://${bucket}/${key}`,
    },
    sftp: {
      relay: relays[1]!,
      destination: () => ({ kind: 'sftp', host: '127.0.0.1', port: relays[1]!.port, user: sshd.user, path: `${sshd.root}/big-\${timestamp}.csv`, password_env: 'SFTP_PASSWORD', host_key_fingerprint: sshd.fingerprint }),
      secrets: () => [['SFTP_PASSWORD', sshd.password]],
      published: (key) => (readdirSync(sshd.root).includes(key) ? readFileSync(join(sshd.root, key)) : undefined),
      location: (key) => `sftp://${sshd.user}@127.0.0.1:${relays[1]!.port}${sshd.root}/${key}`,
    },
  };
}

/** The key `big-${timestamp}.csv` names for an artifact time. */
export const exportKey = (artifactTime: Date) => `big-${artifactTime.toISOString().replace(/[-:]/g, '').replace(/\.\d+/, '')}.csv`;

/**
 * Tenant 1 with workflow `dormant-status` over entity `dormant` (`ext.dormant_partners`: the demo
 * source's partners and `extra` more in `DE`), its states every country of the records and its
 * dormancy 1 s, prepared by a process of its own that sweeps nothing; returns once every record is
 * due (by the database's clock, which the sweep reads), so that the next process's first pass
 * announces them all. Returns the number of records.
 */
export async function prepareDormancy(url: string, owner: pg.Client, demo: { url: string; rows: number }, extra: number): Promise<number> {
  const prepare = await startHubProcess('all', url, { SVC_WORKFLOW_SWEEP_EVERY: '1h' });
  const records = await seedPartners(prepare, owner, demo, 'dormant_partners', 'country', { rows: extra, value: "'DE'" });
  const countries = (await owner.query(`select array_agg(distinct country order by country) as c from ext_t1.dormant_partners`)).rows[0].c as string[];
  const post = async (path: string, body: unknown) =>
    (await fetch(`${prepare.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'content-type': 'application/json' }, body: JSON.stringify(body) })).status;
  const entity = {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name: 'dormant' },
    spec: { scope: 'crm', key: 'id', columns: [{ name: 'id', type: 'text' }, { name: 'country', type: 'text' }], sources: [{ table: 'ext.dormant_partners', key: 'external_id', columns: { id: 'external_id', country: 'country' } }] },
  };
  expect(await post('/api/entities/apply', entity)).toBe(201);
  // Every record is due 1 s after the apply (records already there are in their state since it).
  const workflow = { apiVersion: 'apps.svc.io/v1', kind: 'Workflow', metadata: { name: 'dormant-status' }, spec: { entity: 'dormant', stateColumn: 'country', states: countries, dormancy: { after: '1s' } } };
  expect(await post('/api/workflows/apply', workflow)).toBe(201);
  await prepare.stop();
  await until('every record to be due', async () => (await owner.query(`select now() > tracked_since + interval '1 second' as due from workflows.workflows where name = 'dormant-status'`)).rows[0]?.due === true, { timeoutMs: 5_000 });
  return records;
}

/**
 * After the dormancy's decisions have all come: a marker record, due 1 s after a later pass sees it,
 * is announced by a pass after that one, so a decision doubled by those passes would show by then.
 * Checks that every record has exactly one decision, one inbox item (written in the decision's
 * transaction, docs/processes.md) and a notified spell. Returns the marker's event id.
 */
export async function checkDormancyOnce(owner: pg.Client, records: number, said: () => string): Promise<string> {
  await owner.query(
    `insert into ext_t1.dormant_partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, country)
       select 1, 'marker', 'h-marker', '{}', connector_id, endpoint_id, 'DE' from ext_t1.dormant_partners limit 1`,
  );
  const marker = await until(
    "the marker record's decision",
    async () => (await owner.query(`select id::text from events.outbox where type = 'decision.dormant.dormant-status' and payload->>'key' = 'marker'`)).rows[0]?.id as string | undefined,
    { timeoutMs: 30_000, everyMs: 100, detail: said },
  );
  const { rows } = await owner.query(`select count(*)::int as decisions, count(distinct payload->>'key')::int as keys from events.outbox where type = 'decision.dormant.dormant-status'`);
  expect(rows[0]).toEqual({ decisions: records + 1, keys: records + 1 });
  const inbox = await owner.query(`select count(*)::int as n, count(distinct payload->>'key')::int as keys from events.inbox where type = 'decision.dormant.dormant-status'`);
  expect(inbox.rows[0]).toEqual({ n: records + 1, keys: records + 1 });
  const spells = await owner.query(`select count(*)::int as n, count(*) filter (where notified_at is not null)::int as notified from workflows.spells`);
  expect(spells.rows[0]).toEqual({ n: records + 1, notified: records + 1 });
  return marker;
}

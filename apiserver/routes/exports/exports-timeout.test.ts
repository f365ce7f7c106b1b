import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { type Client, devClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { exportRunEnded } from '../../../test/harness/runs.js';
import { startS3, type TestS3 } from '../../../test/harness/s3.js';

/**
 * The snapshot generation time limit (spec 3: 30 minutes, `svc.export.snapshot.timeout-seconds`),
 * shortened to 1 s: a snapshot that cannot be read (its source table held by an exclusive lock)
 * fails the run with `generation`, publishes nothing, and leaves no open upload; once the lock is
 * gone a retry delivers.
 */

let hub: TestHub;
let s3: TestS3;
let api: Client;
let locker: pg.Client;
const T = 1;

beforeAll(async () => {
  s3 = await startS3();
  s3.createBucket('drops');
  hub = await startTestHub({ 'svc.export.snapshot.timeout-seconds': 1 });
  api = devClient(hub.url, T);
  await hub.services.connectors.ext.ensureTable(T, 'ext.slow', [{ name: 'label', path: '$.label', type: 'text' }]);
  locker = new pg.Client({ connectionString: hub.ownerUrl });
  await locker.connect();
  await locker.query(
    `insert into ext_t${T}.slow (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label)
     values ($1, 'a', 'h', '{}', gen_random_uuid(), gen_random_uuid(), 'one')`,
    [T],
  );
  for (const [name, value] of [['K', s3.accessKeyId], ['S', s3.secretAccessKey]]) expect((await api.post('/api/platform/secrets', { name, value })).status).toBe(201);
  const entity = {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name: 'slow' },
    spec: { scope: 'ops', key: 'id', columns: [{ name: 'id', type: 'text' }, { name: 'label', type: 'text' }], sources: [{ table: 'ext.slow', key: 'external_id', columns: { id: 'external_id', label: 'label' } }] },
  };
  expect((await api.post('/api/entities/apply', entity)).status).toBe(201);
  const exp = {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Export',
    metadata: { name: 'slow' },
    spec: {
      scope: 'ops',
      source: { entity: 'slow' },
      columns: ['id', 'label'],
      order: ['id'],
      format: { kind: 'csv' },
      destination: { kind: 's3', bucket: 'drops', filename: 'slow.csv', endpoint: s3.endpoint, region: s3.region, access_key_env: 'K', secret_key_env: 'S' },
      mode: 'snapshot',
    },
  };
  expect((await api.post('/api/exports/apply', exp)).status).toBe(201);
});

afterAll(async () => {
  await locker?.end();
  await hub?.stop();
  await s3?.stop();
});

const settle = (runId: string) => exportRunEnded<Record<string, unknown>>(api, 'slow', runId);

describe('snapshot time limit', () => {
  it('fails a snapshot that takes longer than the limit as generation, publishing nothing', async () => {
    await locker.query('begin');
    await locker.query(`lock table ext_t${T}.slow in access exclusive mode`);
    const started = await api.post('/api/exports/slow/runs');
    expect(started.status).toBe(202);
    const run = await settle((started.body as { runId: string }).runId);
    await locker.query('rollback');
    expect(run).toMatchObject({ status: 'Failed', failureCode: 'generation' });
    expect(run.failureReason).toContain('svc.export.snapshot.timeout-seconds');
    expect(s3.getObject('drops', 'slow.csv')).toBeUndefined();
    expect(s3.listMultipartUploads('drops')).toEqual([]);

    const retried = await api.post(`/api/exports/slow/runs/${run.id as string}/retry`);
    expect(retried.status).toBe(202);
    expect(await settle((retried.body as { runId: string }).runId)).toMatchObject({ status: 'Completed', rowCount: 1, attempt: 2 });
    expect(s3.getObject('drops', 'slow.csv')?.body.toString()).toBe('"id","label"\r\n"a","one"\r\n');
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createHash } from 'node:crypto';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { exportRunEnded } from '../../../test/harness/runs.js';
import { until } from '../../../test/harness/until.js';
import { startS3, type TestS3 } from '../../../test/harness/s3.js';
import { startCommitRelay } from '../../../test/harness/s3-relay.js';
import { startStallRelay } from '../../../test/harness/stall-relay.js';
import type { Promote } from '../../../src/connectors/types.js';

/**
 * Exports to an S3-compatible server on loopback (test/harness/s3.ts: fauxqs with S3's signature
 * check and conditional writes added), through the HTTP API of a dev-bypass hub: a single-part
 * object with its SHA-256 as metadata, a multipart object above 8 MiB, an existing key left
 * untouched, two exports racing for one key (one publishes, the other ends in collision), refused
 * credentials, an empty entity (a header-only file, or 0 bytes without header, still published),
 * and a versioned bucket's version id in the receipt.
 */

let hub: TestHub;
let owner: pg.Client;
let s3: TestS3;
let api: Client;
const T = 1;
const CONNECTOR = '00000000-0000-0000-0000-0000000000c2';
const ENDPOINT = '00000000-0000-0000-0000-0000000000e2';
const BUCKET = 'drops';
const BIG = 120_000;

type Run = { id: string; status: string; rowCount: number | null; byteCount: number | null; sha256: string | null; location: string | null; failureCode: string | null; failureReason: string | null; etag?: string; versionId?: string };

const promote = (name: string, type: Promote['type']): Promote => ({ name, path: `$.${name}`, type });
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

function entity(name: string, table: string) {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name },
    spec: {
      scope: 'crm',
      key: 'id',
      columns: [
        { name: 'id', type: 'text' },
        { name: 'label', type: 'text' },
        { name: 'amount', type: 'numeric' },
      ],
      sources: [{ table, key: 'external_id', columns: { id: 'external_id', label: 'label', amount: 'amount' } }],
    },
  };
}

function exportOf(name: string, entityName: string, destination: Record<string, unknown>, spec: Record<string, unknown> = {}) {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Export',
    metadata: { name },
    spec: {
      scope: 'crm',
      source: { entity: entityName },
      columns: ['id', 'label', 'amount'],
      order: ['id'],
      format: { kind: 'csv' },
      destination: { kind: 's3', bucket: BUCKET, endpoint: s3.endpoint, region: s3.region, access_key_env: 'S3_KEY', secret_key_env: 'S3_SECRET', ...destination },
      mode: 'snapshot',
      ...spec,
    },
  };
}

const settle = (name: string, runId: string) => exportRunEnded<Run>(api, name, runId);

async function start(name: string): Promise<string> {
  const started = await api.post(`/api/exports/${name}/runs`);
  expect(started.status).toBe(202);
  return (started.body as { runId: string }).runId;
}

const runToEnd = async (name: string) => settle(name, await start(name));

async function applied(manifest: unknown) {
  const res = await api.post('/api/exports/apply', manifest);
  expect({ status: res.status, body: res.body }).toMatchObject({ status: 201 });
}

beforeAll(async () => {
  s3 = await startS3();
  s3.createBucket(BUCKET);
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, T);
  for (const table of ['ext.small', 'ext.big', 'ext.empty']) await hub.services.connectors.ext.ensureTable(T, table, [promote('label', 'text'), promote('amount', 'numeric')]);
  await owner.query(
    `insert into ext_t${T}.small (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label, amount)
     values ($1, 'a', 'h-a', '{}', $2, $3, 'first, "quoted"', 1.50), ($1, 'b', 'h-b', '{}', $2, $3, null, -2), ($1, 'c', 'h-c', '{}', $2, $3, 'Ünïcode ✓', null)`,
    [T, CONNECTOR, ENDPOINT],
  );
  await owner.query(
    `insert into ext_t${T}.big (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label, amount)
     select $1, lpad(i::text, 7, '0'), 'h' || i, '{}', $2, $3, 'partner number ' || i || ', "ltd" and some padding text', i * 1.25
       from generate_series(1, $4) as i`,
    [T, CONNECTOR, ENDPOINT, BIG],
  );
  for (const [name, table] of [['small', 'ext.small'], ['big', 'ext.big'], ['empty', 'ext.empty']] as const) {
    expect((await api.post('/api/entities/apply', entity(name, table))).status).toBe(201);
  }
  for (const [name, value] of [['S3_KEY', s3.accessKeyId], ['S3_SECRET', s3.secretAccessKey], ['WRONG_SECRET', 'not-the-secret-key']]) {
    expect((await api.post('/api/platform/secrets', { name, value })).status).toBe(201);
  }
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await s3?.stop();
});

describe('S3 publication', () => {
  it('puts a single-part object with its SHA-256 as metadata; the receipt matches the bytes', async () => {
    await applied(exportOf('small', 'small', { prefix: 'daily/${date}/', filename: 'small.csv' }));
    const run = await runToEnd('small');
    expect(run).toMatchObject({ status: 'Completed', rowCount: 3, failureCode: null });
    const key = `daily/${new Date().toISOString().slice(0, 10)}/small.csv`;
    const stored = s3.getObject(BUCKET, key)!;
    expect(stored.body.toString('utf8')).toBe('"id","label","amount"\r\n"a","first, ""quoted""","1.50"\r\n"b",,"-2"\r\n"c","Ünïcode ✓",\r\n');
    expect(run.sha256).toBe(sha(stored.body));
    expect(run.byteCount).toBe(stored.body.length);
    expect(stored.metadata['svc-sha256']).toBe(run.sha256);
    expect(run.location).toBe(`s3://${BUCKET}/${key}`);
    expect(run.etag?.replaceAll('"', '')).toBe(stored.etag.replaceAll('"', ''));
  });

  it('leaves an existing key untouched: collision', async () => {
    const run = await runToEnd('small');
    expect(run.failureCode).toBe('collision');
    await applied(exportOf('theirs', 'small', { filename: 'theirs.csv' }));
    s3.putObject(BUCKET, 'theirs.csv', 'their file\n');
    expect((await runToEnd('theirs')).failureCode).toBe('collision');
    expect(s3.getObject(BUCKET, 'theirs.csv')!.body.toString()).toBe('their file\n');
  });

  it('ends a large snapshot in collision when the key is taken before any byte is read (the half-read snapshot is let go)', async () => {
    await applied(exportOf('taken-big', 'big', { filename: 'taken-big.csv' }));
    s3.putObject(BUCKET, 'taken-big.csv', 'x');
    expect(await runToEnd('taken-big')).toMatchObject({ status: 'Failed', failureCode: 'collision' });
    expect(await runToEnd('taken-big')).toMatchObject({ status: 'Failed', failureCode: 'collision' });
  });

  it('uploads above 8 MiB in parts, the object the exact bytes of the receipt', async () => {
    await applied(exportOf('big', 'big', { filename: 'big.csv' }));
    const run = await runToEnd('big');
    expect(run).toMatchObject({ status: 'Completed', rowCount: BIG });
    const stored = s3.getObject(BUCKET, 'big.csv')!;
    expect(run.byteCount).toBeGreaterThan(8 * 1024 * 1024);
    expect(stored.body.length).toBe(run.byteCount);
    expect(sha(stored.body)).toBe(run.sha256);
    expect(stored.etag).toMatch(/-2"?$/);
    const text = stored.body.toString('utf8');
    expect(text.startsWith('"id","label","amount"\r\n"0000001","partner number 1, ""ltd"" and some padding text","1.25"\r\n')).toBe(true);
    expect(text.split('\r\n').length).toBe(BIG + 2);
    expect(s3.listMultipartUploads(BUCKET)).toEqual([]);
  });

  it('a part S3 refuses mid-upload: Failed publication (its code named, never its message), nothing at the key, no upload left open; the retry publishes under the same name', async () => {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: an export file name's own token syntax
    await applied(exportOf('refused-big', 'big', { prefix: 'refused/', filename: 'big-${timestamp}.csv' }));
    const release = s3.refuseParts(BUCKET, 'refused/', { from: 2, status: 403, code: 'AccessDenied' });
    const failed = await runToEnd('refused-big');
    const stamp = ((await api.get(`/api/exports/refused-big/runs/${failed.id}`)).body as { artifactTime: string }).artifactTime.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
    const key = `refused/big-${stamp}.csv`;
    expect(failed).toMatchObject({ status: 'Failed', failureCode: 'publication', location: null });
    expect(failed.failureReason).toBe(`S3 refused the write to s3://${BUCKET}/${key} (AccessDenied, HTTP 403): the credentials in access_key_env/secret_key_env were refused or may not write there`);
    expect(s3.getObject(BUCKET, key)).toBeUndefined();
    expect(s3.listMultipartUploads(BUCKET)).toEqual([]);
    expect(s3.requests.filter((r) => r.url.startsWith(`/${BUCKET}/refused/`) && r.url.includes('partNumber=2')).map((r) => r.status)).toEqual([403]);
    release();
    const retried = await api.post(`/api/exports/refused-big/runs/${failed.id}/retry`);
    expect(retried.status).toBe(202);
    const run = await settle('refused-big', (retried.body as { runId: string }).runId);
    expect(run).toMatchObject({ status: 'Completed', rowCount: BIG, location: `s3://${BUCKET}/${key}` });
    expect(sha(s3.getObject(BUCKET, key)!.body)).toBe(run.sha256);
    expect(s3.listMultipartUploads(BUCKET)).toEqual([]);
  });

  it('lets one of two exports racing for the same key publish; the other ends in collision', async () => {
    await applied(exportOf('race-a', 'small', { filename: 'race.csv' }));
    await applied(exportOf('race-b', 'big', { filename: 'race.csv' }));
    const [a, b] = await Promise.all([start('race-a'), start('race-b')]);
    const runs = [await settle('race-a', a), await settle('race-b', b)];
    expect(runs.map((r) => r.status).sort()).toEqual(['Completed', 'Failed']);
    const winner = runs.find((r) => r.status === 'Completed')!;
    expect(runs.find((r) => r.status === 'Failed')!.failureCode).toBe('collision');
    expect(sha(s3.getObject(BUCKET, 'race.csv')!.body)).toBe(winner.sha256);
    expect(s3.listMultipartUploads(BUCKET)).toEqual([]);
  });

  it('fails refused credentials as publication, naming the secret field and never the secret', async () => {
    await applied(exportOf('wrong', 'small', { filename: 'wrong.csv', secret_key_env: 'WRONG_SECRET' }));
    const run = await runToEnd('wrong');
    expect(run.failureCode).toBe('publication');
    expect(run.failureReason).toMatch(/secret_key_env|credential/);
    expect(run.failureReason).not.toContain('not-the-secret-key');
    expect(run.failureReason).not.toContain(s3.secretAccessKey);
    expect(s3.getObject(BUCKET, 'wrong.csv')).toBeUndefined();
  });

  it('publishes an empty entity as a header-only file, or 0 bytes without a header', async () => {
    await applied(exportOf('empty', 'empty', { filename: 'empty.csv' }));
    const withHeader = await runToEnd('empty');
    expect(withHeader).toMatchObject({ status: 'Completed', rowCount: 0 });
    expect(s3.getObject(BUCKET, 'empty.csv')!.body.toString()).toBe('"id","label","amount"\r\n');
    await applied(exportOf('bare', 'empty', { filename: 'bare.csv' }, { format: { kind: 'csv', header: false } }));
    const bare = await runToEnd('bare');
    expect(bare).toMatchObject({ status: 'Completed', rowCount: 0, byteCount: 0, sha256: sha(Buffer.alloc(0)) });
    expect(s3.getObject(BUCKET, 'bare.csv')!.body.length).toBe(0);
  });

  it('records the version id of a versioned bucket', async () => {
    s3.createBucket('versioned');
    s3.setVersioned('versioned');
    await applied(exportOf('versioned', 'small', { bucket: 'versioned', filename: 'v.csv' }));
    const run = await runToEnd('versioned');
    expect(run.status).toBe('Completed');
    expect(run.versionId).toEqual(expect.any(String));
  });

  it('uses the delimiter of the manifest, also one outside ASCII', async () => {
    await applied(exportOf('semi', 'small', { filename: 'semi.csv' }, { format: { kind: 'csv', delimiter: '§' } }));
    expect((await runToEnd('semi')).status).toBe('Completed');
    expect(s3.getObject(BUCKET, 'semi.csv')!.body.toString('utf8')).toBe('"id"§"label"§"amount"\r\n"a"§"first, ""quoted"""§"1.50"\r\n"b"§§"-2"\r\n"c"§"Ünïcode ✓"§\r\n');
  });

  // Last: it closes the runner of this hub.
  it('a cancel or a delete that arrives once S3 has stored the object does not cut the run: it ends Completed', async () => {
    // S3's answer to the object's PUT held (S3 has stored it; the answer is on its way), until released.
    const relay = await startCommitRelay(s3.endpoint, BUCKET);
    const endpoint = relay.endpoint;
    try {
      for (const [name, stop] of [
        ['stop-cancel', (id: string) => api.post(`/api/exports/stop-cancel/runs/${id}/cancel`)],
        ['stop-delete', () => api.del('/api/exports/stop-delete')],
      ] as const) {
        await applied(exportOf(name, 'small', { filename: `${name}.csv`, endpoint }));
        const { stored, release } = relay.hold(`${name}.csv`);
        const id = await start(name);
        await stored;
        const stopped = await stop(id);
        expect([202, 204]).toContain(stopped.status);
        // No wait: the stop reached the run (runner.stop, an abort) before the answer to it; a publication
        // it cut would be cut now, whatever S3 answers after.
        release();
        const run = await settle(name, id);
        expect({ name, status: run.status, failureCode: run.failureCode }).toEqual({ name, status: 'Completed', failureCode: null });
        expect(s3.getObject(BUCKET, `${name}.csv`)?.body.length).toBe(run.byteCount);
      }
    } finally {
      await relay.close();
    }
  });

  it('a cancel while the endpoint has stopped answering ends the run within the cleanup bound, its reason naming the upload left open', async () => {
    const relay = await startStallRelay(Number(new URL(s3.endpoint).port));
    try {
      await applied(exportOf('stalled', 'big', { filename: 'stalled.csv', endpoint: relay.endpoint }));
      const id = await start('stalled');
      await until('a part of the upload stored', () => s3.listMultipartUploads(BUCKET).some((u) => u.key === 'stalled.csv' && u.parts >= 1), 12_000);
      relay.stall();
      const cancelledAt = performance.now();
      expect((await api.post(`/api/exports/stalled/runs/${id}/cancel`)).status).toBe(202);
      const run = await settle('stalled', id);
      // One cleanup bound (5 s), not the request timeout (120 s) times the SDK's attempts.
      expect(performance.now() - cancelledAt).toBeLessThan(15_000);
      expect(run.status).toBe('Failed');
      expect(run.failureCode).toBe('interrupted');
      expect(run.failureReason).toMatch(/^cancelled by .+ during the run; nothing was published; the incomplete multipart upload \S+ could not be aborted \(no answer within 5 s\)\. Retry it: a collision on retry means it did publish$/);
      expect(s3.getObject(BUCKET, 'stalled.csv')).toBeUndefined();
      // Left open, as the reason says.
      expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === 'stalled.csv')).toHaveLength(1);
    } finally {
      await relay.close();
    }
  });

  it('fails its own runs as interrupted when the hub stops, leaving no object and no open upload', async () => {
    await applied(exportOf('stopping', 'big', { filename: 'stopping.csv' }));
    const id = await start('stopping');
    await hub.services.exports.close();
    const run = await settle('stopping', id);
    expect(run).toMatchObject({ status: 'Failed', failureCode: 'interrupted' });
    expect(s3.getObject(BUCKET, 'stopping.csv')).toBeUndefined();
    expect(s3.listMultipartUploads(BUCKET).filter((u) => u.key === 'stopping.csv')).toEqual([]);
  });
});

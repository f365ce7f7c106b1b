import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../test/harness/api-client.js';
import { itemS3Export, prepareItemExports } from '../../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { egressPolicy } from '../egress/config.js';
import type { ExportRun } from './runs/ledger.js';
import { createExportServices, type ExportServices } from './services.js';

/**
 * An export run whose end PostgreSQL refuses for a value it holds (SQLSTATE class 22 or 23, which
 * the same statement meets again: no outage to wait out), on the real PostgreSQL. Every text of a
 * run's end reaches it made storable already (the ETag and version id through storableText, the
 * reasons masked, the location built from a manifest its jsonb column stored), so the refusal is
 * staged: triggers on exports.runs raise what a NUL in a text raises (untranslatable_character) or a
 * check violation, each for the end of one export's runs only. The run must still end at once, and
 * not stay Running until the interrupted-run sweep fails it as if its process had died: a published
 * file Completed with what of its receipt can be stored, else Failed `record`, the reason quoting
 * nothing of what was refused.
 */

let hub: TestHub;
let owner: pg.Client;
let api: Client;
let s3: Server;
let services: ExportServices;
/** The S3-compatible store's objects by path (`/drops/<key>`). */
const stored = new Map<string, Buffer>();

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, 1);
  await prepareItemExports(hub, api);
  await owner.query(
    `insert into ext_t1.items (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label)
     values (1, 'a', 'h-a', '{}', '00000000-0000-0000-0000-0000000000c9', '00000000-0000-0000-0000-0000000000e9', 'one'),
            (1, 'b', 'h-b', '{}', '00000000-0000-0000-0000-0000000000c9', '00000000-0000-0000-0000-0000000000e9', 'two')`,
  );
  // A store that takes any object (with an ETag and a version id), but refuses every request for a key naming `denied`.
  s3 = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = new URL(req.url ?? '/', 'http://x').pathname;
      if (path.includes('denied')) {
        res.writeHead(403, { 'content-type': 'application/xml' });
        return void res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>m</Message><RequestId>1</RequestId></Error>');
      }
      if (req.method === 'HEAD') return void res.writeHead(stored.has(path) ? 200 : 404).end();
      if (req.method !== 'PUT') return void res.writeHead(405).end();
      const body = Buffer.concat(chunks);
      stored.set(path, body);
      res.writeHead(200, { etag: `"${createHash('md5').update(body).digest('hex')}"`, 'x-amz-version-id': 'v-1' }).end();
    });
  });
  await new Promise<void>((resolve) => s3.listen(0, '127.0.0.1', () => resolve()));
  // Raises the condition its trigger names, quoting the value refused in its detail as PostgreSQL's own texts do (`Token "…" is invalid.`).
  await owner.query(`create function exports.refuse_end() returns trigger language plpgsql as $$
    begin
      raise exception using errcode = tg_argv[0], message = 'refused', detail = 'Token "the-refused-value-xyzzy" is invalid.';
    end $$`);
  services = createExportServices({ config: hub.config, db: hub.services.db, secrets: hub.services.secrets, egress: egressPolicy(hub.config) });
});

afterAll(async () => {
  await services?.close();
  await new Promise((resolve) => (s3 ? s3.close(resolve) : resolve(undefined)));
  for (const name of ['etag', 'receipt', 'failure', 'last']) await owner?.query(`drop trigger if exists refuse_${name} on exports.runs`).catch(() => undefined);
  await owner?.query('drop function if exists exports.refuse_end()').catch(() => undefined);
  await owner?.end();
  await hub?.stop();
});

/** Refuses the ends of exports.runs that `when` (a condition on `new`) picks, raising `condition`. */
async function refuse(trigger: string, when: string, condition: string): Promise<void> {
  await owner.query(`create trigger refuse_${trigger} before update on exports.runs for each row when (${when}) execute function exports.refuse_end('${condition}')`);
}

/** A run of export `name` (applied against the store), ended within 20 s, as its promise and as stored. */
async function run(name: string): Promise<{ ended: ExportRun; row: Record<string, unknown> }> {
  expect((await api.post('/api/exports/apply', itemS3Export(name, `http://127.0.0.1:${(s3.address() as AddressInfo).port}`))).status).toBe(201);
  let timer: NodeJS.Timeout | undefined;
  const ended = await Promise.race([
    services.runNow(1, name),
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('the run did not end within 20 s')), 20_000))),
  ]).finally(() => clearTimeout(timer));
  const { rows } = await owner.query(
    'select status, failure_code, failure_reason, row_count, byte_count, sha256, location, etag, version_id from exports.runs where id = $1',
    [ended.id],
  );
  return { ended, row: rows[0] as Record<string, unknown> };
}

describe("an export run's end refused for a value it holds", () => {
  it('a published file whose ETag is refused: Completed with its location, rows, bytes and digest, without the ETag and version id; nothing of the value logged', async () => {
    await refuse('etag', "new.export_name = 'etag-refused' and new.etag is not null", 'untranslatable_character');
    const logs = captureLogs('info');
    try {
      const { ended, row } = await run('etag-refused');
      const file = stored.get('/drops/etag-refused.csv')!;
      expect(file.toString()).toBe('"id","label"\r\n"a","one"\r\n"b","two"\r\n');
      const receipt = { rowCount: 2, byteCount: file.length, sha256: createHash('sha256').update(file).digest('hex'), location: 's3://drops/etag-refused.csv' };
      expect(ended).toMatchObject({ status: 'Completed', failureCode: null, failureReason: null, ...receipt });
      expect(ended.etag).toBeUndefined();
      expect(ended.versionId).toBeUndefined();
      expect(row).toEqual({ status: 'Completed', failure_code: null, failure_reason: null, row_count: 2, byte_count: file.length, sha256: receipt.sha256, location: receipt.location, etag: null, version_id: null });
      const told = logs.lines().filter((l) => l.runId === ended.id && l.level === 'error');
      expect(told.map((l) => l.msg)).toEqual([`export run ${ended.id}: its end was refused (22P05 untranslatable_character); it is written again Completed without the ETag and version id the destination answered`]);
      expect(logs.raw()).not.toContain('xyzzy');
    } finally {
      logs.restore();
    }
  }, 30_000);

  it('a published file whose receipt is refused whole: Failed record, the reason saying it was published', async () => {
    await refuse('receipt', "new.export_name = 'receipt-refused' and new.status = 'Completed'", 'check_violation');
    const { ended, row } = await run('receipt-refused');
    expect(stored.has('/drops/receipt-refused.csv')).toBe(true);
    const reason = "the run's end could not be stored: 23514 check_violation; its file was published at the destination, so a retry ends in collision";
    expect(ended).toMatchObject({ status: 'Failed', failureCode: 'record', failureReason: reason });
    expect(row).toMatchObject({ status: 'Failed', failure_code: 'record', failure_reason: reason, location: null, etag: null });
    // And so it does: the retry finds the file.
    const retried = await api.post(`/api/exports/receipt-refused/runs/${ended.id}/retry`, {});
    expect(retried.status).toBe(202);
    const retryId = (retried.body as { runId: string }).runId;
    let retry: Record<string, unknown> = {};
    await until('the retry ended', async () => {
      retry = (await api.get(`/api/exports/receipt-refused/runs/${retryId}`)).body as Record<string, unknown>;
      return retry.status !== 'Running';
    });
    expect(retry).toMatchObject({ status: 'Failed', failureCode: 'collision', retryOf: ended.id });
  }, 30_000);

  it('a failure whose end is refused: Failed record naming the failure it had, its reason in the error line; the next run of the export ends as usual', async () => {
    await refuse('failure', "new.export_name = 'failure-denied' and new.failure_code = 'publication'", 'untranslatable_character');
    const logs = captureLogs('info');
    let ended: ExportRun;
    try {
      let row: Record<string, unknown>;
      ({ ended, row } = await run('failure-denied'));
      const reason = "the run's end could not be stored: 22P05 untranslatable_character; the run had failed publication";
      expect(ended).toMatchObject({ status: 'Failed', failureCode: 'record', failureReason: reason });
      expect(row).toMatchObject({ status: 'Failed', failure_code: 'record', failure_reason: reason });
      // The reason the record does not keep (what it said of the destination) is in the log. Was: only its code.
      const told = logs.lines().filter((l) => l.runId === ended.id && l.level === 'error');
      expect(told.map((l) => l.msg)).toEqual([
        `export run ${ended.id}: its end was refused (22P05 untranslatable_character); it is written again as Failed record; it was to fail publication: S3 refused the write to s3://drops/failure-denied.csv (AccessDenied, HTTP 403): the credentials in access_key_env/secret_key_env were refused or may not write there`,
      ]);
      expect(logs.raw()).not.toContain('xyzzy');
    } finally {
      logs.restore();
    }
    await owner.query('drop trigger refuse_failure on exports.runs');
    const next = await services.runNow(1, 'failure-denied');
    expect({ status: next.status, code: next.failureCode }).toEqual({ status: 'Failed', code: 'publication' });
  }, 30_000);

  it('an end refused down to Failed record is left to the interrupted-run sweep, its promise settled', async () => {
    await refuse('last', "new.export_name = 'last-refused' and new.status <> 'Running'", 'untranslatable_character');
    expect((await api.post('/api/exports/apply', itemS3Export('last-refused', `http://127.0.0.1:${(s3.address() as AddressInfo).port}`))).status).toBe(201);
    await expect(services.runNow(1, 'last-refused')).rejects.toMatchObject({ code: '22P05' });
    const { rows } = await owner.query("select status from exports.runs where export_name = 'last-refused'");
    expect(rows).toEqual([{ status: 'Running' }]);
    await owner.query('drop trigger refuse_last on exports.runs');
  }, 30_000);
});

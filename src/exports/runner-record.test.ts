import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, type AddressInfo, type Server } from 'node:net';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../test/harness/api-client.js';
import { ITEM_ENTITY, itemS3Export } from '../../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { Database } from '../db/database.js';
import { egressPolicy } from '../egress/config.js';
import { createExportServices, type ExportServices } from './services.js';

/**
 * The database goes away as an export run ends (here: as soon as the run reaches its destination,
 * which then fails the publication): the run's end is recorded once it is back, and the run's
 * promise settles with that record. Before, the record's failure rejected the run's promise, which
 * nobody waits for when a request or the scheduler starts a run: an unhandled rejection, which ends
 * the hub's process. "Away" is a real refusal: the tenant transactions of the run's services go to
 * a port nothing listens on while it lasts.
 */

let hub: TestHub;
let owner: pg.Client;
let api: Client;
let endpoint: Server;
let services: ExportServices | undefined;
let s3: HttpServer | undefined;
const away = new Database({ appUrl: 'postgres://svc_app@127.0.0.1:9/none', workerUrl: 'postgres://svc_worker@127.0.0.1:9/none', poolSize: 3 });

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, 1);
  await hub.services.connectors.ext.ensureTable(1, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
  await owner.query(
    `insert into ext_t1.items (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label)
     values (1, 'a', 'h-a', '{}', '00000000-0000-0000-0000-0000000000c8', '00000000-0000-0000-0000-0000000000e8', 'one')`,
  );
  for (const [name, value] of [['S3_KEY', 'key-id'], ['S3_SECRET', 'secret-key']]) expect((await api.post('/api/platform/secrets', { name, value })).status).toBe(201);
  expect((await api.post('/api/entities/apply', ITEM_ENTITY)).status).toBe(201);
});

afterAll(async () => {
  await services?.close();
  await away.app.end();
  await away.worker.end();
  await new Promise((resolve) => endpoint?.close(resolve));
  await new Promise((resolve) => (s3 ? s3.close(resolve) : resolve(undefined)));
  await owner?.end();
  await hub?.stop();
});

describe('an export run whose end cannot be recorded at once', () => {
  it('is recorded once the database is back, and its promise settles with the record', async () => {
    let gone = false;
    // The destination: every connection is cut at once (the publication fails), and the first one
    // takes the database away for 1.5 s.
    endpoint = createServer((socket) => {
      socket.destroy();
      if (gone) return;
      gone = true;
      setTimeout(() => {
        gone = false;
      }, 1_500);
    });
    await new Promise<void>((resolve) => endpoint.listen(0, '127.0.0.1', () => resolve()));
    const url = `http://127.0.0.1:${(endpoint.address() as AddressInfo).port}`;
    expect((await api.post('/api/exports/apply', itemS3Export('away', url))).status).toBe(201);

    const db = hub.services.db;
    let refused = 0;
    const staged = Object.assign(Object.create(db) as Database, {
      withTenant: (async (tenantId, fn) => {
        if (!gone) return db.withTenant(tenantId, fn);
        refused++;
        return away.withTenant(tenantId, fn);
      }) as Database['withTenant'],
    });
    services = createExportServices({ config: hub.config, db: staged, secrets: hub.services.secrets, egress: egressPolicy(hub.config) });
    const run = await services.runNow(1, 'away');
    expect(refused).toBeGreaterThan(0);
    expect({ status: run.status, code: run.failureCode }).toEqual({ status: 'Failed', code: 'publication' });
    expect(run.failureReason).toMatch(/could not reach/);
    const { rows } = await owner.query<{ status: string; failure_code: string }>('select status, failure_code from exports.runs where id = $1', [run.id]);
    expect(rows[0]).toEqual({ status: 'Failed', failure_code: 'publication' });
  }, 30_000);

  it('ends Failed when what the destination answered holds a NUL or half a surrogate pair: written as U+FFFD', async () => {
    // An S3 endpoint answering every request 500 with an error code holding a NUL and a lone surrogate (XML character references the SDK decodes).
    s3 = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(500, { 'content-type': 'application/xml' });
        res.end('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>Bad&#0;Code&#xD800;</Code><Message>m</Message><RequestId>1</RequestId></Error>');
      });
    });
    await new Promise<void>((resolve) => s3!.listen(0, '127.0.0.1', () => resolve()));
    expect((await api.post('/api/exports/apply', itemS3Export('nul-code', `http://127.0.0.1:${(s3.address() as AddressInfo).port}`))).status).toBe(201);
    await services?.close();
    services = createExportServices({ config: hub.config, db: hub.services.db, secrets: hub.services.secrets, egress: egressPolicy(hub.config) });
    const run = await services.runNow(1, 'nul-code');
    expect({ status: run.status, code: run.failureCode }).toEqual({ status: 'Failed', code: 'publication' });
    // Such a <Code> is no S3 error code: the reason names the status alone (it quoted the code as Bad\ufffdCode\ufffd before).
    expect(run.failureReason).toMatch(/^S3 answered HTTP 500 while publishing /);
    const { rows } = await owner.query<{ status: string; failure_reason: string }>('select status, failure_reason from exports.runs where id = $1', [run.id]);
    expect(rows[0]).toEqual({ status: 'Failed', failure_reason: run.failureReason });
  }, 30_000);
});

// The hub runs in a time zone far from UTC (UTC+14): file-name tokens must still resolve in UTC.
process.env.TZ = 'Pacific/Kiritimati';

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { chownSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import { stringify } from 'yaml';
import { type Client, client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { exportRunEnded } from '../../../test/harness/runs.js';
import { describeRequiring } from '../../../test/harness/requires.js';
import { sshdProblem, startSshd, type TestSshd } from '../../../test/harness/sshd.js';
import type { Promote } from '../../../src/connectors/types.js';

/**
 * Exports to a real OpenSSH server on loopback, through the HTTP API of a dev-bypass hub: apply
 * (every refusal names its field), runs from claim to receipt, the exact bytes of the file, the
 * receipt's SHA-256 against the file, collisions that leave the existing file untouched, retries,
 * 409s, the failure codes of a wrong host key, a refused login, a missing directory and a dropped
 * source table, scope grants, the audited one-shot download, the scheduler's slot, and the run
 * that the hub's stop interrupts.
 */

let hub: TestHub;
let owner: pg.Client;
let sshd: TestSshd;
let api: Client;
const T = 1;
const CONNECTOR = '00000000-0000-0000-0000-0000000000c1';
const ENDPOINT = '00000000-0000-0000-0000-0000000000e1';

type Run = {
  id: string;
  status: string;
  attempt: number;
  retryOf: string | null;
  rowCount: number | null;
  byteCount: number | null;
  sha256: string | null;
  location: string | null;
  failureCode: string | null;
  failureReason: string | null;
  trigger: string;
  artifactTime: string;
  slot: string | null;
};

const promote = (name: string, type: Promote['type']): Promote => ({ name, path: `$.${name}`, type });

async function insertRows(list: Array<[string, string | null, string | null]>) {
  for (const [id, name, country] of list) {
    await owner.query(
      `insert into ext_t${T}.partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, name, country)
       values ($1, $2, md5($2), $3, $4, $5, $6, $7)`,
      [T, id, JSON.stringify({ id }), CONNECTOR, ENDPOINT, name, country],
    );
  }
}

const entity = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name: 'Partner' },
  spec: {
    scope: ['crm', 'sales'],
    key: 'partner_id',
    columns: [
      { name: 'partner_id', type: 'text' },
      { name: 'name', type: 'text' },
      { name: 'country', type: 'text' },
    ],
    sources: [{ table: 'ext.partners', key: 'external_id', columns: { partner_id: 'external_id', name: 'name', country: 'country' } }],
  },
};

function exportManifest(name: string, destination: Record<string, unknown>, spec: Record<string, unknown> = {}) {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Export',
    metadata: { name },
    spec: {
      scope: 'crm',
      source: { entity: 'PARTNER' },
      columns: ['partner_id', 'name', 'country'],
      order: ['country'],
      format: { kind: 'csv' },
      destination,
      mode: 'snapshot',
      ...spec,
    },
  };
}

const sftp = (over: Record<string, unknown> = {}) => ({
  kind: 'sftp',
  host: '127.0.0.1',
  port: sshd.port,
  user: sshd.user,
  path: `${sshd.root}/out/partners-\${date}.csv`,
  password_env: 'SFTP_PASSWORD',
  host_key_fingerprint: sshd.fingerprint,
  ...over,
});

async function applyYaml(manifest: unknown, as: Client = api) {
  const res = await fetch(`${hub.url}/api/exports/apply`, {
    method: 'POST',
    headers: { 'content-type': 'application/yaml', 'X-Tenant-ID': String(T), ...(as === api ? {} : {}) },
    body: stringify(manifest),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const settle = (name: string, runId: string) => exportRunEnded<Run>(api, name, runId, 20_000);

async function runToEnd(name: string): Promise<Run> {
  const started = await api.post(`/api/exports/${name}/runs`);
  expect(started.status).toBe(202);
  return settle(name, (started.body as { runId: string }).runId);
}

const utcDate = () => new Date().toISOString().slice(0, 10);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** The expected file: rows sorted by country then partner_id then name, byte-wise, NULLs last. */
const EXPECTED =
  '"partner_id","name","country"\r\n' +
  '"p2","Zoë ""the"" second","DE"\r\n' +
  '"p4","","DE"\r\n' +
  '"p1","Alpha, Inc.\nline two","FR"\r\n' +
  '"p3",,"fr"\r\n' +
  '"p5","No country",\r\n';

describeRequiring(sshdProblem(), 'OpenSSH', 'exports to a real OpenSSH server', () => {
  beforeAll(async () => {
    sshd = await startSshd({ user: 'svc-sftp-export' });
    mkdirSync(join(sshd.root, 'out'));
    const { uid, gid } = statSync(sshd.root);
    chownSync(join(sshd.root, 'out'), uid, gid);
    hub = await startTestHub({ 'svc.export.heartbeat-every': '200ms', 'svc.export.run-stale-after': '1s' });
    owner = await ownerClient(hub.ownerUrl);
    api = devClient(hub.url, T);
    await hub.services.connectors.ext.ensureTable(T, 'ext.partners', [promote('name', 'text'), promote('country', 'text')]);
    await insertRows([
      ['p1', 'Alpha, Inc.\nline two', 'FR'],
      ['p2', 'Zoë "the" second', 'DE'],
      ['p3', null, 'fr'],
      ['p4', '', 'DE'],
      ['p5', 'No country', null],
    ]);
    expect((await api.post('/api/entities/apply', entity)).status).toBe(201);
    expect((await api.post('/api/platform/secrets', { name: 'SFTP_PASSWORD', value: sshd.password })).status).toBe(201);
  });

  afterAll(async () => {
    await owner?.end();
    await hub?.stop();
    await sshd?.stop();
  });

  describe('apply', () => {
    it('stores a manifest (YAML), lower-cases its name, and updates it on re-apply', async () => {
      const first = await applyYaml(exportManifest('Partners-Daily', sftp()));
      expect(first.status).toBe(201);
      expect(first.body).toEqual({ name: 'partners-daily', id: expect.any(String), unchanged: false, warnings: [] });
      const again = await applyYaml(exportManifest('partners-daily', sftp()));
      expect(again).toEqual({ status: 200, body: first.body });
      const listed = (await api.get('/api/exports')).body as Array<{ name: string; entity: string; destination: string }>;
      expect(listed.map((e) => [e.name, e.entity, e.destination])).toContainEqual(['partners-daily', 'partner', 'sftp']);
      const one = (await api.get('/api/exports/Partners-Daily')).body as { spec: { destination: { port: number } } };
      expect(one.spec.destination.port).toBe(sshd.port);
      expect(JSON.stringify(one)).not.toContain(sshd.password);
    });

    it('answers 400 naming the field for every kind of bad input', async () => {
      const cases: Array<[unknown, string]> = [
        [exportManifest('bad', sftp({ password: sshd.password })), 'spec.destination.password'],
        [exportManifest('bad', sftp(), { format: { kind: 'csv', delimiter: ';;' } }), 'spec.format.delimiter'],
        [exportManifest('bad', sftp(), { columns: ['partner_id', 'city'], order: ['partner_id'] }), 'spec.columns[1]'],
        [exportManifest('bad', sftp(), { scope: 'hr' }), 'spec.scope'],
        [exportManifest('bad', sftp(), { source: { entity: 'nobody' } }), 'spec.source.entity'],
        [exportManifest('bad', sftp(), { schedule: '61 * * * *' }), 'spec.schedule'],
        [exportManifest('bad', sftp({ path: '/x/${hour}.csv' })), 'spec.destination.path'],
        [exportManifest('bad', sftp(), { columns: ['partner_id', '_conflicts'], order: ['partner_id'] }), 'spec.columns[1]'],
        [{ ...exportManifest('bad', sftp()), apiVersion: 'apps.svc.io/v2' }, 'apiVersion'],
      ];
      for (const [manifest, field] of cases) {
        const res = await api.post('/api/exports/apply', manifest);
        expect({ field, status: res.status, got: (res.body as { field?: string }).field }).toEqual({ field, status: 400, got: field });
        expect(res.text).not.toContain(sshd.password);
      }
      expect((await api.get('/api/exports/bad')).status).toBe(404);
    });
  });

  describe('runs', () => {
    // The export the cases here run (the apply block applies it too: then this is the manifest stored, no change).
    beforeAll(async () => {
      expect([200, 201]).toContain((await applyYaml(exportManifest('partners-daily', sftp()))).status);
    });

    /** The Completed run that published today's file of partners-daily: the first case's, or one run now when this case runs alone. */
    async function published(): Promise<Run> {
      const done = ((await api.get('/api/exports/partners-daily/runs')).body as Run[]).find((r) => r.status === 'Completed');
      if (done) return done;
      const run = await runToEnd('partners-daily');
      expect(run.status).toBe('Completed');
      return run;
    }

    it('publishes the exact bytes with a receipt whose SHA-256 is the file\'s, named in UTC', async () => {
      const run = await runToEnd('partners-daily');
      const file = join(sshd.root, 'out', `partners-${utcDate()}.csv`);
      expect(run).toMatchObject({ status: 'Completed', attempt: 1, retryOf: null, trigger: 'manual', rowCount: 5, failureCode: null, failureReason: null });
      const bytes = readFileSync(file);
      expect(bytes.toString('utf8')).toBe(EXPECTED);
      expect(run.byteCount).toBe(bytes.length);
      expect(run.sha256).toBe(sha(bytes));
      expect(run.location).toBe(`sftp://${sshd.user}@127.0.0.1:${sshd.port}${file}`);
      expect(readdirSync(join(sshd.root, 'out')).filter((f) => f.endsWith('.part'))).toEqual([]);
    });

    it('ends a second run on the same name in collision, the file untouched; a retry collides too (the earlier attempt published)', async () => {
      await published();
      const file = join(sshd.root, 'out', `partners-${utcDate()}.csv`);
      const before = readFileSync(file);
      const run = await runToEnd('partners-daily');
      expect(run).toMatchObject({ status: 'Failed', failureCode: 'collision' });
      expect(run.failureReason).toContain(`partners-${utcDate()}.csv`);
      expect(readFileSync(file)).toEqual(before);
      const retried = await api.post(`/api/exports/partners-daily/runs/${run.id}/retry`);
      expect(retried.status).toBe(202);
      const second = await settle('partners-daily', (retried.body as { runId: string }).runId);
      expect(second).toMatchObject({ status: 'Failed', failureCode: 'collision', attempt: 2, retryOf: run.id, artifactTime: run.artifactTime });
      expect(readdirSync(join(sshd.root, 'out')).filter((f) => f.endsWith('.part'))).toEqual([]);
    });

    it('answers 409 to a retry of a Completed run and to a run while one is in flight', async () => {
      const completed = await published();
      const refused = await api.post(`/api/exports/partners-daily/runs/${completed.id}/retry`);
      expect(refused.status).toBe(409);
      await applyYaml(exportManifest('busy', sftp({ path: `${sshd.root}/out/busy-\${timestamp}.csv` })));
      const [a, b] = await Promise.all([api.post('/api/exports/busy/runs'), api.post('/api/exports/busy/runs')]);
      expect([a.status, b.status].sort()).toEqual([202, 409]);
      const conflict = a.status === 409 ? a : b;
      expect((conflict.body as { error: string }).error).toBe('already has a run in flight');
      const started = a.status === 202 ? a : b;
      expect((await settle('busy', (started.body as { runId: string }).runId)).status).toBe('Completed');
    });

    it('lists runs newest first with limit 1 to 200', async () => {
      await published();
      const earlier = ((await api.get('/api/exports/partners-daily/runs')).body as Run[]).map((r) => r.id);
      // Two more: a run that collides with today's file, and its retry (attempt 2).
      const collided = await runToEnd('partners-daily');
      const retried = await api.post(`/api/exports/partners-daily/runs/${collided.id}/retry`);
      expect(retried.status).toBe(202);
      const second = await settle('partners-daily', (retried.body as { runId: string }).runId);
      const runs = (await api.get('/api/exports/partners-daily/runs')).body as Run[];
      expect(runs.map((r) => r.id)).toEqual([second.id, collided.id, ...earlier]);
      expect(runs.slice(0, 2).map((r) => r.attempt)).toEqual([2, 1]);
      expect(((await api.get('/api/exports/partners-daily/runs?limit=1')).body as Run[]).length).toBe(1);
      expect((await api.get('/api/exports/partners-daily/runs?limit=0')).status).toBe(400);
      expect((await api.get('/api/exports/partners-daily/runs?limit=201')).status).toBe(400);
      expect((await api.get('/api/exports/partners-daily/runs/00000000-0000-0000-0000-000000000000')).status).toBe(404);
      expect((await api.get('/api/exports/nobody/runs')).status).toBe(404);
    });

    it('fails a wrong host key, a refused login and a missing directory as publication, writing nothing and naming no credential', async () => {
      const wrongKey = 'SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
      const cases: Array<[string, Record<string, unknown>, RegExp]> = [
        ['hostkey', sftp({ host_key_fingerprint: wrongKey, path: `${sshd.root}/out/hostkey.csv` }), /host key/i],
        ['login', sftp({ password_env: 'WRONG_PASSWORD', path: `${sshd.root}/out/login.csv` }), /refused|login|authenticat/i],
        ['nodir', sftp({ path: `${sshd.root}/missing/file.csv` }), /does not exist/],
      ];
      expect((await api.post('/api/platform/secrets', { name: 'WRONG_PASSWORD', value: 'not-the-password' })).status).toBe(201);
      for (const [name, destination, reason] of cases) {
        expect((await applyYaml(exportManifest(name, destination))).status).toBe(201);
        const run = await runToEnd(name);
        expect({ name, code: run.failureCode }).toEqual({ name, code: 'publication' });
        expect(run.failureReason).toMatch(reason);
        expect(run.failureReason).not.toContain(sshd.password);
        expect(run.failureReason).not.toContain('not-the-password');
      }
      expect(existsSync(join(sshd.root, 'out', 'hostkey.csv'))).toBe(false);
      expect(existsSync(join(sshd.root, 'out', 'login.csv'))).toBe(false);
    });

    it('a full disk on the server: Failed publication with the SFTP status, nothing under the final name and no .part; the retry, space freed, publishes the same name', async () => {
      const dir = join(sshd.root, 'full');
      mkdirSync(dir);
      // A 64 KiB file system, filled up (mounting needs root, as the sshd harness does).
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', dir]);
      try {
        const { uid, gid } = statSync(sshd.root);
        chownSync(dir, uid, gid);
        try {
          writeFileSync(join(dir, 'filler'), Buffer.alloc(128 * 1024));
        } catch {
          // ENOSPC: the file system is full, which is the point
        }
        expect((await applyYaml(exportManifest('full-disk', sftp({ path: `${dir}/partners-\${timestamp}.csv` })))).status).toBe(201);
        const failed = await runToEnd('full-disk');
        const name = `partners-${failed.artifactTime.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z')}.csv`;
        expect(failed).toMatchObject({ status: 'Failed', failureCode: 'publication', location: null });
        expect(failed.failureReason).toMatch(new RegExp(`^127\\.0\\.0\\.1:${sshd.port} refused writing ${dir}/${name.replace('.', '\\.')}\\.[0-9a-f-]{36}\\.part \\(SFTP status 4, failure\\)$`));
        expect(readdirSync(dir).sort()).toEqual(['filler']);
        rmSync(join(dir, 'filler'));
        const retried = await api.post(`/api/exports/full-disk/runs/${failed.id}/retry`);
        expect(retried.status).toBe(202);
        const run = await settle('full-disk', (retried.body as { runId: string }).runId);
        expect(run).toMatchObject({ status: 'Completed', attempt: 2, retryOf: failed.id, location: `sftp://${sshd.user}@127.0.0.1:${sshd.port}${dir}/${name}` });
        expect(readFileSync(join(dir, name)).toString('utf8')).toBe(EXPECTED);
        expect(readdirSync(dir)).toEqual([name]);
      } finally {
        execFileSync('umount', [dir]);
      }
    });

    it('fails as publication when the named secret is not stored', async () => {
      await applyYaml(exportManifest('nosecret', sftp({ password_env: 'NOT_STORED', path: `${sshd.root}/out/nosecret.csv` })));
      const run = await runToEnd('nosecret');
      expect(run).toMatchObject({ failureCode: 'publication' });
      expect(run.failureReason).toContain('NOT_STORED');
    });
  });

  describe('definition', () => {
    it('fails as definition when the entity\'s source table is gone, and nothing is published', async () => {
      await hub.services.connectors.ext.ensureTable(T, 'ext.gone', [promote('name', 'text')]);
      const gone = {
        ...entity,
        metadata: { name: 'gone' },
        spec: { ...entity.spec, columns: entity.spec.columns.slice(0, 2), sources: [{ table: 'ext.gone', key: 'external_id', columns: { partner_id: 'external_id', name: 'name' } }] },
      };
      expect((await api.post('/api/entities/apply', gone)).status).toBe(201);
      await applyYaml(exportManifest('gone', sftp({ path: `${sshd.root}/out/gone.csv` }), { source: { entity: 'gone' }, columns: ['partner_id', 'name'], order: ['partner_id'] }));
      await owner.query(`drop table ext_t${T}.gone`);
      const run = await runToEnd('gone');
      expect(run.failureCode).toBe('definition');
      expect(run.failureReason).toContain('ext.gone');
      expect(existsSync(join(sshd.root, 'out', 'gone.csv'))).toBe(false);
      // The one-shot download of that entity: a 409 naming the table, not a 500.
      const download = await api.get('/api/exports/entities/gone/download');
      expect(download).toMatchObject({ status: 409, body: { error: 'entity gone cannot be read: source table ext.gone of entity gone does not exist; ingest its sources first or fix the entity' } });
    });
  });

  describe('scopes', () => {
    async function scopedUser(scopes: string[]): Promise<Client> {
      const created = await api.post(`/api/tenants/${T}/users`, { login: `exp-${scopes.join('-')}-${Math.random().toString(36).slice(2, 8)}`, name: 'Scoped' });
      const id = (created.body as { id: number }).id;
      expect((await api.put(`/api/tenants/${T}/users/${id}/scopes`, { scopes })).status).toBe(200);
      return client(hub.url, { 'X-Tenant-ID': String(T), 'X-User-ID': String(id) });
    }

    it('refuses reading, running and listing runs of an export without its scope (403 scope not granted)', async () => {
      expect([200, 201]).toContain((await applyYaml(exportManifest('partners-daily', sftp()))).status); // new when the case runs alone
      const sales = await scopedUser(['sales']);
      for (const res of [await sales.get('/api/exports/partners-daily'), await sales.post('/api/exports/partners-daily/runs'), await sales.get('/api/exports/partners-daily/runs')]) {
        expect(res.status).toBe(403);
        expect(res.body).toEqual({ error: 'scope not granted' });
      }
      expect(((await sales.get('/api/exports')).body as unknown[]).length).toBe(0);
      const crm = await scopedUser(['crm']);
      expect((await crm.get('/api/exports/partners-daily')).status).toBe(200);
    });
  });

  describe('download', () => {
    it('answers the entity as CSV (every column, comma, header), audited as egress with rows, bytes and SHA-256', async () => {
      const res = await fetch(`${hub.url}/api/exports/entities/PARTNER/download`, { headers: { 'X-Tenant-ID': String(T) } });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/csv; charset=utf-8');
      const bytes = Buffer.from(await res.arrayBuffer());
      expect(bytes.toString('utf8')).toBe(
        '"partner_id","name","country"\r\n"p1","Alpha, Inc.\nline two","FR"\r\n"p2","Zoë ""the"" second","DE"\r\n"p3",,"fr"\r\n"p4","","DE"\r\n"p5","No country",\r\n',
      );
      expect(res.headers.get('x-content-sha256')).toBe(sha(bytes));
      expect(res.headers.get('x-row-count')).toBe('5');
      const { rows } = await owner.query<{ target: string; action: string }>("select action, target from audit.entries where action like 'GET /api/exports/entities/%' order by id desc limit 1");
      expect(rows[0]).toEqual({ action: 'GET /api/exports/entities/{entity}/download', target: `/api/exports/entities/PARTNER/download rows=5 bytes=${bytes.length} sha256=${sha(bytes)}` });
      expect((await api.get('/api/exports/entities/nobody/download')).status).toBe(404);
    });
  });

  describe('schedule and interruption', () => {
    it('runs the latest due slot once, with the slot as artifact time and no user; a delivered slot refuses a retry', async () => {
      // The slot's file name is taken by a plain file first, so the slot's run fails in collision…
      const slot = new Date(Math.floor(Date.now() / 60_000) * 60_000);
      const stamp = slot.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
      await applyYaml(exportManifest('every-minute', sftp({ path: `${sshd.root}/out/slot-\${timestamp}.csv` }), { schedule: '* * * * *' }));
      const fired = await hub.services.exports.scheduler.fire(T, 'every-minute');
      if (fired.kind !== 'started') throw new Error(`slot not started: ${fired.kind}`);
      const first = await fired.done;
      const again = await hub.services.exports.scheduler.fire(T, 'every-minute');
      expect(again.kind === 'already-run' || (again.kind === 'started' && again.slot.getTime() > fired.slot.getTime())).toBe(true);
      if (again.kind === 'started') await again.done;
      expect(first).toMatchObject({ status: 'Completed', trigger: 'scheduled', slot: fired.slot.toISOString(), artifactTime: fired.slot.toISOString() });
      expect(first.location).toContain(`slot-${fired.slot.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '')}.csv`);
      expect(stamp.length).toBe(16);
      // …and a Failed run of a delivered slot cannot be retried: it was already delivered.
      const { rows } = await owner.query<{ id: string }>(
        `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, slot, artifact_time, retry_of, ended_at, failure_code, failure_reason)
         select tenant_id, export_id, export_name, entity, scope, destination, 'Failed', 'scheduled', slot, artifact_time, id, now(), 'publication', 'test'
           from exports.runs where id = $1 returning id`,
        [first.id],
      );
      const refused = await api.post(`/api/exports/every-minute/runs/${rows[0]!.id}/retry`);
      expect(refused.status).toBe(409);
      expect((refused.body as { error: string }).error).toBe('already delivered');
    });

    it('fails a Running run whose process stopped beating as interrupted', async () => {
      // An export of this case's own, and a Running run of it whose heartbeat stopped an hour ago.
      expect((await applyYaml(exportManifest('stalled', sftp({ path: `${sshd.root}/out/stalled-\${timestamp}.csv` })))).status).toBe(201);
      const { rows } = await owner.query<{ id: string }>(
        `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, heartbeat_at)
         select tenant_id, id, name, entity, scope, 'sftp', 'Running', 'manual', now(), now() - interval '1 hour' from exports.exports where name = 'stalled' returning id`,
      );
      expect(await hub.services.exports.sweepInterrupted()).toBeGreaterThanOrEqual(1);
      const run = (await api.get(`/api/exports/stalled/runs/${rows[0]!.id}`)).body as Run;
      expect(run).toMatchObject({ status: 'Failed', failureCode: 'interrupted' });
      const retried = await api.post(`/api/exports/stalled/runs/${run.id}/retry`);
      expect(retried.status).toBe(202);
      expect((await settle('stalled', (retried.body as { runId: string }).runId)).status).toBe('Completed');
    });
  });

  describe('collision with a file that was there first', () => {
    it('leaves the existing file untouched', async () => {
      const file = join(sshd.root, 'out', 'taken.csv');
      writeFileSync(file, 'theirs\n');
      const { uid, gid } = statSync(sshd.root);
      chownSync(file, uid, gid);
      await applyYaml(exportManifest('taken', sftp({ path: file })));
      const run = await runToEnd('taken');
      expect(run.failureCode).toBe('collision');
      expect(readFileSync(file, 'utf8')).toBe('theirs\n');
    });
  });
});

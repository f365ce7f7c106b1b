import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { itemS3Export, prepareItemExports } from '../../../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';

/**
 * The address of an export's destination through the HTTP API: an SFTP `host` that is not a DNS
 * name or an IP address (a user, a port, a path, a space in it) and an S3 `endpoint` with a query
 * or a fragment are refused at apply, 400 naming the field. One stored before these rules (written
 * here into its row, as an earlier version stored it) is still listed and read, and its run fails
 * `definition` naming the field, before any connection and without quoting the value. So does an
 * export whose CSV delimiter apply has refused since it was stored.
 */

let hub: TestHub;
let owner: pg.Client;
let api: Client;

const FINGERPRINT = 'SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8';

function sftpExport(name: string, host: string) {
  const manifest = itemS3Export(name, 'https://s3.example.com');
  return { ...manifest, spec: { ...manifest.spec, destination: { kind: 'sftp', host, port: 22, user: 'drop', path: `/upload/${name}.csv`, password_env: 'SFTP_PASSWORD', host_key_fingerprint: FINGERPRINT } } };
}

type Run = { status: string; failureCode: string | null; failureReason: string | null };

/** Export `name`'s spec field at `path` (`destination.host`) set to `value` in its stored row (manifest and normalised spec), as apply once stored it. */
async function storeAsBefore(name: string, path: `${'destination' | 'format'}.${string}`, value: string): Promise<void> {
  const { rowCount } = await owner.query(
    `update exports.exports set manifest = jsonb_set(manifest, array['spec'] || $2::text[], to_jsonb($3::text)),
                                spec = jsonb_set(spec, $2::text[], to_jsonb($3::text))
      where tenant_id = 1 and name = $1`,
    [name, path.split('.'), value],
  );
  expect(rowCount).toBe(1);
}

async function runToEnd(name: string): Promise<Run> {
  const started = await api.post(`/api/exports/${name}/runs`, {});
  expect(started.status).toBe(202);
  const runId = (started.body as { runId: string }).runId;
  return until(`run ${runId} ended`, async () => {
    const run = (await api.get(`/api/exports/${name}/runs/${runId}`)).body as Run;
    return run.status !== 'Running' && run;
  }, 30_000);
}

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  api = devClient(hub.url, 1);
  await prepareItemExports(hub, api);
  expect((await api.post('/api/platform/secrets', { name: 'SFTP_PASSWORD', value: 'sftp-password' })).status).toBe(201);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('an export destination address', () => {
  it('apply refuses an SFTP host that is not a DNS name or an IP address, and an S3 endpoint with a query or a fragment: 400 naming the field, nothing stored', async () => {
    const refused = async (manifest: unknown) => {
      const res = await api.post('/api/exports/apply', manifest);
      return { status: res.status, body: res.body as { error: string; field: string } };
    };
    // Was: 201, each stored, failing only when a run connected.
    expect(await refused(sftpExport('at-host', 'drop:pw-xyzzy@sftp.example.com'))).toEqual({
      status: 400,
      body: expect.objectContaining({ field: 'spec.destination.host', error: 'spec.destination.host may not hold a user (user@host): give the user in spec.destination.user and the password in password_env' }),
    });
    expect(await refused(sftpExport('port-host', 'sftp.example.com:2222'))).toMatchObject({ status: 400, body: { field: 'spec.destination.host' } });
    expect(await refused(sftpExport('path-host', 'sftp.example.com/upload'))).toMatchObject({ status: 400, body: { field: 'spec.destination.host' } });
    expect(await refused(sftpExport('space-host', 'sftp example.com'))).toMatchObject({ status: 400, body: { field: 'spec.destination.host' } });
    expect(await refused(itemS3Export('query-endpoint', 'https://s3.example.com/?x-id=PutObject'))).toMatchObject({ status: 400, body: { field: 'spec.destination.endpoint' } });
    expect(await refused(itemS3Export('fragment-endpoint', 'https://s3.example.com/#top'))).toMatchObject({ status: 400, body: { field: 'spec.destination.endpoint' } });
    const { rows } = await owner.query("select name from exports.exports where tenant_id = 1 and (name like '%-host' or name like '%-endpoint')");
    expect(rows).toEqual([]);
    // As ssh takes them: a name, and an IPv6 address without brackets.
    expect((await api.post('/api/exports/apply', sftpExport('named-host', 'sftp.example.com'))).status).toBe(201);
    expect((await api.post('/api/exports/apply', sftpExport('v6-host', '2001:db8::1'))).status).toBe(201);
  });

  it('stored before the rules: listed and read as stored; a run fails definition naming the field, without connecting or quoting the value', async () => {
    expect((await api.post('/api/exports/apply', sftpExport('old-sftp', 'sftp.example.com'))).status).toBe(201);
    await storeAsBefore('old-sftp', 'destination.host', 'drop:pw-xyzzy@127.0.0.1');
    expect((await api.post('/api/exports/apply', itemS3Export('old-s3', 'http://127.0.0.1:9'))).status).toBe(201);
    await storeAsBefore('old-s3', 'destination.endpoint', 'http://127.0.0.1:9/?x-id=1');

    const listed = await api.get('/api/exports');
    expect(listed.status).toBe(200);
    expect(JSON.stringify(listed.body)).toContain('old-sftp');
    const read = await api.get('/api/exports/old-sftp');
    expect(read.status).toBe(200);
    expect((read.body as { spec: { destination: { host: string } } }).spec.destination.host).toBe('drop:pw-xyzzy@127.0.0.1');

    // Was: Failed publication, "could not connect to drop:pw-xyzzy@127.0.0.1:22: … ENOTFOUND …", the password in the run's record.
    const sftp = await runToEnd('old-sftp');
    expect(sftp).toMatchObject({
      status: 'Failed',
      failureCode: 'definition',
      failureReason:
        'spec.destination.host may not hold a user (user@host): give the user in spec.destination.user and the password in password_env; it was stored before apply refused it, and nothing was sent: fix the export and apply it again',
    });
    // Was: Failed publication, the request sent with the query.
    const s3 = await runToEnd('old-s3');
    expect(s3).toMatchObject({ status: 'Failed', failureCode: 'definition' });
    expect(s3.failureReason).toMatch(/^spec\.destination\.endpoint may not hold a query \(\?…\) or a fragment \(#…\): .*; it was stored before apply refused it, and nothing was sent: fix the export and apply it again$/);
  }, 60_000);

  it('a bracketed IPv6 host stored before apply refused brackets still connects (to the address without them)', async () => {
    expect((await api.post('/api/exports/apply', sftpExport('old-v6', '::1'))).status).toBe(201);
    await storeAsBefore('old-v6', 'destination.host', '[::1]');
    // Port 1: nothing listens there; the run gets as far as connecting.
    await owner.query("update exports.exports set spec = jsonb_set(spec, '{destination,port}', '1') where tenant_id = 1 and name = 'old-v6'");
    const run = await runToEnd('old-v6');
    expect(run).toMatchObject({ status: 'Failed', failureCode: 'publication' });
    expect(run.failureReason).toMatch(/^could not connect to \[::1\]:1: /);
  }, 60_000);

  it('a CSV delimiter stored before apply refused it (U+FEFF): its run fails definition naming the field, nothing sent', async () => {
    expect((await api.post('/api/exports/apply', itemS3Export('old-bom', 'http://127.0.0.1:9'))).status).toBe(201);
    await storeAsBefore('old-bom', 'format.delimiter', '\ufeff');
    expect((await api.get('/api/exports/old-bom')).status).toBe(200);
    // Was: Failed generation, 'the snapshot could not be produced: the delimiter must be …', logged as a failure of the hub.
    expect(await runToEnd('old-bom')).toMatchObject({
      status: 'Failed',
      failureCode: 'definition',
      failureReason:
        'spec.format.delimiter may not be U+FEFF, the byte-order mark: a file would start with it when its first value is NULL, and readers drop it; it was stored before apply refused it, and nothing was sent: fix the export and apply it again',
    });
  }, 60_000);
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { client } from '../test/harness/api-client.js';
import { ITEM_ENTITY, itemS3Export } from '../test/harness/export-manifests.js';
import { startReceiver, type Receiver } from '../test/harness/receiver.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { exportRunEnded, runEnded } from '../test/harness/runs.js';
import { startIssuer, type TestIssuer } from '../test/harness/tokens.js';

/**
 * The outbound address policy over HTTP, in the prod profile (where it is on by default): two hubs
 * on one database, `strict` with the defaults and `allowing` with `svc.egress.allow=127.0.0.1`.
 * Every destination is a loopback receiver; what the strict hub refuses must never reach it.
 */

let issuer: TestIssuer;
let receiver: Receiver;
let strict: TestHub;
let allowing: TestHub;
let auth: Record<string, string>;

const RECORDS = JSON.stringify([{ id: 1, name: 'one' }]);
const OPENAPI = JSON.stringify({
  openapi: '3.0.0',
  info: { title: 'Items' },
  paths: { '/items': { get: { responses: { 200: { content: { 'application/json': { schema: { type: 'array', items: { type: 'object', properties: { id: { type: 'integer' } } } } } } } } } } },
});

beforeAll(async () => {
  issuer = await startIssuer();
  receiver = await startReceiver((path) => ({ status: 200, body: path.startsWith('/openapi') ? OPENAPI : RECORDS }));
  const prod = { 'svc.profile': 'prod', 'svc.oidc.issuer': issuer.issuer, 'svc.secret.master-key': randomBytes(32).toString('hex'), 'svc.http.host': '127.0.0.1' };
  allowing = await startTestHub({ ...prod, 'svc.egress.allow': '127.0.0.1' });
  strict = await startTestHub({ ...prod, 'svc.datasource.url': allowing.ownerUrl, 'svc.migrate.on-start': false });
  const token = await issuer.mint({ realm_access: { roles: ['svc_integrator', 'svc_admin'] }, tenant_id: 1 }, { subject: 'egress-admin' });
  auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  const applied = await post(allowing, '/api/connectors/apply', {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name: 'loopback-source' },
    connector_type: 'rest-generic',
    scopes: ['items'],
    spec: { base_url: receiver.url, endpoints: [{ id: 'items', path: '/items', target: { kind: 'hybrid', table: 'ext.egress_items', unique_key: '$.id' } }] },
  });
  expect(applied.status).toBe(201);
});

afterAll(async () => {
  await strict?.stop();
  await allowing?.stop();
  await receiver?.close();
  await issuer?.close();
});

async function post(hub: TestHub, path: string, body: unknown = {}) {
  const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: auth, body: JSON.stringify(body) });
  const text = await res.text();
  const json = (res.headers.get('content-type') ?? '').includes('json');
  return { status: res.status, body: json && text ? JSON.parse(text) : undefined, text };
}

const POLICY = /refused by the outbound address policy \(svc\.egress\.deny-private\)/;

describe('connectors', () => {
  it('pre-flight: a loopback source is refused before any connection; allow-listed it is read', async () => {
    const before = receiver.received.length;
    const refused = await post(strict, '/api/connectors/loopback-source/preflight');
    expect(refused.status).toBe(200);
    expect(refused.body.ok).toBe(false);
    expect(refused.body.endpoints[0].verdict).toMatch(/^upstream not contacted: 127\.0\.0\.1 is a loopback address/);
    expect(refused.body.endpoints[0].verdict).toMatch(POLICY);
    expect(receiver.received.length).toBe(before);

    const read = await post(allowing, '/api/connectors/loopback-source/preflight');
    expect(read.body).toMatchObject({ ok: true, endpoints: [{ verdict: 'ok', items: 1 }] });
    expect(receiver.received.length).toBe(before + 1);
  });

  it('draft: refused with a 502 naming the policy, nothing sent', async () => {
    const before = receiver.received.length;
    const refused = await post(strict, '/api/connectors/loopback-source/draft', { path: '/items' });
    expect(refused.status).toBe(502);
    expect(refused.body.error).toMatch(POLICY);
    expect(receiver.received.length).toBe(before);
    expect((await post(allowing, '/api/connectors/loopback-source/draft', { path: '/items' })).status).toBe(200);
  });

  it('a run fails naming the policy, not retried, nothing sent', async () => {
    const before = receiver.received.length;
    const started = await post(strict, '/api/connectors/loopback-source/runs');
    expect(started.status).toBe(202);
    const runId = started.body.runs[0].id as string;
    const run = await runEnded<{ status: string; errorMessage: string | null }>(strict.url, runId, auth);
    expect(run).toMatchObject({ status: 'Failed' });
    expect(run?.errorMessage).toMatch(POLICY);
    expect(receiver.received.length).toBe(before);
  });

  // WHATWG URLs normalise numeric IPv4 spellings and trailing dots; the policy reads the raw forms too (src/egress/policy.test.ts).
  it.each([
    ['loopback', (port: string) => `http://127.0.0.1:${port}/openapi.json`],
    ['decimal IPv4', (port: string) => `http://2130706433:${port}/openapi.json`],
    ['hex IPv4', (port: string) => `http://0x7f.1:${port}/openapi.json`],
    ['octal IPv4', (port: string) => `http://0177.0.0.1:${port}/openapi.json`],
    ['IPv4-mapped IPv6', (port: string) => `http://[::ffff:127.0.0.1]:${port}/openapi.json`],
    ['IPv4-mapped IPv6, hex', (port: string) => `http://[::ffff:7f00:1]:${port}/openapi.json`],
    ['localhost with a trailing dot', (port: string) => `http://localhost.:${port}/openapi.json`],
    ['a .localhost name', (port: string) => `http://svc.localhost:${port}/openapi.json`],
  ])('scaffold: %s is refused with a 400 naming openapiUrl, nothing sent', async (_form, url) => {
    const port = new URL(receiver.url).port;
    const before = receiver.received.length;
    const refused = await post(strict, '/api/connectors/scaffold', { openapiUrl: url(port), name: 'items' });
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe('openapiUrl');
    expect(refused.body.error).toMatch(POLICY);
    expect(receiver.received.length).toBe(before);
  });

  it('scaffold: an allow-listed address is read', async () => {
    const res = await post(allowing, '/api/connectors/scaffold', { openapiUrl: `${receiver.url}/openapi.json`, name: 'items' });
    expect(res.status).toBe(200);
    expect(res.text).toContain('base_url');
  });
});

/** The warning an apply answers for an address the policy refuses (src/egress/policy.ts applyWarning). */
const refusedWarning = (field: string, host: string, reason: string) => ({
  field,
  message: `${host} is ${reason}: refused by the outbound address policy (svc.egress.deny-private); runs will fail until svc.egress.allow admits it`,
});

const connectorAt = (name: string, baseUrl: string) => ({
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name },
  connector_type: 'rest-generic',
  scopes: ['items'],
  spec: { base_url: baseUrl, endpoints: [{ id: 'items', path: '/items', target: { kind: 'hybrid', table: 'ext.egress_items', unique_key: '$.id' } }] },
});

describe('apply warns of a refused address and still applies (a manifest in Git stays valid when svc.egress.allow changes)', () => {
  it('connector: a loopback base_url answers 201 with a warning naming spec.base_url; allow-listed, none; a public literal, none', async () => {
    const applied = await post(strict, '/api/connectors/apply', connectorAt('warned-source', 'http://127.0.0.1:8080/api'));
    expect(applied.status).toBe(201);
    expect(applied.body.warnings).toEqual([refusedWarning('spec.base_url', '127.0.0.1', 'a loopback address')]);
    const again = await post(allowing, '/api/connectors/apply', connectorAt('warned-source', 'http://127.0.0.1:8080/api'));
    expect(again.status).toBe(200);
    expect(again.body.warnings).toEqual([]);
    const open = await post(strict, '/api/connectors/apply', connectorAt('public-source', 'https://93.184.216.34/api'));
    expect(open.status).toBe(201);
    expect(open.body.warnings).toEqual([]);
  });

  it.each([
    ['http://[::1]:8080', '::1', 'a loopback address'],
    ['http://10.0.0.5', '10.0.0.5', 'a private address'],
    ['http://169.254.169.254/latest', '169.254.169.254', 'a link-local address'],
    ['http://localhost:8080', 'localhost', 'a loopback name'],
    ['http://2130706433:8080', '127.0.0.1', 'a loopback address'],
  ])('connector validate: %s is valid, with the warning', async (baseUrl, host, reason) => {
    const checked = await post(strict, '/api/connectors/validate', connectorAt('checked-source', baseUrl));
    expect(checked.status).toBe(200);
    expect(checked.body).toEqual({ valid: true, errors: [], warnings: [refusedWarning('spec.base_url', host, reason)] });
  });

  it('export: a loopback S3 endpoint or SFTP host answers 201 with a warning naming the field; allow-listed, none; a public literal, none', async () => {
    expect((await post(strict, '/api/entities/apply', ITEM_ENTITY)).status).toBe(201);
    const s3 = itemS3Export('warned-s3', 'https://127.0.0.1:9000');
    const applied = await post(strict, '/api/exports/apply', s3);
    expect(applied.status).toBe(201);
    expect(applied.body.warnings).toEqual([refusedWarning('spec.destination.endpoint', '127.0.0.1', 'a loopback address')]);
    expect((await post(allowing, '/api/exports/apply', s3)).body).toMatchObject({ warnings: [] });
    const open = await post(strict, '/api/exports/apply', itemS3Export('public-s3', 'https://93.184.216.34'));
    expect(open.status).toBe(201);
    expect(open.body.warnings).toEqual([]);

    const sftp = {
      ...s3,
      metadata: { name: 'warned-sftp' },
      spec: {
        ...s3.spec,
        destination: { kind: 'sftp', host: '10.0.0.5', user: 'drop', path: '/out/items.csv', password_env: 'SFTP_PASSWORD', host_key_fingerprint: `SHA256:${'A'.repeat(43)}` },
      },
    };
    const sftpApplied = await post(strict, '/api/exports/apply', sftp);
    expect(sftpApplied.status).toBe(201);
    expect(sftpApplied.body.warnings).toEqual([refusedWarning('spec.destination.host', '10.0.0.5', 'a private address')]);
  });
});

describe('webhooks', () => {
  it('a loopback target is refused when stored; one stored through an allowing hub is refused at connect time; allow-listed it is delivered', async () => {
    const input = { name: 'loopback-hook', targetUrl: `${receiver.url}/hook`, eventTypes: ['org.created'], authMode: 'NONE' };
    const refused = await post(strict, '/api/tenants/1/integrations', input);
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe('targetUrl');
    expect(refused.body.error).toMatch(POLICY);
    const mapped = await post(strict, '/api/tenants/1/integrations', { ...input, targetUrl: `http://[::ffff:7f00:1]:${new URL(receiver.url).port}/hook` });
    expect(mapped.status).toBe(400);

    const created = await post(allowing, '/api/tenants/1/integrations', input);
    expect(created.status).toBe(201);
    const before = receiver.on('/hook').length;
    const test = await post(strict, `/api/tenants/1/integrations/${created.body.id}/test`, { eventType: 'org.created' });
    expect(test.status).toBe(200);
    expect(test.body.ok).toBe(false);
    expect(JSON.stringify(test.body)).toMatch(POLICY);
    expect(receiver.on('/hook').length).toBe(before);

    const sent = await post(allowing, `/api/tenants/1/integrations/${created.body.id}/test`, { eventType: 'org.created' });
    expect(sent.body.ok).toBe(true);
    expect(receiver.on('/hook').length).toBe(before + 1);
  });
});

describe('export runs: the publication connects only where the policy admits (the hub\'s policy reaches the export runner)', () => {
  /** A TCP listener on every loopback address of both families, counting connections: an SFTP client says nothing HTTP could record. */
  let listener: Server;
  let port: number;
  let connections = 0;
  const sockets = new Set<Socket>();
  const s3Export = (name: string, endpoint: string) => itemS3Export(name, endpoint);
  const sftpExport = (name: string, host: string) => {
    const m = itemS3Export(name, 'https://s3.example.com');
    return { ...m, spec: { ...m.spec, destination: { kind: 'sftp', host, port, user: 'drop', path: '/out/items.csv', password_env: 'S3_SECRET', host_key_fingerprint: `SHA256:${'A'.repeat(43)}` } } };
  };

  beforeAll(async () => {
    listener = createServer((socket) => {
      connections++;
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {});
      socket.destroy();
    });
    await new Promise<void>((done) => listener.listen({ port: 0, host: '::', ipv6Only: false }, done));
    port = (listener.address() as { port: number }).port;
    await strict.services.connectors.ext.ensureTable(1, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
    for (const [name, value] of [['S3_KEY', 'key-id'], ['S3_SECRET', 'secret-key']]) {
      expect([201, 409]).toContain((await post(strict, '/api/platform/secrets', { name, value })).status);
    }
    expect([200, 201]).toContain((await post(strict, '/api/entities/apply', ITEM_ENTITY)).status);
  });

  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((done) => listener?.close(() => done()));
  });

  async function runOn(hub: TestHub, manifest: { metadata: { name: string } }) {
    expect([200, 201]).toContain((await post(hub, '/api/exports/apply', manifest)).status);
    const started = await post(hub, `/api/exports/${manifest.metadata.name}/runs`);
    expect(started.status).toBe(202);
    return exportRunEnded<{ status: string; failureReason: string | null }>(client(hub.url, auth), manifest.metadata.name, started.body.runId);
  }

  it.each([
    ['decimal IPv4', (p: number) => `http://2130706433:${p}`, 'S3 endpoint not contacted: 127.0.0.1 is a loopback address'],
    ['short hex IPv4', (p: number) => `http://0x7f.1:${p}`, 'S3 endpoint not contacted: 127.0.0.1 is a loopback address'],
    ['IPv4-mapped IPv6', (p: number) => `http://[::ffff:127.0.0.1]:${p}`, 'S3 endpoint not contacted: ::ffff:7f00:1 is a loopback address'],
    ['6to4 embedding loopback', (p: number) => `http://[2002:7f00:1::]:${p}`, 'S3 endpoint not contacted: 2002:7f00:1:: is a 6to4 address embedding 127.0.0.1'],
  ])('S3 endpoint, %s: the run fails naming the policy, no connection', async (_form, endpoint, reason) => {
    const before = connections;
    const run = await runOn(strict, s3Export(`s3-${_form.replace(/\W+/g, '-')}`, endpoint(port)));
    expect(run.status).toBe('Failed');
    expect(run.failureReason).toContain(reason);
    expect(run.failureReason).toMatch(POLICY);
    expect(connections).toBe(before);
  });

  it.each([
    ['octal IPv4', '0177.0.0.1', '0177.0.0.1 resolves to 127.0.0.1, a loopback address'],
    ['IPv4-mapped IPv6', '::ffff:127.0.0.1', '::ffff:127.0.0.1 is a loopback address'],
    ['loopback with a zone id', '::1%lo', '::1%lo resolves to ::1, a loopback address'],
    ['upper-case localhost with a trailing dot', 'LOCALHOST.', 'LOCALHOST. is a loopback name'],
  ])('SFTP host, %s: the run fails naming the policy, no connection', async (_form, host, reason) => {
    const before = connections;
    const run = await runOn(strict, sftpExport(`sftp-${_form.replace(/\W+/g, '-')}`, host));
    expect(run.status).toBe('Failed');
    expect(run.failureReason).toContain(`SFTP host ${host} not contacted: ${reason}`);
    expect(run.failureReason).toMatch(POLICY);
    expect(connections).toBe(before);
  });

  it('allow-listed (svc.egress.allow=127.0.0.1), the same SFTP host is connected to', async () => {
    const before = connections;
    const run = await runOn(allowing, sftpExport('sftp-allowed', '0177.0.0.1'));
    expect(run.status).toBe('Failed');
    expect(run.failureReason).not.toMatch(POLICY);
    expect(connections).toBeGreaterThan(before);
  });
});

/** src/egress/policy.ts unconnectablePort: the one text every check of an outbound URL gives for port 0. */
const PORT_ZERO = /: port 0 cannot be connected to: give the port the service listens on, or none for the scheme's default$/;

describe('port 0 is refused where a tenant gives an address (a 400 naming the field), not left to fail at connect', () => {
  it.each(['https://example.com:0/api', 'https://example.com:00/api', 'http://93.184.216.34:0'])('connector apply and validate: base_url %s', async (baseUrl) => {
    const refused = await post(strict, '/api/connectors/apply', connectorAt('port-zero-source', baseUrl));
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe('spec.base_url');
    expect(refused.body.error).toMatch(/^spec\.base_url/);
    expect(refused.body.error).toMatch(PORT_ZERO);
    expect((await fetch(`${strict.url}/api/connectors/port-zero-source`, { headers: auth })).status).toBe(404);
    const checked = await post(strict, '/api/connectors/validate', connectorAt('port-zero-source', baseUrl));
    expect(checked.body.valid).toBe(false);
    expect(checked.body.errors).toEqual([{ field: 'spec.base_url', message: refused.body.error }]);
  });

  it('export apply: an S3 endpoint on port 0 is refused naming spec.destination.endpoint; an SFTP port 0 naming spec.destination.port', async () => {
    expect([200, 201]).toContain((await post(strict, '/api/entities/apply', ITEM_ENTITY)).status);
    const s3 = itemS3Export('port-zero-s3', 'https://example.com:0');
    const refused = await post(strict, '/api/exports/apply', s3);
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe('spec.destination.endpoint');
    expect(refused.body.error).toMatch(/^spec\.destination\.endpoint/);
    expect(refused.body.error).toMatch(PORT_ZERO);

    const sftp = {
      ...s3,
      metadata: { name: 'port-zero-sftp' },
      spec: {
        ...s3.spec,
        destination: { kind: 'sftp', host: 'sftp.example.com', port: 0, user: 'drop', path: '/out/items.csv', password_env: 'SFTP_PASSWORD', host_key_fingerprint: `SHA256:${'A'.repeat(43)}` },
      },
    };
    const sftpRefused = await post(strict, '/api/exports/apply', sftp);
    expect(sftpRefused.status).toBe(400);
    expect(sftpRefused.body.field).toBe('spec.destination.port');
  });

  it('webhook integration: a targetUrl on port 0 is refused naming targetUrl, on create and on update', async () => {
    const input = { name: 'port-zero-hook', targetUrl: 'https://hooks.example.com:0/svc', eventTypes: ['org.created'], authMode: 'NONE' };
    const refused = await post(strict, '/api/tenants/1/integrations', input);
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe('targetUrl');
    expect(refused.body.error).toMatch(PORT_ZERO);

    const created = await post(strict, '/api/tenants/1/integrations', { ...input, targetUrl: 'https://hooks.example.com/svc' });
    expect(created.status).toBe(201);
    const patched = await fetch(`${strict.url}/api/tenants/1/integrations/${created.body.id}`, { method: 'PUT', headers: auth, body: JSON.stringify({ targetUrl: 'https://hooks.example.com:0/svc' }) });
    expect(patched.status).toBe(400);
    const body = (await patched.json()) as { field: string; error: string };
    expect(body.field).toBe('targetUrl');
    expect(body.error).toMatch(PORT_ZERO);
  });

  it('scaffold: an openapiUrl on port 0 is refused naming openapiUrl, nothing fetched', async () => {
    const refused = await post(allowing, '/api/connectors/scaffold', { openapiUrl: 'http://127.0.0.1:0/openapi.json', name: 'items' });
    expect(refused.status).toBe(400);
    expect(refused.body.field).toBe('openapiUrl');
    expect(refused.body.error).toMatch(PORT_ZERO);
  });
});

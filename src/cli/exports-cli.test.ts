import { execFileSync, spawn } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { parse, stringify } from 'yaml';
import type { Promote } from '../connectors/types.js';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { sha256 as sha } from '../../test/harness/bytes.js';
import { startS3, type TestS3 } from '../../test/harness/s3.js';
import { until } from '../../test/harness/until.js';
import { runSvc, type SvcOptions, type SvcResult } from '../../test/harness/svc-cli.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

/**
 * `svc apply`, `svc entities …` and `svc exports …` against a real hub (dev bypass) publishing to
 * the in-process S3 stand-in (test/harness/s3.ts: signatures and conditional writes checked). The
 * stand-in is reached through a small pass-through proxy that can hold the PutObject, so a run is
 * still Running, with its progress recorded, for as long as a test needs: the progress line, the
 * 409 of a run in flight and the final receipt are then seen deterministically.
 */

const T = 1;
const BUCKET = 'exports';
const CONNECTOR = '00000000-0000-0000-0000-0000000000c1';
const ENDPOINT = '00000000-0000-0000-0000-0000000000e1';

let hub: TestHub;
let s3: TestS3;
let gate: Gate;
let owner: pg.Client;
let dir: string;
let env: Record<string, string>;

/** svc with stdout's bytes as well (`exports download` writes the file's bytes to it). */
async function svc(args: string[], options: SvcOptions = {}): Promise<SvcResult & { bytes: Buffer }> {
  const chunks: Buffer[] = [];
  const result = await runSvc(args, { env, ...options, onOut: (_out, chunk) => void chunks.push(Buffer.from(chunk)) });
  return { ...result, bytes: Buffer.concat(chunks) };
}

/** A pass-through proxy to the S3 stand-in that can hold every PUT until released. */
interface Gate {
  url: string;
  hold(): void;
  release(): void;
  held: number;
  close(): Promise<void>;
}

async function startGate(target: string): Promise<Gate> {
  let waiting: Promise<void> | undefined;
  let open: () => void = () => undefined;
  const state = { held: 0 };
  const server: Server = createServer(async (req, res) => {
    const wait = waiting;
    if (wait && req.method === 'PUT') {
      state.held++;
      await wait;
    }
    const upstream = httpRequest(`${target}${req.url}`, { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on('error', (e) => res.destroy(e));
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hold: () => {
      waiting = new Promise<void>((resolve) => (open = resolve));
    },
    release: () => {
      waiting = undefined;
      open();
    },
    get held() {
      return state.held;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const promote = (name: string, type: Promote['type']): Promote => ({ name, path: `$.${name}`, type });

const ENTITY = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name: 'Partner' },
  spec: {
    scope: ['crm', 'sales'],
    key: 'partner_id',
    columns: [
      { name: 'partner_id', type: 'text' },
      { name: 'name', type: 'text', label: 'Name' },
      { name: 'country', type: 'text' },
    ],
    sources: [{ table: 'ext.partners', key: 'external_id', columns: { partner_id: 'external_id', name: 'name', country: 'country' } }],
  },
};

function exportManifest(name: string, destination: Record<string, unknown> = {}) {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Export',
    metadata: { name },
    spec: {
      scope: 'crm',
      source: { entity: 'partner' },
      columns: ['partner_id', 'name', 'country'],
      order: ['partner_id'],
      format: { kind: 'csv' },
      destination: {
        kind: 's3',
        bucket: BUCKET,
        filename: `${name}.csv`,
        region: s3.region,
        endpoint: gate.url,
        access_key_env: 'S3_ACCESS_KEY',
        secret_key_env: 'S3_SECRET_KEY',
        ...destination,
      },
      mode: 'snapshot',
    },
  };
}

/** The download and the export of these rows: all columns, sorted by partner_id. */
const CSV = '"partner_id","name","country"\r\n"p1","Alpha, Inc.\nline two","FR"\r\n"p2","Zoë ""the"" second","DE"\r\n"p3",,"fr"\r\n"p4","","DE"\r\n"p5","No country",\r\n';

beforeAll(async () => {
  s3 = await startS3({ region: 'eu-west-3' });
  s3.createBucket(BUCKET);
  gate = await startGate(s3.endpoint);
  hub = await startTestHub({ 'svc.secret.master-key': Buffer.alloc(32, 7).toString('base64'), 'svc.export.heartbeat-every': '100ms' });
  owner = await ownerClient(hub.ownerUrl);
  dir = mkdtempSync(join(tmpdir(), 'svc-exports-cli-'));
  env = { SVC_CLI_CONFIG: join(dir, 'config.json'), SVC_CLI_POLL_MS: '40' };
  expect((await svc(['login', '--url', hub.url, '--dev-tenant', String(T)])).code).toBe(0);

  await hub.services.connectors.ext.ensureTable(T, 'ext.partners', [promote('name', 'text'), promote('country', 'text')]);
  const rows: Array<[string, string | null, string | null]> = [
    ['p1', 'Alpha, Inc.\nline two', 'FR'],
    ['p2', 'Zoë "the" second', 'DE'],
    ['p3', null, 'fr'],
    ['p4', '', 'DE'],
    ['p5', 'No country', null],
  ];
  for (const [id, name, country] of rows) {
    await owner.query(
      `insert into ext_t${T}.partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, name, country)
       values ($1, $2, md5($2), $3, $4, $5, $6, $7)`,
      [T, id, JSON.stringify({ id }), CONNECTOR, ENDPOINT, name, country],
    );
  }
  for (const [name, value] of [['S3_ACCESS_KEY', s3.accessKeyId], ['S3_SECRET_KEY', s3.secretAccessKey]] as const) {
    expect(await svc(['secrets', 'create', name, '--value-stdin'], { stdin: value })).toMatchObject({ code: 0, out: `secret/${name} created\n` });
  }
});

afterAll(async () => {
  gate?.release();
  await owner?.end();
  await hub?.stop();
  await gate?.close();
  await s3?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/**
 * The entity and the export partners-s3 as the first case applies them: what the later cases read,
 * applied again by each block or case that reads them, so that it passes alone (-t); in the file
 * they are the manifests stored, and nothing changes.
 */
async function applied(): Promise<void> {
  const both = `${stringify(ENTITY)}---\n${stringify(exportManifest('partners-s3'))}`;
  expect(await svc(['apply', '-f', '-'], { stdin: both })).toMatchObject({ code: 0 });
}

describe('apply, entities and exports', () => {
  it('applies a file holding an Entity and an Export, in order; again: unchanged', async () => {
    const file = join(dir, 'partners.yaml');
    writeFileSync(file, `${stringify(ENTITY)}---\n${stringify(exportManifest('partners-s3'))}`);
    // The stand-in speaks plain http: the hub warns, and the warning names the document.
    const warning = `warning: ${file}#2: spec.destination.endpoint: a plain http endpoint sends the file unencrypted\n`;
    expect(await svc(['apply', '-f', file])).toEqual({ code: 0, out: 'entity/partner created\nexport/partners-s3 created\n', err: warning, bytes: expect.any(Buffer) });
    expect(await svc(['apply', '-f', file])).toMatchObject({ code: 0, out: 'entity/partner unchanged\nexport/partners-s3 unchanged\n', err: warning });
    const json = await svc(['apply', '-f', file, '--json']);
    expect(JSON.parse(json.out)).toEqual([
      { name: 'partner', id: expect.any(String), unchanged: true, warnings: [] },
      { name: 'partners-s3', id: expect.any(String), unchanged: true, warnings: [{ field: 'spec.destination.endpoint', message: expect.stringContaining('plain http') }] },
    ]);
  });

  it('refuses an Export whose field is wrong, naming the document and the field; Process is still not applicable', async () => {
    const bad = { ...exportManifest('bad'), spec: { ...exportManifest('bad').spec, scope: 'hr' } };
    const refused = await svc(['apply', '-f', '-'], { stdin: JSON.stringify(bad) });
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/^error: stdin: .*spec\.scope.*\(HTTP 400\)\n$/);
    const widget = await svc(['apply', '-f', '-'], { stdin: 'kind: Widget\nmetadata: {name: p}\n' });
    expect(widget).toMatchObject({ code: 1, out: '' });
    expect(widget.err).toBe('error: stdin: unknown kind Widget (this hub applies Connector, Entity, Export, Workflow, Process)\n');
  });

  it('entities ls and get', async () => {
    await applied();
    const ls = await svc(['entities', 'ls']);
    expect(ls.code).toBe(0);
    const [header, row] = ls.out.trimEnd().split('\n');
    expect(header).toMatch(/^NAME\s+SCOPES\s+KEY\s+COLUMNS\s+SOURCES$/);
    expect(row!.split(/\s{2,}/)).toEqual(['partner', 'crm,sales', 'partner_id', '3', 'ext.partners']);
    expect(JSON.parse((await svc(['entities', 'ls', '--json'])).out)).toEqual([expect.objectContaining({ name: 'partner', key: 'partner_id' })]);

    const get = await svc(['entities', 'get', 'PARTNER']);
    expect(get.code).toBe(0);
    expect(get.out).toContain('name: partner\n');
    expect(get.out).toMatch(/Columns:\n {2}COLUMN\s+TYPE\s+LABEL\s+DESCRIPTION\s+VALUES\n {2}partner_id\s+text\s+-/);
    expect(get.out).toMatch(/ {2}name\s+text\s+Name\s/);
    expect(get.out).toMatch(/Sources \(in order of precedence\):\n {2}TABLE\s+KEY\n {2}ext\.partners\s+external_id\n/);
    expect(get.out).toMatch(/Manifest:\n {2}apiVersion: apps\.svc\.io\/v1\n {2}kind: Entity\n/);
    expect(await svc(['entities', 'get', 'nobody'])).toMatchObject({ code: 1, out: '', err: 'error: entity nobody not found (HTTP 404)\n' });
  });

  it('exports ls and get', async () => {
    await applied();
    const ls = await svc(['exports', 'ls']);
    expect(ls.code).toBe(0);
    const [header, ...rows] = ls.out.trimEnd().split('\n');
    expect(header).toMatch(/^NAME\s+ENTITY\s+SCOPE\s+DESTINATION\s+SCHEDULE$/);
    expect(rows.map((r) => r.split(/\s{2,}/))).toEqual([['partners-s3', 'partner', 'crm', 's3', '-']]);

    const get = await svc(['exports', 'get', 'Partners-S3']);
    expect(get.code).toBe(0);
    expect(get.out).toMatch(/^name: partners-s3\n/);
    expect(get.out).toContain('destination: s3\n');
    const manifest = parse(get.out.slice(get.out.indexOf('Manifest:\n') + 'Manifest:\n'.length).replace(/^ {2}/gm, ''));
    expect(manifest).toMatchObject({ kind: 'Export', spec: { destination: { bucket: BUCKET, access_key_env: 'S3_ACCESS_KEY' } } });
    expect(get.out).not.toContain(s3.secretAccessKey);
    expect(JSON.parse((await svc(['exports', 'get', 'partners-s3', '--json'])).out)).toMatchObject({ name: 'partners-s3', entity: 'partner', manifest: { kind: 'Export' } });
    expect((await svc(['exports', 'get', 'nope'])).err).toMatch(/^error: .*nope.* \(HTTP 404\)\n$/);
  });
});

describe('runs', () => {
  let first: string;
  beforeAll(applied);

  it('follows a run: progress lines with rows and bytes, a 409 for a second run meanwhile, then the receipt', async () => {
    gate.hold(); // the PutObject waits: the run stays Running with its figures recorded
    const heldBefore = gate.held;
    let err = '';
    const following = svc(['exports', 'run', 'partners-s3'], { onErr: (e) => (err = e) });
    await until('the PutObject to be held', () => gate.held > heldBefore, { detail: () => err });
    // A second run while this one is in flight: 409 with the hub's message and hint.
    const busy = await svc(['exports', 'run', 'partners-s3']);
    expect(busy.code).toBe(1);
    expect(busy.out).toBe('');
    expect(busy.err).toMatch(/^error: already has a run in flight; hint: export partners-s3 is running run [0-9a-f-]{36}; wait for it to end \(HTTP 409\)\n$/);
    await until('progress with the final figures', () => /Running: 5 rows, \d+ bytes/.test(err), { detail: () => err });
    gate.release();
    const done = await following;
    expect(done.code).toBe(0);

    const object = s3.getObject(BUCKET, 'partners-s3.csv')!;
    expect(object.body.toString('utf8')).toBe(CSV);
    const lines = done.err.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^export\/partners-s3: run [0-9a-f-]{36} started$/);
    first = lines[0]!.split(' ')[2]!;
    const progress = lines.slice(1);
    expect(progress.length).toBeGreaterThanOrEqual(1);
    for (const line of progress) expect(line).toMatch(/^Running: \d+ rows, \d+ bytes \(\d+ B\) so far, \d+s$/);
    expect(progress.at(-1)).toMatch(new RegExp(`^Running: 5 rows, ${object.body.length} bytes`));
    expect(new Set(progress.map((l) => l.replace(/, \d+s$/, ''))).size).toBe(progress.length); // a new line only when the figures change
    expect(done.out).toBe(
      `export/partners-s3 run ${first}: Completed\n` +
        '  rows:     5\n' +
        `  bytes:    ${object.body.length} (${object.body.length} B)\n` +
        `  sha256:   ${sha(object.body)}\n` +
        `  location: s3://${BUCKET}/partners-s3.csv\n` +
        `  etag:     ${JSON.parse((await svc(['exports', 'runs', 'partners-s3', '--json'])).out)[0].etag}\n`,
    );
    expect(object.metadata['svc-sha256']).toBe(sha(object.body));
  });

  it('a run that fails exits 1 with the failure code and reason (--json: the final record)', async () => {
    const collided = await svc(['exports', 'run', 'Partners-S3']); // echoed as the hub stores the name
    expect(collided.code).toBe(1);
    expect(collided.out).toMatch(/^export\/partners-s3 run [0-9a-f-]{36}: Failed \(collision\)\n {2}code: {3}collision\n {2}reason: .*partners-s3\.csv/);
    const json = await svc(['exports', 'run', 'partners-s3', '--json']);
    expect(json.code).toBe(1);
    expect(json.err).toBe('');
    expect(JSON.parse(json.out)).toMatchObject({ status: 'Failed', failureCode: 'collision', exportName: 'partners-s3', attempt: 1 });
  });

  it('retry: a run failed for a missing bucket is retried once the bucket exists; retrying a Completed run is 409', async () => {
    expect((await svc(['apply', '-f', '-'], { stdin: stringify(exportManifest('partners-late', { bucket: 'late-bucket' })) })).out).toBe('export/partners-late created\n');
    const failed = await svc(['exports', 'run', 'partners-late']);
    expect(failed.code).toBe(1);
    expect(failed.out).toMatch(/: Failed \(publication\)\n {2}code: {3}publication\n {2}reason: .*late-bucket.*does not exist/);
    const runId = failed.out.split(' ')[2]!.replace(/:$/, '');

    s3.createBucket('late-bucket');
    const retried = await svc(['exports', 'retry', 'partners-late', runId, '--no-wait', '--json']);
    expect(retried.code).toBe(0);
    const { runId: second } = JSON.parse(retried.out) as { runId: string };
    await until('the retry to end', async () => JSON.parse((await svc(['exports', 'runs', 'partners-late', '--json'])).out)[0].status !== 'Running');
    const records = JSON.parse((await svc(['exports', 'runs', 'partners-late', '--json'])).out) as Array<{ id: string; status: string; attempt: number; retryOf: string | null }>;
    expect(records.map((r) => [r.id, r.status, r.attempt, r.retryOf])).toEqual([
      [second, 'Completed', 2, runId],
      [runId, 'Failed', 1, null],
    ]);
    expect(s3.getObject('late-bucket', 'partners-late.csv')?.body.toString('utf8')).toBe(CSV);

    const again = await svc(['exports', 'retry', 'partners-late', second]);
    expect(again.code).toBe(1);
    expect(again.err).toMatch(/^error: run .* is Completed: only a Failed run can be retried.* \(HTTP 409\)\n$/);
    expect((await svc(['exports', 'retry', 'partners-late', '00000000-0000-0000-0000-000000000000'])).err).toMatch(/\(HTTP 404\)\n$/);
    // A run that has ended cannot be cancelled (a Running one: apiserver/routes/exports/exports-hung-destination.test.ts).
    const cancel = await svc(['exports', 'cancel', 'partners-late', second]);
    expect(cancel.code).toBe(1);
    expect(cancel.err).toBe(`error: run ${second} is Completed: only a Running run can be cancelled (HTTP 409)\n`);
  });

  it('retry follows the new run like run does, on a terminal rewriting one progress line', async () => {
    expect((await svc(['apply', '-f', '-'], { stdin: stringify(exportManifest('partners-tty', { bucket: 'tty-bucket' })) })).code).toBe(0);
    const failed = await svc(['exports', 'run', 'partners-tty', '--no-wait']);
    expect(failed.out).toMatch(/^export\/partners-tty: run [0-9a-f-]{36} started\n$/);
    const runId = failed.out.split(' ')[2]!;
    await until('the run to fail', async () => JSON.parse((await svc(['exports', 'runs', 'partners-tty', '--json'])).out)[0].status === 'Failed');
    s3.createBucket('tty-bucket');

    gate.hold();
    const heldBefore = gate.held;
    let err = '';
    const following = svc(['exports', 'retry', 'partners-tty', runId], { stderr: { isTTY: true }, onErr: (e) => (err = e) });
    await until('the PutObject to be held', () => gate.held > heldBefore);
    await until('progress with the final figures', () => /Running: 5 rows/.test(err), { detail: () => err });
    gate.release();
    const result = await following;
    expect(result.code).toBe(0);
    expect(result.err).toMatch(new RegExp(`^export/partners-tty: run [0-9a-f-]{36} started \\(retry of ${runId}\\)\n(\rRunning: \\d+ rows, [^\n\r]*\u001b\\[K)+\r\u001b\\[K$`));
    expect(result.out).toMatch(/: Completed\n {2}rows: {5}5\n/);
    expect(result.out).toContain(`  attempt:  2 (retry of ${runId})\n`);
  });

  it('Ctrl-C stops following with exit 130; the run goes on in the hub', async () => {
    expect((await svc(['apply', '-f', '-'], { stdin: stringify(exportManifest('partners-stop')) })).code).toBe(0);
    gate.hold();
    const heldBefore = gate.held;
    const stop = new AbortController();
    const following = svc(['exports', 'run', 'partners-stop'], { signal: stop.signal });
    await until('the PutObject to be held', () => gate.held > heldBefore);
    stop.abort();
    const result = await following;
    expect(result.code).toBe(130);
    expect(result.err).toMatch(/\nstopped following run [0-9a-f-]{36}; it goes on in the hub: svc exports runs partners-stop\n$/);
    gate.release();
    await until('the run to complete', async () => JSON.parse((await svc(['exports', 'runs', 'partners-stop', '--json'])).out)[0].status === 'Completed');
  });

  it('runs: a table newest first, --limit', async () => {
    const runs = await svc(['exports', 'runs', 'partners-s3']);
    expect(runs.code).toBe(0);
    const [header, ...rows] = runs.out.trimEnd().split('\n');
    expect(header).toMatch(/^ID\s+STATUS\s+TRIGGER\s+ATTEMPT\s+STARTED\s+ENDED\s+ROWS\s+BYTES\s+FAILURE$/);
    expect(rows.map((r) => r.split(/\s{2,}/)[1])).toEqual(['Failed', 'Failed', 'Completed']);
    expect(rows.at(-1)).toMatch(new RegExp(`^${first}\\s+Completed\\s+manual\\s+1\\s+\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\dZ\\s+\\S+ \\S+Z\\s+5\\s+\\d+\\s+-$`));
    expect(rows[0]).toMatch(/\s+collision$/);
    const limited = await svc(['exports', 'runs', 'partners-s3', '--limit', '1']);
    expect(limited.out.trimEnd().split('\n')).toHaveLength(2);
    // --all follows the hub's Link rel="next" page after page: the three runs, one per page
    const whole = JSON.parse((await svc(['exports', 'runs', 'partners-s3', '--json'])).out) as Array<{ id: string }>;
    expect(whole).toHaveLength(3);
    expect(JSON.parse((await svc(['exports', 'runs', 'partners-s3', '--limit', '1', '--all', '--json'])).out)).toEqual(whole);
    expect((await svc(['exports', 'runs', 'partners-s3', '--limit', '1', '--all'])).out.trimEnd().split('\n')).toHaveLength(4);
    expect((await svc(['exports', 'runs', 'partners-s3', '--limit', 'x'])).code).toBe(2);
    expect(await svc(['exports', 'runs', 'partners-s3', '--limit', '500'])).toMatchObject({ code: 2, out: '' });
    expect((await svc(['exports', 'runs', 'partners-s3', '--limit', '200'])).code).toBe(0);
    expect(await svc(['exports', 'runs', 'nobody'])).toMatchObject({ code: 1, out: '' });
  });
});

describe('download', () => {
  beforeAll(applied);
  it('writes the exact bytes to -o FILE, with rows, bytes and the verified SHA-256 on stderr', async () => {
    const file = join(dir, 'partner.csv');
    writeFileSync(file, 'an older download\n');
    const result = await svc(['exports', 'download', 'Partner', '-o', file]);
    expect(result).toMatchObject({ code: 0, out: '' });
    const bytes = readFileSync(file);
    expect(bytes.toString('utf8')).toBe(CSV);
    expect(result.err).toBe(`Partner: 5 rows, ${bytes.length} bytes (${bytes.length} B), SHA-256 ${sha(bytes)} verified, written to ${file}\n`);
    expect(readdirSync(dir).filter((f) => f.endsWith('.part'))).toEqual([]);
    const json = await svc(['exports', 'download', 'partner', '-o', file, '--json']);
    expect(JSON.parse(json.out)).toEqual({ entity: 'partner', file, rows: 5, bytes: bytes.length, sha256: sha(bytes) });
    // A file name holding control characters (a script took it from elsewhere) is shown as svc shows text. Was: written as it is.
    const odd = join(dir, 'p\x1b]0;pwned\x07\u202evsc.csv');
    const named = await svc(['exports', 'download', 'partner', '-o', odd]);
    expect(named).toMatchObject({ code: 0, out: '' });
    expect(readFileSync(odd, 'utf8')).toBe(CSV);
    expect(named.err).toBe(`partner: 5 rows, ${bytes.length} bytes (${bytes.length} B), SHA-256 ${sha(bytes)} verified, written to ${dir}/p\\x1b]0;pwned\\x07\\u202evsc.csv\n`);
    rmSync(odd);
  });

  it('--json without -o (or with -o -), where stdout would be the CSV, is a usage error (exit 2), before the hub is asked', async () => {
    let asked = 0;
    const server = createServer((_req, res) => {
      asked++;
      res.writeHead(500).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const env = { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, SVC_DEV_TENANT: '1' };
      for (const args of [['exports', 'download', 'partner', '--json'], ['--json', 'exports', 'download', 'partner', '-o', '-']]) {
        const result = await svc(args, { env });
        expect(result).toMatchObject({ code: 2, out: '' });
        expect(result.err.split('\n')[0]).toBe('svc exports download: --json prints the summary of a download written to a file, and needs -o FILE: without it stdout is the CSV, not JSON');
      }
      expect(asked).toBe(0);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('streams to stdout without -o', async () => {
    const result = await svc(['exports', 'download', 'partner']);
    expect(result.code).toBe(0);
    expect(result.bytes.equals(Buffer.from(CSV))).toBe(true);
    expect(result.err).toMatch(/^partner: 5 rows, \d+ bytes \(\d+ B\), SHA-256 [0-9a-f]{64} verified\n$/);
  });

  it('to a terminal, the CSV\'s control characters are shown (\\x1b), never obeyed; the SHA-256 is of the bytes sent', async () => {
    await hub.services.connectors.ext.ensureTable(T, 'ext.hostile', [promote('name', 'text')]);
    const hostile = 'pwn\x1b]52;c;aGk=\x07\x1b[2J\u202eevil';
    await owner.query(
      `insert into ext_t${T}.hostile (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, name)
       values ($1, 'h1', md5('h1'), '{}', $2, $3, $4)`,
      [T, CONNECTOR, ENDPOINT, hostile],
    );
    const entity = { ...ENTITY, metadata: { name: 'Hostile' }, spec: { ...ENTITY.spec, columns: ENTITY.spec.columns.slice(0, 2), sources: [{ table: 'ext.hostile', key: 'external_id', columns: { partner_id: 'external_id', name: 'name' } }] } };
    expect((await svc(['apply', '-f', '-'], { stdin: JSON.stringify(entity) })).code).toBe(0);
    const raw = `"partner_id","name"\r\n"h1","${hostile}"\r\n`;
    // to a pipe or a file: the bytes as sent
    expect((await svc(['exports', 'download', 'hostile'])).bytes.toString('utf8')).toBe(raw);
    const { code, out, err } = await runSvc(['exports', 'download', 'hostile'], { env, stdout: { isTTY: true } });
    expect(code).toBe(0);
    expect(out).toBe('"partner_id","name"\n"h1","pwn\\x1b]52;c;aGk=\\x07\\x1b[2J\\u202eevil"\n');
    expect(err).toContain(`SHA-256 ${sha(raw)} verified`);
    expect((await svc(['entities', 'rm', 'hostile'])).code).toBe(0);
  });

  it('-o naming a FIFO or a device (a process substitution, /dev/null) writes through it, never replacing it with a file; a directory is refused before anything is downloaded', async () => {
    // As root, a rename over /dev/null replaced the device with a regular file: a FIFO shows the same path without that risk.
    const fifo = join(dir, 'through-a-pipe.csv');
    execFileSync('mkfifo', [fifo]);
    const cat = spawn('cat', [fifo], { stdio: ['ignore', 'pipe', 'ignore'] });
    const chunks: Buffer[] = [];
    cat.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    const read = new Promise((resolve) => cat.on('close', resolve));
    try {
      const result = await svc(['exports', 'download', 'partner', '-o', fifo]);
      expect(lstatSync(fifo).isFIFO()).toBe(true);
      expect(result).toMatchObject({ code: 0, out: '', err: expect.stringMatching(/^partner: 5 rows, \d+ bytes \(\d+ B\), SHA-256 [0-9a-f]{64} verified, written to /) });
      await read;
      expect(Buffer.concat(chunks).toString('utf8')).toBe(CSV);
    } finally {
      cat.kill();
    }
    expect(readdirSync(dir).filter((f) => f.endsWith('.part'))).toEqual([]);
    const folder = join(dir, 'a-folder');
    mkdirSync(folder);
    const intoFolder = await svc(['exports', 'download', 'partner', '-o', folder]);
    expect(intoFolder).toMatchObject({ code: 1, out: '', err: `error: ${folder} is a directory: name the file to write (-o ${join(folder, 'partner.csv')})\n` });
    expect(readdirSync(folder)).toEqual([]);
    expect(readdirSync(dir).filter((f) => f.endsWith('.part'))).toEqual([]);
  });

  it('an unknown entity is the hub\'s 404', async () => {
    const file = join(dir, 'nobody.csv');
    expect(await svc(['exports', 'download', 'nobody', '-o', file])).toMatchObject({ code: 1, out: '', err: expect.stringMatching(/^error: .*nobody.* \(HTTP 404\)\n$/) });
    expect(existsSync(file)).toBe(false);
  });

  it('fails, writing nothing at FILE, when the bytes do not hash to the announced SHA-256', async () => {
    const body = Buffer.from('"a"\r\n"tampered"\r\n');
    const liar = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/csv', 'content-length': body.length, 'x-row-count': '1', 'x-content-sha256': sha('something else') });
      res.end(body);
    });
    await new Promise<void>((resolve) => liar.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(liar.address() as AddressInfo).port}`;
      const file = join(dir, 'tampered.csv');
      const result = await svc(['exports', 'download', 'partner', '-o', file], { env: { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: url, SVC_DEV_TENANT: '1' } });
      expect(result).toMatchObject({ code: 1, out: '' });
      expect(result.err).toBe(`error: SHA-256 mismatch: the hub announced ${sha('something else')}, the ${body.length} bytes received hash to ${sha(body)}; ${file} was not written\n`);
      expect(existsSync(file)).toBe(false);
      expect(readdirSync(dir).filter((f) => f.endsWith('.part'))).toEqual([]);
      const toStdout = await svc(['exports', 'download', 'partner'], { env: { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: url, SVC_DEV_TENANT: '1' } });
      expect(toStdout.code).toBe(1);
      expect(toStdout.err).toContain('SHA-256 mismatch');
    } finally {
      await new Promise<void>((resolve) => liar.close(() => resolve()));
    }
  });

  it('-o into a directory that is missing (or not writable) is refused before the hub is asked: no download is sent, none recorded', async () => {
    let requests = 0;
    const counter = createServer((_req, res) => {
      requests += 1;
      res.writeHead(200, { 'content-type': 'text/csv', 'content-length': 5, 'x-row-count': '1', 'x-content-sha256': sha('"a"\r\n') });
      res.end('"a"\r\n');
    });
    await new Promise<void>((resolve) => counter.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(counter.address() as AddressInfo).port}`;
      const file = join(dir, 'no-such-folder', 'partner.csv');
      const result = await svc(['exports', 'download', 'partner', '-o', file], { env: { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: url, SVC_DEV_TENANT: '1' } });
      expect(result).toMatchObject({ code: 1, out: '', err: `error: cannot write ${file}: ENOENT\n` });
      expect(requests).toBe(0);
      // The same server, a folder that exists: the download is sent and written.
      const ok = join(dir, 'counted.csv');
      expect((await svc(['exports', 'download', 'partner', '-o', ok], { env: { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: url, SVC_DEV_TENANT: '1' } })).code).toBe(0);
      expect(requests).toBe(1);
      expect(readFileSync(ok, 'utf8')).toBe('"a"\r\n');
      expect(readdirSync(dir).filter((f) => f.endsWith('.part'))).toEqual([]);
    } finally {
      await new Promise<void>((resolve) => counter.close(() => resolve()));
    }
  });
});

describe('rm and usage', () => {
  it('rm deletes an export (its runs stay with the hub) and an entity', async () => {
    expect(await svc(['exports', 'rm', 'Partners-TTY'])).toMatchObject({ code: 0, out: 'export/partners-tty deleted\n', err: '' });
    expect((await svc(['exports', 'get', 'partners-tty'])).code).toBe(1);
    expect((await svc(['exports', 'rm', 'Partners-TTY'])).err).toMatch(/\(HTTP 404\)\n$/);
    for (const name of ['partners-s3', 'partners-late', 'partners-stop']) expect((await svc(['exports', 'rm', name])).code).toBe(0);
    expect(await svc(['exports', 'ls'])).toMatchObject({ code: 0, out: 'No exports.\n' });
    expect(await svc(['entities', 'rm', 'Partner'])).toMatchObject({ code: 0, out: 'entity/partner deleted\n', err: '' });
    expect(await svc(['entities', 'ls'])).toMatchObject({ code: 0, out: 'No entities.\n' });
  });

  it('refuses a bad SVC_CLI_POLL_MS before starting anything', async () => {
    const result = await svc(['exports', 'run', 'nobody'], { env: { ...env, SVC_CLI_POLL_MS: 'fast' } });
    expect(result).toEqual({ code: 1, out: '', err: "error: SVC_CLI_POLL_MS must be a positive number of milliseconds, not 'fast'\n", bytes: expect.any(Buffer) });
  });

  it.each([
    [['exports', 'retry', 'x'], 'svc exports retry: missing RUN_ID', 'Usage: svc exports retry NAME RUN_ID [--no-wait]'],
    [['exports', 'run'], 'svc exports run: missing NAME', 'Usage: svc exports run NAME [--no-wait]'],
    [['exports', 'download', 'x', '-o'], "svc exports download: -o, --output needs a value", 'Usage: svc exports download ENTITY [-o FILE]'],
    [['entities', 'get'], 'svc entities get: missing NAME', 'Usage: svc entities get NAME'],
  ])('svc %j exits 2 with the usage', async (args, message, usage) => {
    const result = await svc(args);
    expect(result).toMatchObject({ code: 2, out: '' });
    expect(result.err).toContain(message);
    expect(result.err).toContain(usage);
  });
});

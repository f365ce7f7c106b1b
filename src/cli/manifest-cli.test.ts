import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { stringify } from 'yaml';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { svcRunner } from '../../test/harness/svc-cli.js';

/** `svc delete -f` and `svc diff -f` against a real hub (dev bypass) over a real PostgreSQL. */

let hub: TestHub;
let dir: string;
let env: Record<string, string>;

const svc = svcRunner(() => ({ env }));

/** An inline credential header (dev profile): the hub stores it and shows it `[REDACTED]`. */
const SECRET = 'Bearer inline-d1ff-5ecret-0042';

const CONNECTOR = {
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name: 'diff-partners' },
  connector_type: 'rest-generic',
  scopes: ['crm'],
  spec: {
    base_url: 'http://127.0.0.1:9',
    headers: [{ name: 'Authorization', value: SECRET }],
    endpoints: [{ id: 'partners', path: '/partners', target: { table: 'ext.diff_partners', unique_key: '$.id' } }],
  },
};

const ENTITY = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name: 'diff-partner' },
  spec: {
    scope: 'crm',
    key: 'partner_id',
    columns: [
      { name: 'partner_id', type: 'text' },
      { name: 'status', type: 'text' },
    ],
    sources: [{ table: 'ext.diff_partners', key: 'external_id', columns: { partner_id: 'external_id', status: '$.status' } }],
  },
};

beforeAll(async () => {
  hub = await startTestHub();
  dir = mkdtempSync(join(tmpdir(), 'svc-manifest-cli-'));
  env = { SVC_CLI_CONFIG: join(dir, 'config.json') };
  expect((await svc(['login', '--url', hub.url, '--dev-tenant', '1'])).code).toBe(0);
}, 60_000);

afterAll(async () => {
  await hub?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('svc diff and svc delete', () => {
  it('diff: new before apply, the same after it (an inline credential is no difference), a local edit shown; never a secret', async () => {
    const file = join(dir, 'diff.yaml');
    // the entity first in the file: diff, like apply, takes the connector first
    writeFileSync(file, `${stringify(ENTITY)}---\n${stringify(CONNECTOR)}`);
    const before = await svc(['diff', '-f', file]);
    expect(before.code).toBe(1);
    expect(before.out.indexOf(`+ new connector/diff-partners (${file}#2): not on the hub\n`)).toBe(0);
    expect(before.out).toContain(`+ new entity/diff-partner (${file}#1): not on the hub\n`);
    expect(before.out).toContain('+      value: "[REDACTED]"\n');
    expect(before.out + before.err).not.toContain('inline-d1ff');

    expect((await svc(['apply', '-f', file])).code).toBe(0);
    expect(await svc(['diff', '-f', file])).toEqual({ code: 0, out: '', err: '' });
    const same = await svc(['diff', '-f', file, '--json']);
    expect(same.code).toBe(0);
    expect(JSON.parse(same.out)).toEqual([
      { kind: 'Connector', name: 'diff-partners', source: `${file}#2`, status: 'same' },
      { kind: 'Entity', name: 'diff-partner', source: `${file}#1`, status: 'same' },
    ]);

    // a local edit: the changed line, and the credential (changed too) never shown
    const edited = structuredClone(CONNECTOR);
    edited.spec.base_url = 'http://127.0.0.1:10';
    edited.spec.headers[0]!.value = 'Bearer another-5ecret-0043';
    writeFileSync(file, `${stringify(ENTITY)}---\n${stringify(edited)}`);
    const changed = await svc(['diff', '-f', file]);
    expect(changed.code).toBe(1);
    expect(changed.err).toBe('');
    expect(changed.out).toBe(
      [
        '--- connector/diff-partners (on the hub)',
        `+++ connector/diff-partners (${file}#2)`,
        '@@ -6,7 +6,7 @@',
        ' scopes:',
        '   - crm',
        ' spec:',
        '-  base_url: http://127.0.0.1:9',
        '+  base_url: http://127.0.0.1:10',
        '   endpoints:',
        '     - id: partners',
        '       path: /partners',
        '',
      ].join('\n'),
    );
    expect(changed.out).not.toMatch(/5ecret/);
    const asJson = await svc(['diff', '-f', file, '--json']);
    expect(asJson.code).toBe(1);
    expect(asJson.out).not.toMatch(/5ecret/);
    expect(JSON.parse(asJson.out)[0]).toMatchObject({ name: 'diff-partners', status: 'changed' });

    // connectors preflight -f compares the file with the applied connector by the same form: an inline
    // credential in the file is no difference there either (it warned that the applied one differs)
    writeFileSync(file, stringify(CONNECTOR));
    const preflight = await svc(['connectors', 'preflight', '-f', file]);
    expect(preflight.out).toContain('connector/diff-partners: NOT OK');
    expect(preflight.err).not.toContain('differs from this file');
    writeFileSync(file, stringify(edited));
    expect((await svc(['connectors', 'preflight', '-f', file])).err).toContain(`warning: ${file}: the applied connector diff-partners differs from this file`);

    // usage: -f is required (exit 2); a file that cannot be read or parsed is an error: 2, never 1 ("differences")
    expect((await svc(['diff'])).code).toBe(2);
    expect(await svc(['diff', '-f', join(dir, 'absent.yaml')])).toMatchObject({ code: 2, out: '', err: expect.stringMatching(/^error: .*absent\.yaml/) });
    writeFileSync(file, 'kind: Connector\nmetadata: {name: [\n');
    expect(await svc(['diff', '-f', file])).toMatchObject({ code: 2, out: '', err: expect.stringMatching(/^error: /) });
    // a refusal of the hub (an unreachable one here) too
    const gone = { SVC_URL: 'http://127.0.0.1:9', SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: env.SVC_CLI_CONFIG! };
    writeFileSync(file, stringify(CONNECTOR));
    expect(await svc(['diff', '-f', file], { env: gone })).toMatchObject({ code: 2, out: '', err: expect.stringContaining('cannot reach') });
  });

  it('diff: a Workflow and a Process (names in mixed case) are the same once applied; delete takes them before their Entity', async () => {
    const file = join(dir, 'kinds.yaml');
    const workflow = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Workflow',
      metadata: { name: 'Kinds-Status' },
      spec: { entity: 'kinds-partner', stateColumn: 'status', states: ['prospect', 'active'], transitions: [{ from: 'prospect', to: 'active' }] },
    };
    const process = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Process',
      metadata: { name: 'Kinds-Big-Runs' },
      spec: { event: 'connector.run.*', when: 'payload.records_out > 1000', decision: 'decision.big-run', message: 'big run {{payload.run_id}}' },
    };
    writeFileSync(file, [process, workflow, { ...ENTITY, metadata: { name: 'Kinds-Partner' } }].map((d) => stringify(d)).join('---\n'));
    expect((await svc(['apply', '-f', file])).code).toBe(0);
    expect(await svc(['diff', '-f', file])).toEqual({ code: 0, out: '', err: '' });
    expect(await svc(['delete', '-f', file])).toEqual({ code: 0, out: 'workflow/kinds-status deleted\nprocess/kinds-big-runs deleted\nentity/kinds-partner deleted\n', err: '' });
  });

  it('delete: a directory with a connector and an entity, entity first; again: already deleted, exit 0', async () => {
    const folder = mkdtempSync(join(dir, 'del-'));
    // named so that the connector's file is read first: the order is apply's, reversed
    writeFileSync(join(folder, 'a-connector.yaml'), stringify({ ...CONNECTOR, metadata: { name: 'del-partners' } }));
    writeFileSync(join(folder, 'b-entity.json'), JSON.stringify({ ...ENTITY, metadata: { name: 'Del-Partner' } }));
    expect(await svc(['apply', '-f', folder])).toMatchObject({ code: 0, out: 'connector/del-partners created\nentity/del-partner created\n' });

    expect(await svc(['delete', '-f', folder])).toEqual({ code: 0, out: 'entity/del-partner deleted\nconnector/del-partners deleted\n', err: '' });
    expect((await svc(['connectors', 'get', 'del-partners'])).code).toBe(1);
    expect((await svc(['entities', 'get', 'del-partner'])).code).toBe(1);

    expect(await svc(['delete', '-f', folder])).toEqual({
      code: 0,
      out: 'entity/del-partner not found (already deleted)\nconnector/del-partners not found (already deleted)\n',
      err: '',
    });
    const asJson = await svc(['delete', '-f', folder, '--json']);
    expect(asJson.code).toBe(0);
    expect(JSON.parse(asJson.out)).toEqual([
      { kind: 'Entity', name: 'Del-Partner', source: join(folder, 'b-entity.json'), deleted: false },
      { kind: 'Connector', name: 'del-partners', source: join(folder, 'a-connector.yaml'), deleted: false },
    ]);

    // a URL that is not the hub's base URL answers every path 404 `not found`: an error, not already deleted
    expect((await svc(['apply', '-f', folder])).code).toBe(0);
    const elsewhere = { SVC_URL: `${hub.url}/svc`, SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: env.SVC_CLI_CONFIG! };
    const lost = await svc(['delete', '-f', folder], { env: elsewhere });
    expect(lost).toEqual({
      code: 1,
      out: '',
      err: `error: ${join(folder, 'b-entity.json')}: not found; ${hub.url}/svc does not serve DELETE /api/entities/Del-Partner: not a svc-hub, or not its base URL; 1 later document was not sent (HTTP 404)\n`,
    });
    // an error of diff exits 2 (kubectl diff's convention: 1 says that there are differences)
    const notServed = await svc(['diff', '-f', folder], { env: elsewhere });
    expect(notServed).toMatchObject({ code: 2, out: '' });
    expect(notServed.err).toContain('does not serve GET /api/connectors/del-partners');
    const api = await svc(['delete', '-f', folder], { env: { ...elsewhere, SVC_URL: `${hub.url}/api` } });
    expect(api).toMatchObject({ code: 1, out: '' });
    expect(api.err).toContain(`not found; the hub's URL is its base, without /api (${hub.url})`);
    expect((await svc(['delete', '-f', folder])).code).toBe(0);

    // an unknown kind anywhere: nothing is sent
    expect((await svc(['apply', '-f', folder])).code).toBe(0);
    writeFileSync(join(folder, 'z.yaml'), 'kind: Widget\nmetadata: {name: w}\n');
    expect(await svc(['delete', '-f', folder])).toEqual({ code: 1, out: '', err: `error: ${join(folder, 'z.yaml')}: unknown kind Widget (this hub applies Connector, Entity, Export, Workflow, Process)\n` });
    expect((await svc(['connectors', 'get', 'del-partners'])).code).toBe(0);
  });

  it("delete and diff: another server's 404 (an empty body, its own JSON) is an error, not an object already gone", async () => {
    // a web server, a proxy or another service at SVC_URL: it answers every path 404, but not as the hub names a missing object
    const bodies = ['', '{"error":"not_found","message":"no route"}'];
    let next = 0;
    const other = createServer((_req, res) => {
      const body = bodies[next % bodies.length]!;
      res.writeHead(404, body ? { 'content-type': 'application/json' } : {}).end(body);
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    const elsewhere = { SVC_URL: url, SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: env.SVC_CLI_CONFIG! };
    const text = stringify({ ...CONNECTOR, metadata: { name: 'foreign-partners' } });
    try {
      for (const [i, message] of ['not found', 'not_found'].entries()) {
        next = i;
        expect(await svc(['delete', '-f', '-'], { stdin: text, env: elsewhere })).toEqual({
          code: 1,
          out: '',
          err: `error: stdin: ${message}; ${url} does not serve DELETE /api/connectors/foreign-partners: not a svc-hub, or not its base URL (HTTP 404)\n`,
        });
        expect(await svc(['diff', '-f', '-'], { stdin: text, env: elsewhere })).toEqual({
          code: 2,
          out: '',
          err: `error: stdin: ${message}; ${url} does not serve GET /api/connectors/foreign-partners: not a svc-hub, or not its base URL (HTTP 404)\n`,
        });
      }
    } finally {
      other.closeAllConnections();
      other.close();
    }
    // the hub's own 404 for an object it does not have (`connector NAME not found`) is still an object already gone
    expect(await svc(['delete', '-f', '-'], { stdin: text })).toEqual({ code: 0, out: 'connector/foreign-partners not found (already deleted)\n', err: '' });
  });

  it('delete: a refusal other than 404 stops the rest, names the document and says how many were not sent', async () => {
    // a source that answers after five seconds: the run of busy-partners is in flight meanwhile, and its delete refused (409)
    const timers: NodeJS.Timeout[] = [];
    const slow = createServer((_req, res) => void timers.push(setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('[]'), 5_000)));
    await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
    try {
      const at = (name: string) => ({ ...CONNECTOR, metadata: { name }, spec: { ...CONNECTOR.spec, base_url: `http://127.0.0.1:${(slow.address() as AddressInfo).port}` } });
      // delete order reverses the file's within a kind: busy-partners is sent first
      const text = `${stringify(at('kept-partners'))}---\n${stringify(at('busy-partners'))}`;
      expect((await svc(['apply', '-f', '-'], { stdin: text })).code).toBe(0);
      expect((await svc(['connectors', 'run', 'busy-partners'])).code).toBe(0);
      const refused = await svc(['delete', '-f', '-'], { stdin: text });
      expect(refused.code).toBe(1);
      expect(refused.out).toBe('');
      expect(refused.err).toMatch(/^error: stdin#2: .*; 1 later document was not sent \(HTTP 409\)\n$/);
      expect((await svc(['connectors', 'get', 'kept-partners'])).code).toBe(0);
      // --json: the answers before the refusal, as an array
      const asJson = await svc(['delete', '-f', '-', '--json'], { stdin: `${stringify(at('busy-partners'))}---\n${stringify(at('gone-partners'))}` });
      expect(asJson.code).toBe(1);
      expect(JSON.parse(asJson.out)).toEqual([{ kind: 'Connector', name: 'gone-partners', source: 'stdin#2', deleted: false }]);
      expect(asJson.err).toMatch(/^error: stdin#1: .*\(HTTP 409\)\n$/);

      // --continue: the refusal said, the rest deleted, exit 1 naming the refused document
      const going = await svc(['delete', '-f', '-', '--continue'], { stdin: text });
      expect(going).toEqual({
        code: 1,
        out: 'connector/kept-partners deleted\n',
        err: expect.stringMatching(/^error: stdin#2: connector busy-partners has a run in flight.*\(HTTP 409\)\nerror: 1 of 2 documents was refused \(stdin#2\); the other one was deleted\n$/),
      });
      expect((await svc(['connectors', 'get', 'kept-partners'])).code).toBe(1);
      expect((await svc(['connectors', 'get', 'busy-partners'])).code).toBe(0);
      // a hub that cannot be reached stops it still
      const unreachable = await svc(['delete', '-f', '-', '--continue'], { stdin: text, env: { SVC_URL: 'http://127.0.0.1:9', SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: env.SVC_CLI_CONFIG! } });
      expect(unreachable).toMatchObject({ code: 1, out: '', err: expect.stringMatching(/^error: cannot reach .*; 1 later document was not sent\n$/) });
      // --json: what was sent after the refusal too, an array (two documents)
      const goingJson = await svc(['delete', '-f', '-', '--continue', '--json'], { stdin: text });
      expect(goingJson.code).toBe(1);
      expect(JSON.parse(goingJson.out)).toEqual([{ kind: 'Connector', name: 'kept-partners', source: 'stdin#1', deleted: false }]);
    } finally {
      for (const timer of timers) clearTimeout(timer);
      slow.closeAllConnections();
      await new Promise((resolve) => slow.close(resolve));
    }
  });
});

describe('svc apply and svc connectors validate with more issues than an answer lists', () => {
  it('print the first 100 warnings, then one line counting the rest (no empty field before it)', async () => {
    const unknown = Object.fromEntries(Array.from({ length: 150 }, (_, i) => [`extra_${i}`, i]));
    const file = join(dir, 'many-warnings.json');
    writeFileSync(file, JSON.stringify({ ...CONNECTOR, metadata: { name: 'many-warnings' }, spec: { ...CONNECTOR.spec, headers: undefined, ...unknown } }));
    for (const args of [['apply', '-f', file], ['connectors', 'validate', '-f', file]]) {
      const { code, err } = await svc(args);
      const lines = err.split('\n').filter((line) => line.startsWith('warning: '));
      expect({ args, code, count: lines.length, first: lines[0], last: lines.at(-1) }).toEqual({
        args,
        code: 0,
        count: 101,
        first: `warning: ${file}: spec.extra_0: unknown key — ignored by the runtime`,
        last: `warning: ${file}: … and 50 more not listed (the first 100 are)`,
      });
    }
  }, 60_000);
});

import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type ChatModel, startChatModel } from '../../test/harness/chat-model.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { indexAll } from '../../test/harness/retrieval.js';
import { startIssuer, type TestIssuer } from '../../test/harness/tokens.js';
import { svcRunner } from '../../test/harness/svc-cli.js';
import { until } from '../../test/harness/until.js';

/**
 * `svc chat` against a real hub (tokens of a real issuer on loopback, so the caller is a hub user
 * with a default scope), its rows ingested from a source on loopback and embedded by the real
 * offline model, and a scripted stand-in for the language model (test/harness/chat-model.ts) that
 * cites every row it is given.
 */

let issuer: TestIssuer;
let hub: TestHub;
let model: ChatModel;
let source: Server;
let dir: string;
let token: string;

/** The partners scope's rows, and the finance scope's, each of which names the question word for word. */
const QUESTION = 'Which invoices of Sunrise Bakery in Lisbon are open?';
const BAKERIES = [{ id: 'b1', name: 'Harbour Ropes', city: 'Porto' }, { id: 'b2', name: 'Blue Tiles', city: 'Faro' }, { id: 'b3', name: 'Cork Works', city: 'Braga' }];
const INVOICES = Array.from({ length: 6 }, (_, i) => ({ id: `i${i}`, name: `Open invoices of Sunrise Bakery in Lisbon, number ${i}`, city: 'Lisbon' }));

function connector(name: string, scope: string, path: string, table: string): Record<string, unknown> {
  return {
    apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', scopes: [scope],
    spec: {
      base_url: `http://127.0.0.1:${(source.address() as AddressInfo).port}`,
      endpoints: [{
        id: 'all', path, pagination: { kind: 'none', response_path: '$' },
        target: { kind: 'hybrid', table, unique_key: '$.id', promote: [{ name: 'name', path: '$.name', type: 'text' }, { name: 'city', path: '$.city', type: 'text' }] },
      }],
    },
  };
}

const svc = svcRunner(() => ({ env: { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: hub.url, SVC_TOKEN: token } }));

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${hub.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json().catch(() => undefined) };
}

beforeAll(async () => {
  source = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(req.url === '/bakeries' ? BAKERIES : INVOICES));
  });
  source.listen(0, '127.0.0.1');
  await once(source, 'listening');
  issuer = await startIssuer();
  model = await startChatModel({ script: (r) => `Here [row:${[...r.messages[1]!.content.matchAll(/\[row:([0-9a-f]+)\]/g)].map((m) => m[1]).join('][row:')}].` });
  hub = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.llm.base-url': model.url, 'svc.llm.model': 'stand-in', 'svc.egress.allow': '127.0.0.1/32' });
  token = await issuer.mint({ realm_access: { roles: ['svc_user', 'svc_integrator', 'svc_admin'] }, tenant_id: 1 }, { subject: 'ana' });
  dir = mkdtempSync(join(tmpdir(), 'svc-chat-'));
  for (const [name, scope, path, table] of [['bakeries', 'partners', '/bakeries', 'ext.bakeries'], ['invoices', 'finance', '/invoices', 'ext.invoices']] as const) {
    const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(connector(name, scope, path, table)) });
    expect(applied.status).toBe(201);
    const started = await call('POST', `/api/connectors/${name}/runs`, {});
    expect(started.status).toBe(202);
    const id = (started.body as { runs: Array<{ id: string }> }).runs[0]!.id;
    const status = await until(`run ${id} to end`, async () => {
      const { status } = (await call('GET', `/api/platform/runs/${id}`)).body as { status: string };
      return status !== 'Running' && status;
    }, { timeoutMs: 30_000, everyMs: 50 });
    expect(status).toBe('Completed');
  }
  await indexAll(hub.services.retrieval);
  expect(await call('PUT', '/api/platform/users/me/scope', { defaultScope: 'partners' })).toMatchObject({ status: 200, body: { defaultScope: 'partners' } });
}, 120_000);

afterAll(async () => {
  await hub?.stop();
  await model?.close();
  await issuer?.close();
  if (source) await new Promise<void>((resolve) => source.close(() => resolve()));
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('svc chat', () => {
  it('prints the table and key of every citation when the caller has a default scope (rows another scope holds are nearer the question)', async () => {
    // The finance rows name the question word for word: a search of every scope finds them first.
    const unscoped = await call('POST', '/api/platform/rag/search', { query: QUESTION, topK: 2 });
    expect((unscoped.body as { results: Array<{ metadata: { table: string } }> }).results.map((r) => r.metadata.table)).toEqual(['ext.invoices', 'ext.invoices']);
    const chat = await svc(['chat', QUESTION, '--top', '2']);
    expect(chat).toMatchObject({ code: 0, err: '' });
    const [answer, citations] = chat.out.split('\nCitations:\n') as [string, string];
    expect(answer).toMatch(/^Here \[row:[0-9a-f]{64}\]\[row:[0-9a-f]{64}\]\.\n$/);
    const lines = citations.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^TABLE\s+KEY\s+ROW$/);
    expect(lines.slice(1)).toHaveLength(2);
    for (const line of lines.slice(1)) expect(line).toMatch(/^ext\.bakeries\s+b[123]\s+[0-9a-f]{64}$/);
    // --json: the hub's answer, whose citedRows name the same rows.
    const json = JSON.parse((await svc(['chat', QUESTION, '--top', '2', '--json'])).out) as { citations: string[]; citedRows: Array<{ rowHash: string; table: string; key: string }> };
    expect(json.citedRows.map((r) => r.rowHash)).toEqual(json.citations);
    for (const row of json.citedRows) expect(row).toEqual({ rowHash: expect.stringMatching(/^[0-9a-f]{64}$/), table: 'ext.bakeries', key: expect.stringMatching(/^b[123]$/) });
  });
});

describe('svc chat --analytic and svc rediscover', () => {
  it("a scope without a card: the 409's hint says that applying an entity builds none, names the source table not there yet, and the rediscover to run", async () => {
    const columns = [{ name: 'bakery_id', type: 'text' }, { name: 'name', type: 'text' }];
    const sources = [
      { table: 'ext.bakeries', key: 'external_id', columns: { bakery_id: 'external_id', name: 'name' } },
      { table: 'ext.bakery_branches', key: '$.id', columns: { name: '$.name' } },
    ];
    const entity = { apiVersion: 'apps.svc.io/v1', kind: 'Entity', metadata: { name: 'bakery' }, spec: { scope: 'bakers', key: 'bakery_id', columns, sources } };
    expect(await call('POST', '/api/entities/apply', entity)).toMatchObject({ status: 201 });
    const asked = await svc(['chat', 'How many bakeries are there?', '--analytic', '--scope', 'bakers']);
    expect(asked).toEqual({
      code: 1,
      out: '',
      err:
        "error: no schema discovered for scope 'bakers' — apply an entity or run discovery first; hint: applying an entity or a connector does not build the card: " +
        "POST /api/platform/rag/rediscover?scope=bakers (svc rediscover --scope bakers) builds it from the scope's ingested tables and the entities declaring it; " +
        'it leaves off an entity whose source is not there yet, until a run of its connector writes it and the scope is rediscovered again: ' +
        'source table ext.bakery_branches of entity bakery does not exist (HTTP 409)\n',
    });
    // That rediscover finds nothing yet: it says why.
    expect(await svc(['rediscover', '--scope', 'bakers'])).toEqual({
      code: 0,
      out: 'scope bakers: 0 table(s), 0 column(s) discovered (source discovered)\n',
      err: "warning: scope 'bakers' is declared by entity/bakery, but none of the tables they read exists yet: run the connectors, then svc rediscover --scope bakers again\n",
    });
  });

  it('rediscover of a scope no connector or entity declares is the hub\'s 404 naming it (a typo), exit 1, nothing stored', async () => {
    expect(await svc(['rediscover', '--scope', 'nope'])).toEqual({
      code: 1,
      out: '',
      err:
        "error: no connector or entity of the tenant declares scope 'nope'; hint: a connector's scopes and an entity's spec.scope declare the tenant's scopes " +
        '(GET /api/connectors and GET /api/entities list them: svc connectors ls, svc entities ls); nothing was stored (HTTP 404)\n',
    });
    expect(await svc(['rediscover', '--scope', 'nope', '--json'])).toMatchObject({ code: 1, out: '', err: expect.stringContaining("declares scope 'nope'") });
    // A scope with a table: no warning.
    expect(await svc(['rediscover', '--scope', 'partners'])).toMatchObject({ code: 0, out: expect.stringMatching(/^scope partners: 1 table\(s\)/), err: '' });
  });
});

describe('svc search and svc index status while the index is being built', () => {
  it('a search right after a run says how much is not searchable yet, and svc index status shows it; once indexed, nothing is said; a caller without svc_admin is told nothing', async () => {
    const applied = await call('POST', '/api/connectors/apply', connector('late', 'late', '/invoices', 'ext.late_invoices'));
    expect(applied.status).toBe(201);
    const started = await call('POST', '/api/connectors/late/runs', {});
    const id = (started.body as { runs: Array<{ id: string }> }).runs[0]!.id;
    await until(`run ${id} to complete`, async () => ((await call('GET', `/api/platform/runs/${id}`)).body as { status: string }).status === 'Completed', { timeoutMs: 30_000, everyMs: 50 });
    // The run's six rows are handed to the indexer; no indexer runs in this hub until the test says so.
    const note = `warning: the index is still being built: ${INVOICES.length} ingested row(s) not yet made into chunks, not searched yet (svc index status)\n`;
    const searched = await svc(['search', 'Sunrise Bakery', '--scope', 'late']);
    expect(searched).toEqual({ code: 0, out: 'Nothing found.\n', err: note });
    // For scripts too: stdout stays the hub's JSON, the warning goes to stderr.
    const json = await svc(['search', 'Sunrise Bakery', '--scope', 'late', '--json']);
    expect({ code: json.code, results: (JSON.parse(json.out) as { results: unknown[] }).results, err: json.err }).toEqual({ code: 0, results: [], err: note });
    const status = await svc(['index', 'status']);
    expect(status.code).toBe(0);
    expect(status.out).toMatch(new RegExp(`^searchable: (\\d+) of \\1 chunk\\(s\\); not yet: ${INVOICES.length} ingested row\\(s\\) still to be made into chunks, 0 chunk\\(s\\) waiting for their vector, 0 set aside`));
    expect(status.out).toContain(`pendingRows: ${INVOICES.length}\n`);
    // Without svc_admin the status is refused: the search says nothing of it.
    const integrator = await issuer.mint({ realm_access: { roles: ['svc_user', 'svc_integrator'] }, tenant_id: 1 }, { subject: 'ivo' });
    expect(await svc(['search', 'Sunrise Bakery', '--scope', 'late'], { env: { SVC_CLI_CONFIG: join(dir, 'none.json'), SVC_URL: hub.url, SVC_TOKEN: integrator } })).toEqual({ code: 0, out: 'Nothing found.\n', err: '' });
    await indexAll(hub.services.retrieval);
    const indexed = await svc(['search', 'Sunrise Bakery', '--scope', 'late', '--top', '1']);
    expect(indexed).toMatchObject({ code: 0, out: expect.stringContaining('ext.late_invoices'), err: '' });
    const after = (await svc(['index', 'status'])).out;
    expect(after).toMatch(/^searchable: all \d+ chunk\(s\)\n/);
    expect(after).toMatch(/^pendingRows: 0$/m);
  }, 60_000);
});

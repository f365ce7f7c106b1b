import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { parse, stringify } from 'yaml';
import { startDemoSource } from '../../../src/demo-source/server.js';
import { ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { runEnded } from '../../../test/harness/runs.js';

/**
 * soap-generic end to end: the examples/soap-*.yaml manifests applied over HTTP, run against the
 * real demo source's eight SOAP services, rows in ext.* tables, the run ledger, dead letters and
 * events; then hostile answers from a stub service.
 */

let hub: TestHub;
let demo: Awaited<ReturnType<typeof startDemoSource>>;
let owner: pg.Client;
let stub: Server;
let stubUrl: string;
const stubAnswers = new Map<string, string>();

const H = { 'X-Tenant-ID': '1' };

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 2400, log: () => undefined });
  stub = createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/xml; charset=utf-8' });
    res.end(stubAnswers.get(req.url ?? '') ?? '');
  });
  await new Promise<void>((resolve) => stub.listen(0, '127.0.0.1', resolve));
  stubUrl = `http://127.0.0.1:${(stub.address() as AddressInfo).port}`;
  hub = await startTestHub({ 'svc.credentials.env-allow': 'DEMO_SOAP_*', 'svc.connectors.retry.base-delay': '5ms', 'svc.connectors.retry.max-delay': '20ms' });
  owner = await ownerClient(hub.ownerUrl);
  process.env.DEMO_SOAP_PASSWORD = 'demo-password';
  process.env.DEMO_SOAP_SESSION = 'any-session-token';
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await demo?.close();
  await new Promise((resolve) => stub?.close(resolve));
});

type Run = { id: string; status: string; recordsIn: number; recordsOut: number; recordsSkipped: number; deadLetterCount: number; errorMessage: string | null; chunkCount: number };

/** An examples/ manifest, pointed at this demo source and at this hub's allowed credential names. */
function example(service: string): string {
  const text = readFileSync(new URL(`../../../examples/soap-${service}.yaml`, import.meta.url), 'utf8')
    .replace('http://demo-source:8099', demo.url)
    .replace('password_env: DEMO_PASSWORD', 'password_env: DEMO_SOAP_PASSWORD')
    .replace('token_env: DEMO_SESSION_TOKEN', 'token_env: DEMO_SOAP_SESSION');
  return text;
}

async function apply(yaml: string) {
  const res = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: yaml });
  expect([200, 201]).toContain(res.status);
}

async function run(name: string): Promise<Run> {
  const res = await fetch(`${hub.url}/api/connectors/${name}/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });
  expect(res.status).toBe(202);
  const { runs } = (await res.json()) as { runs: Array<{ id: string }> };
  return runEnded<Run>(hub.url, runs[0]!.id, H, 60_000);
}

const count = async (table: string) => (await owner.query(`select count(*)::int as n, count(distinct external_id)::int as ids from ext_t1.${table}`)).rows[0];

describe('the eight demo SOAP services, from examples/', () => {
  it.each([
    ['siebel', 2400],
    ['sap', 2400],
    ['mute', 2400],
    ['tail', 201],
    ['flaky', 2400],
    ['session', 2400],
  ])('%s completes with %i rows, promoted columns typed, no data.row.changed', async (service, rows) => {
    await apply(example(service));
    const result = await run(`demo-soap-${service}`);
    expect(result).toMatchObject({ status: 'Completed', recordsIn: rows, recordsOut: rows, recordsSkipped: 0, deadLetterCount: 0, errorMessage: null });
    expect(await count(`soap_${service}_partners`)).toEqual({ n: rows, ids: rows });
    const sample = await owner.query(`select name, city, credit_limit, updated_at, data->>'name' as payload_name from ext_t1.soap_${service}_partners where external_id = '7'`);
    expect(sample.rows[0].name).toBe(sample.rows[0].payload_name);
    expect(sample.rows[0].updated_at).toBeInstanceOf(Date);
    expect(Number(sample.rows[0].credit_limit)).toBeGreaterThan(0);
    const events = await owner.query(`select type from events.outbox where payload->>'run_id' = $1 order by id`, [result.id]);
    expect(events.rows.map((e) => e.type)).toEqual(['connector.run.started', 'connector.run.completed']);
  });

  it('tail reads its last page of one element', async () => {
    const before = demo.requests();
    await run('demo-soap-tail');
    expect(demo.requests() - before).toBe(3);
  });

  it.each([
    ['fault', 500],
    ['fault200', 200],
  ])('%s fails at once with the fault string (HTTP %i), nothing written', async (service, status) => {
    await apply(example(service));
    const before = demo.requests();
    const result = await run(`demo-soap-${service}`);
    expect(result).toMatchObject({ status: 'Failed', recordsIn: 0, errorMessage: `the SOAP service answered a Fault (HTTP ${status}): the ${service} service failed on purpose (demo fault)` });
    expect(demo.requests() - before).toBe(1);
    const failed = await owner.query(`select payload from events.outbox where type = 'connector.run.failed' and payload->>'run_id' = $1`, [result.id]);
    expect(failed.rows[0].payload.error_message).toBe(result.errorMessage);
  });

  it('session without its token setting: 401 naming the status, the fault and the session setting', async () => {
    const manifest = parse(example('session')) as { metadata: { name: string }; spec: { endpoints: Array<{ soap: Record<string, unknown> }> } };
    manifest.metadata.name = 'soap-no-session';
    delete manifest.spec.endpoints[0]!.soap.session;
    await apply(stringify(manifest));
    const result = await run('soap-no-session');
    expect(result.status).toBe('Failed');
    expect(result.errorMessage).toBe(
      'upstream returned HTTP 401 (permanent) with the Fault "no SessionToken in the SOAP Header": the service refused the credentials or the session; this endpoint sends no session token: set soap.session (token_env, header) if the service needs one, and check spec.auth',
    );
  });

  it('a placeholder the engine does not fill is a warning naming it (sent as written), at validate and apply', async () => {
    const typo = example('siebel').replace('{{start_row}}', '{{startrow}}').replace('name: demo-soap-siebel', 'name: soap-typo');
    const message =
      'spec.endpoints[0].soap.body holds {{startrow}}, which is not filled (a SOAP body fills {{page_size}} and {{start_row}} only): it is sent as written';
    const checked = await fetch(`${hub.url}/api/connectors/validate`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: typo });
    expect(await checked.json()).toMatchObject({ errors: [], warnings: [{ field: 'spec.endpoints[0].soap.body', message }] });
    const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: typo });
    expect(applied.status).toBe(201);
    expect(((await applied.json()) as { warnings: unknown[] }).warnings).toEqual([{ field: 'spec.endpoints[0].soap.body', message }]);
    const header = example('session').replace('{{token}}</ns:SessionToken>', '{{token}}<ns:User>{{user}}</ns:User></ns:SessionToken>').replace('name: demo-soap-session', 'name: soap-typo-header');
    const headerChecked = await fetch(`${hub.url}/api/connectors/validate`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: header });
    expect(await headerChecked.json()).toMatchObject({
      errors: [],
      warnings: [{ field: 'spec.endpoints[0].soap.session.header', message: 'spec.endpoints[0].soap.session.header holds {{user}}, which is not filled (a SOAP session header fills {{token}} only): it is sent as written' }],
    });
  });

  it('validate and pre-flight work for soap-generic; a wrong field is a 400 naming it', async () => {
    const valid = await fetch(`${hub.url}/api/connectors/validate`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: example('siebel') });
    expect(valid.status).toBe(200);
    for (const [broken, field] of [
      [example('siebel').replace('records: Partner', 'records: ns:Partner'), 'spec.endpoints[0].soap.records'],
      [example('siebel').replace('action: QueryPartners', 'action: QueryPartners\n        envelope: x'), 'spec.endpoints[0].soap.envelope'],
      // SOAP 1.1's SOAPAction cannot carry a double quote (it was dropped from the header as sent).
      [example('siebel').replace('action: QueryPartners', `action: 'urn:Query"Partners'`), 'spec.endpoints[0].soap.action'],
    ]) {
      const refused = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: broken });
      expect(refused.status).toBe(400);
      expect(((await refused.json()) as { field: string }).field).toBe(field);
    }
    await apply(example('siebel'));
    const preflight = await fetch(`${hub.url}/api/connectors/demo-soap-siebel/preflight`, { method: 'POST', headers: H });
    expect(preflight.status).toBe(200);
    expect(JSON.stringify(await preflight.json())).toContain('"verdict":"ok"');
    const draft = await fetch(`${hub.url}/api/connectors/demo-soap-siebel/draft`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{"path":"/siebel/start.swe"}' });
    expect(draft.status).toBe(400);
  });

  it('a body or session header that would not be well-formed XML as sent is a 400 naming it, at validate and apply', async () => {
    const siebel = example('siebel');
    const session = example('session');
    const body = '<ns:QueryPartners xmlns:ns="urn:demo:siebel:partners"><ns:PageSize>{{page_size}}</ns:PageSize><ns:StartRowNum>{{start_row}}</ns:StartRowNum></ns:QueryPartners>';
    expect(siebel).toContain(body);
    const withBody = (text: string) => siebel.replace(body, text);
    for (const [broken, field, reason] of [
      // Unclosed, a bare ampersand, a prefix no declaration binds, a placeholder where a name goes, no element at all.
      [withBody(body.replace('</ns:QueryPartners>', '')), 'spec.endpoints[0].soap.body', 'unclosed tag: ns:QueryPartners'],
      [withBody(body.replace('{{start_row}}', 'a & b')), 'spec.endpoints[0].soap.body', '1:113: an & that starts no entity or character reference (write &amp; for the character)'],
      [withBody(body.replace(' xmlns:ns="urn:demo:siebel:partners"', '')), 'spec.endpoints[0].soap.body', 'unbound namespace prefix: "ns"'],
      [withBody('<{{page_size}}/>'), 'spec.endpoints[0].soap.body', 'soap.body must be well-formed XML'],
      [withBody('PageSize={{page_size}}'), 'spec.endpoints[0].soap.body', 'text outside an element'],
      [session.replace('</ns:SessionToken>', '</ns:Session>'), 'spec.endpoints[0].soap.session.header', 'soap.session.header must be well-formed XML'],
    ]) {
      const refused = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: broken });
      expect(refused.status).toBe(400);
      const answer = (await refused.json()) as { field: string; error: string };
      expect(answer.field).toBe(field);
      expect(answer.error).toContain(reason);
      const checked = await fetch(`${hub.url}/api/connectors/validate`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: broken });
      expect(((await checked.json()) as { errors: unknown[] }).errors).toEqual([{ field, message: answer.error }]);
    }
    // Placeholders in text and in attribute values, several elements, the envelope's own prefix: sent as they are.
    for (const fine of ['<q:Q xmlns:q="urn:q" size="{{page_size}}">{{start_row}} &amp; {{other}}</q:Q>', '<A/> <B>{{page_size}}</B>', '<soap:Q>{{page_size}}</soap:Q>']) {
      const valid = await fetch(`${hub.url}/api/connectors/validate`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: withBody(fine) });
      expect(((await valid.json()) as { errors: unknown[] }).errors).toEqual([]);
    }
  });
});

describe('broken answers through a run', () => {
  const envelope = (inner: string) => `<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><r:Out xmlns:r="urn:r">${inner}</r:Out></s:Body></s:Envelope>`;
  const partner = (id: string, name: string) => `<r:Partner>${id ? `<r:id>${id}</r:id>` : ''}<r:name>${name}</r:name></r:Partner>`;

  async function runStub(name: string, answer: string): Promise<Run> {
    stubAnswers.set(`/${name}`, answer);
    const manifest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name },
      connector_type: 'soap-generic',
      scopes: ['partners'],
      spec: {
        base_url: stubUrl,
        endpoints: [
          {
            id: 'partners',
            path: `/${name}`,
            soap: { body: '<r:Q xmlns:r="urn:r"/>', records: 'Partner' },
            pagination: { kind: 'soap', page_size: 10 },
            target: { table: `ext.${name.replace(/-/g, '_')}`, unique_key: 'id', promote: [{ name: 'name', path: 'name', type: 'text' }] },
          },
        ],
      },
    };
    await apply(stringify(manifest));
    return run(name);
  }

  it('a record without its key element is dead-lettered, the others stored', async () => {
    const result = await runStub('soap-nokey', envelope(partner('1', 'Ann') + partner('', 'Nobody') + partner('3', 'Carl')));
    expect(result).toMatchObject({ status: 'Completed', recordsIn: 3, recordsOut: 2, recordsSkipped: 1, deadLetterCount: 1 });
    const letters = (await (await fetch(`${hub.url}/api/platform/dlq?run=${result.id}`, { headers: H })).json()) as Array<{ id: number; skipReason: string }>;
    expect(letters.map((l) => l.skipReason)).toEqual(['missing_key']);
  });

  it('a record whose key element appears twice is dead-lettered saying so, the others stored', async () => {
    const twice = `<r:Partner><r:id>2</r:id><r:id>20</r:id><r:name>Bea</r:name></r:Partner>`;
    const result = await runStub('soap-twokeys', envelope(partner('1', 'Ann') + twice + partner('3', 'Carl')));
    expect(result).toMatchObject({ status: 'Completed', recordsIn: 3, recordsOut: 2, recordsSkipped: 1, deadLetterCount: 1 });
    const letters = (await (await fetch(`${hub.url}/api/platform/dlq?run=${result.id}`, { headers: H })).json()) as Array<{ skipReason: string; errorMessage: string }>;
    expect(letters).toHaveLength(1);
    expect(letters[0]!.errorMessage).toBe('unique_key $.id: the key element appears 2 times in the record, and a record needs exactly one; the row cannot be stored');
    expect(letters[0]!.errorMessage).not.toContain('resolves to nothing');
    // The pre-flight names it the same way.
    const preflight = await fetch(`${hub.url}/api/connectors/soap-twokeys/preflight`, { method: 'POST', headers: H });
    const report = (await preflight.json()) as { endpoints: Array<{ verdict: string; warnings?: string[] }> };
    expect(report.endpoints[0]).toMatchObject({
      verdict: 'ok',
      warnings: [`unique_key $.id gives no key in 1 of the 3 records read (record 2: ${letters[0]!.errorMessage}): a run dead-letters those rows (missing_key)`],
    });
  });

  it.each([
    ['soap-lol', `<!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>${envelope(partner('1', '&b;'))}`, 'a DOCTYPE is not accepted'],
    ['soap-xxe', `<!DOCTYPE l [<!ENTITY f SYSTEM "file:///etc/passwd">]>${envelope(partner('1', '&f;'))}`, 'a DOCTYPE is not accepted'],
    ['soap-json', '{"rows": []}', 'the body is not well-formed XML'],
    ['soap-cut', envelope(partner('1', 'Ann')).slice(0, -25), 'the body is not well-formed XML'],
  ])('%s fails the run with a clear message and writes nothing', async (name, answer, reason) => {
    const result = await runStub(name, answer);
    expect(result.status).toBe('Failed');
    expect(result.recordsIn).toBe(0);
    expect(result.errorMessage).toMatch(/^upstream answered HTTP 200 with a body that is not a SOAP envelope: /);
    expect(result.errorMessage).toContain(reason);
    expect(result.errorMessage).not.toContain('root:x:0');
  });
});

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { DemoSource } from '../../demo-source/server.js';
import type { EndpointSpec, SoapCall } from '../types.js';
import { firstPage } from './read.js';
import { connectorSpec, DEMO_AUTH, endpointSpec, engineContext, readAll, startFixtureSource } from './testing/specs.js';

/** The SOAP reader against the demo source's eight services, and against hostile answers. */

let demo: DemoSource;
let hostile: Server;
let hostileUrl: string;
const answers = new Map<string, { status: number; body: string }>();
/** Requests the hostile server answered, per path. */
const hitCounts = new Map<string, number>();
const hits = (path: string) => hitCounts.get(path) ?? 0;

beforeAll(async () => {
  demo = await startFixtureSource(250);
  hostile = createServer((req, res) => {
    hitCounts.set(req.url ?? '', (hitCounts.get(req.url ?? '') ?? 0) + 1);
    if (req.url === '/huge') return streamHuge(res);
    if (req.url === '/echo') return echoRequest(req, res);
    if (req.url === '/echo200') return echoRequest(req, res, 200);
    if (req.url === '/negotiate') return negotiate(req, res);
    const answer = answers.get(req.url ?? '') ?? { status: 404, body: '' };
    res.writeHead(answer.status, { 'Content-Type': 'text/xml; charset=utf-8' });
    res.end(answer.body);
  });
  await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve));
  hostileUrl = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`;
});

/**
 * A 400 that quotes the request's body back, as some services do with a request they refuse (or, with
 * `status` 200, a gateway's page that is not the answer): its Authorization header, then its body.
 */
function echoRequest(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, status = 400): void {
  let sent = '';
  req.setEncoding('utf8');
  req.on('data', (chunk: string) => (sent += chunk));
  req.on('end', () => {
    res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8' });
    res.end(`bad request: ${req.headers.authorization ?? ''} ${sent}`);
  });
}

/**
 * A service behind a gateway that negotiates the answer's type by Accept, as HTTP allows: 406 to a
 * request accepting none of the envelope types, one record otherwise. It records the Accept sent.
 */
const accepted: Array<string | undefined> = [];
function negotiate(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse): void {
  const accept = req.headers.accept;
  accepted.push(accept);
  req.resume();
  if (accept !== undefined && !/\b(text\/xml|application\/soap\+xml|\*\/\*)\b/.test(accept)) {
    res.writeHead(406, { 'Content-Type': 'text/plain; charset=utf-8' });
    return void res.end(`not acceptable: ${accept}`);
  }
  res.writeHead(200, { 'Content-Type': 'text/xml; charset=utf-8' });
  res.end('<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><Partner><id>1</id></Partner></s:Body></s:Envelope>');
}

/** A 1 GiB envelope of records, written as the client reads it, until the client hangs up. */
function streamHuge(res: import('node:http').ServerResponse): void {
  res.writeHead(200, { 'Content-Type': 'text/xml; charset=utf-8' });
  const record = '<Partner><id>1</id><name>x</name></Partner>';
  const chunk = record.repeat(Math.ceil((1024 * 1024) / record.length));
  let sent = 0;
  res.write('<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>');
  const more = () => {
    while (sent < 1024 * 1024 * 1024 && !res.destroyed) {
      sent += chunk.length;
      if (!res.write(chunk)) return void res.once('drain', more);
    }
    res.end('</s:Body></s:Envelope>');
  };
  res.on('error', () => undefined);
  more();
}

afterAll(async () => {
  await demo?.close();
  await new Promise((resolve) => hostile?.close(resolve));
});

const body = (service: string) =>
  `<ns:QueryPartners xmlns:ns="urn:demo:${service}:partners"><ns:PageSize>{{page_size}}</ns:PageSize><ns:StartRowNum>{{start_row}}</ns:StartRowNum></ns:QueryPartners>`;

function soapEndpoint(service: string, soap: Partial<SoapCall> = {}, pageSize = 100): EndpointSpec {
  return endpointSpec(`/${service}/start.swe`, { kind: 'soap', page_size: pageSize, start_row: 0 }, {
    method: 'POST',
    soap: { version: '1.1', action: 'QueryPartners', body: body(service), records: 'Partner', stop: { flag: 'LastPage', when: 'true' }, ...soap },
  });
}

const read = (service: string, soap: Partial<SoapCall> = {}, pageSize = 100, values: Record<string, string> = {}) =>
  readAll(connectorSpec(demo.url, { connectorType: 'soap-generic', auth: DEMO_AUTH.basic }), soapEndpoint(service, soap, pageSize), engineContext(values));

describe('SOAP reads against the demo source', () => {
  it('siebel: LastPage ends the read; records are children by local name; the SOAPAction is sent', async () => {
    const { pages, items, error } = await read('siebel');
    expect(error).toBeUndefined();
    expect(pages.map((p) => p.items.length)).toEqual([100, 100, 50]);
    expect(items[0]).toEqual(expect.objectContaining({ id: '1', name: expect.any(String), city: expect.any(String), country: expect.any(String) }));
    const request = demo.seen().find((r) => r.path === '/siebel/start.swe')!;
    expect(request.headers['content-type']).toBe('text/xml; charset=utf-8');
    expect(request.headers.soapaction).toBe('"QueryPartners"');
    expect(request.body).toContain('<ns:PageSize>100</ns:PageSize><ns:StartRowNum>0</ns:StartRowNum>');
  });

  it('sap: MoreRecords=false ends the read (case-insensitive, trimmed)', async () => {
    const { items, error } = await read('sap', { stop: { flag: 'MoreRecords', when: ' FALSE ' } });
    expect(error).toBeUndefined();
    expect(items).toHaveLength(250);
  });

  it('mute: no stop signal, the read ends on the empty page', async () => {
    const { pages, error } = await read('mute', { stop: undefined });
    expect(error).toBeUndefined();
    expect(pages.map((p) => p.items.length)).toEqual([100, 100, 50]);
  });

  it('tail: 201 rows, the last page holding one', async () => {
    const { pages, items, error } = await read('tail');
    expect(error).toBeUndefined();
    expect(pages.map((p) => p.items.length)).toEqual([100, 100, 1]);
    expect(items).toHaveLength(201);
  });

  it('fault and fault200: the Fault fails the read at once with its string, never retried', async () => {
    for (const service of ['fault', 'fault200']) {
      const before = demo.count(`/${service}/`);
      const { items, error } = await read(service);
      expect(items).toEqual([]);
      expect(error?.name).toBe('SoapFaultError');
      expect(error?.message).toBe(`the SOAP service answered a Fault (HTTP ${service === 'fault' ? 500 : 200}): the ${service} service failed on purpose (demo fault)`);
      expect(demo.count(`/${service}/`) - before).toBe(1);
    }
  });

  it('flaky: 500s without a Fault are retried by the retry policy', async () => {
    const { items, error } = await read('flaky');
    expect(error).toBeUndefined();
    expect(items).toHaveLength(250);
  });

  it('session: 401 names the status, the fault string and the session setting; the token in the header reads everything', async () => {
    const refused = await read('session');
    expect(refused.error?.message).toBe(
      'upstream returned HTTP 401 (permanent) with the Fault "no SessionToken in the SOAP Header": the service refused the credentials or the session; this endpoint sends no session token: set soap.session (token_env, header) if the service needs one, and check spec.auth',
    );
    const session = { token_env: 'CRM_SESSION_TOKEN', header: '<ns:SessionToken xmlns:ns="urn:demo:session:partners">{{token}}</ns:SessionToken>' };
    const ok = await read('session', { session }, 100, { CRM_SESSION_TOKEN: 'tok<&>en' });
    expect(ok.error).toBeUndefined();
    expect(ok.items).toHaveLength(250);
    const sent = demo.seen().filter((r) => r.path === '/session/start.swe').at(-1)!;
    expect(sent.body).toContain('<soap:Header><ns:SessionToken xmlns:ns="urn:demo:session:partners">tok&lt;&amp;&gt;en</ns:SessionToken></soap:Header>');
    const missing = await read('session', { session });
    expect(missing.error?.name).toBe('CredentialError');
  });

  it('SOAP 1.2: application/soap+xml with the action parameter, the 1.2 envelope namespace', async () => {
    await read('mute', { version: '1.2', stop: undefined });
    const sent = demo.seen().filter((r) => r.path === '/mute/start.swe').at(-1)!;
    expect(sent.headers['content-type']).toBe('application/soap+xml; charset=utf-8; action="QueryPartners"');
    expect(sent.headers.soapaction).toBeUndefined();
    expect(sent.body).toContain('xmlns:soap="http://www.w3.org/2003/05/soap-envelope"');
  });

  it('accepts the envelope type of its version, not JSON; a declared Accept wins (a negotiating service answered 406)', async () => {
    const endpoint = (version: '1.1' | '1.2') => ({ ...soapEndpoint('negotiate', { version, stop: undefined }), path: '/negotiate' });
    accepted.length = 0;
    for (const version of ['1.1', '1.2'] as const) {
      const { items, error } = await readAll(connectorSpec(hostileUrl, { connectorType: 'soap-generic' }), endpoint(version), engineContext());
      expect(error).toBeUndefined();
      expect(items).toEqual([{ id: '1' }]);
    }
    const declared = await readAll(connectorSpec(hostileUrl, { connectorType: 'soap-generic', headers: [{ name: 'accept', value: 'text/xml; q=1, */*; q=0.1' }] }), endpoint('1.1'), engineContext());
    expect(declared.error).toBeUndefined();
    expect(accepted).toEqual(['text/xml', 'application/soap+xml', 'text/xml; q=1, */*; q=0.1']);
  });

  it('the pre-flight reads the first page and names a Fault', async () => {
    const connector = connectorSpec(demo.url, { connectorType: 'soap-generic', auth: DEMO_AUTH.basic });
    const ok = await firstPage(connector, soapEndpoint('siebel'), engineContext());
    expect(ok).toMatchObject({ status: 200, verdict: 'ok', method: 'POST' });
    expect(ok.items).toHaveLength(100);
    const fault = await firstPage(connector, soapEndpoint('fault'), engineContext());
    // The status named once: every SOAP failure's message names it.
    expect(fault.verdict).toBe('the SOAP service answered a Fault (HTTP 500): the fault service failed on purpose (demo fault)');
  });
});

describe('hostile and broken answers', () => {
  const readHostile = (path: string, status: number, text: string) => {
    answers.set(path, { status, body: text });
    return readAll(connectorSpec(hostileUrl, { connectorType: 'soap-generic' }), { ...soapEndpoint('x'), path }, engineContext());
  };
  const envelope = (inner: string) => `<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>${inner}</s:Body></s:Envelope>`;

  it('a billion-laughs document is refused before any expansion', async () => {
    const lol = `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">${Array.from({ length: 9 }, (_, i) => `<!ENTITY lol${i + 1} "${`&lol${i === 0 ? '' : i};`.repeat(10)}">`).join('')}]>${envelope('<Partner><id>&lol9;</id></Partner>')}`;
    const { items, error } = await readHostile('/lol', 200, lol);
    expect(items).toEqual([]);
    expect(error?.name).toBe('UnreadableResponseError');
    expect(error?.message).toMatch(/^upstream answered HTTP 200 with a body that is not a SOAP envelope: the body is not well-formed XML \(1:\d+: a DOCTYPE is not accepted \(no DTDs, no entity declarations\)\)/);
  });

  it('an external entity pointing at a local file is never read', async () => {
    const xxe = `<?xml version="1.0"?><!DOCTYPE x [<!ENTITY file SYSTEM "file:///etc/passwd">]>${envelope('<Partner><id>&file;</id></Partner>')}`;
    const { items, error } = await readHostile('/xxe', 200, xxe);
    expect(items).toEqual([]);
    expect(error?.message).toContain('a DOCTYPE is not accepted');
    expect(error?.message).not.toContain('root:');
  });

  it('a body that is not XML, an unterminated envelope, XML that is no envelope: clear messages', async () => {
    const notXml = await readHostile('/json', 200, '{"data": []}');
    expect(notXml.error?.message).toMatch(/^upstream answered HTTP 200 with a body that is not a SOAP envelope: the body is not well-formed XML \(.+\) \(content-type text\/xml; charset=utf-8\): \{"data": \[\]\}$/);
    const cut = await readHostile('/cut', 200, envelope('<Partner><id>1</id></Partner>').slice(0, -20));
    expect(cut.error?.message).toMatch(/the body is not well-formed XML \(.*unclosed tag/);
    const other = await readHostile('/other', 200, '<html><body>hi</body></html>');
    expect(other.error?.message).toContain('the body is XML but not a SOAP envelope (root element html)');
  });

  it('a 1 GiB answer is refused at the page bound without holding it: the process stays within its memory', async () => {
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
    try {
      const { items, error } = await readAll(connectorSpec(hostileUrl, { connectorType: 'soap-generic' }), { ...soapEndpoint('x'), path: '/huge' }, engineContext());
      expect(items).toEqual([]);
      expect(error?.message).toMatch(/with a page larger than 67108864 bytes; refusing to hold it in memory/);
    } finally {
      clearInterval(sampler);
    }
    // One page bound (64 MiB) and the text it became, not the gigabyte.
    expect(peak - before).toBeLessThan(400 * 1024 * 1024);
  });

  it('a session token echoed back as it was sent (XML-escaped, an apostrophe as &apos;) is masked in the message', async () => {
    const token = `se'ss"<ion>&-TOKEN-1234`;
    const session = { token_env: 'CRM_SESSION_TOKEN', header: '<ns:SessionToken xmlns:ns="urn:x">{{token}}</ns:SessionToken>' };
    const { error } = await readAll(
      connectorSpec(hostileUrl, { connectorType: 'soap-generic' }),
      { ...soapEndpoint('x', { session }), path: '/echo' },
      engineContext({ CRM_SESSION_TOKEN: token }),
    );
    expect(error?.message).toContain('bad request: ');
    expect(error?.message).toContain('<ns:SessionToken xmlns:ns="urn:x">[REDACTED]</ns:SessionToken>');
    expect(error?.message).not.toContain('TOKEN-1234');
  });

  it('a 200 that is not an envelope, quoting the request back, has its credentials masked in the run and the pre-flight (a REST page too)', async () => {
    const token = 'session-TOKEN-5678';
    const session = { token_env: 'CRM_SESSION_TOKEN', header: '<t>{{token}}</t>' };
    const endpoint = { ...soapEndpoint('x', { session }), path: '/echo200' };
    const spec = connectorSpec(hostileUrl, { connectorType: 'soap-generic' });
    const { error } = await readAll(spec, endpoint, engineContext({ CRM_SESSION_TOKEN: token }));
    expect(error?.message).toMatch(/^upstream answered HTTP 200 with a body that is not a SOAP envelope: .*<soap:Header><t>\[REDACTED\]<\/t><\/soap:Header>/);
    const report = await firstPage(spec, endpoint, engineContext({ CRM_SESSION_TOKEN: token }));
    expect(report.verdict).toContain('<t>[REDACTED]</t>');
    expect(`${error?.message} ${report.verdict}`).not.toContain('TOKEN-5678');

    const rest = await readAll(connectorSpec(hostileUrl, { auth: { kind: 'bearer', token_env: 'ECHO_TOKEN' } }), endpointSpec('/echo200', { kind: 'none', response_path: '$' }), engineContext({ ECHO_TOKEN: token }));
    expect(rest.error?.message).toBe('upstream answered HTTP 200 with a body that is not JSON (content-type text/plain; charset=utf-8): bad request: Bearer [REDACTED]');
  });

  it('names of any length in an answer that is refused: the message quotes at most 500 characters of its reason', async () => {
    // A root element, or an attribute written twice, named by 20 MB: the run's message, its event's payload and
    // the log line each held the 20 MB name.
    const name = 'N'.repeat(1_000_000);
    for (const [path, page, reason] of [
      ['/long-root', `<${name}/>`, `the body is XML but not a SOAP envelope (root element ${'N'.repeat(400)}`],
      ['/long-attribute', envelope(`<Partner ${name}="1" ${name}="2"/>`), 'the body is not well-formed XML (1:'],
      ['/long-wide', envelope(`<Partner><id>1</id><${name}>${Array.from({ length: 10_001 }, (_, i) => `<f${i}/>`).join('')}</${name}></Partner>`), 'a record holds an element (NNNN'],
    ] as const) {
      const { error } = await readHostile(path, 200, page);
      expect(error?.message.startsWith(`upstream answered HTTP 200 with a body that is not a SOAP envelope: ${reason}`)).toBe(true);
      expect(error?.message.length).toBeLessThan(1_000);
    }
  });

  it('nesting deeper than the bound is refused', async () => {
    const deep = envelope(`${'<a>'.repeat(100)}${'</a>'.repeat(100)}`);
    const { error } = await readHostile('/deep', 200, deep);
    expect(error?.message).toContain('elements nest deeper than 64 levels');
  });

  it('attributes and nested children become @name and nested keys; a 1.2 Fault names its Reason', async () => {
    const page = envelope('<r:Result xmlns:r="urn:r"><r:Partner code="A"><r:id>1</r:id><r:address kind="home"><r:city>Lyon</r:city></r:address></r:Partner></r:Result>');
    const { items } = await readHostile('/attrs', 200, page);
    expect(JSON.parse(JSON.stringify(items))).toEqual([{ '@code': 'A', id: '1', address: { '@kind': 'home', city: 'Lyon' } }]);
    const fault12 = `<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"><e:Body><e:Fault><e:Code><e:Value>e:Receiver</e:Value></e:Code><e:Reason><e:Text xml:lang="en">backend down</e:Text></e:Reason></e:Fault></e:Body></e:Envelope>`;
    const { error } = await readHostile('/fault12', 500, fault12);
    expect(error?.message).toBe('the SOAP service answered a Fault (HTTP 500): backend down');
  });

  it('a Fault whose string goes past the 64 KiB read of an error answer is still a Fault, named from its start, never retried', async () => {
    const long = `${'x'.repeat(199_990)} &amp; end`;
    const fault = `<?xml version="1.0"?><s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Header><h:Trace xmlns:h="urn:h">1</h:Trace></s:Header><s:Body><s:Fault><faultcode>s:Server</faultcode><faultstring>${long}</faultstring></s:Fault></s:Body></s:Envelope>`;
    const before = hits('/long-fault');
    const { error } = await readHostile('/long-fault', 500, fault);
    expect(error?.name).toBe('SoapFaultError');
    expect(error?.message).toMatch(/^the SOAP service answered a Fault \(HTTP 500\): x{100}/);
    expect(hits('/long-fault') - before).toBe(1);
    // A cut answer that is not a Fault stays a transient 500.
    const cut = `<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><r:Result xmlns:r="urn:r">${'y'.repeat(100_000)}</r:Result></s:Body></s:Envelope>`;
    const other = await readHostile('/long-other', 500, cut);
    expect(other.error?.name).toBe('UpstreamHttpError');
  });
});

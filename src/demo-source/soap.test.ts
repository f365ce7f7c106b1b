import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { generatePartners } from './data.js';
import { type DemoSource, startDemoSource } from './server.js';

const N = 2400;
const ALL_IDS = Array.from({ length: N }, (_, i) => i + 1);
const BASIC = `Basic ${Buffer.from('demo:demo-password').toString('base64')}`;
const SIEBEL_ACTION = '"document/urn:demo:siebel:partners:QueryPartners"';

let source: DemoSource;

beforeAll(async () => {
  source = await startDemoSource({ port: 0, host: '127.0.0.1', rows: N, log: () => {} });
});
afterAll(async () => {
  await source.close();
});

function envelope(start: number, size: number | undefined, header = '<soapenv:Header/>', operation = 'QueryPartners'): string {
  return (
    '<?xml version="1.0" encoding="UTF-8"?>' +
    '<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:dem="urn:demo:partners">' +
    header +
    `<soapenv:Body><dem:${operation}>` +
    (size === undefined ? '' : `<dem:PageSize>${size}</dem:PageSize>`) +
    `<dem:StartRowNum>${start}</dem:StartRowNum>` +
    `</dem:${operation}></soapenv:Body></soapenv:Envelope>`
  );
}

async function call(service: string, body: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${source.url}/${service}/start.swe`, {
    method: 'POST',
    headers: { Authorization: BASIC, 'Content-Type': 'text/xml; charset=utf-8', SOAPAction: SIEBEL_ACTION, ...headers },
    body,
  });
  return { status: res.status, contentType: res.headers.get('content-type'), xml: await res.text() };
}

function ids(xml: string, prefix = 'ns'): number[] {
  return [...xml.matchAll(new RegExp(`<${prefix}:id>(\\d+)</${prefix}:id>`, 'g'))].map((m) => Number(m[1]));
}

function flag(xml: string, name: string): string | undefined {
  return new RegExp(`<\\w+:${name}>(\\w+)</\\w+:${name}>`).exec(xml)?.[1];
}

/** Reads pages of `size` until the stop rule says so; returns the ids and the number of requests. */
async function readAll(service: string, size: number, stop: (xml: string, page: number[]) => boolean, prefix = 'ns', headers = {}) {
  const seen: number[] = [];
  let requests = 0;
  for (let start = 0; ; start += size) {
    const { status, xml } = await call(service, envelope(start, size, undefined), headers);
    requests++;
    expect(status).toBe(200);
    const page = ids(xml, prefix);
    seen.push(...page);
    if (stop(xml, page) || requests > 1000) break;
  }
  return { seen, requests };
}

describe('SOAP services', () => {
  it('siebel: pages by PageSize/StartRowNum until LastPage is true; payload namespace-prefixed', async () => {
    const { seen, requests } = await readAll('siebel', 100, (xml) => flag(xml, 'LastPage') === 'true');
    expect(requests).toBe(24);
    expect(seen).toEqual(ALL_IDS);
    const { xml, contentType } = await call('siebel', envelope(0, 1));
    expect(contentType).toMatch(/^text\/xml/);
    const p = generatePartners(1)[0]!;
    expect(xml).toContain('<ns:QueryPartnersResponse xmlns:ns="urn:demo:siebel:partners"><ns:LastPage>false</ns:LastPage>');
    expect(xml).toContain(
      `<ns:Partner><ns:id>1</ns:id><ns:name>${p.name}</ns:name><ns:city>${p.city}</ns:city><ns:country>${p.country}</ns:country>` +
        `<ns:credit_limit>${p.credit_limit}</ns:credit_limit><ns:updated_at>${p.updated_at}</ns:updated_at></ns:Partner>`,
    );
  });

  it('siebel: a missing or wrong SOAPAction is a Client Fault on HTTP 500', async () => {
    for (const action of ['', '"document/urn:demo:siebel:partners:DeletePartners"']) {
      const res = await call('siebel', envelope(0, 10), { SOAPAction: action });
      expect(res.status).toBe(500);
      expect(res.xml).toMatch(/<SOAP-ENV:Fault><faultcode>SOAP-ENV:Client<\/faultcode><faultstring>SOAPAction/);
    }
    expect((await call('siebel', envelope(0, 10), { SOAPAction: 'QueryPartners' })).status).toBe(200);
  });

  it('sap: MoreRecords until false, prefix n0', async () => {
    const { seen, requests } = await readAll('sap', 200, (xml) => flag(xml, 'MoreRecords') === 'false', 'n0');
    expect(requests).toBe(12);
    expect(seen).toEqual(ALL_IDS);
    expect((await call('sap', envelope(0, 5))).xml).toContain('<n0:MoreRecords>true</n0:MoreRecords>');
  });

  it('mute: no stop signal; a client stops on a short or empty page', async () => {
    const { seen, requests } = await readAll('mute', 100, (_xml, page) => page.length < 100);
    expect(requests).toBe(25);
    expect(seen).toEqual(ALL_IDS);
    const last = await call('mute', envelope(2400, 100));
    expect(last.xml).not.toMatch(/LastPage|MoreRecords/);
    expect(last.xml).toContain('<ns:ListOfPartner/>');
  });

  it('tail: 201 rows, so the last page of 100 holds exactly one element', async () => {
    const { seen, requests } = await readAll('tail', 100, (xml) => flag(xml, 'LastPage') === 'true');
    expect(requests).toBe(3);
    expect(seen).toEqual(ALL_IDS.slice(0, 201));
    const last = await call('tail', envelope(200, 100));
    expect(last.xml.match(/<ns:Partner>/g)).toHaveLength(1);
    expect(flag(last.xml, 'LastPage')).toBe('true');
  });

  it('fault: a SOAP Fault on HTTP 500; fault200: the same Fault on HTTP 200', async () => {
    const fault = await call('fault', envelope(0, 10));
    expect(fault.status).toBe(500);
    expect(fault.xml).toMatch(/<SOAP-ENV:Fault><faultcode>SOAP-ENV:Server<\/faultcode><faultstring>[^<]+<\/faultstring><\/SOAP-ENV:Fault>/);
    const fault200 = await call('fault200', envelope(0, 10));
    expect(fault200.status).toBe(200);
    expect(fault200.xml).toContain('<SOAP-ENV:Fault><faultcode>SOAP-ENV:Server</faultcode>');
    expect(ids(fault200.xml)).toEqual([]);
  });

  it('flaky: two plain 500s (no Fault) per page, then the page; /admin/reset starts over', async () => {
    await fetch(`${source.url}/admin/reset`, { method: 'POST' });
    const first = await call('flaky', envelope(0, 10));
    expect(first.status).toBe(500);
    expect(first.xml).not.toMatch(/Fault/);
    expect((await call('flaky', envelope(0, 10))).status).toBe(500);
    const third = await call('flaky', envelope(0, 10));
    expect(third.status).toBe(200);
    expect(ids(third.xml)).toEqual(ALL_IDS.slice(0, 10));
    expect((await call('flaky', envelope(0, 10))).status).toBe(200);
    expect((await call('flaky', envelope(10, 10))).status).toBe(500);
    await fetch(`${source.url}/admin/reset`);
    expect((await call('flaky', envelope(0, 10))).status).toBe(500);

    await fetch(`${source.url}/admin/reset`, { method: 'POST' });
    const seen: number[] = [];
    let requests = 0;
    for (let start = 0, last = false; !last; start += 500) {
      for (;;) {
        const res = await call('flaky', envelope(start, 500));
        requests++;
        if (res.status === 500) continue;
        seen.push(...ids(res.xml));
        last = flag(res.xml, 'LastPage') === 'true';
        break;
      }
    }
    expect(requests).toBe(15);
    expect(seen).toEqual(ALL_IDS);
  });

  it('session: 401 unless a SessionToken rides in the SOAP header', async () => {
    const without = await call('session', envelope(0, 10));
    expect(without.status).toBe(401);
    expect(without.xml).toContain('SessionToken');
    const empty = await call('session', envelope(0, 10, '<soapenv:Header><dem:SessionToken></dem:SessionToken></soapenv:Header>'));
    expect(empty.status).toBe(401);
    const inBody = await call('session', envelope(0, 10).replace('<dem:StartRowNum>', '<dem:SessionToken>t</dem:SessionToken><dem:StartRowNum>'));
    expect(inBody.status).toBe(401);
    const header = '<soapenv:Header><sess:SessionToken xmlns:sess="urn:demo:session">abc123</sess:SessionToken></soapenv:Header>';
    const withToken = await call('session', envelope(0, 10, header));
    expect(withToken.status).toBe(200);
    expect(ids(withToken.xml)).toEqual(ALL_IDS.slice(0, 10));
  });

  it('PageSize defaults to 50 and is capped at 500', async () => {
    expect(ids((await call('siebel', envelope(0, undefined))).xml)).toHaveLength(50);
    expect(ids((await call('siebel', envelope(0, 2000))).xml)).toHaveLength(500);
  });

  it('basic auth on every service: 401 with a Fault and a challenge', async () => {
    for (const service of ['siebel', 'sap', 'mute', 'tail', 'fault', 'fault200', 'flaky', 'session']) {
      for (const authorization of ['', `Basic ${Buffer.from('demo:wrong').toString('base64')}`]) {
        const res = await fetch(`${source.url}/${service}/start.swe`, {
          method: 'POST',
          headers: { Authorization: authorization, SOAPAction: SIEBEL_ACTION },
          body: envelope(0, 10),
        });
        expect(res.status).toBe(401);
        expect(res.headers.get('www-authenticate')).toMatch(/^Basic /);
        expect(await res.text()).toContain('<faultcode>SOAP-ENV:Client</faultcode>');
      }
    }
  });

  it('refuses what is not a QueryPartners envelope with a Client Fault; GET is 405', async () => {
    const notSoap = await call('sap', '{"hello": 1}');
    expect(notSoap.status).toBe(500);
    expect(notSoap.xml).toContain('not a SOAP envelope');
    const otherOp = await call('sap', envelope(0, 10, undefined, 'DeletePartners'));
    expect(otherOp.status).toBe(500);
    expect(otherOp.xml).toContain('unknown operation');
    const badNumber = await call('sap', envelope(0, 10).replace('<dem:StartRowNum>0', '<dem:StartRowNum>zero'));
    expect(badNumber.status).toBe(500);
    expect((await fetch(`${source.url}/sap/start.swe`, { headers: { Authorization: BASIC } })).status).toBe(405);
  });
});

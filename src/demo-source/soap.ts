/**
 * SOAP 1.1 services, each `POST /<service>/start.swe`. The XML is never parsed: the operation, the
 * paging elements and the session token are found with regular expressions, whatever their prefix.
 */
import type { Partner } from './data.js';
import { MAX_PAGE_SIZE, DEFAULT_PAGE_SIZE, type RequestContext, sendText } from './http.js';

const SOAP_ENV = 'http://schemas.xmlsoap.org/soap/envelope/';
const OPERATION = 'QueryPartners';
/** The tail service serves this many rows (fewer when DEMO_ROWS is smaller). */
const TAIL_ROWS = 201;
const XML = 'text/xml; charset=utf-8';

type StopSignal = 'LastPage' | 'MoreRecords' | 'none';

interface SoapService {
  prefix: string;
  namespace: string;
  stop: StopSignal;
  /** Refuse a request whose SOAPAction header does not end with the operation name. */
  soapAction?: boolean;
  /** Refuse (401) a request without a non-empty SessionToken element in the SOAP Header. */
  session?: boolean;
  rows?: number;
  /** Always answer this Fault, with this HTTP status. */
  fault?: number;
  /** Two plain 500s (no Fault) per page before the page itself. */
  flaky?: boolean;
}

export const SOAP_SERVICES: Readonly<Record<string, SoapService>> = {
  siebel: { prefix: 'ns', namespace: 'urn:demo:siebel:partners', stop: 'LastPage', soapAction: true },
  sap: { prefix: 'n0', namespace: 'urn:demo:sap:partners', stop: 'MoreRecords' },
  mute: { prefix: 'ns', namespace: 'urn:demo:mute:partners', stop: 'none' },
  tail: { prefix: 'ns', namespace: 'urn:demo:tail:partners', stop: 'LastPage', rows: TAIL_ROWS },
  fault: { prefix: 'ns', namespace: 'urn:demo:fault:partners', stop: 'LastPage', fault: 500 },
  fault200: { prefix: 'ns', namespace: 'urn:demo:fault200:partners', stop: 'LastPage', fault: 200 },
  flaky: { prefix: 'ns', namespace: 'urn:demo:flaky:partners', stop: 'LastPage', flaky: true },
  session: { prefix: 'ns', namespace: 'urn:demo:session:partners', stop: 'LastPage', session: true },
};

function escapeXml(text: string): string {
  return text.replace(/[<>&'"]/g, (c) => `&#${c.charCodeAt(0)};`);
}

function envelope(body: string): string {
  return `<?xml version="1.0" encoding="UTF-8"?>\n<SOAP-ENV:Envelope xmlns:SOAP-ENV="${SOAP_ENV}"><SOAP-ENV:Body>${body}</SOAP-ENV:Body></SOAP-ENV:Envelope>`;
}

export function soapFault(code: 'Client' | 'Server', message: string): string {
  return envelope(
    `<SOAP-ENV:Fault><faultcode>SOAP-ENV:${code}</faultcode><faultstring>${escapeXml(message)}</faultstring></SOAP-ENV:Fault>`,
  );
}

/** The text content of the first element with this local name (any prefix) inside `xml`. */
function element(xml: string, localName: string): string | undefined {
  const match = new RegExp(`<(?:[\\w.-]+:)?${localName}(?:\\s[^>]*)?>([^<]*)</(?:[\\w.-]+:)?${localName}\\s*>`).exec(xml);
  return match?.[1]?.trim();
}

function section(xml: string, localName: string): string | undefined {
  return new RegExp(`<(?:[\\w.-]+:)?${localName}(?:\\s[^>]*)?>([\\s\\S]*?)</(?:[\\w.-]+:)?${localName}\\s*>`).exec(xml)?.[1];
}

class SoapRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function number(xml: string, name: string, fallback: number): number {
  const raw = element(xml, name);
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new SoapRefusal(500, `${name} must be a non-negative integer, got '${raw}'`);
  return Number(raw);
}

function partnerXml(p: Partner, px: string): string {
  return (
    `<${px}:Partner><${px}:id>${p.id}</${px}:id><${px}:name>${escapeXml(p.name)}</${px}:name>` +
    `<${px}:city>${escapeXml(p.city)}</${px}:city><${px}:country>${p.country}</${px}:country>` +
    `<${px}:credit_limit>${p.credit_limit}</${px}:credit_limit><${px}:updated_at>${p.updated_at}</${px}:updated_at></${px}:Partner>`
  );
}

export function handleSoap(ctx: RequestContext, name: string, service: SoapService, xml: string) {
  const { res } = ctx;
  if (service.fault !== undefined) {
    return sendText(res, service.fault, XML, soapFault('Server', `the ${name} service failed on purpose (demo fault)`));
  }
  try {
    if (!/<(?:[\w.-]+:)?Envelope[\s>]/.test(xml)) throw new SoapRefusal(500, 'the body is not a SOAP envelope');
    const body = section(xml, 'Body');
    if (body === undefined) throw new SoapRefusal(500, 'the SOAP envelope has no Body');
    const operation = /^\s*<(?:[\w.-]+:)?([\w.-]+)/.exec(body)?.[1];
    if (operation !== OPERATION) throw new SoapRefusal(500, `unknown operation '${operation ?? ''}'; this service offers ${OPERATION}`);
    if (service.soapAction) {
      const action = String(ctx.req.headers.soapaction ?? '').replace(/^"|"$/g, '');
      if (!action.endsWith(OPERATION)) throw new SoapRefusal(500, `SOAPAction '${action}' does not name the operation ${OPERATION}`);
    }
    if (service.session) {
      const token = element(section(xml, 'Header') ?? '', 'SessionToken');
      if (!token) throw new SoapRefusal(401, 'no SessionToken in the SOAP Header');
    }
    const start = number(body, 'StartRowNum', 0);
    const size = Math.min(number(body, 'PageSize', DEFAULT_PAGE_SIZE), MAX_PAGE_SIZE);
    if (size < 1) throw new SoapRefusal(500, 'PageSize must be at least 1');

    if (service.flaky) {
      const key = `soap:${name}:${start}:${size}`;
      const seen = (ctx.flaky.get(key) ?? 0) + 1;
      ctx.flaky.set(key, seen);
      if (seen <= 2) return sendText(res, 500, 'text/plain; charset=utf-8', 'Internal Server Error');
    }

    const total = Math.min(service.rows ?? ctx.data.size, ctx.data.size);
    const rows = ctx.data.rows.slice(Math.min(start, total), Math.min(start + size, total));
    const more = start + size < total;
    const px = service.prefix;
    const flag =
      service.stop === 'LastPage'
        ? `<${px}:LastPage>${!more}</${px}:LastPage>`
        : service.stop === 'MoreRecords'
          ? `<${px}:MoreRecords>${more}</${px}:MoreRecords>`
          : '';
    const list = rows.length === 0 ? `<${px}:ListOfPartner/>` : `<${px}:ListOfPartner>${rows.map((p) => partnerXml(p, px)).join('')}</${px}:ListOfPartner>`;
    sendText(res, 200, XML, envelope(`<${px}:${OPERATION}Response xmlns:${px}="${service.namespace}">${flag}${list}</${px}:${OPERATION}Response>`));
  } catch (error) {
    if (error instanceof SoapRefusal) return sendText(res, error.status, XML, soapFault('Client', error.message));
    throw error;
  }
}

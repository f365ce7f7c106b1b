import { SaxesParser } from 'saxes';
import type { SoapCall } from '../types.js';
import { descendants, firstDescendant, MAX_XML_DEPTH, parseXml, parseXmlSync, toJson, XmlError, type XmlElement, type XmlLimits, XmlTooLargeError, XmlTooWideError } from './xml.js';

/**
 * SOAP 1.1 and 1.2 on the wire: the envelope a page request sends, and what an answer says (its
 * records, its stop flag, or its Fault). Only the envelope namespaces differ between versions.
 */

const ENVELOPE_NS = { '1.1': 'http://schemas.xmlsoap.org/soap/envelope/', '1.2': 'http://www.w3.org/2003/05/soap-envelope' } as const;

const ESCAPES: Record<string, string> = { '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' };

/** Escapes a value for XML text or a quoted attribute. */
export function escapeXml(text: string): string {
  let out = '';
  for (const c of text) out += ESCAPES[c] ?? c;
  return out;
}

/** Fills each `{{name}}` placeholder with its XML-escaped value (other text is left as written). */
export function fillTemplate(template: string, values: Record<string, string>): string {
  let out = template;
  for (const [name, value] of Object.entries(values)) out = out.split(`{{${name}}}`).join(escapeXml(value));
  return out;
}

/** The headers a SOAP request carries: the content type of its version, the action where it belongs. */
export function soapHeaders(call: SoapCall): Record<string, string> {
  if (call.version === '1.2') {
    const action = call.action === undefined ? '' : `; action="${call.action.replace(/["\\]/g, '\\$&')}"`;
    return { 'Content-Type': `application/soap+xml; charset=utf-8${action}` };
  }
  // SOAP 1.1's `"<URI-reference>"` has no escape for a double quote: manifest validation refuses one in a 1.1
  // action; the strip only keeps the header well-formed for a connector stored before that check.
  return { 'Content-Type': 'text/xml; charset=utf-8', SOAPAction: `"${(call.action ?? '').replace(/"/g, '')}"` };
}

/**
 * The `Accept` a SOAP request sends unless the connector declares one: the envelope's own media type
 * (1.1 `text/xml`, 1.2 `application/soap+xml`), never the JSON a REST read asks for (a service or a
 * gateway that negotiates would answer 406, or JSON).
 */
export function soapAccept(call: SoapCall): string {
  return call.version === '1.2' ? 'application/soap+xml' : 'text/xml';
}

/** The envelope of one page: the session header (token filled) and the operation body (paging filled). */
export function soapEnvelope(call: SoapCall, paging: { pageSize: number; startRow: number }, token?: string): string {
  const ns = ENVELOPE_NS[call.version];
  const header = call.session && token !== undefined ? `<soap:Header>${fillTemplate(call.session.header, { token })}</soap:Header>` : '';
  const body = fillTemplate(call.body, { page_size: String(paging.pageSize), start_row: String(paging.startRow) });
  return `<?xml version="1.0" encoding="UTF-8"?>\n<soap:Envelope xmlns:soap="${ns}">${header}<soap:Body>${body}</soap:Body></soap:Envelope>`;
}

/** Longest part of a refusal that quotes the text (a tag's name may be as long as the body). */
const MAX_PROBLEM_CHARS = 300;

/**
 * What is wrong with a SOAP body or session header template as soapEnvelope sends it, or undefined. The
 * text is read as the content of the Body (or Header) it is sent in: its `{{name}}` placeholders filled
 * (`names`; each by as many digits as the placeholder has characters, so that a line and column are those
 * of the text as written), the envelope's own `soap` prefix in scope. It must be well-formed XML with
 * every prefix it uses declared (a namespace-aware service refuses anything else), no DOCTYPE, and hold
 * at least one element, with only white space outside its elements. A placeholder the engine does not
 * fill is text like any other.
 */
export function templateProblem(template: string, names: readonly string[], version: SoapCall['version']): string | undefined {
  let text = template;
  for (const name of names) text = text.split(`{{${name}}}`).join('0'.repeat(name.length + 4));
  // saxes reads past an & that starts no reference to the next `;` and blames what follows (`unclosed tag`): named here.
  const bare = bareAmpersand(text);
  if (bare !== undefined) return `${bare}: an & that starts no entity or character reference (write &amp; for the character)`;
  const parser = new SaxesParser({ xmlns: true, fragment: true, position: true, additionalNamespaces: { soap: ENVELOPE_NS[version] } });
  let depth = 0;
  let elements = 0;
  const stop = (problem: string): never => {
    throw new SoapEnvelopeError(problem.length > MAX_PROBLEM_CHARS ? `${problem.slice(0, MAX_PROBLEM_CHARS)}…` : problem);
  };
  parser.on('error', (err) => stop(err.message));
  parser.on('doctype', () => stop(`${parser.line}:${parser.column}: a DOCTYPE is not accepted`));
  parser.on('opentag', () => {
    // As deep as an answer may nest (saxes resolves each prefix up the open elements: 33,000 levels took 25 s).
    if (++depth > MAX_XML_DEPTH) stop(`${parser.line}:${parser.column}: elements nest deeper than ${MAX_XML_DEPTH} levels`);
    elements++;
  });
  parser.on('closetag', () => {
    depth--;
  });
  const outside = (chunk: string) => {
    if (depth === 0 && chunk.trim() !== '') stop(`${parser.line}:${parser.column}: text outside an element`);
  };
  parser.on('text', outside);
  parser.on('cdata', outside);
  try {
    parser.write(text).close();
  } catch (err) {
    if (err instanceof SoapEnvelopeError) return err.message;
    throw err;
  }
  return elements === 0 ? 'it holds no XML element' : undefined;
}

/** The rest of a reference after its `&`: an entity name or a character reference, and its `;`. */
const REFERENCE = /(?:[A-Za-z_:][A-Za-z0-9_:.-]*|#[0-9]+|#x[0-9A-Fa-f]+);/y;
/** Sections an & is text in, by their start and end. */
const LITERAL_SECTIONS: ReadonlyArray<readonly [string, string]> = [
  ['<![CDATA[', ']]>'],
  ['<!--', '-->'],
  ['<?', '?>'],
];

/**
 * The line and column (`2:5`) of the first & that starts no reference, outside CDATA sections, comments and
 * processing instructions, or undefined. One pass: a section is skipped to its end, and one without an end ends the
 * search (saxes says what is wrong with it).
 */
function bareAmpersand(text: string): string | undefined {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a) {
      line++;
      lineStart = i + 1;
    } else if (c === 0x3c) {
      const section = LITERAL_SECTIONS.find(([start]) => text.startsWith(start, i));
      if (section === undefined) continue;
      const end = text.indexOf(section[1], i + section[0].length);
      if (end < 0) return undefined;
      for (let j = i; j < end; j++) {
        if (text.charCodeAt(j) === 0x0a) {
          line++;
          lineStart = j + 1;
        }
      }
      i = end + section[1].length - 1;
    } else if (c === 0x26) {
      REFERENCE.lastIndex = i + 1;
      if (!REFERENCE.test(text)) return `${line}:${i - lineStart + 1}`;
    }
  }
  return undefined;
}

/** A parsed answer: its records (as JSON), the stop flag's text if present, or its Fault. */
export interface SoapAnswer {
  records: unknown[];
  /** The stop flag's trimmed text, when the call declares a flag and the answer carries it. */
  flag?: string;
  /** The fault string (1.1 faultstring, 1.2 Reason/Text) when the Body holds a Fault. */
  fault?: string;
}

/** Why an answer is not a usable SOAP envelope (not XML, no Envelope, no Body). */
export class SoapEnvelopeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SoapEnvelopeError';
  }
}

/**
 * Reads an answer (a page, up to the page-size bound: parsed without holding the event loop); rejects
 * with SoapEnvelopeError when it is not well-formed XML, not a SOAP envelope, or holds more elements
 * or attributes than a page may build (MAX_XML_ELEMENTS, MAX_XML_ATTRIBUTES; `limits` is for tests), or a record
 * of an element wider than MAX_JSON_NAMES.
 */
export async function readAnswer(text: string, call: Pick<SoapCall, 'records' | 'stop'>, limits?: XmlLimits): Promise<SoapAnswer> {
  let root: XmlElement;
  try {
    root = await parseXml(text, limits);
  } catch (err) {
    throw envelopeError(err);
  }
  const body = bodyOf(root);
  const fault = body.children.find((c) => c.local === 'Fault');
  if (fault) return { records: [], fault: faultString(fault) };
  let records: unknown[];
  try {
    records = descendants(body, call.records).map((r) => toJson(r, true));
  } catch (err) {
    throw envelopeError(err);
  }
  const answer: SoapAnswer = { records };
  const flag = call.stop ? firstDescendant(body, call.stop.flag) : undefined;
  if (flag) answer.flag = flag.text.trim();
  return answer;
}

/**
 * The fault string of a text that may be a SOAP Fault envelope (an error answer), or undefined.
 * Synchronous: for the start of an error answer only (at most 64 KiB is read of one).
 */
export function faultOf(text: string): string | undefined {
  try {
    const fault = bodyOf(parseXmlSync(text)).children.find((c) => c.local === 'Fault');
    return fault ? faultString(fault) : undefined;
  } catch {
    return cutFaultOf(text);
  }
}

/** An Envelope whose Body opens with a Fault, read from its start only. */
const FAULT_START = /^\s*(?:<\?xml[^>]*\?>\s*)?<(?:[\w.-]+:)?Envelope\b[^>]*>(?:\s*<(?:[\w.-]+:)?Header\b[^>]*\/>|\s*<(?:[\w.-]+:)?Header\b[^>]*>[\s\S]*?<\/(?:[\w.-]+:)?Header>)?\s*<(?:[\w.-]+:)?Body\b[^>]*>\s*<(?:[\w.-]+:)?Fault\b/;
/**
 * The start of a fault string (1.1) or of a Reason's Text (1.2), up to the next tag or the end of what
 * was read. The tag's attributes never run past a `<` (none can hold one), so the search from each
 * `<` ends at the next: linear in what was read, not quadratic in an answer of unclosed `<Text`.
 */
const FAULT_TEXT = /<(?:[\w.-]+:)?(?:faultstring|Text)\b(?:[^<>"']|"[^<"]*"|'[^<']*')*>([^<]*)(<)?/;
const ENTITIES: Record<string, string> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" };

/**
 * The fault string of an error answer that is not a whole document: only its start is read (64
 * KiB), and a Fault with a long fault string is cut there. An Envelope whose Body opens with a
 * Fault is a Fault however it ends; its string is what was read of it, marked as cut when its end
 * was not read.
 */
function cutFaultOf(text: string): string | undefined {
  if (!FAULT_START.test(text)) return undefined;
  const found = FAULT_TEXT.exec(text);
  if (!found) return 'fault without a reason (its answer was cut before one)';
  const value = found[1]!.replace(/&(lt|gt|amp|quot|apos);/g, (_, name: string) => ENTITIES[name]!).trim();
  if (found[2] === undefined) return `${value}… (cut: only the start of the answer is read)`;
  return value || 'fault without a reason';
}

/** An XmlError as the SoapEnvelopeError it makes of an answer; anything else as it is. */
function envelopeError(err: unknown): unknown {
  if (err instanceof XmlTooLargeError) {
    const limit = err.limit.toLocaleString('en-US');
    return new SoapEnvelopeError(`the SOAP answer has more than ${limit} ${err.counted}; a page is refused past ${limit} (lower pagination.page_size)`);
  }
  if (err instanceof XmlTooWideError) {
    return new SoapEnvelopeError(`a record holds an element (${err.element}) of more than ${err.maxNames.toLocaleString('en-US')} distinct child element and attribute names; the page is refused`);
  }
  if (err instanceof XmlError) return new SoapEnvelopeError(`the body is not well-formed XML (${err.message})`);
  return err;
}

/** The Body of an answer's Envelope; throws SoapEnvelopeError when there is none. */
function bodyOf(root: XmlElement): XmlElement {
  if (root.local !== 'Envelope') throw new SoapEnvelopeError(`the body is XML but not a SOAP envelope (root element ${root.local})`);
  const body = root.children.find((c) => c.local === 'Body');
  if (!body) throw new SoapEnvelopeError('the SOAP envelope has no Body');
  return body;
}

/** The fault string (1.1) or the Reason's first Text (1.2); an empty one is no reason, and the code is named instead. */
function faultString(fault: XmlElement): string {
  const v11 = fault.children.find((c) => c.local === 'faultstring');
  const reason = fault.children.find((c) => c.local === 'Reason');
  const text = (v11 ?? (reason ? firstDescendant(reason, 'Text') : undefined))?.text.trim();
  if (text) return text;
  const code = fault.children.find((c) => c.local === 'faultcode' || c.local === 'Code');
  return code ? `fault without a reason (code ${collectText(code).trim()})` : 'fault without a reason';
}

function collectText(element: XmlElement): string {
  return element.text + element.children.map(collectText).join('');
}

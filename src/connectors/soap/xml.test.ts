import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { SaxesParser } from 'saxes';
import { descendants, MAX_XML_DEPTH, MAX_XML_ELEMENTS, parseXml, parseXmlSync, toJson, XML_SLICE_CHARS, XmlError, XmlTooManyElementsError } from './xml.js';

/** The XML tree and its JSON form (src/connectors/soap/xml.ts), below the SOAP engine. */
describe('parseXml and toJson', () => {
  it('matches elements and attributes by local name whatever their prefix, and leaves namespace declarations out', async () => {
    const root = await parseXml('<a:Root xmlns:a="urn:a" xmlns="urn:d"><b:Item xmlns:b="urn:b" b:kind="x" plain="y"><a:id>7</a:id></b:Item><Item><id>8</id></Item></a:Root>');
    expect(root.local).toBe('Root');
    const items = descendants(root, 'Item');
    expect(items.map((i) => toJson(i, true))).toEqual([{ '@kind': 'x', '@plain': 'y', id: '7' }, { id: '8' }]);
  });

  it('keeps names that are Object.prototype members as plain keys, repeated names as arrays', async () => {
    const root = await parseXml('<r><__proto__>p</__proto__><constructor>c</constructor><toString>t</toString><hasOwnProperty>h</hasOwnProperty><x>1</x><x>2</x><x>3</x></r>');
    const json = toJson(root, true) as Record<string, unknown>;
    expect(Object.getPrototypeOf(json)).toBe(Object.prototype);
    expect(Object.keys(json)).toEqual(['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'x']);
    expect(Object.getOwnPropertyDescriptor(json, '__proto__')?.value).toBe('p');
    expect(json.constructor).toBe('c');
    expect(json.toString).toBe('t');
    expect(json.x).toEqual(['1', '2', '3']);
    expect(JSON.parse(JSON.stringify(json))).toEqual(json);
  });

  it('gives text beside children as #text, and a text-only element as its text', async () => {
    const root = await parseXml('<r a="1">hello<b>there</b>  </r>');
    expect(toJson(root)).toEqual({ '@a': '1', b: 'there', '#text': 'hello  ' });
    expect(toJson(await parseXml('<r><![CDATA[<x>]]></r>'))).toBe('<x>');
  });

  it('refuses a DOCTYPE, a document nested too deep, and one that is not well-formed, saying where', async () => {
    await expect(parseXml('<!DOCTYPE r [<!ENTITY e "x">]><r>&e;</r>')).rejects.toThrow(/a DOCTYPE is not accepted/);
    const deep = `${'<d>'.repeat(MAX_XML_DEPTH + 1)}${'</d>'.repeat(MAX_XML_DEPTH + 1)}`;
    await expect(parseXml(deep)).rejects.toThrow(`elements nest deeper than ${MAX_XML_DEPTH} levels`);
    await expect(parseXml(`${'<d>'.repeat(MAX_XML_DEPTH)}${'</d>'.repeat(MAX_XML_DEPTH)}`)).resolves.toBeDefined();
    const error = await parseXml('<r><a></r>').catch((err: unknown) => err);
    expect(error).toBeInstanceOf(XmlError);
    expect((error as Error).message).toMatch(/^1:\d+: /);
    await expect(parseXml('')).rejects.toThrow(XmlError);
    expect(() => parseXmlSync('<r><a></r>')).toThrow(/^1:\d+: /);
  });

  it('reads a document fed in slices whole: text, a CRLF and a surrogate pair cut at a slice boundary', async () => {
    // The filler puts a CR, then a surrogate pair, across the first two slice boundaries.
    const head = '<r><t>';
    const first = 'x'.repeat(XML_SLICE_CHARS - head.length - 1);
    const second = 'y'.repeat(XML_SLICE_CHARS - 2);
    const root = await parseXml(`${head}${first}\r\n${second}😀z</t></r>`);
    expect(toJson(root)).toEqual({ t: `${first}\n${second}😀z` });
  });
});

describe('parseXml bounds', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  it('refuses a document with more elements than the limit as soon as it passes it, before reading the rest', async () => {
    // Ten elements, then a syntax error: nine are refused at the tenth, before the parser reaches it.
    const text = `<r>${'<a/>'.repeat(9)}<<<broken</r>`;
    const broken = await parseXml(text, { maxElements: 10 }).catch((err: unknown) => err);
    expect(broken).toBeInstanceOf(XmlError);
    expect(broken).not.toBeInstanceOf(XmlTooManyElementsError);
    await expect(parseXml(text, { maxElements: 9 })).rejects.toThrow(new XmlTooManyElementsError(9));
    await expect(parseXml(text, { maxElements: 9 })).rejects.toThrow('the document has more than 9 elements');
    expect(() => parseXmlSync(text, { maxElements: 9 })).toThrow(XmlTooManyElementsError);

    // 4 million elements (16 MiB) with a limit of 1,000: refused in a few slices' time at most, not
    // after parsing (and building) the whole document.
    const huge = `<r>${'<a/>'.repeat(4_000_000)}</r>`;
    const written = countWritten();
    const started = performance.now();
    await expect(parseXml(huge, { maxElements: 1000 })).rejects.toThrow('the document has more than 1,000 elements');
    expect(performance.now() - started).toBeLessThan(500);
    expect(written()).toBeLessThanOrEqual(XML_SLICE_CHARS);
  });

  it(`refuses a document of more than ${MAX_XML_ELEMENTS.toLocaleString('en-US')} elements by default`, async () => {
    expect(MAX_XML_ELEMENTS).toBe(1_000_000);
    await expect(parseXml(`<r>${'<a/>'.repeat(MAX_XML_ELEMENTS - 1)}</r>`)).resolves.toBeDefined();
    // The refusal stops at the limit: of 4 million elements, the parser was given the first million
    // and a slice at most, not the rest. (Counted, not timed: a bound relative to the legal
    // document's parse failed on a machine loaded by other work.)
    const written = countWritten();
    await expect(parseXml(`<r>${'<a/>'.repeat(4_000_000)}</r>`)).rejects.toThrow('the document has more than 1,000,000 elements');
    expect(written()).toBeGreaterThan(4 * MAX_XML_ELEMENTS);
    expect(written()).toBeLessThanOrEqual(3 + 4 * (MAX_XML_ELEMENTS + 1) + XML_SLICE_CHARS);
  });

  it('keeps the event loop turning while a large legal document is parsed', async () => {
    const record = (i: number) => `<rec><id>${i}</id><name>name of record ${i}</name><city>Somewhere</city><note>${'n'.repeat(40)}</note></rec>`;
    const records: string[] = [];
    let size = 0;
    for (let i = 0; size < 20 * 1024 * 1024; i++) {
      records.push(record(i));
      size += records[records.length - 1]?.length ?? 0;
    }
    const text = `<s:Envelope xmlns:s="urn:s"><s:Body><R>${records.join('')}</R></s:Body></s:Envelope>`;

    const ticks: number[] = [];
    const timer = setInterval(() => ticks.push(performance.now()), 5);
    const started = performance.now();
    let root: Awaited<ReturnType<typeof parseXml>>;
    try {
      root = await parseXml(text);
    } finally {
      clearInterval(timer);
    }
    const ended = performance.now();
    expect(root.children[0]?.children[0]?.children).toHaveLength(records.length);

    const times = [started, ...ticks.filter((t) => t <= ended), ended];
    const largestGap = Math.max(...times.slice(1).map((t, i) => t - (times[i] as number)));
    // A synchronous parse has one gap: the whole parse. Sliced, no gap is more than a fraction of it.
    expect(ticks.length).toBeGreaterThanOrEqual(5);
    expect(largestGap).toBeLessThan(Math.max(200, (ended - started) / 3));
  });

  it('parses a malformed document once, and still says where it breaks', async () => {
    const text = `<r>${'<a>x</a>'.repeat(100_000)}<a></r>`;
    const written = countWritten();
    const error = await parseXml(text).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(XmlError);
    expect((error as Error).message).toMatch(/^1:\d+: /);
    expect(written()).toBe(text.length);
  });
});

/** Counts the characters written to any saxes parser from now on (close() writes null: not counted). */
function countWritten(): () => number {
  let total = 0;
  const write = SaxesParser.prototype.write;
  jest.spyOn(SaxesParser.prototype, 'write').mockImplementation(function (this: SaxesParser, chunk: string | object | null) {
    if (typeof chunk === 'string') total += chunk.length;
    return write.call(this, chunk);
  });
  return () => total;
}

import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { SaxesParser } from 'saxes';
import { leastCpuMs } from '../../../test/harness/cpu-cost.js';
import {
  descendants,
  MAX_XML_ATTRIBUTES,
  MAX_XML_DEPTH,
  MAX_XML_ELEMENT_ATTRIBUTES,
  MAX_XML_ELEMENTS,
  parseXml,
  parseXmlSync,
  toJson,
  XML_SLICE_CHARS,
  XmlError,
  XmlTooManyAttributesError,
  XmlTooManyElementsError,
} from './xml.js';

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
    // The refusal stops at the limit: of 4 million elements, saxes was given the first million
    // and a slice at most, not the rest. (Counted, not timed: a bound relative to the legal
    // document's parse failed on a machine loaded by other work.) The comment makes it saxes's document.
    const written = countWritten();
    await expect(parseXml(`<r><!---->${'<a/>'.repeat(4_000_000)}</r>`)).rejects.toThrow('the document has more than 1,000,000 elements');
    expect(written()).toBeGreaterThan(4 * MAX_XML_ELEMENTS);
    expect(written()).toBeLessThanOrEqual(10 + 4 * (MAX_XML_ELEMENTS + 1) + XML_SLICE_CHARS);
    // A plain document is refused by parseXml's own reader at the same element: what breaks after it (which
    // would have handed the document to saxes) is never reached.
    const writtenBefore = written();
    await expect(parseXml(`<r>${'<a/>'.repeat(4_000_000)}<<<</r>`)).rejects.toThrow('the document has more than 1,000,000 elements');
    expect(written()).toBe(writtenBefore);
  });

  it('reads an element\'s attributes in time linear in their number, a repeated one refused as saxes refuses it', async () => {
    // The check for an attribute written twice compared each with every one before it: 1 s of the event
    // loop for an element of 10,000 attributes (a 100 KiB answer), 71 s for 100,000 (1 MiB).
    // Timed against an eighth of them (processor time, the least of a few runs): linear is about 8 times it,
    // the quadratic check was 64 times.
    const element = (n: number) => `<r><p${attributeList(n)}/></r>`;
    const eighth = await leastCpuMs(() => parseXml(element(1_000)), { repeat: 3 });
    const whole = await leastCpuMs(() => parseXml(element(8_000)), { repeat: 3 });
    expect(whole).toBeLessThan(eighth * 8 * 3);
    expect(toJson(await parseXml(element(3)))).toEqual({ p: { '@a0': 'v', '@a1': 'v', '@a2': 'v' } });
    const repeated = `<r><p${attributeList(8_000)} a7="w"/></r>`;
    await expect(parseXml(repeated)).rejects.toThrow(/^1:\d+: duplicate attribute: a7\.$/);
    expect(() => parseXmlSync(repeated)).toThrow(/^1:\d+: duplicate attribute: a7\.$/);
  });

  it(`refuses an element of more than ${MAX_XML_ELEMENT_ATTRIBUTES.toLocaleString('en-US')} attributes and a document of more than ${MAX_XML_ATTRIBUTES.toLocaleString('en-US')}, as they are read`, async () => {
    expect([MAX_XML_ELEMENT_ATTRIBUTES, MAX_XML_ATTRIBUTES]).toEqual([10_000, 1_000_000]);
    // One element of 6 million attributes (64 MiB) held the event loop for 15 s at the element's end in saxes,
    // and took 3 GB. Refused at the attribute past the limit, a slice later at most (here of 500,000).
    const at = `<r><p${attributeList(MAX_XML_ELEMENT_ATTRIBUTES)}`.length;
    const wide = `<r><p${attributeList(500_000)}/></r>`;
    const written = countWritten();
    await expect(parseXml(wide)).rejects.toThrow(/^1:\d+: an element has more than 10,000 attributes$/);
    expect(written()).toBeLessThanOrEqual(2 * (at + XML_SLICE_CHARS));
    await expect(parseXml(`<r><p${attributeList(MAX_XML_ELEMENT_ATTRIBUTES)}/></r>`)).resolves.toBeDefined();

    // Attributes spread over elements: counted over the document, refused at the same one by either reader.
    const spread = `<r>${'<a x="1" y="2"/>'.repeat(5)}<b z="3"/></r>`;
    await expect(parseXml(spread, { maxAttributes: 10 })).rejects.toThrow(new XmlTooManyAttributesError(10));
    expect(() => parseXmlSync(spread, { maxAttributes: 10 })).toThrow(new XmlTooManyAttributesError(10));
    await expect(parseXml(`<!---->${spread}`, { maxAttributes: 10 })).rejects.toThrow('the document has more than 10 attributes');
    await expect(parseXml(spread, { maxAttributes: 11 })).resolves.toBeDefined();
    const many = `<r>${`<p${attributeList(MAX_XML_ELEMENT_ATTRIBUTES)}/>`.repeat(101)}</r>`;
    await expect(parseXml(many)).rejects.toThrow('the document has more than 1,000,000 attributes');
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

/** ` a0="v" a1="v" …`: n attributes of distinct names. */
function attributeList(n: number): string {
  const names: string[] = [];
  for (let i = 0; i < n; i++) names.push(` a${i}="v"`);
  return names.join('');
}

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

/**
 * parseXml reads plain documents itself and leaves the rest to saxes (parseXmlSync is saxes alone): whichever
 * reads a document, the tree, or the error, is the same.
 */
describe('parseXml on plain and other documents', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  /** parseXml's outcome (its tree, or its error's class and message) and the characters it gave saxes. */
  const outcome = async (text: string, limits?: { maxDepth?: number; maxElements?: number }) => {
    const written = countWritten();
    const result = await parseXml(text, limits).then(
      (tree) => ({ tree }),
      (err: Error) => ({ error: `${err.constructor.name}: ${err.message}` }),
    );
    const saxes = written();
    jest.restoreAllMocks();
    return { result, saxes };
  };
  const bySaxes = (text: string, limits?: { maxDepth?: number; maxElements?: number }) => {
    try {
      return { tree: parseXmlSync(text, limits) };
    } catch (err) {
      return { error: `${(err as Error).constructor.name}: ${(err as Error).message}` };
    }
  };

  const plain = [
    '<?xml version="1.0" encoding="UTF-8"?>\n<SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/"><SOAP-ENV:Body><ns:R xmlns:ns="urn:r"><ns:LastPage>true</ns:LastPage><ns:ListOfPartner><ns:Partner><ns:id>1</ns:id><ns:name>A &#38; B &lt;C&gt; &amp;&quot;&apos;&#x263A;</ns:name></ns:Partner><ns:Partner><ns:id>2</ns:id><ns:name/></ns:Partner></ns:ListOfPartner></ns:R></SOAP-ENV:Body></SOAP-ENV:Envelope>',
    "<?xml version='1.0' standalone='yes' ?>  <r a = 'x\"y' b=\"it's\" c=\">\" >\n  text <b:c xmlns:b=\"u\" b:k=\"v\"/> tail ]] > 😀 \u0085\u2028\u007f <d></d ><e />\n</r>\n\t ",
    '<r><x>1</x><x>2</x><y><x>3</x></y>&#10;&#13;&#9;&#x10FFFF;</r>',
    '<a:b:c><_.-9:x/></a:b:c>',
    '<?xml version="1.0"\r\n encoding="utf-8"?>\r\n<r\r\n a="1"\r\n>\r\n <x>one\r\ntwo\rthree\r\r\nfour&#13;\r</x\r\n>\r\n</r>\r\n',
  ];
  const other = [
    '<r><!-- a comment --><a>1</a></r>',
    '<r><![CDATA[<x>]]></r>',
    '<?xml version="1.0"?><?pi data?><r/>',
    '<?xml version="1.1"?><r/>',
    '<?xml version="1.0" encoding="-x"?><r/>',
    ' <?xml version="1.0"?><r/>',
    '<!DOCTYPE r><r/>',
    '<r a="x\ry"/>',
    '<r a="x\ty"/>',
    '<r a="x&amp;y"/>',
    '<r a="<"/>',
    '<r a="1" a="2"/>',
    '<r xmlns:a="1" xmlns:a="2"/>',
    '<r a="1"b="2"/>',
    '<r a/>',
    '<r a=1/>',
    '<r>&nbsp;</r>',
    '<r>&#0;</r>',
    '<r>&#X41;</r>',
    '<r>&#xD800;</r>',
    '<r>&</r>',
    '<r>a ]]> b</r>',
    '<r>\u0001</r>',
    '<r>\ud800x</r>',
    '<r>\udc00</r>',
    '<r>\ufffe</r>',
    '<é/>',
    '<r><é>1</é></r>',
    '<r></s>',
    '<r><a></r>',
    '<r/><s/>',
    'x<r/>',
    '<r/>x',
    '<r/',
    '<r',
    '<r>',
    '',
    '   ',
    '\ufeff<r/>',
    '< r/>',
    '<r/ >',
    '</r>',
    '<1/>',
  ];

  it('reads plain documents without saxes, into the tree saxes builds', async () => {
    for (const text of plain) {
      const { result, saxes } = await outcome(text);
      expect({ text, saxes }).toEqual({ text, saxes: 0 });
      expect(result).toEqual(bySaxes(text));
    }
  });

  it('leaves every other document to saxes: the same tree, or the same error saying where', async () => {
    for (const text of other) {
      const { result, saxes } = await outcome(text);
      expect({ text, saxes: saxes > 0 }).toEqual({ text, saxes: text.length > 0 });
      expect({ text, result }).toEqual({ text, result: bySaxes(text) });
    }
  });

  it('keeps the limits: too deep is saxes\'s error, too many elements refused at the same element', async () => {
    const deep = `<r>${'<d>'.repeat(MAX_XML_DEPTH)}${'</d>'.repeat(MAX_XML_DEPTH)}</r>`;
    expect((await outcome(deep)).result).toEqual(bySaxes(deep));
    expect((await outcome(deep)).result).toMatchObject({ error: expect.stringContaining(`elements nest deeper than ${MAX_XML_DEPTH} levels`) });
    const many = `<r>${'<a/>'.repeat(9)}<b x="1"/></r>`;
    for (const maxElements of [9, 10, 11]) {
      const { result, saxes } = await outcome(many, { maxElements });
      expect(result).toEqual(bySaxes(many, { maxElements }));
      expect(saxes).toBe(0);
    }
    expect((await outcome(many, { maxElements: 9 })).result).toEqual({ error: 'XmlTooManyElementsError: the document has more than 9 elements' });
  });

  it('agrees with saxes on thousands of documents one character away from a plain one (CRs among them)', async () => {
    const alphabet = ['<', '>', '/', '&', ';', '"', "'", '=', ' ', '\n', '\r', '\t', '!', '?', '[', ']', '-', '#', 'x', 'a', ':', '1', 'é', '\u0000', '\ud83d'];
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % n;
    };
    for (let k = 0; k < 4000; k++) {
      const base = plain[k % 2 === 0 ? 1 : 4]!;
      const at = random(base.length);
      const kind = random(3);
      const c = alphabet[random(alphabet.length)]!;
      const text = kind === 0 ? base.slice(0, at) + base.slice(at + 1) : kind === 1 ? base.slice(0, at) + c + base.slice(at) : base.slice(0, at) + c + base.slice(at + 1);
      const { result } = await outcome(text);
      expect({ text, result }).toEqual({ text, result: bySaxes(text) });
    }
  });
});

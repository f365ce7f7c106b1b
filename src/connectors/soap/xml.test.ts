import { describe, expect, it } from '@jest/globals';
import { descendants, MAX_XML_DEPTH, parseXml, toJson, XmlError } from './xml.js';

/** The XML tree and its JSON form (src/connectors/soap/xml.ts), below the SOAP engine. */
describe('parseXml and toJson', () => {
  it('matches elements and attributes by local name whatever their prefix, and leaves namespace declarations out', () => {
    const root = parseXml('<a:Root xmlns:a="urn:a" xmlns="urn:d"><b:Item xmlns:b="urn:b" b:kind="x" plain="y"><a:id>7</a:id></b:Item><Item><id>8</id></Item></a:Root>');
    expect(root.local).toBe('Root');
    const items = descendants(root, 'Item');
    expect(items.map((i) => toJson(i, true))).toEqual([{ '@kind': 'x', '@plain': 'y', id: '7' }, { id: '8' }]);
  });

  it('keeps names that are Object.prototype members as plain keys, repeated names as arrays', () => {
    const root = parseXml('<r><__proto__>p</__proto__><constructor>c</constructor><toString>t</toString><hasOwnProperty>h</hasOwnProperty><x>1</x><x>2</x><x>3</x></r>');
    const json = toJson(root, true) as Record<string, unknown>;
    expect(Object.getPrototypeOf(json)).toBe(Object.prototype);
    expect(Object.keys(json)).toEqual(['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'x']);
    expect(Object.getOwnPropertyDescriptor(json, '__proto__')?.value).toBe('p');
    expect(json.constructor).toBe('c');
    expect(json.toString).toBe('t');
    expect(json.x).toEqual(['1', '2', '3']);
    expect(JSON.parse(JSON.stringify(json))).toEqual(json);
  });

  it('gives text beside children as #text, and a text-only element as its text', () => {
    const root = parseXml('<r a="1">hello<b>there</b>  </r>');
    expect(toJson(root)).toEqual({ '@a': '1', b: 'there', '#text': 'hello  ' });
    expect(toJson(parseXml('<r><![CDATA[<x>]]></r>'))).toBe('<x>');
  });

  it('refuses a DOCTYPE, a document nested too deep, and one that is not well-formed, saying where', () => {
    expect(() => parseXml('<!DOCTYPE r [<!ENTITY e "x">]><r>&e;</r>')).toThrow(/a DOCTYPE is not accepted/);
    const deep = `${'<d>'.repeat(MAX_XML_DEPTH + 1)}${'</d>'.repeat(MAX_XML_DEPTH + 1)}`;
    expect(() => parseXml(deep)).toThrow(`elements nest deeper than ${MAX_XML_DEPTH} levels`);
    expect(() => parseXml(`${'<d>'.repeat(MAX_XML_DEPTH)}${'</d>'.repeat(MAX_XML_DEPTH)}`)).not.toThrow();
    let error: unknown;
    try {
      parseXml('<r><a></r>');
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(XmlError);
    expect((error as Error).message).toMatch(/^1:\d+: /);
    expect(() => parseXml('')).toThrow(XmlError);
  });
});

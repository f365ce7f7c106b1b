import { describe, expect, it } from '@jest/globals';
import { leastCpuMs } from '../../../test/harness/cpu-cost.js';
import { faultOf, readAnswer, SoapEnvelopeError, templateProblem } from './envelope.js';

/** What an answer says (src/connectors/soap/envelope.ts), and what a page may not be. */
const envelope = (inner: string) => `<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>${inner}</s:Body></s:Envelope>`;
const call = { records: 'Partner', stop: { flag: 'LastPage', when: 'true' } };

describe('readAnswer and faultOf', () => {
  it('reads the records, the stop flag and a Fault', async () => {
    const answer = await readAnswer(envelope('<r:Out xmlns:r="urn:r"><r:Partner><r:id>1</r:id></r:Partner><r:Partner id="2"/><r:LastPage> true </r:LastPage></r:Out>'), call);
    expect(answer).toEqual({ records: [{ id: '1' }, { '@id': '2' }], flag: 'true' });
    const fault = envelope('<s:Fault><faultcode>s:Server</faultcode><faultstring> no such partner </faultstring></s:Fault>');
    expect(await readAnswer(fault, call)).toEqual({ records: [], fault: 'no such partner' });
    expect(faultOf(fault)).toBe('no such partner');
    expect(faultOf(envelope('<r/>'))).toBeUndefined();
    expect(faultOf('<html>Bad gateway')).toBeUndefined();
  });

  it('names the code of a Fault whose fault string or Reason is empty, as of one without any', async () => {
    // An empty string ended the run's message in 'answered a Fault (HTTP 500): ' and nothing, the code left out.
    for (const inner of ['<faultstring/>', '<faultstring>  </faultstring>', '<faultstring><b>x</b></faultstring>']) {
      const fault = envelope(`<s:Fault><faultcode>s:Client</faultcode>${inner}</s:Fault>`);
      expect(await readAnswer(fault, call)).toEqual({ records: [], fault: 'fault without a reason (code s:Client)' });
      expect(faultOf(fault)).toBe('fault without a reason (code s:Client)');
    }
    const v12 = envelope('<s:Fault><s:Code><s:Value>s:Receiver</s:Value></s:Code><s:Reason><s:Text xml:lang="en"></s:Text></s:Reason></s:Fault>');
    expect(faultOf(v12)).toBe('fault without a reason (code s:Receiver)');
    // Cut before its end (only the start of an error answer is read): no code to name.
    expect(faultOf(`<s:Envelope><s:Body><s:Fault><faultcode>s:Client</faultcode><faultstring></faultstring>${'<Text '.repeat(5)}`)).toBe('fault without a reason');
  });

  it('names by local name only, as docs/connectors.md "Namespaces" states: no URI tells elements apart, an undeclared prefix is read', async () => {
    // Both readers (the plain one, and saxes for a document with a comment) read it alike.
    for (const extra of ['', '<!-- c -->']) {
      const text = `<e:Envelope xmlns:e="urn:not-soap"><e:Body>${extra}<x:Out><a:Partner xmlns:a="urn:a" xmlns:b="urn:b" a:code="1" b:code="2"><a:id>1</a:id><b:id>2</b:id><q:Partner><id>9</id></q:Partner></a:Partner><z:Partner><id>3</id></z:Partner><r:Fault xmlns:r="urn:r"/></x:Out></e:Body></e:Envelope>`;
      expect(await readAnswer(text, { records: 'Partner' })).toEqual({ records: [{ '@code': '2', id: ['1', '2'], Partner: { id: '9' } }, { id: '3' }] });
    }
    // A Fault directly in the Body is one whatever its namespace.
    expect(await readAnswer('<Envelope><Body><r:Fault xmlns:r="urn:r"><faultstring>f</faultstring></r:Fault></Body></Envelope>', call)).toEqual({ records: [], fault: 'f' });
  });

  it('templateProblem: an & that starts no reference is named where it is (not in CDATA, a comment or a PI), a deep body refused at the bound', () => {
    const paging = ['page_size', 'start_row'];
    expect(templateProblem('<Q>\n  <R>AT&T {{page_size}}</R></Q>', paging, '1.1')).toBe('2:8: an & that starts no entity or character reference (write &amp; for the character)');
    expect(templateProblem('<Q a="&amp;&#38;&#x26;"><![CDATA[a & b]]><!-- x & y --><?p a & b?>{{start_row}}</Q>', paging, '1.1')).toBeUndefined();
    // saxes resolves each prefix up the open elements: a body of 33,000 open elements took 25 s.
    const started = performance.now();
    expect(templateProblem(`<a>${'<b>'.repeat(33_000)}`, paging, '1.2')).toMatch(/^1:\d+: elements nest deeper than 64 levels$/);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(templateProblem(`${'<b>'.repeat(64)}${'</b>'.repeat(64)}`, paging, '1.2')).toBeUndefined();
  });

  it('refuses what is not a SOAP envelope, saying why', async () => {
    await expect(readAnswer('<r><a></r>', call)).rejects.toThrow(/^the body is not well-formed XML \(1:\d+: /);
    await expect(readAnswer('<Other/>', call)).rejects.toThrow('the body is XML but not a SOAP envelope (root element Other)');
    await expect(readAnswer('<s:Envelope xmlns:s="urn:s"/>', call)).rejects.toThrow('the SOAP envelope has no Body');
  });

  it('reads the fault string of a cut error answer in time linear in its length, whatever tags it repeats', async () => {
    // An unclosed `<Text` (or `<faultstring`) again and again, to the 64 KiB read of an error answer:
    // a search for the tag's end that ran past the next `<` scanned to the end from each of them
    // (half a second of the event loop per 64 KiB, twice per answer in a run).
    // Timed against the same answer at an eighth of its length (processor time, the least of a few runs):
    // linear is about 8 times it, the quadratic search was 64 times.
    const cut = (tag: string, chars: number) => `<s:Envelope><s:Body><s:Fault>${tag.repeat(Math.floor(chars / tag.length))}`;
    for (const tag of ['<Text', '<a:faultstring']) {
      expect(faultOf(cut(tag, 65_536))).toBe('fault without a reason (its answer was cut before one)');
      const eighth = await leastCpuMs(() => faultOf(cut(tag, 8_192)), { repeat: 10 });
      const whole = await leastCpuMs(() => faultOf(cut(tag, 65_536)), { repeat: 10 });
      expect(whole).toBeLessThan(eighth * 8 * 3);
    }
    expect(faultOf(`<s:Envelope><s:Body><s:Fault><faultstring a=">">no &amp; such</faultstring>`)).toBe('no & such');
  });

  it('refuses an answer with more elements than a page may build, naming the limit', async () => {
    const small = envelope(`<R>${'<Partner/>'.repeat(20)}</R>`);
    await expect(readAnswer(small, call, { maxElements: 20 })).rejects.toThrow(
      new SoapEnvelopeError('the SOAP answer has more than 20 elements; a page is refused past 20 (lower pagination.page_size)'),
    );
    await expect(readAnswer(small, call, { maxElements: 23 })).resolves.toMatchObject({ records: expect.any(Array) });

    // The tester's answer, at a sixteenth of its size, against the real limit.
    // (That the parse stops at the limit, in time, is xml.test.ts's: against a legal document of the limit's size.)
    const answer = readAnswer(envelope(`<R>${'<a/>'.repeat(1_100_000)}</R>`), call);
    await expect(answer).rejects.toThrow(SoapEnvelopeError);
    await expect(answer).rejects.toThrow(/^the SOAP answer has more than 1,000,000 elements; /);
  });

  it('refuses an answer holding a record of more than 10,000 fields, at any level of it, before building the rest', async () => {
    // One record of a million distinct child names (15 MB) held the shared event loop for 3 s in a run,
    // building and sorting its JSON (the hub's readiness answered 503 meanwhile).
    const fields = (n: number) => Array.from({ length: n }, (_, i) => `<f${i}>v</f${i}>`).join('');
    const wide = envelope(`<Partner><id>1</id>${fields(10_000)}</Partner>`);
    await expect(readAnswer(wide, call)).rejects.toThrow(
      new SoapEnvelopeError('a record holds an element (Partner) of more than 10,000 distinct child element and attribute names; the page is refused'),
    );
    await expect(readAnswer(envelope(`<Partner>${fields(10_000)}</Partner>`), call)).resolves.toMatchObject({ records: [expect.any(Object)] });
    const attributed = envelope(`<Partner${Array.from({ length: 10 }, (_, i) => ` a${i}="v"`).join('')}>${fields(9_991)}</Partner>`);
    await expect(readAnswer(attributed, call)).rejects.toThrow(/of more than 10,000 distinct child element and attribute names/);
    const nested = envelope(`<Partner><id>1</id><extra>${fields(10_001)}</extra></Partner>`);
    await expect(readAnswer(nested, call)).rejects.toThrow('a record holds an element (extra) of more than 10,000 distinct child element and attribute names; the page is refused');
    // Repeated names are one field each (an array): a list of a million records is no wide record.
    await expect(readAnswer(envelope(`<L>${'<Partner><id>1</id></Partner>'.repeat(20_000)}</L>`), call)).resolves.toMatchObject({ records: expect.any(Array) });
  });

  it('refuses an answer with more attributes than a page may build, naming the limit', async () => {
    const small = envelope(`<R>${'<Partner id="1"/>'.repeat(20)}</R>`);
    await expect(readAnswer(small, call, { maxAttributes: 19 })).rejects.toThrow(
      new SoapEnvelopeError('the SOAP answer has more than 19 attributes; a page is refused past 19 (lower pagination.page_size)'),
    );
    // The xmlns:s declaration is one of them.
    await expect(readAnswer(small, call, { maxAttributes: 21 })).resolves.toMatchObject({ records: expect.any(Array) });
  });
});

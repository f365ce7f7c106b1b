import { SaxesParser } from 'saxes';

/**
 * A small, bounded XML tree built with saxes (a streaming, non-validating parser): elements and
 * attributes are matched by local name, whatever their prefix, and nothing beyond the
 * document is ever read. A DOCTYPE is refused outright, so no DTD is processed and no entity other
 * than the five predefined ones and character references exists: a billion-laughs document and an
 * external entity pointing at a local file both end as a clear parse error, before any expansion.
 * What one document may build is bounded too (MAX_XML_DEPTH levels, MAX_XML_ELEMENTS elements), and
 * a page is parsed in slices so that the event loop keeps turning while it is read. A plain document (what SOAP
 * services answer: elements, attributes, text and the predefined entities) is read by a reader of this module's
 * own, in about half the time saxes takes to build the same tree; saxes reads every other document from its
 * start, and is the one that says what is wrong with one and where.
 */

export interface XmlElement {
  /** The name without its prefix. */
  local: string;
  /** Attributes by local name (namespace declarations left out). */
  attributes: Record<string, string>;
  children: XmlElement[];
  /** The element's own character data (text and CDATA directly inside it), concatenated. */
  text: string;
}

/** Deepest element nesting accepted; a deeper document is refused rather than walked. */
export const MAX_XML_DEPTH = 64;

/**
 * Most elements one document may hold (a SOAP page: 500 records of 50 fields is 25,000). A larger
 * document is refused as soon as its element past the limit opens, before the rest is read or built.
 */
export const MAX_XML_ELEMENTS = 1_000_000;

/** Most attributes one element may have (as JAXP's elementAttributeLimit): past it the document is refused. */
export const MAX_XML_ELEMENT_ATTRIBUTES = 10_000;

/** Most attributes one document may hold (namespace declarations included). */
export const MAX_XML_ATTRIBUTES = 1_000_000;

/**
 * Most keys toJson gives one element's object: its distinct child names and its attributes. Elements and
 * attributes are bounded per document, but one element of a million distinct children became one object
 * of a million keys, built and then sorted (for the row's hash) without a turn of the event loop: 3 s.
 */
export const MAX_JSON_NAMES = 10_000;

/**
 * Characters handed to the parser at a time; parseXml yields to the event loop between slices. A
 * slice of 256 Ki characters takes a few ms to parse and build (about 30 ms at worst, with the
 * collector's work); 1 Mi took up to 90 ms. The yields cost nothing measurable (252 on a 63 MiB page).
 */
export const XML_SLICE_CHARS = 256 * 1024;

export interface XmlLimits {
  /** Deepest nesting accepted (default MAX_XML_DEPTH). */
  maxDepth?: number;
  /** Most elements accepted (default MAX_XML_ELEMENTS). */
  maxElements?: number;
  /** Most attributes accepted (default MAX_XML_ATTRIBUTES). */
  maxAttributes?: number;
}

export class XmlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'XmlError';
  }
}

/** A document with more of something (elements, attributes) than its limit: refused before the rest of it is read. */
export class XmlTooLargeError extends XmlError {
  constructor(
    readonly limit: number,
    readonly counted: 'elements' | 'attributes',
  ) {
    super(`the document has more than ${limit.toLocaleString('en-US')} ${counted}`);
    this.name = 'XmlTooLargeError';
  }
}

/** A document with more elements than the limit: refused as soon as its element past the limit opens. */
export class XmlTooManyElementsError extends XmlTooLargeError {
  constructor(maxElements: number) {
    super(maxElements, 'elements');
    this.name = 'XmlTooManyElementsError';
  }
}

/** A document with more attributes than the limit: refused as soon as its attribute past the limit is read. */
export class XmlTooManyAttributesError extends XmlTooLargeError {
  constructor(maxAttributes: number) {
    super(maxAttributes, 'attributes');
    this.name = 'XmlTooManyAttributesError';
  }
}

/** An element whose JSON object would have more than MAX_JSON_NAMES keys (toJson). */
export class XmlTooWideError extends XmlError {
  constructor(
    readonly element: string,
    readonly maxNames: number,
  ) {
    super(`element ${element} has more than ${maxNames.toLocaleString('en-US')} distinct child element and attribute names`);
    this.name = 'XmlTooWideError';
  }
}

/** The attributes of every element without any (most of a SOAP answer's): one frozen object, never written. */
const NO_ATTRIBUTES: Record<string, string> = Object.freeze({}) as Record<string, string>;

/** Distinct element and attribute names whose local part one parse keeps (a document of generated names cannot grow it past this). */
const MAX_CACHED_NAMES = 1024;

/** A qualified name without its prefix. */
const localName = (name: string): string => {
  const colon = name.indexOf(':');
  return colon < 0 ? name : name.slice(colon + 1);
};

/**
 * Parses a whole document into its root element; rejects with XmlError for anything not well-formed
 * (the message starts with the line and column), too deep, or with too many elements. The text is
 * fed in slices of XML_SLICE_CHARS with a turn of the event loop between them, so a large page
 * never holds the loop for more than one slice; the first error ends the parse at once.
 */
export async function parseXml(text: string, limits: XmlLimits = {}): Promise<XmlElement> {
  // Most answers are plain XML (elements, attributes, text, the predefined entities): read by plainTree, in about
  // half the time saxes takes. What it leaves (anything else, or anything not well-formed) is saxes's, from the start.
  const plain = plainTree(text, limits);
  let read = plain(XML_SLICE_CHARS);
  while (read === MORE) {
    await new Promise<void>((resolve) => setImmediate(resolve));
    read = plain(XML_SLICE_CHARS);
  }
  if (read !== NOT_PLAIN) return read;
  const builder = treeBuilder(limits);
  for (let at = 0; at < text.length; at += XML_SLICE_CHARS) {
    if (at > 0) await new Promise<void>((resolve) => setImmediate(resolve));
    builder.write(text.slice(at, at + XML_SLICE_CHARS));
  }
  return builder.close();
}

/**
 * parseXml in one synchronous pass, for small texts only (an error answer's first 64 KiB): it holds
 * the event loop for the whole parse. The same limits apply.
 */
export function parseXmlSync(text: string, limits: XmlLimits = {}): XmlElement {
  const builder = treeBuilder(limits);
  builder.write(text);
  return builder.close();
}

/** A tree built from the text written to it, slice by slice; any failure throws XmlError. */
function treeBuilder({ maxDepth = MAX_XML_DEPTH, maxElements = MAX_XML_ELEMENTS, maxAttributes = MAX_XML_ATTRIBUTES }: XmlLimits): {
  write(slice: string): void;
  close(): XmlElement;
} {
  // Without namespace processing (it costs about a third of the parse): elements and attributes
  // are matched by local name whatever their prefix, so the URIs are never needed. Lines and
  // columns are counted by saxes whatever `position` says; it only puts them in its own messages.
  const parser = new SaxesParser({ xmlns: false, position: true });
  const stack: XmlElement[] = [];
  let root: XmlElement | undefined;
  let elements = 0;
  /** Attributes read in the document, and in the tag being read. */
  let attributeCount = 0;
  let tagAttributes = 0;
  const localOf = localNames();
  const fail = (message: string): never => {
    throw new XmlError(`${parser.line}:${parser.column}: ${message}`);
  };

  // Thrown from a handler, an error leaves saxes at once: nothing past the first failure is read.
  parser.on('error', (err) => {
    throw new XmlError(err.message);
  });
  parser.on('doctype', () => fail('a DOCTYPE is not accepted (no DTDs, no entity declarations)'));
  // Counted as each is read: saxes keeps a tag's attributes until its end, then checks and builds them all at once.
  parser.on('opentagstart', () => {
    tagAttributes = 0;
  });
  parser.on('attribute', () => {
    if (++attributeCount > maxAttributes) throw new XmlTooManyAttributesError(maxAttributes);
    if (++tagAttributes > MAX_XML_ELEMENT_ATTRIBUTES) fail(`an element has more than ${MAX_XML_ELEMENT_ATTRIBUTES.toLocaleString('en-US')} attributes`);
  });
  parser.on('opentag', (tag) => {
    if (++elements > maxElements) throw new XmlTooManyElementsError(maxElements);
    if (stack.length >= maxDepth) fail(`elements nest deeper than ${maxDepth} levels`);
    let attributes = NO_ATTRIBUTES;
    for (const name in tag.attributes) {
      if (name === 'xmlns' || name.startsWith('xmlns:')) continue;
      if (attributes === NO_ATTRIBUTES) attributes = {};
      attributes[localOf(name)] = tag.attributes[name] as string;
    }
    const element: XmlElement = { local: localOf(tag.name), attributes, children: [], text: '' };
    const parent = stack[stack.length - 1];
    if (parent) parent.children.push(element);
    else root = element;
    stack.push(element);
  });
  parser.on('closetag', () => {
    stack.pop();
  });
  const addText = (chunk: string) => {
    const current = stack[stack.length - 1];
    if (current) current.text += chunk;
  };
  parser.on('text', addText);
  parser.on('cdata', addText);

  const run = (chunk: string | null) => {
    try {
      parser.write(chunk);
    } catch (err) {
      throw err instanceof XmlError ? err : new XmlError((err as Error).message);
    }
  };
  return {
    write: (slice) => run(slice),
    close: () => {
      run(null);
      if (!root) throw new XmlError('the document has no root element');
      return root;
    },
  };
}

/** Each distinct qualified name's local part, cut once: a page repeats a few names thousands of times. */
function localNames(): (name: string) => string {
  const locals = new Map<string, string>();
  return (name) => {
    let local = locals.get(name);
    if (local === undefined) {
      local = localName(name);
      if (locals.size < MAX_CACHED_NAMES) locals.set(name, local);
    }
    return local;
  };
}

/** plainTree's answers besides the root: more to read (after a turn of the event loop), or not plain XML. */
const MORE = 'more';
const NOT_PLAIN = 'not plain';

/** ASCII characters of names (`:`, letters, `_`; digits, `-`, `.` after the first): 1 may start a name, 2 may follow. */
const NAME_CHARS = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  const ch = String.fromCharCode(c);
  if (/[A-Za-z_:]/.test(ch)) NAME_CHARS[c] = 1;
  else if (/[0-9.-]/.test(ch)) NAME_CHARS[c] = 2;
}
const isNameStart = (c: number) => c < 128 && NAME_CHARS[c] === 1;
const isNameChar = (c: number) => c < 128 && NAME_CHARS[c] !== 0;
/** XML's white space. */
const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x09 || c === 0x0d;
/** Most attributes of one element the plain reader reads (checking each against those before it); an element of more is saxes's. */
const PLAIN_TAG_ATTRIBUTES = 64;

/** An XML 1.0 declaration at the document's start (version 1.0; an encoding name; standalone). */
const XML_DECLARATION =
  /<\?xml[ \t\n\r]+version[ \t\n\r]*=[ \t\n\r]*(["'])1\.0\1(?:[ \t\n\r]+encoding[ \t\n\r]*=[ \t\n\r]*(["'])[A-Za-z][A-Za-z0-9._-]*\2)?(?:[ \t\n\r]+standalone[ \t\n\r]*=[ \t\n\r]*(["'])(?:yes|no)\3)?[ \t\n\r]*\?>/y;
const PREDEFINED = new Map([
  ['lt', '<'],
  ['gt', '>'],
  ['amp', '&'],
  ['quot', '"'],
  ['apos', "'"],
]);
/** XML 1.0's Char production. */
const isXmlChar = (c: number) => c === 0x09 || c === 0x0a || c === 0x0d || (c >= 0x20 && c <= 0xd7ff) || (c >= 0xe000 && c <= 0xfffd) || (c >= 0x10000 && c <= 0x10ffff);

/**
 * The tree of a plain XML document, read by hand: an XML declaration (version 1.0), elements with ASCII names,
 * attributes whose values hold no `&`, `<`, tab or line break, and text with the predefined entities and character
 * references (a carriage return in it read as XML reads it: CR LF or a lone CR is a line feed); well-formed (one
 * root, tags closed in order, no attribute twice, only white space outside the root, no `]]>`, only XML
 * characters), within the same limits. Anything else (a comment, CDATA, a processing instruction, a DOCTYPE,
 * another entity, a non-ASCII name, any error) is NOT_PLAIN, as soon as
 * it is met: saxes then reads the document from its start and builds the same tree, or says what is wrong and
 * where (so is an element of more than PLAIN_TAG_ATTRIBUTES attributes). Too many elements throws
 * XmlTooManyElementsError as saxes would, at the same element, and too many attributes XmlTooManyAttributesError at
 * the same attribute: all before it is
 * plain and well-formed. Each call reads about `chars` characters (whole tags, text cut anywhere) and answers the
 * root, MORE, or NOT_PLAIN.
 */
function plainTree(text: string, { maxDepth = MAX_XML_DEPTH, maxElements = MAX_XML_ELEMENTS, maxAttributes = MAX_XML_ATTRIBUTES }: XmlLimits): (chars: number) => XmlElement | typeof MORE | typeof NOT_PLAIN {
  const end = text.length;
  const stack: XmlElement[] = [];
  /** The open elements' qualified names (a closing tag repeats it). */
  const names: string[] = [];
  let root: XmlElement | undefined;
  let elements = 0;
  let attributeCount = 0;
  const localOf = localNames();
  /** The name of the tag read last, whether it closed an element, and what name followed each name last time. */
  let last = '';
  let closedLast = false;
  const afterOpen = new Map<string, string>();
  const afterClose = new Map<string, string>();
  XML_DECLARATION.lastIndex = 0;
  let i = XML_DECLARATION.test(text) ? XML_DECLARATION.lastIndex : 0;

  /** The start tag at i (`<` and a name's first character); false: not plain. */
  const openTag = (): boolean => {
    if (root !== undefined && stack.length === 0) return false;
    // The name that followed the same tag last time (a page repeats its records' sequence of tags), else read.
    const after = closedLast ? afterClose : afterOpen;
    let name = after.get(last);
    let j = i + 1;
    if (name !== undefined && text.startsWith(name, j) && !isNameChar(text.charCodeAt(j + name.length))) j += name.length;
    else {
      j++;
      while (j < end && isNameChar(text.charCodeAt(j))) j++;
      name = text.slice(i + 1, j);
      if (after.size < MAX_CACHED_NAMES) after.set(last, name);
    }
    let attributes = NO_ATTRIBUTES;
    let seen: string[] | undefined;
    let closed = false;
    for (;;) {
      let c = text.charCodeAt(j);
      if (c === 0x3e) break;
      if (c === 0x2f) {
        if (text.charCodeAt(j + 1) !== 0x3e) return false;
        closed = true;
        j++;
        break;
      }
      if (!isSpace(c)) return false;
      do c = text.charCodeAt(++j);
      while (isSpace(c));
      if (c === 0x3e || c === 0x2f) continue;
      if (!isNameStart(c)) return false;
      const nameStart = j;
      while (++j < end && isNameChar(text.charCodeAt(j)));
      const attribute = text.slice(nameStart, j);
      while (isSpace(text.charCodeAt(j))) j++;
      if (text.charCodeAt(j) !== 0x3d) return false;
      while (isSpace(text.charCodeAt(++j)));
      const quote = text.charCodeAt(j);
      if (quote !== 0x22 && quote !== 0x27) return false;
      const valueStart = j + 1;
      for (j = valueStart; j < end; j++) {
        const v = text.charCodeAt(j);
        if (v === quote) break;
        if (v < 0x20 || v === 0x26 || v === 0x3c || v >= 0xd800) return false;
      }
      if (j >= end) return false;
      const value = text.slice(valueStart, j++);
      seen ??= [];
      if (seen.includes(attribute) || seen.length === PLAIN_TAG_ATTRIBUTES) return false;
      seen.push(attribute);
      if (++attributeCount > maxAttributes) throw new XmlTooManyAttributesError(maxAttributes);
      if (attribute === 'xmlns' || attribute.startsWith('xmlns:')) continue;
      if (attributes === NO_ATTRIBUTES) attributes = {};
      attributes[localOf(attribute)] = value;
    }
    if (++elements > maxElements) throw new XmlTooManyElementsError(maxElements);
    if (stack.length >= maxDepth) return false;
    const element: XmlElement = { local: localOf(name), attributes, children: [], text: '' };
    const parent = stack[stack.length - 1];
    if (parent) parent.children.push(element);
    else root = element;
    if (!closed) {
      stack.push(element);
      names.push(name);
    }
    last = name;
    closedLast = closed;
    i = j + 1;
    return true;
  };

  /** The end tag at i (`</`) of the element open last; false: not plain. */
  const closeTag = (): boolean => {
    const name = names[names.length - 1];
    if (name === undefined || !text.startsWith(name, i + 2)) return false;
    let j = i + 2 + name.length;
    while (isSpace(text.charCodeAt(j))) j++;
    if (text.charCodeAt(j) !== 0x3e) return false;
    stack.pop();
    names.pop();
    last = name;
    closedLast = true;
    i = j + 1;
    return true;
  };

  /** Character data at i, up to the next tag or about `until`; false: not plain. */
  const characters = (until: number): boolean => {
    const current = stack[stack.length - 1];
    let j = i;
    let from = i;
    let decoded = '';
    while (j < end && j < until) {
      const c = text.charCodeAt(j);
      if (c === 0x3c) break;
      if (current === undefined) {
        // Outside the root: white space only.
        if (!isSpace(c)) return false;
      } else if (c === 0x26) {
        const semicolon = text.indexOf(';', j + 1);
        if (semicolon < 0 || semicolon > j + 10) return false;
        const reference = text.slice(j + 1, semicolon);
        let value = PREDEFINED.get(reference);
        if (value === undefined) {
          const code = /^#[0-9]{1,7}$/.test(reference) ? Number(reference.slice(1)) : /^#x[0-9a-fA-F]{1,6}$/.test(reference) ? Number.parseInt(reference.slice(2), 16) : Number.NaN;
          if (!isXmlChar(code)) return false;
          value = String.fromCodePoint(code);
        }
        decoded += text.slice(from, j) + value;
        j = from = semicolon + 1;
        continue;
      } else if (c < 0x20) {
        if (c === 0x0d) {
          // A carriage return, alone or before a line feed, is read as a line feed (XML's end-of-line handling).
          decoded += `${text.slice(from, j)}\n`;
          j = from = text.charCodeAt(j + 1) === 0x0a ? j + 2 : j + 1;
          continue;
        }
        if (c !== 0x09 && c !== 0x0a) return false;
      } else if (c === 0x5d) {
        if (text.startsWith(']]>', j)) return false;
      } else if (c >= 0xd800) {
        if (c <= 0xdbff) {
          const low = text.charCodeAt(j + 1);
          if (!(low >= 0xdc00 && low <= 0xdfff)) return false;
          j++;
        } else if (c <= 0xdfff || c >= 0xfffe) return false;
      }
      j++;
    }
    if (current !== undefined) current.text += from === i ? text.slice(i, j) : decoded + text.slice(from, j);
    i = j;
    return true;
  };

  return (chars) => {
    const until = i + chars;
    while (i < end) {
      if (i >= until) return MORE;
      if (text.charCodeAt(i) !== 0x3c) {
        if (!characters(until)) return NOT_PLAIN;
        continue;
      }
      const next = text.charCodeAt(i + 1);
      if (!(next === 0x2f ? closeTag() : isNameStart(next) && openTag())) return NOT_PLAIN;
    }
    return root !== undefined && stack.length === 0 ? root : NOT_PLAIN;
  };
}

/** Every element with this local name under `from` (not `from` itself), in document order. */
export function descendants(from: XmlElement, local: string): XmlElement[] {
  const found: XmlElement[] = [];
  const walk = (element: XmlElement) => {
    for (const child of element.children) {
      if (child.local === local) found.push(child);
      else walk(child);
    }
  };
  walk(from);
  return found;
}

/** The first element with this local name under `from`, depth first, or undefined. */
export function firstDescendant(from: XmlElement, local: string): XmlElement | undefined {
  for (const child of from.children) {
    if (child.local === local) return child;
    const inner = firstDescendant(child, local);
    if (inner) return inner;
  }
  return undefined;
}

export type XmlJson = string | { [name: string]: XmlJson | XmlJson[] };

/**
 * An element as JSON: its children by local name (a repeated name becomes an array), its attributes
 * as `@name`, its text as `#text` beside them; an element with neither children nor attributes is
 * its text. `asObject` keeps even a text-only element an object (records are always objects).
 * Throws XmlTooWideError for an element (this one or one inside it) of more than MAX_JSON_NAMES keys.
 */
export function toJson(element: XmlElement, asObject = false): XmlJson {
  const attributes = element.attributes === NO_ATTRIBUTES ? [] : Object.entries(element.attributes);
  if (element.children.length === 0 && attributes.length === 0 && !asObject) return element.text;
  // A plain object (fast properties, unlike a prototype-less one: about a tenth of a SOAP run's CPU
  // goes to reading records); a name is looked up as an own key only, so `constructor` or
  // `toString` is a key like any other, and `__proto__` is defined as an own property.
  const out: { [name: string]: XmlJson | XmlJson[] } = {};
  for (const [name, value] of attributes) own(out, `@${name}`, value);
  let names = attributes.length;
  for (const child of element.children) {
    const value = toJson(child);
    const name = child.local;
    const known = out[name];
    if (known === undefined || !Object.hasOwn(out, name)) {
      if (++names > MAX_JSON_NAMES) throw new XmlTooWideError(element.local, MAX_JSON_NAMES);
      own(out, name, value);
    }
    else if (Array.isArray(known)) known.push(value);
    else out[name] = [known, value];
  }
  if (element.children.length === 0 ? element.text !== '' : element.text.trim() !== '') out['#text'] = element.text;
  return out;
}

/** Sets a new own key (`__proto__` included, as a plain data property). */
function own(out: { [name: string]: XmlJson | XmlJson[] }, name: string, value: XmlJson | XmlJson[]): void {
  if (name === '__proto__') Object.defineProperty(out, name, { value, enumerable: true, writable: true, configurable: true });
  else out[name] = value;
}

import { SaxesParser } from 'saxes';

/**
 * A small, bounded XML tree built with saxes (a streaming, non-validating parser): elements and
 * attributes are matched by local name, whatever their prefix, and nothing beyond the
 * document is ever read. A DOCTYPE is refused outright, so no DTD is processed and no entity other
 * than the five predefined ones and character references exists: a billion-laughs document and an
 * external entity pointing at a local file both end as a clear parse error, before any expansion.
 * What one document may build is bounded too (MAX_XML_DEPTH levels, MAX_XML_ELEMENTS elements), and
 * a page is parsed in slices so that the event loop keeps turning while it is read.
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
}

export class XmlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'XmlError';
  }
}

/** A document with more elements than the limit: refused before the rest of it is read. */
export class XmlTooManyElementsError extends XmlError {
  constructor(readonly maxElements: number) {
    super(`the document has more than ${maxElements.toLocaleString('en-US')} elements`);
    this.name = 'XmlTooManyElementsError';
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
function treeBuilder({ maxDepth = MAX_XML_DEPTH, maxElements = MAX_XML_ELEMENTS }: XmlLimits): {
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
  // Each distinct qualified name's local part, cut once: a page repeats a few names thousands of times.
  const locals = new Map<string, string>();
  const localOf = (name: string): string => {
    let local = locals.get(name);
    if (local === undefined) {
      local = localName(name);
      if (locals.size < MAX_CACHED_NAMES) locals.set(name, local);
    }
    return local;
  };
  const fail = (message: string): never => {
    throw new XmlError(`${parser.line}:${parser.column}: ${message}`);
  };

  // Thrown from a handler, an error leaves saxes at once: nothing past the first failure is read.
  parser.on('error', (err) => {
    throw new XmlError(err.message);
  });
  parser.on('doctype', () => fail('a DOCTYPE is not accepted (no DTDs, no entity declarations)'));
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
 */
export function toJson(element: XmlElement, asObject = false): XmlJson {
  const attributes = element.attributes === NO_ATTRIBUTES ? [] : Object.entries(element.attributes);
  if (element.children.length === 0 && attributes.length === 0 && !asObject) return element.text;
  // A plain object (fast properties, unlike a prototype-less one: about a tenth of a SOAP run's CPU
  // goes to reading records); a name is looked up as an own key only, so `constructor` or
  // `toString` is a key like any other, and `__proto__` is defined as an own property.
  const out: { [name: string]: XmlJson | XmlJson[] } = {};
  for (const [name, value] of attributes) own(out, `@${name}`, value);
  for (const child of element.children) {
    const value = toJson(child);
    const name = child.local;
    const known = out[name];
    if (known === undefined || !Object.hasOwn(out, name)) own(out, name, value);
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

import { SaxesParser } from 'saxes';

/**
 * A small, bounded XML tree built with saxes (a streaming, non-validating parser): elements and
 * attributes are matched by local name, whatever their prefix, and nothing beyond the
 * document is ever read. A DOCTYPE is refused outright, so no DTD is processed and no entity other
 * than the five predefined ones and character references exists: a billion-laughs document and an
 * external entity pointing at a local file both end as a clear parse error, before any expansion.
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

export class XmlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'XmlError';
  }
}

/** A qualified name without its prefix. */
const localName = (name: string): string => {
  const colon = name.indexOf(':');
  return colon < 0 ? name : name.slice(colon + 1);
};

/**
 * Parses a whole document into its root element; throws XmlError for anything not well-formed.
 * Parsed without position tracking (it costs about a tenth of the parse on every page); a document
 * that fails is parsed again with positions, so that the message says where.
 */
export function parseXml(text: string, maxDepth = MAX_XML_DEPTH): XmlElement {
  const fast = parse(text, maxDepth, false);
  if (!(fast instanceof XmlError)) return fast;
  const positioned = parse(text, maxDepth, true);
  throw positioned instanceof XmlError ? positioned : fast;
}

function parse(text: string, maxDepth: number, position: boolean): XmlElement | XmlError {
  // Without namespace processing (it costs about a third of the parse): elements and attributes
  // are matched by local name whatever their prefix, so the URIs are never needed.
  const parser = new SaxesParser({ xmlns: false, position });
  const stack: XmlElement[] = [];
  let root: XmlElement | undefined;
  let failure: XmlError | undefined;
  const where = () => (position ? `${parser.line}:${parser.column}: ` : '');
  const fail = (message: string) => {
    failure ??= new XmlError(message);
  };

  parser.on('error', (err) => fail(err.message));
  parser.on('doctype', () => fail(`${where()}a DOCTYPE is not accepted (no DTDs, no entity declarations)`));
  parser.on('opentag', (tag) => {
    if (failure) return;
    if (stack.length >= maxDepth) return fail(`${where()}elements nest deeper than ${maxDepth} levels`);
    const attributes: Record<string, string> = {};
    for (const name in tag.attributes) {
      if (name === 'xmlns' || name.startsWith('xmlns:')) continue;
      attributes[localName(name)] = tag.attributes[name] as string;
    }
    const element: XmlElement = { local: localName(tag.name), attributes, children: [], text: '' };
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

  try {
    parser.write(text);
    if (!failure) parser.close();
  } catch (err) {
    fail((err as Error).message);
  }
  if (failure) return failure;
  if (!root) return new XmlError('the document has no root element');
  return root;
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
  const attributes = Object.entries(element.attributes);
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

import { type Document, Lexer, LineCounter, parseAllDocuments, parseDocument, type YAMLError } from 'yaml';
import { KUBECTL_MANIFEST } from './yaml.js';

/**
 * The largest YAML text the hub reads on a tenant's behalf (a manifest body, an OpenAPI document to
 * draft from): 1 MiB. The yaml package reads about 1 MB a second on this hub's machines, a hundred
 * times slower than `JSON.parse`, so the limit bounds what one text can hold the YAML reader's
 * thread for (yaml-reader.ts; never the event loop that serves every tenant) to seconds. A manifest is far smaller (and a
 * custom resource cannot exceed the 1.5 MiB Kubernetes stores); larger documents go as JSON, up to
 * `svc.http.body-limit`.
 */
export const MAX_YAML_BYTES = 1024 * 1024;

/**
 * What YAML text surely holds, found from its tokens before it is parsed (the yaml package's lexer is linear and
 * yields tokens one at a time; its parser and composer take some microseconds per node, seconds for a text of
 * 100,000 keys): whether it nests collections deeper than `maxDepth`, and whether it writes more than `maxKeys` keys
 * or opens more than `maxContainers` collections. It stops at the first bound passed, so a text built to pass them
 * costs no more than the part of it that does.
 *
 * Nesting: the yaml package's parser and composer take time that grows faster than the text with nesting written
 * compactly (a 2 MB body of `[[[…]]]` held the event loop for seconds before the depth check on the parsed value
 * could refuse it). Two compact forms nest without growing the indentation, and both are counted: flow collections
 * (each `[` or `{` opens a level until its `]` or `}`) and block indicators written on one line (`- - - x`, `? ? x`:
 * each `-` or `?` outside a flow collection opens a sequence or mapping inside the previous one). A flow collection
 * opened on a line after such indicators is inside them, so the two add up. Nesting by indentation alone is not
 * counted: its text grows with the square of its depth, and the parser refuses it past its own stack quickly.
 *
 * Keys: each `:` value indicator and each `?` key indicator belongs to one key of one mapping (duplicates included,
 * as the JSON count counts them), so there are at least as many keys as the larger of the two counts. Collections:
 * each flow collection, and each block indicator after the first on its line (it opens a collection inside the
 * one of the indicator before it). Block mappings and sequences opened by indentation are not counted.
 *
 * Nodes (`maxNodes`): scalars, quoted or not, aliases and flow collections, and a sequence item or explicit key with
 * none of these after it on its line (its value empty, or a block collection below), each a key or value of its own.
 *
 * So every count is a lower bound: what it refuses surely passes the bound; what it lets through is checked on the
 * parsed value (the JSON text a YAML body reads as) as before.
 */
export function scanYamlTokens(
  text: string,
  maxDepth: number,
  maxKeys = Number.POSITIVE_INFINITY,
  maxContainers = Number.POSITIVE_INFINITY,
  maxNodes = Number.POSITIVE_INFINITY,
): YamlScan {
  let flow = 0;
  let onLine = 0;
  let colons = 0;
  let questions = 0;
  let containers = 0;
  let nodes = 0;
  // A sequence item or key indicator whose value has not shown yet on its line.
  let item = false;
  const over = (what: keyof YamlScan): YamlScan => ({ tooDeep: what === 'tooDeep', tooManyKeys: what === 'tooManyKeys', tooManyContainers: what === 'tooManyContainers', tooManyNodes: what === 'tooManyNodes' });
  // The token after the lexer's scalar mark is the scalar's text (a block scalar's may begin with a quote).
  let scalarText = false;
  for (const token of new Lexer().lex(text)) {
    if (scalarText) {
      scalarText = false;
      continue;
    }
    scalarText = token === '\x1f';
    // A node: a plain or block scalar (the lexer marks its start), a quoted one, an alias or a flow collection; and a
    // sequence item (`-`) or explicit key (`?`) with nothing of these after it on its line (empty, or a block
    // collection on the lines below).
    const first = token.charCodeAt(0);
    const value = first === 0x1f || first === 0x22 || first === 0x27 || first === 0x2a || token === '[' || token === '{';
    const indicator = token === '-' || token === '?';
    // A block scalar's header (`|`, `>`, with its indicators) is the item's value: the scalar mark after it is counted.
    if ((first === 0x7c || first === 0x3e) && item) item = false;
    if ((value || indicator || token === '\n' || token === '\r\n') && item) {
      item = false;
      if (!value && ++nodes > maxNodes) return over('tooManyNodes');
    }
    if (value && ++nodes > maxNodes) return over('tooManyNodes');
    if (indicator && flow === 0) item = true;
    switch (token) {
      case '[':
      case '{':
        flow += 1;
        if (flow + onLine > maxDepth) return over('tooDeep');
        if (++containers > maxContainers) return over('tooManyContainers');
        break;
      case ']':
      case '}':
        if (flow > 0) flow -= 1;
        break;
      case ':':
        if (++colons > maxKeys) return over('tooManyKeys');
        break;
      case '-':
      case '?':
        if (token === '?' && ++questions > maxKeys) return over('tooManyKeys');
        if (flow === 0) {
          onLine += 1;
          if (onLine > maxDepth) return over('tooDeep');
          if (onLine > 1 && ++containers > maxContainers) return over('tooManyContainers');
        }
        break;
      case '\n':
      case '\r\n':
        if (flow === 0) onLine = 0;
        break;
      default:
        // A document marker ends whatever a broken document left open.
        if (token === '---' || token === '...') {
          flow = 0;
          onLine = 0;
        }
    }
  }
  return { tooDeep: false, tooManyKeys: false, tooManyContainers: false, tooManyNodes: false };
}

/** Which bound of scanYamlTokens a YAML text surely passes (at most one: the scan stops there). */
export interface YamlScan {
  tooDeep: boolean;
  tooManyKeys: boolean;
  tooManyContainers: boolean;
  tooManyNodes: boolean;
}

/**
 * Most nodes a YAML manifest writes (keys and values: scalars, aliases, sequence items and flow collections;
 * scanYamlTokens): the yaml package reads some 10 µs a node on a loaded machine, so a text of 200,000 sequence items (`- 1`, 1 MiB,
 * under every JSON bound) held the YAML reader, and every other tenant's YAML behind it, for the whole
 * `svc.http.yaml-read-timeout` (10 s). A manifest writes a few thousand; one this large goes as JSON.
 */
export const MAX_YAML_NODES = 120_000;

/**
 * Most nodes a YAML document that is not a manifest writes (an OpenAPI description to draft a connector from;
 * scanYamlTokens counts them). Such a document is larger than a manifest: a realistic OpenAPI 3 description of
 * 600 paths and 600 schemas, 0.95 MB of block YAML, writes some 70,000 nodes (40,000 keys), and a 1 MiB one of
 * terser names more, so MAX_YAML_NODES would refuse real ones. Twice what 1 MiB of such YAML writes: at some 10 µs
 * a node, a read holds the YAML reader's thread (never the event loop) two to three seconds at most, within
 * `svc.http.yaml-read-timeout`; a text built of tiny nodes (`[1,1,…]`, 500,000 in 1 MiB) is refused from its
 * tokens before it is parsed. A larger description goes as JSON (read up to 5 MiB).
 */
export const MAX_YAML_DOCUMENT_NODES = 250_000;

/** Whether YAML text surely nests collections deeper than `max` (scanYamlTokens). */
export function yamlNestsDeeperThan(text: string, max: number): boolean {
  return scanYamlTokens(text, max).tooDeep;
}

/**
 * Marks each error and warning of a parsed document with its line and column and the line it is on,
 * as the yaml package's own `prettyErrors` writes them (the same text), but reading only the 80-odd
 * characters of the line it shows. The package's version copies the whole line for every error: a
 * body of 20,000 anchors on one 120 KB line (20,000 errors) took 15 s, about the square of its
 * length.
 */
function markPositions(src: string, lines: LineCounter): (error: YAMLError) => void {
  return (error) => {
    if (error.pos[0] === -1) return;
    error.linePos = [lines.linePos(error.pos[0]), lines.linePos(error.pos[1])];
    const { line, col } = error.linePos[0];
    error.message += ` at line ${line}, column ${col}`;
    let ci = col - 1;
    const start = lines.lineStarts[line - 1]!;
    let end = lines.lineStarts[line] ?? src.length;
    while (end > start && (src[end - 1] === '\n' || src[end - 1] === '\r')) end -= 1;
    const length = end - start;
    let shown: string;
    if (ci >= 60 && length > 80) {
      const trimStart = Math.min(ci - 39, length - 79);
      shown = `…${src.substring(start + trimStart, Math.min(end, start + trimStart + 80))}`;
      ci -= trimStart - 1;
    } else shown = src.substring(start, Math.min(end, start + 81));
    if (shown.length > 80) shown = `${shown.substring(0, 79)}…`;
    if (line > 1 && /^ *$/.test(shown.substring(0, ci))) {
      const prevStart = lines.lineStarts[line - 2]!;
      const prevEnd = lines.lineStarts[line - 1]!;
      shown = (prevEnd - prevStart > 80 ? `${src.substring(prevStart, prevStart + 79)}…\n` : src.substring(prevStart, prevEnd)) + shown;
    }
    if (/[^ ]/.test(shown)) {
      let count = 1;
      const last = error.linePos[1];
      if (last?.line === line && last.col > col) count = Math.max(1, Math.min(last.col - col, 80 - ci));
      error.message += `:\n\n${shown}\n${' '.repeat(ci)}${'^'.repeat(count)}\n`;
    }
  };
}

/**
 * A parse error's message as an answer may show it: its words and position (`… at line 4, column 1`) without the
 * lines of text markPositions quotes after them, which may hold a credential written into the manifest (a body that
 * is not JSON is described the same way, by position, never by its text).
 */
export function yamlErrorWithoutText(message: string): string {
  return message.replace(/( at line \d+, column \d+):\n\n[\s\S]*$/, '$1');
}

const BOM = '\uFEFF';

/** A line kubectl's reader splits documents at, and YAML reads as a document start: `---`, alone or with a comment. */
const SEPARATOR = /^---(?:[ \t]*|[ \t]+#.*)\r?$/;

/**
 * `text` with the byte order mark (U+FEFF) removed where kubectl skips it: at the start of a document
 * that a `---` line separates from text before it. kubectl cuts a file into documents at its `---`
 * lines first (k8s.io/apimachinery's YAMLReader, the separator line dropped) and reads each as a
 * stream of its own, whose leading mark go-yaml skips, so files that each begin with a mark can be
 * joined with `---` lines. The yaml package skips one only before a document's `---` (at the start
 * of the stream), and would read it after one as the first character of the first key
 * (`\uFEFFkind`). Elsewhere kubectl keeps it as text too, and so does this: after a `---` that
 * begins the file (kubectl's reader keeps that line with the document), or inside a document.
 */
export function withoutKubectlBoms(text: string): string {
  if (!text.includes(BOM)) return text;
  const lines = text.split('\n');
  // Whether kubectl's reader holds text of the document being read (a `---` then ends it), and whether this line begins a document it has cut.
  let held = false;
  let cut = false;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (cut && line.startsWith(BOM)) lines[i] = line.slice(1);
    cut = false;
    if (held && SEPARATOR.test(line)) {
      held = false;
      cut = true;
    } else held = true;
  }
  return lines.join('\n');
}

/** One manifest document read as kubectl reads it (KUBECTL_MANIFEST), its errors and warnings marked with their positions in linear time. */
export function readManifestDocument(source: string): Document {
  const text = withoutKubectlBoms(source);
  const lines = new LineCounter();
  const doc = parseDocument(text, { ...KUBECTL_MANIFEST, prettyErrors: false, lineCounter: lines });
  const mark = markPositions(text, lines);
  doc.errors.forEach(mark);
  doc.warnings.forEach(mark);
  return doc;
}

/** Every manifest document of a file read as kubectl reads them, as readManifestDocument reads one. */
export function readManifestDocuments(source: string): Document[] {
  const text = withoutKubectlBoms(source);
  const lines = new LineCounter();
  const docs = parseAllDocuments(text, { ...KUBECTL_MANIFEST, prettyErrors: false, lineCounter: lines });
  if (!Array.isArray(docs)) return [];
  const mark = markPositions(text, lines);
  for (const doc of docs) {
    doc.errors.forEach(mark);
    doc.warnings.forEach(mark);
  }
  return docs;
}

import { parseDocument } from 'yaml';
import { MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, MAX_JSON_KEYS } from '../validation/input-limits.js';
import { keysAsKubectl, kubectlRefusal, selfContainingAlias } from './yaml.js';
import { MAX_YAML_DOCUMENT_NODES, MAX_YAML_NODES, readManifestDocument, scanYamlTokens, yamlErrorWithoutText } from './yaml-limits.js';

/** Why a YAML body was refused: the ValidationError the route answers (message, field, hint), a 413 when `tooLarge`. */
export interface YamlProblem {
  message: string;
  field?: string;
  hint?: string;
  tooLarge?: true;
  /** Nested past MAX_JSON_DEPTH. */
  tooDeep?: true;
  /** A document (not a manifest) writing more than MAX_YAML_DOCUMENT_NODES. */
  tooManyNodes?: true;
}

/**
 * The JSON text of a value read from YAML, or the problem of one larger than `maxJsonBytes`: aliases repeat what they
 * name (the yaml package allows a hundredfold), so 1 MiB of YAML could make 100 MB of manifest. A value is held to
 * what the same manifest sent as JSON may be.
 */
function jsonOf(value: unknown, maxJsonBytes: number, what: string): YamlRead {
  const json = JSON.stringify(value ?? null);
  // A string's length is at most its UTF-8 bytes: only what may be too large is measured in bytes.
  if (json.length > maxJsonBytes || (json.length * 3 > maxJsonBytes && Buffer.byteLength(json) > maxJsonBytes)) {
    return {
      problem: {
        message: `${what} reads as more JSON than the ${maxJsonBytes.toLocaleString('en-US')} bytes a body may hold (svc.http.body-limit): its aliases repeat what they name`,
        hint: 'write the repeated parts once, or send the manifest as JSON',
        tooLarge: true,
      },
    };
  }
  return { json };
}

/**
 * What reading a YAML text gave: its value as JSON text, or why it was refused. JSON text, not the value: it is what
 * crosses from the reading thread (yaml-reader.ts), and `JSON.parse` on the other side makes plain objects of that
 * thread's own realm. Nothing is lost on the way: what is accepted is what kubectl would send as JSON (non-finite
 * numbers and non-text keys are refused before); a `-0` arrives as `0`, as it is stored.
 */
export type YamlRead = { json: string } | { problem: YamlProblem };

const tooDeep = (root: string): YamlProblem => ({
  message: `${root} nests objects and arrays deeper than ${MAX_JSON_DEPTH} levels`,
  field: root,
  hint: `at most ${MAX_JSON_DEPTH} levels of nesting are accepted`,
  tooDeep: true,
});

const count = (n: number) => n.toLocaleString('en-US');

/**
 * A YAML manifest whose tokens already write more keys or open more collections than a body may hold: refused (413)
 * before it is parsed, as a JSON body past the same bounds is (without the JSON's exact count: the tokens are read
 * only up to the bound). Parsed, such a text held the reading thread, and so every other tenant's YAML, for seconds.
 */
const tooMany = (root: string, what: string, hint = 'a manifest holds far fewer; split the body into several requests'): YamlProblem => ({
  message: `${root} holds more than ${what}`,
  hint,
  tooLarge: true,
});

/**
 * A body of several YAML documents (`---` between them): one request applies one manifest. The yaml package's own
 * words ask for a function of its API (`please use YAML.parseAllDocuments()`), which is no advice to a caller.
 */
const severalDocuments = (root: string, line: number | undefined): YamlProblem => ({
  message: `${root} holds more than one YAML document${line === undefined ? '' : ` (the second begins at line ${line})`}: a request takes one manifest`,
  field: root,
  hint: 'send each document in a request of its own (svc apply -f FILE sends the documents of a file one after the other)',
});

/**
 * A manifest body in YAML, read as kubectl reads it: compact nesting refused from the tokens before the parser spends
 * time on it, the parser's first error, what kubectl would read otherwise (`kubectlRefusal`), keys as kubectl writes
 * them (`keysAsKubectl`, named under `root`), and the JSON text's size. The nesting cap and the object and key counts
 * are the router's, on that JSON text, as for a JSON body (one check for both); a text whose tokens already pass the
 * key or object count is refused from them, before the parser spends seconds on it (scanYamlTokens). Synchronous and CPU-bound: the hub
 * runs it on the reading thread, never on the event loop (yaml-reader.ts).
 */
export function readYamlManifest(text: string, root: string, maxJsonBytes = Number.POSITIVE_INFINITY): YamlRead {
  const scanned = scanYamlTokens(text, MAX_JSON_DEPTH, MAX_JSON_KEYS, MAX_JSON_CONTAINERS, MAX_YAML_NODES);
  if (scanned.tooDeep) return { problem: tooDeep(root) };
  if (scanned.tooManyKeys) return { problem: tooMany(root, `${count(MAX_JSON_KEYS)} keys`) };
  if (scanned.tooManyContainers) return { problem: tooMany(root, `${count(MAX_JSON_CONTAINERS)} objects and arrays`) };
  if (scanned.tooManyNodes) return { problem: tooMany(root, `${count(MAX_YAML_NODES)} keys and values (YAML nodes)`, 'send a manifest this large as JSON (Content-Type: application/json), or split it') };
  let value: unknown;
  try {
    const doc = readManifestDocument(text);
    const error = doc.errors[0];
    if (error?.code === 'MULTIPLE_DOCS') return { problem: severalDocuments(root, error.linePos?.[0].line) };
    if (error) return { problem: { message: `${root} is not valid YAML: ${yamlErrorWithoutText(error.message)}`, field: root } };
    const refusal = kubectlRefusal(doc);
    if (refusal) return { problem: { message: `${root} is not a manifest kubectl would read the same: ${refusal}`, field: root } };
    const key = keysAsKubectl(doc, root);
    if (key) return { problem: { message: key.message, field: key.field, hint: key.hint } };
    value = doc.toJS();
  } catch (err) {
    // A document nested past the parser's own stack: the yaml library reports the RangeError as a
    // parse error of its own, whose message says so.
    if (err instanceof RangeError || /Maximum call stack size exceeded/.test((err as Error).message)) return { problem: tooDeep(root) };
    return { problem: { message: `${root} is not valid YAML: ${(err as Error).message}`, field: root } };
  }
  return jsonOf(value, maxJsonBytes, `${root} (YAML)`);
}

/**
 * A document in YAML that is not a manifest (an OpenAPI description to draft from): read with the yaml package's
 * defaults, keys not compared with every earlier key of their mapping (the package's check takes time growing with
 * the square of their number), compact nesting refused from the tokens. Undefined when it is not YAML.
 */
export function readYamlDocument(text: string, maxJsonBytes = Number.POSITIVE_INFINITY): YamlRead | undefined {
  const scanned = scanYamlTokens(text, MAX_JSON_DEPTH, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, MAX_YAML_DOCUMENT_NODES);
  if (scanned.tooDeep) return { problem: tooDeep('the document') };
  if (scanned.tooManyNodes) return { problem: { message: `holds more than ${count(MAX_YAML_DOCUMENT_NODES)} keys and values (YAML nodes), more than the hub reads as YAML`, tooLarge: true, tooManyNodes: true } };
  let value: unknown;
  try {
    const doc = parseDocument(text, { uniqueKeys: false, prettyErrors: false });
    if (doc.errors.length) return undefined;
    const circular = selfContainingAlias(doc);
    if (circular) return { problem: { message: circular } };
    value = doc.toJS();
  } catch {
    return undefined;
  }
  return jsonOf(value, maxJsonBytes, 'the document');
}

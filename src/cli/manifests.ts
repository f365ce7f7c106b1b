import { keysAsKubectl, kubectlRefusal } from '../manifests/yaml.js';
import { readManifestDocuments, yamlNestsDeeperThan } from '../manifests/yaml-limits.js';
import { MAX_JSON_DEPTH } from '../validation/input-limits.js';
import { CliError } from './errors.js';

/**
 * Manifests for `svc apply`: every document of a YAML or JSON file (a list, or `kind: List` with
 * `items`, counts as its documents), each routed by its `kind` to the hub's apply path.
 */

export interface Manifest {
  kind: string;
  name: string;
  body: Record<string, unknown>;
  /** `file`, or `file#2` for the second document. */
  source: string;
}

/** The kinds this hub applies, and where. */
const APPLY_PATHS: Readonly<Record<string, string>> = {
  Connector: '/api/connectors/apply',
  Entity: '/api/entities/apply',
  Export: '/api/exports/apply',
  Workflow: '/api/workflows/apply',
  Process: '/api/processes/apply',
};

/**
 * Where each kind's stored object is read (`svc diff`) and deleted (`svc delete`): the routes of
 * `svc <kind> get` and `svc <kind> rm`. A Workflow is read under /api/platform (where its list is).
 */
const OBJECT_PATHS: Readonly<Record<string, { get: string; delete: string }>> = {
  Connector: { get: '/api/connectors/', delete: '/api/connectors/' },
  Entity: { get: '/api/entities/', delete: '/api/entities/' },
  Export: { get: '/api/exports/', delete: '/api/exports/' },
  Workflow: { get: '/api/platform/workflows/', delete: '/api/workflows/' },
  Process: { get: '/api/processes/', delete: '/api/processes/' },
};

/**
 * The routes of one manifest's stored object, its name percent-encoded; like applyPath, refuses an
 * unknown kind (and here a document without metadata.name) before anything is sent.
 */
export function objectPaths(manifest: Manifest): { get: string; delete: string } {
  applyPath(manifest);
  if (!manifest.name) throw new CliError(`${manifest.source}: no metadata.name (the ${manifest.kind} to find on the hub)`);
  const paths = OBJECT_PATHS[manifest.kind]!;
  const name = encodeURIComponent(manifest.name);
  return { get: paths.get + name, delete: paths.delete + name };
}

/** Kinds of the manifest contract (CONTRACTS section 5) whose apply path the hub does not have yet (none today). */
const NOT_YET: string[] = [];

/**
 * The manifests of `text`, read as kubectl reads them. `slow` is called first when the text must go
 * through the YAML reader (about a MiB a second) and is larger than `slowAbove` bytes.
 */
export function parseManifests(text: string, file: string, slow?: { above: number; reading: () => void; done: () => void }, emptyAllowed = false): Manifest[] {
  const manifests = readDocuments(text, file, slow);
  // A file of a directory may hold none (empty, or every line commented out): kubectl skips it too.
  if (!manifests.length && !emptyAllowed) throw new CliError(`${file}: no manifest in it`);
  return manifests;
}

function readDocuments(text: string, file: string, slow?: { above: number; reading: () => void; done: () => void }): Manifest[] {
  const fast = jsonDocuments(text);
  if (fast) return manifestsOf(fast, file);
  const announced = slow !== undefined && text.length > slow.above;
  if (announced) slow.reading();
  try {
    return manifestsOf(yamlDocuments(text, file), file);
  } finally {
    if (announced) slow.done();
  }
}

/**
 * A JSON text (an object or an array) read with `JSON.parse`, about a hundred times faster than the
 * YAML reader, when that gives exactly what the YAML reader gives; undefined for anything else, which
 * the YAML reader then reads and refuses as before: not JSON, a key given twice in one object (which
 * `JSON.parse` would take silently, the last one winning, and the YAML reading refuses as kubectl's
 * duplicates are ambiguous), a number past a double's range (`1e400`: refused there), nesting past
 * the hub's depth, or a character the YAML reader takes otherwise than JSON does (a tab, a YAML line
 * break such as U+2028 or U+0085, a C1 control character or DEL, a lone surrogate, a byte order mark).
 * Numbers are the same doubles either way (an integer past 2^53 rounded to the nearest).
 */
export function jsonDocuments(text: string): unknown[] | undefined {
  if (!/^[ \n\r]*[{[]/.test(text) || NOT_READ_ALIKE.test(text)) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  const walked = { keys: 0, finite: true };
  if (depthOf(value, walked) > MAX_JSON_DEPTH || !walked.finite) return undefined;
  // Every key of the text is a key of the value unless one is given twice in its object.
  return keysWritten(text) === walked.keys ? [value] : undefined;
}

/**
 * A character the YAML reader takes otherwise than JSON.parse, or refuses: anything but newlines,
 * printable ASCII and printable Unicode (a tab, C1 controls and DEL, a lone surrogate), the YAML line
 * breaks U+0085, U+2028 and U+2029, and the byte order mark.
 */
const NOT_READ_ALIKE = /[^\n\r\u0020-\u007e\u00a0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\u{10000}-\u{10ffff}]/u;

/** How many keys a JSON text writes: its strings followed by a colon (the text is valid JSON). */
function keysWritten(text: string): number {
  let keys = 0;
  let i = text.indexOf('"');
  while (i !== -1) {
    // to the closing quote, past escaped characters
    let end = i + 1;
    for (;;) {
      const quote = text.indexOf('"', end);
      let backslashes = 0;
      while (text.charCodeAt(quote - 1 - backslashes) === 92) backslashes += 1;
      end = quote + 1;
      if (backslashes % 2 === 0) break;
    }
    let next = end;
    while (text[next] === ' ' || text[next] === '\n' || text[next] === '\r') next += 1;
    if (text[next] === ':') keys += 1;
    i = text.indexOf('"', next);
  }
  return keys;
}

/** How deeply `value` nests objects and arrays (an empty one counts), counting keys and non-finite numbers on the way. */
function depthOf(value: unknown, walked: { keys: number; finite: boolean }): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) walked.finite = false;
    return 0;
  }
  if (!value || typeof value !== 'object') return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  if (!Array.isArray(value)) walked.keys += Object.keys(value).length;
  let deepest = 0;
  for (const child of children) deepest = Math.max(deepest, depthOf(child, walked));
  return deepest + 1;
}

/** The documents of `text` as the YAML reader reads them (kubectl's reading), refused as kubectl refuses them. */
export function yamlDocuments(text: string, file: string): unknown[] {
  const documents: unknown[] = [];
  // Compact nesting (`[[[…`, `- - - …`) past the hub's cap is refused from the tokens, before the parser spends seconds on it.
  if (yamlNestsDeeperThan(text, MAX_JSON_DEPTH)) throw new CliError(`${file}: nests objects and arrays deeper than ${MAX_JSON_DEPTH} levels (the hub accepts at most ${MAX_JSON_DEPTH})`);
  for (const [i, doc] of readManifestDocuments(text).entries()) {
    const where = `${file} document ${i + 1}`;
    const problem = doc.errors[0]?.message ?? kubectlRefusal(doc) ?? keysAsKubectl(doc, '')?.message;
    if (problem) throw new CliError(`${where}: ${problem}`);
    let value: unknown;
    try {
      value = doc.toJS();
    } catch (err) {
      // An alias bomb (`Excessive alias count`), a document nested past the parser's stack.
      throw new CliError(`${where}: ${(err as Error).message.split('\n')[0]}`);
    }
    documents.push(value);
  }
  return documents;
}

function manifestsOf(documents: unknown[], file: string): Manifest[] {
  const objects = documents.filter((value) => value !== null && value !== undefined).flatMap(flatten);
  const many = objects.length > 1;
  return objects.map((value, i) => {
    const source = many ? `${file}#${i + 1}` : file;
    if (!value || typeof value !== 'object' || Array.isArray(value)) throw new CliError(`${source}: a manifest must be an object`);
    const body = value as Record<string, unknown>;
    const kind = body.kind;
    if (typeof kind !== 'string' || !kind) {
      // A mark kubectl keeps too (after a `---` that begins the file, or inside a document) is invisible where the file is read.
      const marked = '\uFEFFkind' in body ? ': its key kind begins with a byte order mark (U+FEFF), which kubectl reads as part of the key too; remove the mark' : '';
      throw new CliError(`${source}: no kind (expected one of ${Object.keys(APPLY_PATHS).join(', ')})${marked}`);
    }
    const name = (body.metadata as { name?: unknown } | undefined)?.name;
    return { kind, name: typeof name === 'string' ? name : '', body, source };
  });
}

/**
 * Where each kind comes in `svc apply`: Connectors first, then Entities (which read the connectors'
 * tables), then the kinds that may name an Entity (a Workflow or an Export whose Entity is not applied
 * is refused) and Processes. Files and documents keep their order within a kind.
 */
const APPLY_RANK: Readonly<Record<string, number>> = { Connector: 0, Entity: 1 };

/**
 * The manifests in the order `svc apply` sends them: by APPLY_RANK, stably. A directory's files are
 * read in the order of their names, which need not be the order of what they depend on
 * (`account-workflow.yaml` before `account.yaml`): sent as read, the Workflow was refused, which
 * stopped the rest, and so at every later apply of the same directory.
 */
export function inApplyOrder(manifests: Manifest[]): Manifest[] {
  const rank = (m: Manifest) => APPLY_RANK[m.kind] ?? 2;
  return [...manifests].sort((a, b) => rank(a) - rank(b));
}

/**
 * The manifests in the order `svc delete` sends them: the reverse of apply's (Processes, Exports and
 * Workflows, then Entities, then Connectors), so nothing is deleted before what names it.
 */
export function inDeleteOrder(manifests: Manifest[]): Manifest[] {
  return inApplyOrder(manifests).reverse();
}

/**
 * A unified-style diff of two texts by lines (`-` the first's, `+` the second's, `context` lines of
 * each change around it, `@@ -a,b +c,d @@` before each hunk); empty when they are the same. The
 * longest common subsequence of the lines that differ (after the common head and tail).
 */
export function lineDiff(before: string[], after: string[], context = 3): string {
  let head = 0;
  while (head < before.length && head < after.length && before[head] === after[head]) head += 1;
  let tail = 0;
  while (tail < before.length - head && tail < after.length - head && before[before.length - 1 - tail] === after[after.length - 1 - tail]) tail += 1;
  const a = before.slice(head, before.length - tail);
  const b = after.slice(head, after.length - tail);
  // lcs[i][j]: the longest common subsequence of a[i..] and b[j..]; past a few million cells (16 MiB),
  // none: the middle shows as removed, then added (still a true diff, not the shortest)
  const small = a.length * b.length <= 4_000_000;
  const lcs = Array.from({ length: small ? a.length + 1 : 0 }, () => new Uint32Array(b.length + 1));
  if (small) for (let i = a.length - 1; i >= 0; i--) for (let j = b.length - 1; j >= 0; j--) lcs[i]![j] = a[i] === b[j] ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
  const ops: Array<{ op: ' ' | '-' | '+'; line: string }> = before.slice(0, head).map((line) => ({ op: ' ', line }));
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (!small) ops.push(i < a.length ? { op: '-', line: a[i++]! } : { op: '+', line: b[j++]! });
    else if (i < a.length && j < b.length && a[i] === b[j]) {
      ops.push({ op: ' ', line: a[i]! });
      i += 1;
      j += 1;
    } else if (i < a.length && (j === b.length || lcs[i + 1]![j]! >= lcs[i]![j + 1]!)) ops.push({ op: '-', line: a[i++]! });
    else ops.push({ op: '+', line: b[j++]! });
  }
  for (const line of before.slice(before.length - tail)) ops.push({ op: ' ', line });
  let out = '';
  let k = 0;
  while (k < ops.length) {
    if (ops[k]!.op === ' ') {
      k += 1;
      continue;
    }
    // a hunk: from `context` lines before this change to `context` lines after the last change closer than 2 * context
    const start = Math.max(0, k - context);
    let end = k;
    for (let m = k; m < ops.length && m - end <= 2 * context; m++) if (ops[m]!.op !== ' ') end = m;
    end = Math.min(ops.length, end + context + 1);
    const oldStart = ops.slice(0, start).filter((o) => o.op !== '+').length;
    const newStart = ops.slice(0, start).filter((o) => o.op !== '-').length;
    const hunk = ops.slice(start, end);
    const oldCount = hunk.filter((o) => o.op !== '+').length;
    const newCount = hunk.filter((o) => o.op !== '-').length;
    out += `@@ -${oldStart + (oldCount ? 1 : 0)},${oldCount} +${newStart + (newCount ? 1 : 0)},${newCount} @@\n`;
    for (const { op, line } of hunk) out += `${op}${line}\n`;
    k = end;
  }
  return out;
}

/** Refuses the whole file before anything is sent when one kind cannot be applied. */
export function applyPath(manifest: Manifest): string {
  const found = APPLY_PATHS[manifest.kind];
  if (found) return found;
  const known = Object.keys(APPLY_PATHS).join(', ');
  if (NOT_YET.includes(manifest.kind))
    throw new CliError(`${manifest.source}: kind ${manifest.kind} cannot be applied: this hub has no apply path for it yet (it applies ${known})`);
  throw new CliError(`${manifest.source}: unknown kind ${manifest.kind} (this hub applies ${known})`);
}

function flatten(value: unknown): unknown[] {
  if (Array.isArray(value)) return value.flatMap(flatten);
  const list = value as { kind?: unknown; items?: unknown };
  if (list && typeof list === 'object' && list.kind === 'List' && Array.isArray(list.items)) return list.items.flatMap(flatten);
  return [value];
}

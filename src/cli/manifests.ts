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

/** Kinds of the manifest contract (CONTRACTS section 5) whose apply path the hub does not have yet (none today). */
const NOT_YET: string[] = [];

export function parseManifests(text: string, file: string): Manifest[] {
  const objects: unknown[] = [];
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
    if (value === null || value === undefined) continue;
    objects.push(...flatten(value));
  }
  if (!objects.length) throw new CliError(`${file}: no manifest in it`);
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

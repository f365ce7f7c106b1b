import vm from 'node:vm';
import { Environment } from '@marcbachmann/cel-js';

/**
 * A process's `when`: Common Expression Language over `type` (string), `tenantId` (int) and
 * `payload` (map), parsed and type-checked once at apply (docs/processes.md), evaluated per event
 * with a time bound. Never `eval`: @marcbachmann/cel-js is an interpreter over its own AST.
 *
 * `type` is a built-in identifier in that library (the type of types), so the expression is parsed
 * once, every identifier `type` (not `type(x)`, not `payload.type`) is renamed to EVENT_TYPE_VAR in
 * the source at its position, and the renamed text is what is checked and evaluated.
 */

const EVENT_TYPE_VAR = 'svc_event_type';

/** Structural limits at parse time: a `when` is a condition, not a program. */
const LIMITS = { maxAstNodes: 500, maxDepth: 40, maxListElements: 200, maxMapEntries: 200, maxCallArguments: 16 };
/** Longest accepted `when` text. */
export const WHEN_MAX = 2000;
/** Macros nested deeper than this (comprehensions within comprehensions) are refused at apply. */
export const MAX_COMPREHENSION_NESTING = 2;
/** Wall-clock bound of one evaluation; past it the evaluation is stopped and counts as false. */
export const EVALUATION_TIMEOUT_MS = 50;

const COMPREHENSIONS = new Set(['all', 'exists', 'exists_one', 'existsOne', 'map', 'filter', 'bind', 'transformList', 'transformMap', 'sortBy']);

const parser = new Environment({ limits: LIMITS, unlistedVariablesAreDyn: true });
const env = new Environment({ limits: LIMITS })
  .registerVariable(EVENT_TYPE_VAR, 'string')
  .registerVariable('tenantId', 'int')
  .registerVariable('payload', 'map');

export class CelError extends Error {}

/** A checked `when`, ready to evaluate. */
export interface CompiledWhen {
  source: string;
  /** The text evaluated (identifiers `type` renamed). */
  renamed: string;
}

interface Node {
  op: string;
  args: unknown;
  start?: number;
  end?: number;
}

const isNode = (v: unknown): v is Node => typeof v === 'object' && v !== null && typeof (v as Node).op === 'string';

/** Parses, renames `type`, type-checks; the result type must be bool (or dyn). Throws CelError with a readable reason. */
export function compileWhen(source: string): CompiledWhen {
  if (source.length > WHEN_MAX) throw new CelError(`is longer than ${WHEN_MAX} characters`);
  let ast: unknown;
  try {
    ast = parser.parse(source).ast;
  } catch (err) {
    throw new CelError(`is not valid CEL: ${firstLine(err)}`);
  }
  const renames: Array<{ start: number; end: number }> = [];
  const nesting = walk(ast, 0, renames);
  if (nesting > MAX_COMPREHENSION_NESTING) {
    throw new CelError(`nests macros (all, exists, map, filter, cel.bind, …) ${nesting} deep; at most ${MAX_COMPREHENSION_NESTING} are allowed`);
  }
  let renamed = source;
  for (const r of renames.sort((a, b) => b.start - a.start)) renamed = renamed.slice(0, r.start) + EVENT_TYPE_VAR + renamed.slice(r.end);
  let checked: { valid: boolean; type?: string; error?: unknown };
  try {
    checked = env.check(renamed) as typeof checked;
  } catch (err) {
    throw new CelError(`does not type-check: ${firstLine(err)}`);
  }
  if (!checked.valid) throw new CelError(`does not type-check: ${firstLine(checked.error).replaceAll(EVENT_TYPE_VAR, 'type')}`);
  if (checked.type !== 'bool' && checked.type !== 'dyn') throw new CelError(`must be a condition (bool), not ${checked.type}`);
  return { source, renamed };
}

/** The deepest nesting of comprehension macros under `node`; collects identifiers `type` to rename. */
function walk(node: unknown, depth: number, renames: Array<{ start: number; end: number }>): number {
  if (Array.isArray(node)) return Math.max(depth, ...node.map((n) => walk(n, depth, renames)));
  if (!isNode(node)) return depth;
  if (node.op === 'id') {
    if (node.args === 'type' && node.start !== undefined && node.end !== undefined) renames.push({ start: node.start, end: node.end });
    return depth;
  }
  if (node.op === 'value') return depth;
  if (node.op === 'rcall' && Array.isArray(node.args) && COMPREHENSIONS.has(String(node.args[0]))) {
    return Math.max(walk(node.args[1], depth, renames), walk(node.args[2], depth + 1, renames), depth + 1);
  }
  return walk(node.args, depth, renames);
}

const firstLine = (err: unknown): string => String(err instanceof Error ? err.message : err).split('\n')[0]!.trim();

/**
 * A JSON value as CEL sees it: integers (what the catalog declares `long`) become CEL ints, so
 * `payload.records_out + 1` is int arithmetic; other numbers stay doubles.
 */
function celValue(value: unknown): unknown {
  if (typeof value === 'number') return Number.isSafeInteger(value) ? BigInt(value) : value;
  if (Array.isArray(value)) return value.map(celValue);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, celValue(v)]));
  return value;
}

/** What an evaluation saw: the event's type, tenant and payload. */
export interface WhenInput {
  type: string;
  tenantId: number;
  payload: Record<string, unknown>;
}

export type WhenOutcome = { result: boolean } | { result: false; error: string; timedOut: boolean };

const box: { run: (() => unknown) | null; out: unknown } = { run: null, out: undefined };
const context = vm.createContext(box);
const script = new vm.Script('out = run()');

/**
 * Evaluates `when` for one event: true only for a bool true. A failure (a missing field, a type
 * mismatch at run time) or an evaluation past EVALUATION_TIMEOUT_MS (stopped by V8) is false, with
 * the reason.
 */
export function evaluateWhen(when: CompiledWhen, input: WhenInput, timeoutMs = EVALUATION_TIMEOUT_MS): WhenOutcome {
  box.run = () => env.evaluate(when.renamed, { [EVENT_TYPE_VAR]: input.type, tenantId: BigInt(input.tenantId), payload: celValue(input.payload) });
  box.out = undefined;
  try {
    script.runInContext(context, { timeout: timeoutMs });
    return { result: box.out === true };
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') return { result: false, error: `evaluation stopped after ${timeoutMs} ms`, timedOut: true };
    return { result: false, error: firstLine(err), timedOut: false };
  } finally {
    box.run = null;
    box.out = undefined;
  }
}

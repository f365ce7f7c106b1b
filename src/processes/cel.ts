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
  /** `renamed` parsed once: evaluating it is `env.evaluate(renamed, vars)` without parsing again each time. */
  evaluate: (vars: Record<string, unknown>) => unknown;
}

interface Node {
  op: string;
  args: unknown;
  start?: number;
  end?: number;
}

const isNode = (v: unknown): v is Node => typeof v === 'object' && v !== null && typeof (v as Node).op === 'string';

/**
 * Parses, renames `type`, type-checks; the result type must be bool (or dyn); a string literal given
 * to `matches` must be a regular expression the evaluator can compile. Throws CelError with a
 * readable reason.
 */
export function compileWhen(source: string, options: { checkPatterns?: boolean } = {}): CompiledWhen {
  if (source.length > WHEN_MAX) throw new CelError(`is longer than ${WHEN_MAX} characters`);
  let ast: unknown;
  try {
    ast = parser.parse(source).ast;
  } catch (err) {
    throw new CelError(`is not valid CEL: ${firstLine(err)}`);
  }
  const found: Found = { renames: [], patterns: [] };
  const nesting = walk(ast, 0, found);
  if (nesting > MAX_COMPREHENSION_NESTING) {
    throw new CelError(`nests macros (all, exists, map, filter, cel.bind, …) ${nesting} deep; at most ${MAX_COMPREHENSION_NESTING} are allowed`);
  }
  let renamed = source;
  for (const r of found.renames.sort((a, b) => b.start - a.start)) renamed = renamed.slice(0, r.start) + EVENT_TYPE_VAR + renamed.slice(r.end);
  let checked: { valid: boolean; type?: string; error?: unknown };
  try {
    checked = env.check(renamed) as typeof checked;
  } catch (err) {
    throw new CelError(`does not type-check: ${firstLine(err)}`);
  }
  if (!checked.valid) throw new CelError(`does not type-check: ${firstLine(checked.error).replaceAll(EVENT_TYPE_VAR, 'type')}`);
  if (checked.type !== 'bool' && checked.type !== 'dyn') throw new CelError(`must be a condition (bool), not ${checked.type}`);
  for (const pattern of options.checkPatterns === false ? [] : found.patterns) {
    // What the evaluator does with it (`new RegExp(pattern)`, no flags): compiling only parses the
    // pattern, it never runs it, and the text is bounded by WHEN_MAX.
    try {
      new RegExp(pattern);
    } catch (err) {
      throw new CelError(`gives matches() a pattern that is not a valid regular expression: ${firstLine(err)}`);
    }
  }
  return { source, renamed, evaluate: env.parse(renamed) };
}

/** What `walk` collects: identifiers `type` to rename, string literals given to `matches` as the pattern. */
interface Found {
  renames: Array<{ start: number; end: number }>;
  patterns: string[];
}

/** The pattern of `s.matches("…")` (or `matches(s, "…")`) when it is a string literal. */
function literalPattern(node: Node): string | undefined {
  if (!Array.isArray(node.args) || node.args[0] !== 'matches') return undefined;
  const args = node.op === 'rcall' ? node.args[2] : node.op === 'call' ? node.args[1] : undefined;
  if (!Array.isArray(args)) return undefined;
  const pattern = args[node.op === 'rcall' ? 0 : 1] as unknown;
  return isNode(pattern) && pattern.op === 'value' && typeof pattern.args === 'string' ? pattern.args : undefined;
}

/** The deepest nesting of comprehension macros under `node`; collects what `Found` holds. */
function walk(node: unknown, depth: number, found: Found): number {
  if (Array.isArray(node)) return Math.max(depth, ...node.map((n) => walk(n, depth, found)));
  if (!isNode(node)) return depth;
  if (node.op === 'id') {
    if (node.args === 'type' && node.start !== undefined && node.end !== undefined) found.renames.push({ start: node.start, end: node.end });
    return depth;
  }
  if (node.op === 'value') return depth;
  const pattern = literalPattern(node);
  if (pattern !== undefined) found.patterns.push(pattern);
  if (node.op === 'rcall' && Array.isArray(node.args) && COMPREHENSIONS.has(String(node.args[0]))) {
    return Math.max(walk(node.args[1], depth, found), walk(node.args[2], depth + 1, found), depth + 1);
  }
  return walk(node.args, depth, found);
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

/** One evaluation to run: a condition and the event it is evaluated for. */
export interface WhenTask {
  when: CompiledWhen;
  input: WhenInput;
}

/** What one bounded run of several evaluations did (`evaluateWhens`). */
export interface WhenRun {
  /** The outcomes of the first tasks, in order: all of them, or those before the one stopped. */
  outcomes: WhenOutcome[];
  /** The task after `outcomes` (index `outcomes.length`) was running when the time bound stopped the run. */
  stopped: boolean;
}

const box: { run: (() => unknown) | null } = { run: null };
const context = vm.createContext(box);
const script = new vm.Script('run()');

/**
 * Evaluates the tasks in order in ONE run bounded by `timeoutMs` (wall-clock; V8 interrupts it):
 * the bound's watchdog costs some 50 µs to arm, far more than a plain condition, so the conditions
 * of one event are evaluated under one bound. A task's failure (a missing field) is its outcome and
 * the run goes on; when the bound stops the run, `stopped` says so, and the task then running is
 * the one after `outcomes` (a stop cannot be caught by the evaluator: the run ends there).
 */
export function evaluateWhens(tasks: readonly WhenTask[], timeoutMs = EVALUATION_TIMEOUT_MS): WhenRun {
  const outcomes: WhenOutcome[] = [];
  if (tasks.length === 0) return { outcomes, stopped: false };
  box.run = () => {
    // The payload converted once per event, not once per condition.
    let converted: { input: WhenInput; vars: Record<string, unknown> } | undefined;
    for (const task of tasks) {
      try {
        if (converted?.input !== task.input) {
          const { input } = task;
          converted = { input, vars: { [EVENT_TYPE_VAR]: input.type, tenantId: BigInt(input.tenantId), payload: celValue(input.payload) } };
        }
        outcomes.push({ result: task.when.evaluate(converted.vars) === true });
      } catch (err) {
        outcomes.push({ result: false, error: firstLine(err), timedOut: false });
      }
    }
  };
  try {
    script.runInContext(context, { timeout: timeoutMs });
    return { outcomes, stopped: false };
  } catch (err) {
    const code = (err as { code?: string }).code;
    // The bound can fire after the last task's outcome was recorded, as the run returns: then
    // nothing was stopped.
    if (code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') return { outcomes, stopped: outcomes.length < tasks.length };
    // Not the evaluator's (it catches its own): the task then running failed; the caller goes on after it.
    if (outcomes.length < tasks.length) outcomes.push({ result: false, error: firstLine(err), timedOut: false });
    return { outcomes, stopped: false };
  } finally {
    box.run = null;
  }
}

/** The outcome of an evaluation stopped at its bound. */
export const stoppedOutcome = (timeoutMs: number): WhenOutcome => ({ result: false, error: `evaluation stopped after ${timeoutMs} ms`, timedOut: true });

/**
 * Evaluates `when` for one event: true only for a bool true. A failure (a missing field, a type
 * mismatch at run time) or an evaluation past EVALUATION_TIMEOUT_MS (stopped by V8) is false, with
 * the reason.
 */
export function evaluateWhen(when: CompiledWhen, input: WhenInput, timeoutMs = EVALUATION_TIMEOUT_MS): WhenOutcome {
  const run = evaluateWhens([{ when, input }], timeoutMs);
  return run.stopped ? stoppedOutcome(timeoutMs) : run.outcomes[0]!;
}

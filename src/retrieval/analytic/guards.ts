import { loadModule, parse, parseSync } from 'libpg-query';
import { deparseSync } from 'pgsql-deparser';
import { canonical, GuardRefusal } from './ast.js';
import { boundLimit } from './limit.js';
import { ReferenceWalker } from './references.js';
import type { SchemaCard } from './schema-card.js';
import { checkStatementShape, MAX_QUERY_CHARS } from './statement-shape.js';

/** The largest answer analytic chat returns; a larger LIMIT is lowered to it. */
export const MAX_ROWS = 500;

export { MAX_QUERY_CHARS };

export type GuardResult =
  | {
      ok: true;
      /** The statement to run: card relations resolved to the tenant's tables, `*` expanded, LIMIT added or lowered. */
      sql: string;
      limit: number;
    }
  | {
      ok: false;
      guard: 1 | 2 | 3 | 4;
      /** A refusal a user can read, naming what was refused. */
      reason: string;
    };

export interface GuardOptions {
  /** At most this many rows (default 500). */
  maxRows?: number;
  /** A card relation's name (`ext.partners`) as SQL for the tenant's real table (`"ext_t7"."partners"`). */
  resolveRelation: (name: string) => string;
  /**
   * A card relation computed at read time (an entity's, `entity.partner`): the SQL of the one
   * SELECT that stands for it, or undefined for a relation that is a table (resolveRelation). That
   * SELECT is the hub's own (src/entities/relation.ts): it takes the relation's place, under the
   * same name, once guards 2 and 3 have held the query to the card, and is not walked by them.
   * Throw a GuardRefusal to refuse a relation that cannot be read now.
   */
  resolveSubquery?: (name: string) => string | undefined;
}

let loaded: Promise<void> | undefined;

/**
 * The four deterministic guards a generated SELECT passes before it runs (the fifth, the
 * read-only transaction, is runReadOnly in run.ts). Decisions are taken on PostgreSQL's own parse
 * tree (libpg-query), never on the text:
 *
 * 1. exactly one plain SELECT (no writes at any depth, no SELECT INTO, no row locks, no WITH RECURSIVE);
 * 2. only the card's relations and columns, allowlisted functions, operators and casts;
 * 3. a literal compared with a column that declares values is one of them;
 * 4. the answer is bounded: LIMIT added or lowered to `maxRows`, a non-constant LIMIT refused.
 *
 * The statement that runs is rendered from the rewritten tree, parsed again and compared with it:
 * if the rendering does not parse back to the very tree the guards approved, the query is refused.
 */
export async function guardQuery(sql: string, card: SchemaCard, options: GuardOptions): Promise<GuardResult> {
  loaded ??= loadModule();
  await loaded;
  const maxRows = options.maxRows ?? MAX_ROWS;
  let tree: { stmts?: unknown[] };
  if (sql.trim() === '') return { ok: false, guard: 1, reason: 'The query is empty.' };
  if (sql.length > MAX_QUERY_CHARS) {
    return { ok: false, guard: 1, reason: `The query is ${sql.length} characters long, more than the ${MAX_QUERY_CHARS} allowed.` };
  }
  try {
    tree = await parse(sql);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return { ok: false, guard: 1, reason: `The query is not valid SQL: ${message}.` };
  }
  try {
    const select = checkStatementShape(tree.stmts ?? []);
    const walker = new ReferenceWalker(card, options.resolveRelation, options.resolveSubquery);
    walker.topLevel(select);
    if (walker.valueRefusal !== undefined) return { ok: false, guard: 3, reason: walker.valueRefusal };
    const limit = boundLimit(select, maxRows);
    const rewritten = { SelectStmt: select };
    const text = render(rewritten);
    if (text === undefined || !sameTree(text, rewritten)) {
      return { ok: false, guard: 1, reason: 'The query could not be rewritten faithfully, so it does not run.' };
    }
    return { ok: true, sql: text, limit };
  } catch (err) {
    if (err instanceof GuardRefusal) return { ok: false, guard: err.guard, reason: err.message };
    // A tree nested deeper than the walk's stack: no question over a schema card needs one.
    if (err instanceof RangeError) return { ok: false, guard: 1, reason: 'The query is nested too deeply.' };
    throw err;
  }
}

/** The SQL text of a rewritten SELECT, or undefined when the deparser cannot render it. */
function render(select: unknown): string | undefined {
  try {
    return deparseSync({ version: 0, stmts: [{ stmt: select }] } as Parameters<typeof deparseSync>[0], { pretty: false });
  } catch {
    return undefined;
  }
}

/** Whether `text` parses to exactly `tree` (positions aside). */
function sameTree(text: string, tree: unknown): boolean {
  try {
    const again = parseSync(text);
    return again.stmts?.length === 1 && canonical(again.stmts[0]?.stmt) === canonical(tree);
  } catch {
    return false;
  }
}

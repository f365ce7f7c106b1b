/**
 * What one analytic statement's plan may hold in memory at once: each sort, hash and buffer of rows of the plan holds
 * up to `work_mem` (`svc.analytic.work-mem`, with `hash_mem_multiplier` 1) before it spills to temporary files, and
 * PostgreSQL bounds each of them, not their number. A plan keeps them until the statement ends (an arm of a UNION that
 * has finished keeps its hash table), so a statement's memory is their number times `work_mem`: 100 arms of a UNION,
 * each grouping and sorting, took a backend to 580 MB at 4MB. So the plan's memory-using parts are counted
 * (memoryParts) and a plan past `svc.analytic.statement-memory` divided by `work_mem` is refused before it runs
 * (docs/analytic-guards.md, "Resources of one statement").
 */

/** Plan nodes that hold up to work_mem each: a sort, a hash join's table, a buffer of rows (tuplestore), a cache, a bitmap. */
const HOLDING = new Set([
  'Sort',
  'Incremental Sort',
  'Hash',
  'Materialize',
  'Memoize',
  'WindowAgg',
  'Bitmap Heap Scan',
  'Function Scan',
  'Table Function Scan',
  'Recursive Union',
]);

/** An aggregate that sorts its own input, as EXPLAIN VERBOSE writes it: `count(DISTINCT …)`, `string_agg(… ORDER BY …)`, `WITHIN GROUP (ORDER BY …)`. */
const SORTING_AGGREGATE = /\bDISTINCT\b|\bORDER BY\b/g;

/** A subquery run once into a hash table (`x in (select …)`), as EXPLAIN writes it in the expression that reads it. */
const HASHED_SUBPLAN = /\bhashed SubPlan (\d+)\b/g;

interface PlanNode {
  'Node Type'?: string;
  Strategy?: string;
  'Subplan Name'?: string;
  'Grouping Sets'?: { 'Sort Key'?: unknown }[];
  Output?: unknown;
  Filter?: unknown;
  Plans?: PlanNode[];
}

/**
 * The parts of a plan (EXPLAIN (VERBOSE, FORMAT JSON)'s `Plan`) that may each hold up to work_mem at once: sorts
 * (incremental too), hashes of hash joins, hashed aggregates (one for a node's hash tables, which share it), hashed set
 * operations, materialized rows, memoize caches, window buffers, bitmaps, each CTE's rows, each hashed subquery, each
 * further sort of an aggregate over grouping sets, and each aggregate that sorts its input on its own (DISTINCT, ORDER
 * BY, WITHIN GROUP: counted from the aggregate node's text, so a string constant spelling them counts too, never fewer).
 */
export function memoryParts(plan: unknown): number {
  let parts = 0;
  const hashed = new Set<string>();
  const visit = (node: PlanNode): void => {
    const type = node['Node Type'];
    if (type !== undefined && HOLDING.has(type)) parts++;
    if ((type === 'Aggregate' || type === 'SetOp') && (node.Strategy === 'Hashed' || node.Strategy === 'Mixed')) parts++;
    if (type === 'Aggregate') {
      parts += (node['Grouping Sets'] ?? []).filter((set) => set['Sort Key'] !== undefined).length;
      parts += (JSON.stringify([node.Output ?? [], node.Filter ?? '']).match(SORTING_AGGREGATE) ?? []).length;
    }
    if (node['Subplan Name']?.startsWith('CTE ')) parts++;
    for (const child of node.Plans ?? []) visit(child);
  };
  visit(plan as PlanNode);
  for (const m of JSON.stringify(plan).matchAll(HASHED_SUBPLAN)) hashed.add(m[1]!);
  return parts + hashed.size;
}

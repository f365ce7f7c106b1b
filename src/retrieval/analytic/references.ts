import { parseSync } from 'libpg-query';
import { ALLOWED_CAST_TYPES, ALLOWED_FUNCTIONS, ALLOWED_OPERATORS, ALLOWED_SQL_VALUE_FUNCTIONS } from './allowlist.js';
import { type Body, bodyOf, GuardRefusal, integerConst, isBody, list, literalText, names, nodeOf, stringOf } from './ast.js';
import type { CardColumn, CardRelation, SchemaCard } from './schema-card.js';
import { checkSelectBody, MAX_QUERY_CHARS } from './statement-shape.js';
import { domainViolation, LIKE_STEPS, type Origin } from './value-domains.js';
import {
  BOUNDED, bounded, build, copy, FUNCTION_SIZES, grow, largest, MAX_SHORT_EXPONENT, type NumberClass, numberOf, readBack, type Size, weightOf,
} from './value-size.js';

/** A relation in a FROM clause, as column references see it. */
interface Item {
  /** The name that qualifies its columns: its alias, else its relation or CTE name; undefined for an unaliased subquery. */
  alias: string | undefined;
  /** Set for a relation of the card: the real table may hold columns the card does not show. */
  card?: { relation: CardRelation; schema: string; rel: string; explicitAlias: boolean };
  /** The columns known by name, in order, with the card column each one reads when that is known. */
  columns: Map<string, Origin | undefined>;
  /** For a CTE, subquery or VALUES list: how large each named column's values can be (value-size.ts). */
  sizes?: Map<string, Size>;
  /** For a CTE, subquery or VALUES list: what each named column's expression weighs (MAX_INLINED_NODES, MAX_LONG_ARITHMETIC). */
  weights?: Map<string, Weight>;
  /** True when some of its columns have names the guard cannot predict (a subquery's unnamed expression). */
  opaque: boolean;
  /** A card relation computed at read time: the parsed SELECT (wrapped) that replaces it in FROM. */
  subquery?: unknown;
}

/** The FROM items one query level sees, and the levels around it. */
interface Level {
  items: Item[];
  parent: Level | undefined;
}

/** One output column of a query: its name when predictable, and the card column it passes through unchanged. */
interface Output {
  name: string | undefined;
  origin: Origin | undefined;
  /** How large its values can be (value-size.ts). */
  size: Size;
  /** What its expression weighs where PostgreSQL puts it in place of a reference (MAX_INLINED_NODES, MAX_LONG_ARITHMETIC). */
  weight: Weight;
}

/**
 * What an expression weighs where PostgreSQL puts it in place of a reference: its nodes
 * (MAX_INLINED_NODES), of them its operations whose time grows with the square of a number's length
 * (MAX_LONG_ARITHMETIC), the pieces of built values its operations hold until the row is done
 * (MAX_HELD_PIECES), and its operations that read a grown value whole (MAX_GROWN_READS).
 */
const WEIGHT_KEYS = ['nodes', 'arithmetic', 'pieces', 'scans'] as const;
type Weight = Record<(typeof WEIGHT_KEYS)[number], number>;

const weighing = (w: Partial<Weight>): Weight => ({ nodes: 0, arithmetic: 0, pieces: 0, scans: 0, ...w });
const NO_WEIGHT: Weight = weighing({});
const combined = (a: Weight, b: Weight | undefined, f: (x: number, y: number) => number): Weight =>
  Object.fromEntries(WEIGHT_KEYS.map((k) => [k, f(a[k], b?.[k] ?? 0)])) as Weight;
const heavier = (a: Weight, b: Weight | undefined): Weight => combined(a, b, Math.max);

type Ctes = ReadonlyMap<string, Output[]>;

/** The keys each node type may carry; any other key (a construct this guard does not know) is refused. */
const KNOWN_KEYS: Record<string, ReadonlySet<string>> = {
  SelectStmt: keys(
    'distinctClause targetList fromClause whereClause groupClause groupDistinct havingClause windowClause valuesLists sortClause',
    'limitOffset limitCount limitOption withClause op all larg rarg',
  ),
  ResTarget: keys('name val location'),
  ColumnRef: keys('fields location'),
  A_Const: keys('ival fval sval boolval isnull location'),
  A_Expr: keys('kind name lexpr rexpr location rexpr_list_start rexpr_list_end'),
  BoolExpr: keys('boolop args location'),
  NullTest: keys('arg nulltesttype argisrow location'),
  BooleanTest: keys('arg booltesttype location'),
  FuncCall: keys('funcname args agg_order agg_filter over agg_within_group agg_star agg_distinct func_variadic funcformat location'),
  WindowDef: keys('name refname partitionClause orderClause frameOptions startOffset endOffset location'),
  SortBy: keys('node sortby_dir sortby_nulls useOp location'),
  TypeCast: keys('arg typeName location'),
  CaseExpr: keys('arg args defresult location'),
  CaseWhen: keys('expr result location'),
  CoalesceExpr: keys('args location'),
  MinMaxExpr: keys('op args location'),
  SubLink: keys('subLinkType testexpr operName subselect location'),
  A_ArrayExpr: keys('elements location list_start list_end'),
  SQLValueFunction: keys('op typmod location'),
  List: keys('items'),
  GroupingFunc: keys('args location'),
  GroupingSet: keys('kind content location'),
  RangeVar: keys('schemaname relname inh relpersistence alias location'),
  RangeSubselect: keys('lateral subquery alias'),
  JoinExpr: keys('jointype isNatural larg rarg usingClause join_using_alias quals alias rtindex'),
  CommonTableExpr: keys('ctename aliascolnames ctematerialized ctequery location'),
};

function keys(...groups: string[]): ReadonlySet<string> {
  return new Set(groups.flatMap((g) => g.split(' ')));
}

/** Constructs refused by name, with the words a user reads. */
const REFUSED_CONSTRUCTS: Record<string, string> = {
  RowExpr: 'Row constructors are not allowed.',
  A_Indirection: 'Subscripts and field selection are not allowed.',
  ParamRef: 'Query parameters ($1) are not allowed.',
  CollateClause: 'COLLATE is not allowed.',
  RangeFunction: 'Functions in FROM are not allowed.',
  RangeTableSample: 'TABLESAMPLE is not allowed.',
  RangeTableFunc: 'XMLTABLE is not allowed.',
  JsonTable: 'JSON_TABLE is not allowed.',
  XmlExpr: 'XML functions are not allowed.',
  XmlSerialize: 'XMLSERIALIZE is not allowed.',
};

const ALLOWED_EXPR_KINDS = new Set([
  'AEXPR_OP', 'AEXPR_OP_ANY', 'AEXPR_OP_ALL', 'AEXPR_DISTINCT', 'AEXPR_NOT_DISTINCT', 'AEXPR_NULLIF', 'AEXPR_IN', 'AEXPR_LIKE',
  'AEXPR_ILIKE', 'AEXPR_SIMILAR', 'AEXPR_BETWEEN', 'AEXPR_NOT_BETWEEN', 'AEXPR_BETWEEN_SYM', 'AEXPR_NOT_BETWEEN_SYM',
]);
/** Operators that compare two values in place (A_Expr names; IN, BETWEEN and IS DISTINCT FROM use them too). */
const COMPARISONS = new Set(['=', '<>', '<', '>', '<=', '>=']);
const ALLOWED_SUBLINKS = new Set(['EXISTS_SUBLINK', 'ALL_SUBLINK', 'ANY_SUBLINK', 'EXPR_SUBLINK', 'ARRAY_SUBLINK']);

/**
 * The most columns `*` may stand for in one query, all its select lists together: PostgreSQL's most
 * for one select list (MaxTupleAttributeNumber). `*` grows the query as the guards rewrite it (as
 * entity relations do, MAX_ENTITY_SQL_CHARS): a query of 20,000 characters holds 10,000 of them, and
 * over a card relation of 6 columns they made a statement of 1.1 MB, over 50 columns 10 MB, whose
 * rendering and parsing again held the hub's event loop for 2.6 s and 29 s before PostgreSQL refused it.
 */
const MAX_STAR_COLUMNS = 1664;

/**
 * The most relations one query may read: each card table named, each naming of an entity counting the
 * tables its SQL reads, each naming of a CTE the relations of its query (PostgreSQL puts a CTE named once,
 * or NOT MATERIALIZED, in place of the naming), and a subquery, VALUES list or CTE in FROM, or under IN
 * or EXISTS (which become joins), that reads no table one. PostgreSQL's planner takes about a megabyte of
 * memory for each relation of a query, whatever their rows, and more past a hundred: 400 tables joined in a
 * query of 12 KB took a backend to 788 MB while it planned, 200 subqueries of two tables each (20 KB) to
 * 1 GB within the 5 s statement timeout, 600 VALUES lists joined to 1.4 GB, 500 `id in (select 1 offset 0)`
 * to 175 MB; 100 take some 100 MB. A question joins a few.
 */
export const MAX_RELATIONS = 100;

/**
 * The most aggregates with DISTINCT or ORDER BY (`count(distinct …)`, `string_agg(… order by …)`; not WITHIN GROUP)
 * one query may hold. PostgreSQL's planner looks for one order of the input that serves several of them, comparing
 * each with the others, in a time that grows with about the cube of their number and in which it does not look at
 * the statement timeout: 100 planned in 66 ms, 300 in 2.1 s, 600 (a query of 18 KB) in 23 s under a 2 s timeout.
 * A question counts a few distinct values.
 */
export const MAX_SORTED_AGGREGATES = 64;

/**
 * The most window functions (each OVER) one query may hold. Each window of its own ordering is a sort and a
 * WindowAgg node that carries the results of the ones below it, so the planner's memory grows with the square of
 * their number and its time faster, without a look at the statement timeout: 100 planned in 60 ms (6 MB), 200 in
 * 330 ms (25 MB), 800 (a query of 20 KB over one table) took a backend to 750 MB and ran 14.8 s under a 2 s timeout,
 * still planning. A question ranks or compares with the previous row a few times.
 */
export const MAX_WINDOW_FUNCTIONS = 64;

/**
 * The most characters of entity relations' SQL (resolveSubquery) one query may hold, each naming of
 * one counting: five times the longest query the guards read. Each naming puts the entity's whole
 * SELECT in the statement, which the hub parses and renders three times on its event loop: 1,300
 * namings of a 343-character entity in a query of 20,000 characters made a statement of 484 KB (1 s),
 * and an entity's SELECT alone (without its conflict ledger, src/entities/relation.ts) reaches 18 KB
 * with 5 sources and 30 columns, 376 KB with 16 and 200.
 */
const MAX_ENTITY_SQL_CHARS = 5 * MAX_QUERY_CHARS;

/**
 * The most expression nodes one query may stand for once each reference to a column of a subquery
 * or CTE counts the nodes of that column's expression: PostgreSQL flattens such a subquery (a CTE
 * named once, or NOT MATERIALIZED, too) by putting the column's expression in place of every
 * reference, in the planner's memory and in every row's evaluation, and it checks for the statement
 * timeout between rows, not inside one row's expressions. A column that reads the one below twice
 * (`select s.b + s.b as b from (…) s`) doubles at each level: 20 levels, a query of 1 KB, ran 6.5 s
 * under a 2 s timeout, 30 levels would be 2^29 copies (hours, and more memory than the server has).
 * Counted so, a query's own text (20,000 characters) holds at most about 10,000 nodes.
 */
export const MAX_INLINED_NODES = 50_000;

/**
 * Operators and functions whose time grows with the square of a number's length: a `numeric` holds up
 * to 131,072 digits (`2::numeric ^ 400000`, `1e131000`, or a stored value), and one product, quotient,
 * power or root of such numbers takes 0.1 to 0.5 s of one server core, inside which PostgreSQL does not
 * look at the statement timeout; nor between the operations of one row's expressions. A query's text
 * held about 4,900 of them (`a*a + a*a + …` over a CTE's 60,206-digit `a`: 100 of them ran 11.5 s
 * under a 2 s timeout), some ten minutes of a core. `+`, `-`, comparisons and casts take time in
 * proportion to the length: milliseconds.
 */
const LONG_ARITHMETIC_OPERATORS = new Set(['*', '/', '%', '^']);
const LONG_ARITHMETIC_FUNCTIONS = new Set(['power', 'sqrt', 'div', 'mod']);

/**
 * The most LONG_ARITHMETIC operations one query may write, each reference to a subquery or CTE column
 * counting those of its expression (MAX_INLINED_NODES): what one row's evaluation may run past the
 * statement timeout is then at most 64 such operations, about 6 to 30 s of one core on the largest
 * numbers. A question's ratios and percentages take a few each.
 */
export const MAX_LONG_ARITHMETIC = 64;

/**
 * The most pieces of built values (value-size.ts: `||`, concat, concat_ws, and what copies or casts
 * such a value) one query's operations may hold, each reference to a subquery or CTE column counting
 * those of its expression (MAX_INLINED_NODES). Each such operation keeps its result until the row is
 * done, so a chain of n pieces holds 2 + 3 + … + n of them (5,049 for 100), and PostgreSQL builds a
 * column's chain again at every reference it puts the expression in place of: a chain of 100 pieces
 * over a 10,001-character number read ten times (`length(c.s) + length(c.s) + …`, a query of 704
 * characters) took a backend to 540 MB. With this bound one row's operations hold at most this many
 * pieces of built values, each piece no larger than the largest value the query reads (a literal, a
 * stored value, a short number's text), a long number's text (value-size.ts, up to 147,457
 * characters) counting LONG_NUMBER_WEIGHT pieces, as it counts that many of the MAX_INLINED_NODES
 * nodes: two chains of 99 pieces over `(1e131000)::text` took a backend to 1.9 GB when each counted
 * one. A question's names and labels (`first_name || ' ' || last_name`: 5) take a few dozen.
 */
export const MAX_HELD_PIECES = 10_000;

/**
 * The most operations one query may run that read a grown value (value-size.ts: string_agg,
 * array_agg, ARRAY(subquery), a built value read back) whole, in place: a comparison, IN, BETWEEN,
 * NULLIF, GREATEST or LEAST, CASE's subject, length, position, strpos, min and max…, each reference
 * to a subquery or CTE column counting those of its expression (MAX_INLINED_NODES). Such a value
 * holds up to 1 GB, and PostgreSQL looks at the statement timeout neither inside one such reading
 * nor between the operations of one row's expressions: 800 `position('zz' in c.s)` over a 25 MB
 * string_agg ran 76 s under a 2 s timeout. A question measures or compares such a value a few times.
 */
export const MAX_GROWN_READS = 64;

function isSystemSchema(schema: string): boolean {
  return schema === 'information_schema' || schema.startsWith('pg_');
}

/**
 * Guards 2 and 3 over one SELECT, rewriting it on the way: every relation of the card becomes the
 * tenant's real table (with its card name as alias, so references keep working), `*` becomes the
 * card's columns, and a GROUP BY on an output name becomes its position. Guard 2 refusals are
 * thrown; the first guard 3 refusal is kept in `valueRefusal` (guard 2 outranks it).
 */
export class ReferenceWalker {
  private readonly relations = new Map<string, CardRelation>();
  valueRefusal: string | undefined;
  /** The size of each expression node walked so far (guard 2's bound on what a statement builds). */
  private readonly sizes = new WeakMap<object, Size>();
  /** The output columns of each subquery of a SubLink walked so far. */
  private readonly subqueryOutputs = new WeakMap<object, Output[]>();
  /** What is left of the query's steps of LIKE matching against declared values (guard 3). */
  private readonly likeBudget = { left: LIKE_STEPS };
  /** The columns `*` has stood for so far, in the whole query (at most MAX_STAR_COLUMNS). */
  private starColumns = 0;
  /** The relations the query reads so far, each naming of a CTE or an entity counting its own (at most MAX_RELATIONS). */
  private relationCount = 0;
  /** The aggregates with DISTINCT or ORDER BY in the query so far (at most MAX_SORTED_AGGREGATES). */
  private sortedAggregates = 0;
  /** The window functions (OVER) in the query so far (at most MAX_WINDOW_FUNCTIONS). */
  private windowFunctions = 0;
  /** The relations each CTE's query reads, by its outputs as the CTE map holds them. */
  private readonly cteRelations = new WeakMap<Output[], number>();
  /** The characters of entity relations' SQL put in the query so far (at most MAX_ENTITY_SQL_CHARS). */
  private entitySqlChars = 0;
  /** What the expressions walked so far weigh, each reference to a derived column counting what it stands for (MAX_INLINED_NODES, MAX_LONG_ARITHMETIC). */
  private inlined: Weight = NO_WEIGHT;

  constructor(
    private readonly card: SchemaCard,
    private readonly resolveRelation: (name: string) => string,
    private readonly resolveSubquery: (name: string) => string | undefined = () => undefined,
  ) {
    for (const relation of card.relations) this.relations.set(relation.name, relation);
  }

  /** Walks a whole query level; returns its output columns. */
  select(s: Body, outer: Level | undefined, ctes: Ctes): Output[] {
    this.known('SelectStmt', s);
    checkSelectBody(s);
    let visible = ctes;
    const withClause = isBody(s.withClause) ? s.withClause : undefined;
    for (const entry of list(withClause?.ctes)) {
      const cte = this.expect(entry, 'CommonTableExpr');
      const query = bodyOf(cte.ctequery, 'SelectStmt');
      if (!query) throw new GuardRefusal(1, 'Only a SELECT may run inside WITH.');
      const relationsBefore = this.relationCount;
      const outputs = renamed(this.select(query, outer, visible), names(cte.aliascolnames) ?? []);
      this.cteRelations.set(outputs, this.relationCount - relationsBefore);
      const next = new Map(visible);
      next.set(String(cte.ctename), outputs);
      visible = next;
    }

    const setOperation = s.op !== undefined && s.op !== 'SETOP_NONE';
    if (setOperation || list(s.valuesLists).length > 0) {
      // UNION/INTERSECT/EXCEPT and VALUES carry their rows elsewhere: no other clause may hide here.
      for (const key of ['targetList', 'fromClause', 'whereClause', 'groupClause', 'havingClause', 'windowClause', 'distinctClause']) {
        if (s[key] !== undefined) throw new GuardRefusal(2, 'This form of set operation or VALUES is not allowed.');
      }
    }
    if (setOperation) {
      if (!isBody(s.larg) || !isBody(s.rarg)) throw new GuardRefusal(2, 'A set operation without both of its queries cannot be checked.');
      const left = this.select(s.larg, outer, visible);
      const right = this.select(s.rarg, outer, visible);
      for (const sort of list(s.sortClause)) this.setOperationSort(sort, left);
      this.nonTopLimit(s, { items: [], parent: outer }, visible);
      return left.map((o, i) => ({ name: o.name, origin: undefined, size: largest([o.size, right[i]?.size ?? BOUNDED]), weight: heavier(o.weight, right[i]?.weight) }));
    }

    if (list(s.valuesLists).length > 0) {
      const level: Level = { items: [], parent: outer };
      const sizes: Size[] = [];
      const weights: Weight[] = [];
      for (const row of list(s.valuesLists)) {
        list(this.expect(row, 'List').items).forEach((item, i) => {
          const before = { ...this.inlined };
          this.expr(item, level, visible);
          sizes[i] = largest([sizes[i] ?? BOUNDED, this.sizeOf(item)]);
          weights[i] = heavier(this.since(before), weights[i]);
        });
      }
      const outputs = sizes.map((size, i) => ({ name: `column${i + 1}`, origin: undefined, size, weight: weights[i] ?? NO_WEIGHT }));
      for (const sort of list(s.sortClause)) this.setOperationSort(sort, outputs);
      this.nonTopLimit(s, level, visible);
      return outputs;
    }

    const level: Level = { items: [], parent: outer };
    for (const from of list(s.fromClause)) level.items.push(...this.from(from, level.items, outer, visible));

    const targets = this.expandStars(list(s.targetList), level);
    if (s.targetList !== undefined) s.targetList = targets;
    const outputs: Output[] = [];
    for (const target of targets) {
      const t = this.expect(target, 'ResTarget');
      const before = { ...this.inlined };
      const origin = this.expr(t.val, level, visible);
      const name = typeof t.name === 'string' ? t.name : figureName(t.val);
      outputs.push({ name, origin: isBody(bodyOf(t.val, 'ColumnRef')) ? origin : undefined, size: this.sizeOf(t.val), weight: this.since(before) });
    }
    const outputNames = new Set(outputs.map((o) => o.name).filter((n): n is string => n !== undefined));

    if (s.whereClause !== undefined) this.expr(s.whereClause, level, visible);
    if (s.havingClause !== undefined) this.expr(s.havingClause, level, visible);
    if (s.groupClause !== undefined) s.groupClause = list(s.groupClause).map((g) => this.groupItem(g, level, visible, outputs));
    for (const d of list(s.distinctClause)) {
      if (isBody(d) && Object.keys(d).length === 0) continue;
      this.sortExpr(d, level, visible, outputNames);
    }
    for (const sort of list(s.sortClause)) {
      const by = this.expect(sort, 'SortBy');
      if (by.useOp !== undefined) throw new GuardRefusal(2, 'ORDER BY … USING an operator is not allowed.');
      this.sortExpr(by.node, level, visible, outputNames);
    }
    for (const w of list(s.windowClause)) this.windowDef(this.expect(w, 'WindowDef'), level, visible);
    this.nonTopLimit(s, level, visible);
    return outputs;
  }

  /** LIMIT and OFFSET below the top level are expressions like any other; guard 4 owns the top level's. */
  private nonTopLimit(s: Body, level: Level, ctes: Ctes): void {
    if (s.limitCount !== undefined) this.expr(s.limitCount, level, ctes);
    if (s.limitOffset !== undefined) this.expr(s.limitOffset, level, ctes);
  }

  /** The top level's LIMIT and OFFSET are checked by guard 4, not walked here. */
  topLevel(s: Body): void {
    const count = s.limitCount;
    const offset = s.limitOffset;
    delete s.limitCount;
    delete s.limitOffset;
    try {
      this.select(s, undefined, new Map());
    } finally {
      if (count !== undefined) s.limitCount = count;
      if (offset !== undefined) s.limitOffset = offset;
    }
  }

  // ---------------------------------------------------------------- FROM

  /** One FROM item: the items it brings into scope. `before` are the items to its left (LATERAL sees them). */
  private from(node: unknown, before: Item[], outer: Level | undefined, ctes: Ctes): Item[] {
    const n = nodeOf(node);
    if (!n) throw new GuardRefusal(2, 'A FROM item cannot be read.');
    const refused = REFUSED_CONSTRUCTS[n.type];
    if (refused) throw new GuardRefusal(2, refused);
    switch (n.type) {
      case 'RangeVar': {
        const item = this.rangeVar(n.body, ctes);
        if (item.subquery !== undefined) {
          // An entity of the card: the hub's own subquery takes the relation's place under the same
          // name, after its references were checked against the card (it is not walked itself).
          const wrapper = node as Body;
          delete wrapper.RangeVar;
          wrapper.RangeSubselect = { subquery: item.subquery, alias: { aliasname: item.alias } };
          delete item.subquery;
        }
        return [item];
      }
      case 'RangeSubselect': {
        this.known('RangeSubselect', n.body);
        const query = bodyOf(n.body.subquery, 'SelectStmt');
        if (!query) throw new GuardRefusal(2, 'A subquery in FROM must be a SELECT.');
        const scope = n.body.lateral === true ? { items: [...before], parent: outer } : outer;
        const alias = isBody(n.body.alias) ? n.body.alias : undefined;
        const relationsBefore = this.relationCount;
        const outputs = renamed(this.select(query, scope, ctes), names(alias?.colnames) ?? []);
        // A subquery or VALUES list that reads no table is still a relation the planner joins.
        if (this.relationCount === relationsBefore) this.readRelations(1, typeof alias?.aliasname === 'string' ? alias.aliasname : 'a subquery');
        return [derivedItem(typeof alias?.aliasname === 'string' ? alias.aliasname : undefined, outputs)];
      }
      case 'JoinExpr': {
        this.known('JoinExpr', n.body);
        const j = n.body;
        if (j.isNatural === true) throw new GuardRefusal(2, 'NATURAL JOIN is not allowed: name the join columns (ON or USING).');
        if (j.alias !== undefined || j.join_using_alias !== undefined) throw new GuardRefusal(2, 'An alias on a JOIN is not allowed.');
        const left = this.from(j.larg, before, outer, ctes);
        const right = this.from(j.rarg, [...before, ...left], outer, ctes);
        for (const name of names(j.usingClause) ?? []) {
          for (const side of [left, right]) {
            if (lookUp(side, name) !== 'found') throw new GuardRefusal(2, `Column "${name}" of JOIN … USING is not on the schema card of every joined relation.`);
          }
        }
        if (j.quals !== undefined) this.expr(j.quals, { items: [...left, ...right], parent: outer }, ctes);
        return [...left, ...right];
      }
      default:
        throw new GuardRefusal(2, `${n.type} in FROM is not allowed.`);
    }
  }

  private rangeVar(r: Body, ctes: Ctes): Item {
    if ('catalogname' in r) throw new GuardRefusal(2, `Relation "${String(r.relname)}" may not name a database.`);
    this.known('RangeVar', r);
    const schema = typeof r.schemaname === 'string' ? r.schemaname : undefined;
    const rel = String(r.relname);
    const alias = isBody(r.alias) ? r.alias : undefined;
    const aliasName = typeof alias?.aliasname === 'string' ? alias.aliasname : undefined;
    if (schema === undefined) {
      const cte = ctes.get(rel);
      if (cte) {
        this.readRelations(Math.max(1, this.cteRelations.get(cte) ?? 0), rel);
        return derivedItem(aliasName ?? rel, renamed(cte, names(alias?.colnames) ?? []));
      }
      if (rel.startsWith('pg_')) throw new GuardRefusal(2, `System catalog "${rel}" cannot be queried.`);
      throw new GuardRefusal(2, `Relation "${rel}" must be named with its schema, exactly as on the schema card of scope "${this.card.scope}".`);
    }
    const full = `${schema}.${rel}`;
    if (isSystemSchema(schema)) throw new GuardRefusal(2, `System catalog "${full}" cannot be queried.`);
    const relation = this.relations.get(full);
    if (!relation) throw new GuardRefusal(2, `Relation "${full}" is not on the schema card of scope "${this.card.scope}".`);
    if (alias?.colnames !== undefined) throw new GuardRefusal(2, `Column aliases on "${full}" are not allowed; alias the columns in the select list.`);
    const name = aliasName ?? rel;
    const columns = new Map<string, Origin | undefined>();
    for (const column of relation.columns) columns.set(column.name, { relation: full, column });
    const item: Item = { alias: name, card: { relation, schema, rel, explicitAlias: aliasName !== undefined }, columns, opaque: false };
    const computed = this.resolveSubquery(full);
    if (computed !== undefined) {
      this.entitySqlChars += computed.length;
      if (this.entitySqlChars > MAX_ENTITY_SQL_CHARS) {
        throw new GuardRefusal(
          2,
          `The query's entity relations stand for more than ${MAX_ENTITY_SQL_CHARS} characters of SQL in all (${full}: ${computed.length} each time it is named): name them fewer times.`,
        );
      }
      item.subquery = this.computed(full, computed);
      this.readRelations(Math.max(1, JSON.stringify(item.subquery).split('"RangeVar":').length - 1), full);
      return item;
    }
    this.readRelations(1, full);
    const real = this.resolved(full);
    r.schemaname = real.schemaname;
    r.relname = real.relname;
    r.alias = { aliasname: name };
    return item;
  }

  /** Counts `n` relations read through `what` (a table, a CTE's or an entity's naming); past MAX_RELATIONS the query is refused. */
  private readRelations(n: number, what: string): void {
    this.relationCount += n;
    if (this.relationCount > MAX_RELATIONS) {
      throw new GuardRefusal(
        2,
        `The query reads more than ${MAX_RELATIONS} relations (${what}: ${n} each time it is named; each naming of a CTE or an entity counts the tables it reads): PostgreSQL's planner takes about a megabyte of memory for each, whatever their rows. Join fewer relations.`,
      );
    }
  }

  /** The tenant's real table for a card relation, as schema and name. */
  private resolved(name: string): { schemaname: string; relname: string } {
    const sql = this.resolveRelation(name);
    let stmts: unknown[] = [];
    try {
      stmts = parseSync(`select from ${sql}`).stmts ?? [];
    } catch {
      // reported below
    }
    const from = stmts.length === 1 ? list(bodyOf((stmts[0] as { stmt?: unknown }).stmt, 'SelectStmt')?.fromClause) : [];
    const r = from.length === 1 ? bodyOf(from[0], 'RangeVar') : undefined;
    if (!r || typeof r.schemaname !== 'string' || typeof r.relname !== 'string' || r.alias !== undefined || 'catalogname' in r) {
      throw new Error(`resolveRelation(${name}) did not answer a schema-qualified table name: ${sql}`);
    }
    return { schemaname: r.schemaname, relname: r.relname };
  }

  /** The parsed SELECT of a card relation computed at read time (wrapped, as a RangeSubselect holds it). */
  private computed(name: string, sql: string): unknown {
    let stmts: unknown[] = [];
    try {
      stmts = parseSync(sql).stmts ?? [];
    } catch {
      // reported below
    }
    const stmt = stmts.length === 1 ? (stmts[0] as { stmt?: unknown }).stmt : undefined;
    if (!bodyOf(stmt, 'SelectStmt')) throw new Error(`resolveSubquery(${name}) did not answer one SELECT: ${sql}`);
    return stmt;
  }

  // ---------------------------------------------------------------- select list

  /** `*`, `q.*` and `schema.rel.*` in a select list become the columns they stand for (a card relation's: its card columns). */
  private expandStars(targets: unknown[], level: Level): unknown[] {
    const out: unknown[] = [];
    for (const target of targets) {
      const t = this.expect(target, 'ResTarget');
      const ref = bodyOf(t.val, 'ColumnRef');
      const fields = list(ref?.fields);
      if (!ref || !bodyOf(fields[fields.length - 1], 'A_Star')) {
        out.push(target);
        continue;
      }
      const qualifier = names(fields.slice(0, -1));
      if (!qualifier) throw new GuardRefusal(2, 'A * reference cannot be read.');
      let items: Item[];
      if (qualifier.length === 0) items = level.items;
      else items = [this.qualified(qualifier, level).item];
      if (items.length === 0) throw new GuardRefusal(2, 'SELECT * needs a FROM clause.');
      for (const item of items) {
        if (item.opaque) throw new GuardRefusal(2, 'SELECT * over a subquery with unnamed columns is not allowed; name its columns.');
        this.starColumns += item.columns.size;
        if (this.starColumns > MAX_STAR_COLUMNS) {
          throw new GuardRefusal(2, `The query's * stand for more than ${MAX_STAR_COLUMNS} columns in all, the most PostgreSQL takes in one select list: name the columns the question needs.`);
        }
        for (const column of item.columns.keys()) {
          const fieldsOut = item.alias !== undefined ? [item.alias, column] : [column];
          out.push({ ResTarget: { val: { ColumnRef: { fields: fieldsOut.map((sval) => ({ String: { sval } })) } } } });
        }
      }
    }
    return out;
  }

  // ---------------------------------------------------------------- GROUP BY, ORDER BY

  /** A GROUP BY item; a bare name that is no readable column but an output name becomes the output's position. */
  private groupItem(node: unknown, level: Level, ctes: Ctes, outputs: Output[]): unknown {
    const set = bodyOf(node, 'GroupingSet');
    if (set) {
      this.known('GroupingSet', set);
      set.content = list(set.content).map((c) => this.groupItem(c, level, ctes, outputs));
      return node;
    }
    const bare = bareName(node);
    if (bare !== undefined && resolveBare(bare, level) !== 'found') {
      const position = outputs.findIndex((o) => o.name === bare);
      if (position >= 0) return integerConst(position + 1);
    }
    this.expr(node, level, ctes);
    return node;
  }

  /** ORDER BY and DISTINCT ON: a bare name may be an output column (PostgreSQL prefers the output then). */
  private sortExpr(node: unknown, level: Level, ctes: Ctes, outputNames: ReadonlySet<string>): void {
    const bare = bareName(node);
    if (bare !== undefined && outputNames.has(bare)) return;
    this.expr(node, level, ctes);
  }

  private setOperationSort(sort: unknown, outputs: Output[]): void {
    const by = this.expect(sort, 'SortBy');
    if (by.useOp !== undefined) throw new GuardRefusal(2, 'ORDER BY … USING an operator is not allowed.');
    const bare = bareName(by.node);
    if (bare !== undefined && outputs.some((o) => o.name === bare)) return;
    const c = bodyOf(by.node, 'A_Const');
    if (c && isBody(c.ival)) return;
    throw new GuardRefusal(2, 'ORDER BY of UNION, INTERSECT, EXCEPT or VALUES may only name output columns or positions.');
  }

  private windowDef(w: Body, level: Level, ctes: Ctes): void {
    this.known('WindowDef', w);
    for (const p of list(w.partitionClause)) this.expr(p, level, ctes);
    for (const o of list(w.orderClause)) {
      const by = this.expect(o, 'SortBy');
      if (by.useOp !== undefined) throw new GuardRefusal(2, 'ORDER BY … USING an operator is not allowed.');
      this.expr(by.node, level, ctes);
    }
    if (w.startOffset !== undefined) this.expr(w.startOffset, level, ctes);
    if (w.endOffset !== undefined) this.expr(w.endOffset, level, ctes);
  }

  // ---------------------------------------------------------------- expressions

  /**
   * Checks one expression; answers the card column it is (a bare column reference, possibly cast),
   * if any. Its size (value-size.ts) is kept for the expressions around it, and a growing
   * operation over an operand that grew already is refused.
   */
  private expr(node: unknown, level: Level, ctes: Ctes): Origin | undefined {
    this.inline(weighing({ nodes: 1 + arrayLiteralElements(node), arithmetic: longArithmetic(node) ? 1 : 0 }));
    const origin = this.checkExpr(node, level, ctes);
    if (isBody(node) && !this.sizes.has(node)) {
      let size = this.measure(node);
      if (size.level === 0) {
        size = bounded(this.numberClass(node), this.charsOf(node));
        // A long number (or its text) this node makes, or a copy of a long literal, weighs its characters, at 1,000
        // a node (MAX_INLINED_NODES).
        if (weightOf(size) > 1) this.inline(weighing({ nodes: weightOf(size) - 1 }));
      }
      this.sizes.set(node, size);
      const pieces = this.held(node, size);
      const scans = this.grownReads(node);
      if (pieces > 0 || scans > 0) this.inline(weighing({ pieces, scans }));
    }
    return origin;
  }

  private checkExpr(node: unknown, level: Level, ctes: Ctes): Origin | undefined {
    const n = nodeOf(node);
    if (!n) throw new GuardRefusal(2, 'An expression cannot be read.');
    const b = n.body;
    const refused = REFUSED_CONSTRUCTS[n.type];
    if (refused) throw new GuardRefusal(2, refused);
    if (!KNOWN_KEYS[n.type]) throw new GuardRefusal(2, `The construct ${n.type} is not allowed.`);
    this.known(n.type, b);
    switch (n.type) {
      case 'ColumnRef': {
        const { origin, size } = this.columnRef(b, level);
        this.sizes.set(node as Body, size);
        return origin;
      }
      case 'A_Const':
        return undefined;
      case 'A_Expr': {
        const kind = String(b.kind);
        if (!ALLOWED_EXPR_KINDS.has(kind)) throw new GuardRefusal(2, `The operator form ${kind} is not allowed.`);
        const op = names(b.name);
        if (op?.length !== 1) throw new GuardRefusal(2, 'Schema-qualified operators (OPERATOR(…)) are not allowed.');
        const name = op[0]!;
        if (!name.startsWith('BETWEEN') && !name.startsWith('NOT BETWEEN') && !ALLOWED_OPERATORS.has(name)) {
          throw new GuardRefusal(2, `The operator ${name} is not allowed.`);
        }
        // LIKE, ILIKE and the regular-expression operators over ANY/ALL of an array run once per element within one
        // row's evaluation, which the statement timeout does not cut, ILIKE lowercasing a copy of its value each time:
        // `'{a,a,…}'::text[]` (or an array column) holds thousands of elements in one node. (ARRAY[…] was refused as a
        // grown value already; ANY (subquery) gives one pattern per row.)
        if ((kind === 'AEXPR_OP_ANY' || kind === 'AEXPR_OP_ALL') && !COMPARISONS.has(name)) {
          throw new GuardRefusal(
            2,
            `${kind === 'AEXPR_OP_ANY' ? 'ANY' : 'ALL'} with ${name} is not allowed over an array: each element copies the value it reads, and one array can hold thousands; join the patterns with OR (AND).`,
          );
        }
        const left = b.lexpr === undefined ? undefined : this.expr(b.lexpr, level, ctes);
        const right = b.rexpr === undefined ? undefined : this.expr(b.rexpr, level, ctes);
        this.noteValue(() => domainViolation(kind, name, b.lexpr, left, b.rexpr, right, this.likeBudget));
        return undefined;
      }
      case 'List':
        for (const item of list(b.items)) this.expr(item, level, ctes);
        return undefined;
      case 'BoolExpr':
      case 'CoalesceExpr':
      case 'MinMaxExpr':
      case 'GroupingFunc':
        for (const arg of list(b.args)) this.expr(arg, level, ctes);
        return undefined;
      case 'NullTest':
      case 'BooleanTest':
        this.expr(b.arg, level, ctes);
        return undefined;
      case 'A_ArrayExpr':
        for (const e of list(b.elements)) this.expr(e, level, ctes);
        return undefined;
      case 'TypeCast': {
        const typeName = isBody(b.typeName) ? b.typeName : {};
        const type = names(typeName.names);
        const last = type?.[type.length - 1];
        if (!type || !last || type.length > 2 || (type.length === 2 && type[0] !== 'pg_catalog') || !ALLOWED_CAST_TYPES.has(last)) {
          throw new GuardRefusal(2, `A cast to ${type ? type.join('.') : 'this type'} is not allowed.`);
        }
        if (typeName.setof !== undefined || typeName.pct_type !== undefined) throw new GuardRefusal(2, 'This cast is not allowed.');
        if (last === 'bpchar') paddedLength(list(typeName.typmods));
        for (const mod of list(typeName.typmods)) this.expr(mod, level, ctes);
        return this.expr(b.arg, level, ctes);
      }
      case 'CaseExpr': {
        const subject = b.arg === undefined ? undefined : this.expr(b.arg, level, ctes);
        for (const w of list(b.args)) {
          const when = this.expect(w, 'CaseWhen');
          const value = this.expr(when.expr, level, ctes);
          if (b.arg !== undefined) this.noteValue(() => domainViolation('AEXPR_OP', '=', b.arg, subject, when.expr, value, this.likeBudget));
          this.expr(when.result, level, ctes);
        }
        if (b.defresult !== undefined) this.expr(b.defresult, level, ctes);
        return undefined;
      }
      case 'FuncCall':
        this.funcCall(b, level, ctes);
        return undefined;
      case 'SubLink': {
        if (!ALLOWED_SUBLINKS.has(String(b.subLinkType))) throw new GuardRefusal(2, `The subquery form ${String(b.subLinkType)} is not allowed.`);
        const op = b.operName === undefined ? ['='] : names(b.operName);
        if (op?.length !== 1 || !ALLOWED_OPERATORS.has(op[0]!)) throw new GuardRefusal(2, 'This subquery operator is not allowed.');
        if (b.testexpr !== undefined) this.expr(b.testexpr, level, ctes);
        const query = bodyOf(b.subselect, 'SelectStmt');
        if (!query) throw new GuardRefusal(2, 'A subquery must be a SELECT.');
        const relationsBefore = this.relationCount;
        this.subqueryOutputs.set(query, this.select(query, level, ctes));
        // IN and EXISTS become joins: one that reads no table is still a relation the planner joins.
        const joined = b.subLinkType === 'ANY_SUBLINK' || b.subLinkType === 'EXISTS_SUBLINK';
        if (joined && this.relationCount === relationsBefore) this.readRelations(1, 'a subquery');
        return undefined;
      }
      case 'SQLValueFunction':
        if (!ALLOWED_SQL_VALUE_FUNCTIONS.has(String(b.op))) {
          throw new GuardRefusal(2, `${String(b.op).replace(/^SVFOP_/, '').replace(/_N$/, '')} is not allowed.`);
        }
        return undefined;
      default:
        throw new GuardRefusal(2, `The construct ${n.type} is not allowed here.`);
    }
  }

  private funcCall(f: Body, level: Level, ctes: Ctes): void {
    const name = names(f.funcname);
    const last = name?.[name.length - 1];
    const qualifiedOk = name !== undefined && (name.length === 1 || (name.length === 2 && name[0] === 'pg_catalog'));
    if (!last || !qualifiedOk || !ALLOWED_FUNCTIONS.has(last)) {
      throw new GuardRefusal(2, `The function ${name ? name.join('.') : '(unreadable)'} is not allowed.`);
    }
    // VARIADIC passes an array as the arguments: concat_ws repeats its separator for every element, so one
    // array of thousands of elements (a string cast to text[], 2 characters each) makes as many copies of it.
    if (f.func_variadic !== undefined && f.func_variadic !== false) throw new GuardRefusal(2, 'VARIADIC is not allowed: pass the values as arguments.');
    // percentile_disc returns a copy of the ordered value for each fraction it is given: its fractions must be
    // numbers written in the query, each a node, not an array of thousands read from a column or a string.
    if (last === 'percentile_disc' && !list(f.args).every(fractions)) {
      throw new GuardRefusal(
        2,
        'percentile_disc takes a number or ARRAY[…] of numbers written in the query: it returns a copy of a value for each fraction, and an array from a column or a string (\'{…}\'::float8[]) can hold thousands.',
      );
    }
    if (f.agg_distinct === true || (list(f.agg_order).length > 0 && f.agg_within_group !== true)) {
      this.sortedAggregates += 1;
      if (this.sortedAggregates > MAX_SORTED_AGGREGATES) {
        throw new GuardRefusal(
          2,
          `The query has more than ${MAX_SORTED_AGGREGATES} aggregates with DISTINCT or ORDER BY: PostgreSQL's planner compares each with the others, in a time that grows with the cube of their number and that the statement timeout does not cut. Use fewer.`,
        );
      }
    }
    for (const arg of list(f.args)) this.expr(arg, level, ctes);
    for (const o of list(f.agg_order)) this.expr(this.expect(o, 'SortBy').node, level, ctes);
    if (f.agg_filter !== undefined) this.expr(f.agg_filter, level, ctes);
    if (isBody(f.over)) {
      this.windowFunctions += 1;
      if (this.windowFunctions > MAX_WINDOW_FUNCTIONS) {
        throw new GuardRefusal(
          2,
          `The query has more than ${MAX_WINDOW_FUNCTIONS} window functions (OVER): PostgreSQL's planner takes memory growing with the square of their number, and a time the statement timeout does not cut. Use fewer.`,
        );
      }
      this.windowDef(f.over, level, ctes);
    }
  }

  // ---------------------------------------------------------------- column references

  private columnRef(ref: Body, level: Level): { origin: Origin | undefined; size: Size } {
    const fields = names(ref.fields);
    if (!fields) throw new GuardRefusal(2, '* may only stand alone in the select list (use count(*) to count rows).');
    if (fields.length === 1) {
      const name = fields[0]!;
      for (let l: Level | undefined = level; l; l = l.parent) {
        const found = l.items.find((i) => i.columns.has(name));
        if (found) {
          this.inlineColumn(found, name);
          return { origin: found.columns.get(name), size: columnSize(found, name) };
        }
        const cards = l.items.filter((i) => i.card);
        if (cards.length > 0) {
          throw new GuardRefusal(2, `Column "${name}" is not on the schema card for ${cards.map((i) => i.card!.relation.name).join(', ')}.`);
        }
      }
      throw new GuardRefusal(2, `Column "${name}" is not a column of any relation in the query.`);
    }
    if (fields.length > 3) throw new GuardRefusal(2, `The reference ${fields.join('.')} is not allowed.`);
    const column = fields[fields.length - 1]!;
    const { item } = this.qualified(fields.slice(0, -1), level);
    if (!item.columns.has(column)) {
      if (item.card) throw new GuardRefusal(2, `Column "${column}" is not on the schema card for ${item.card.relation.name}.`);
      throw new GuardRefusal(2, `Column "${column}" is not a column of "${item.alias ?? 'the subquery'}".`);
    }
    // schema.relation.column: the relation now carries its card name as alias.
    if (fields.length === 3) ref.fields = [item.alias!, column].map((sval) => ({ String: { sval } }));
    this.inlineColumn(item, column);
    return { origin: item.columns.get(column), size: columnSize(item, column) };
  }

  /** Counts a reference to a column of a subquery, CTE or VALUES list as the expression it stands for (MAX_INLINED_NODES). */
  private inlineColumn(item: Item, column: string): void {
    const weight = item.weights?.get(column);
    // The reference itself was counted as one node already.
    if (weight && WEIGHT_KEYS.some((k) => weight[k] > (k === 'nodes' ? 1 : 0))) {
      this.inline({ ...weight, nodes: Math.max(0, weight.nodes - 1) }, `${item.alias ?? 'subquery'}.${column}`, weight);
    }
  }

  /** What the expressions walked since `before` weigh. */
  private since(before: Weight): Weight {
    return combined(this.inlined, before, (x, y) => x - y);
  }

  /** Adds `weight` to the query's as PostgreSQL flattens it; past MAX_INLINED_NODES, MAX_LONG_ARITHMETIC, MAX_HELD_PIECES or MAX_GROWN_READS the query is refused. */
  private inline(weight: Weight, column?: string, each?: Weight): void {
    this.inlined = combined(this.inlined, weight, (x, y) => x + y);
    if (this.inlined.nodes > MAX_INLINED_NODES) {
      throw new GuardRefusal(
        2,
        `The query stands for more than ${MAX_INLINED_NODES} expression nodes once each reference to a column of a subquery or CTE counts that column's expression${column ? ` (${column}: ${each!.nodes} nodes each time it is read)` : ''}: PostgreSQL puts the expression in place of every reference. Compute such a column once and read it fewer times.`,
      );
    }
    if (this.inlined.arithmetic > MAX_LONG_ARITHMETIC) {
      throw new GuardRefusal(
        2,
        `The query multiplies, divides, raises to a power or takes a root more than ${MAX_LONG_ARITHMETIC} times${column ? ` (${column} stands for ${each!.arithmetic} each time it is read)` : ''}: on long numbers each takes up to half a second that the statement timeout does not cut. Compute fewer of them.`,
      );
    }
    if (this.inlined.pieces > MAX_HELD_PIECES) {
      throw new GuardRefusal(
        2,
        `The query's joins with || and concat hold more than ${MAX_HELD_PIECES} pieces of values once each reference to a column of a subquery or CTE counts that column's expression${column ? ` (${column}: ${each!.pieces} pieces each time it is read)` : ''}: each join keeps its result until the row is done, and PostgreSQL builds a column's joins again at every reference. Join fewer values, or read such a column fewer times.`,
      );
    }
    if (this.inlined.scans > MAX_GROWN_READS) {
      throw new GuardRefusal(
        2,
        `The query compares or measures values gathered from many rows (string_agg, array_agg, ARRAY(subquery), a built value read back) more than ${MAX_GROWN_READS} times${column ? ` (${column} stands for ${each!.scans} each time it is read)` : ''}: each reads up to a gigabyte in a time the statement timeout does not cut. Read them fewer times.`,
      );
    }
  }

  /** The item a qualifier (`p`, `partners` or `ext.partners`) names, innermost level first, as PostgreSQL looks it up. */
  private qualified(qualifier: string[], level: Level): { item: Item } {
    for (let l: Level | undefined = level; l; l = l.parent) {
      const item =
        qualifier.length === 1
          ? l.items.find((i) => i.alias === qualifier[0])
          : l.items.find((i) => i.card && !i.card.explicitAlias && i.card.schema === qualifier[0] && i.card.rel === qualifier[1]);
      if (item) return { item };
    }
    const text = qualifier.join('.');
    if (qualifier.length === 2 && isSystemSchema(qualifier[0]!)) throw new GuardRefusal(2, `System catalog "${text}" cannot be queried.`);
    throw new GuardRefusal(2, `"${text}" is not a relation of the query's FROM clause.`);
  }

  // ---------------------------------------------------------------- value sizes

  /** The size of an expression walked already (one not walked is taken as grown: refused wherever size matters). */
  private sizeOf(node: unknown): Size {
    return (isBody(node) ? this.sizes.get(node) : undefined) ?? { level: 2, what: 'an expression of unknown size' };
  }

  /** The size of an expression node whose operands were walked; refuses a growing operation over grown operands. */
  private measure(node: Body): Size {
    const n = nodeOf(node);
    if (!n) return BOUNDED;
    const b = n.body;
    const of = (x: unknown) => this.sizeOf(x);
    switch (n.type) {
      case 'A_Expr': {
        const op = names(b.name)?.[0] ?? '';
        if (b.kind === 'AEXPR_OP' && op === '||') return build('||', [of(b.lexpr), of(b.rexpr)], true);
        if (b.kind === 'AEXPR_NULLIF') return of(b.lexpr);
        // Comparing reads a value in place; LIKE, ILIKE, SIMILAR TO and regular expressions may copy it. A prefix
        // operator (`-total`) has no left operand.
        if (!COMPARISONS.has(op.replace(/^(NOT )?BETWEEN.*/, '='))) copy(op, [b.lexpr, b.rexpr].filter((x) => x !== undefined).map(of));
        return BOUNDED;
      }
      case 'List':
        return largest(list(b.items).map(of));
      case 'TypeCast': {
        const arg = copy('a cast', [of(b.arg)]);
        return arg.level === 1 ? { level: 2, what: `a cast of the result of ${arg.op}` } : arg;
      }
      case 'CaseExpr':
        return largest([...list(b.args).map((w) => of(bodyOf(w, 'CaseWhen')?.result)), ...(b.defresult === undefined ? [] : [of(b.defresult)])]);
      case 'CoalesceExpr':
      case 'MinMaxExpr':
        return largest(list(b.args).map(of));
      case 'A_ArrayExpr':
        return grow('ARRAY[…]', list(b.elements).map(of), true, { level: 2, what: 'ARRAY[…]' });
      case 'SubLink': {
        const first = this.subqueryOutputs.get(bodyOf(b.subselect, 'SelectStmt') ?? {})?.[0];
        if (b.subLinkType === 'ARRAY_SUBLINK') {
          return grow('ARRAY(subquery)', [first?.size ?? BOUNDED], true, { level: 2, what: 'ARRAY(subquery)' });
        }
        if (b.subLinkType === 'EXPR_SUBLINK') return readBack(first?.size, 'a scalar subquery');
        const op = b.operName === undefined ? '=' : (names(b.operName)?.[0] ?? '');
        if (!COMPARISONS.has(op)) copy(op, [of(b.testexpr), first?.size ?? BOUNDED]);
        return BOUNDED;
      }
      case 'FuncCall': {
        const name = names(b.funcname)?.at(-1) ?? '';
        const args = [...list(b.args), ...list(b.agg_order).map((o) => bodyOf(o, 'SortBy')?.node)].map(of);
        switch (FUNCTION_SIZES[name]) {
          case 'gathers':
            return grow(name, args, true, { level: 2, what: `the output of ${name}` });
          case 'sums':
            // concat_ws writes its separator (the first argument) between every two of the others.
            return build(name, name === 'concat_ws' ? [...args, ...Array(Math.max(0, args.length - 3)).fill(args[0])] : args, false);
          case 'expands': {
            if (name !== 'to_char') return build(name, args, false);
            // to_char writes up to TO_CHAR_EXPANSION characters for each of its pattern's (`J`, a Julian day, 9 digits):
            // a literal pattern of at most MAX_SHORT_PATTERN characters makes a short value of its own; a longer one,
            // or one that is not a literal, counts TO_CHAR_EXPANSION pieces.
            const pattern = literalText(list(b.args)[1]);
            const built = build(name, [...args, ...Array(TO_CHAR_EXPANSION - 1).fill(args[1] ?? BOUNDED)], false);
            return pattern !== undefined && pattern.length <= MAX_SHORT_PATTERN ? BOUNDED : built;
          }
          case 'keeps':
            return largest(args);
          case 'copies':
            return copy(name, args);
          case 'own':
            return BOUNDED;
          default:
            return { level: 2, what: `the output of ${name}` };
        }
      }
      default:
        return BOUNDED;
    }
  }

  /**
   * What a bounded result may be as a number (value-size.ts, NumberClass), from its operands' walked
   * already: long when an operation can grow a number's digits past those of what it reads (a
   * product, quotient, power, variance, round or trunc to more than MAX_SHORT_EXPONENT places, a
   * literal with a larger exponent, a cast to numeric of to_char's text or of a long number's), or
   * when it passes on, copies or adds to a long operand; composed for to_char's text and what passes it on.
   */
  private numberClass(node: Body): NumberClass | undefined {
    const n = nodeOf(node);
    if (!n) return undefined;
    const b = n.body;
    const num = (x: unknown): NumberClass | undefined => {
      const s = this.sizeOf(x);
      return s.level === 0 ? s.number : undefined;
    };
    const most = (xs: unknown[]) => numberOf(...xs.map(num));
    switch (n.type) {
      case 'A_Const':
        return longLiteral(b) ? 'long' : undefined;
      case 'A_Expr': {
        const op = names(b.name)?.[0] ?? '';
        if (b.kind === 'AEXPR_NULLIF') return num(b.lexpr);
        if (b.kind !== 'AEXPR_OP') return undefined;
        if (DIGIT_GROWING_OPERATORS.has(op)) return 'long';
        return DIGIT_KEEPING_OPERATORS.has(op) ? most([b.lexpr, b.rexpr]) : undefined;
      }
      case 'TypeCast': {
        const typeName = isBody(b.typeName) ? b.typeName : {};
        const type = names(typeName.names)?.at(-1) ?? '';
        if (type === 'numeric' || type === 'decimal') {
          // numeric(p, s) holds at most 1,000 digits; text made by to_char or a long number's reads as a long number.
          if (list(typeName.typmods).length > 0) return undefined;
          const arg = this.sizeOf(b.arg);
          return arg.level > 0 || (arg.level === 0 && arg.number !== undefined) ? 'long' : undefined;
        }
        return TEXT_TYPES.has(type) ? num(b.arg) : undefined;
      }
      case 'FuncCall': {
        const name = names(b.funcname)?.at(-1) ?? '';
        const args = [...list(b.args), ...list(b.agg_order).map((o) => bodyOf(o, 'SortBy')?.node)];
        if (DIGIT_GROWING_FUNCTIONS.has(name)) return 'long';
        if (name === 'to_char') return 'composed';
        if (name === 'round' || name === 'trunc') {
          const places = list(b.args)[1];
          return places === undefined || shortPlaces(places) ? num(args[0]) : 'long';
        }
        if (FUNCTION_SIZES[name] === 'own' && !DIGIT_KEEPING_FUNCTIONS.has(name)) return undefined;
        return most(args);
      }
      case 'CaseExpr':
        return most([...list(b.args).map((w) => bodyOf(w, 'CaseWhen')?.result), b.defresult]);
      case 'CoalesceExpr':
      case 'MinMaxExpr':
        return most(list(b.args));
      case 'List':
        return most(list(b.items));
      case 'A_ArrayExpr':
        return most(list(b.elements));
      case 'SubLink': {
        if (b.subLinkType !== 'EXPR_SUBLINK' && b.subLinkType !== 'ARRAY_SUBLINK') return undefined;
        const first = this.subqueryOutputs.get(bodyOf(b.subselect, 'SelectStmt') ?? {})?.[0];
        return first?.size.level === 0 ? first.size.number : undefined;
      }
      default:
        return undefined;
    }
  }

  /**
   * The most characters of the query's own text a bounded result may be (value-size.ts, CHARS_PER_WEIGHT):
   * a string literal's, a char(n) cast's n, and what passes them on or copies them.
   */
  private charsOf(node: Body): number | undefined {
    const n = nodeOf(node);
    if (!n) return undefined;
    const b = n.body;
    const most = (xs: unknown[]) => {
      const chars = xs.map((x) => {
        const s = this.sizeOf(x);
        return s.level === 0 ? (s.chars ?? 0) : 0;
      });
      return Math.max(0, ...chars) || undefined;
    };
    switch (n.type) {
      case 'A_Const':
        return isBody(b.sval) && typeof b.sval.sval === 'string' ? b.sval.sval.length || undefined : undefined;
      case 'TypeCast': {
        const typeName = isBody(b.typeName) ? b.typeName : {};
        const type = names(typeName.names)?.at(-1) ?? '';
        if (!TEXT_TYPES.has(type)) return undefined;
        const padded = type === 'bpchar' ? Number(literalText(list(typeName.typmods)[0]) ?? 0) : 0;
        return Math.max(padded, most([b.arg]) ?? 0) || undefined;
      }
      case 'A_Expr':
        return b.kind === 'AEXPR_NULLIF' ? most([b.lexpr]) : undefined;
      case 'FuncCall': {
        const size = FUNCTION_SIZES[names(b.funcname)?.at(-1) ?? ''];
        return size === 'copies' || size === 'keeps' ? most([...list(b.args), ...list(b.agg_order).map((o) => bodyOf(o, 'SortBy')?.node)]) : undefined;
      }
      case 'CaseExpr':
        return most([...list(b.args).map((w) => bodyOf(w, 'CaseWhen')?.result), b.defresult]);
      case 'CoalesceExpr':
      case 'MinMaxExpr':
        return most(list(b.args));
      case 'SubLink': {
        const first = this.subqueryOutputs.get(bodyOf(b.subselect, 'SelectStmt') ?? {})?.[0];
        return b.subLinkType === 'EXPR_SUBLINK' && first?.size.level === 0 ? first.size.chars : undefined;
      }
      default:
        return undefined;
    }
  }

  /**
   * The pieces of built values (value-size.ts) the result `node` makes holds until the row is done
   * (MAX_HELD_PIECES): a `||`, concat or concat_ws, its built value's; an operation that copies a
   * built value (upper, a cast, lag, max, LIKE and the regular-expression operators), that value's.
   * What passes a value on without making one (CASE, COALESCE, GREATEST, NULLIF) and what reads it
   * in place (comparisons, length) hold none; a bounded result is one value, counted as its node.
   */
  private held(node: Body, size: Size): number {
    const n = nodeOf(node);
    if (!n) return 0;
    const b = n.body;
    const pieces = (s: Size) => (s.level === 1 ? s.held : 0);
    const of = (x: unknown) => pieces(this.sizeOf(x));
    switch (n.type) {
      case 'A_Expr': {
        const op = names(b.name)?.[0] ?? '';
        if (b.kind === 'AEXPR_OP' && op === '||') return pieces(size);
        if (b.kind === 'AEXPR_NULLIF' || COMPARISONS.has(op.replace(/^(NOT )?BETWEEN.*/, '='))) return 0;
        return Math.max(of(b.lexpr), of(b.rexpr));
      }
      case 'SubLink': {
        const op = b.operName === undefined ? '=' : (names(b.operName)?.[0] ?? '');
        return b.testexpr === undefined || COMPARISONS.has(op) ? 0 : of(b.testexpr);
      }
      case 'TypeCast':
        return of(b.arg);
      case 'FuncCall':
        return pieces(size);
      default:
        return 0;
    }
  }

  /**
   * The operands of `node` it reads whole in place that are grown values (MAX_GROWN_READS): every
   * operand of a comparison, function or subquery test that is one, CASE's subject once per WHEN.
   * What passes a value on (CASE results, COALESCE) and IS NULL read none.
   */
  private grownReads(node: Body): number {
    const n = nodeOf(node);
    if (!n) return 0;
    const b = n.body;
    const grown = (x: unknown) => (x !== undefined && this.sizeOf(x).level === 2 ? 1 : 0);
    switch (n.type) {
      case 'A_Expr': {
        // IN and BETWEEN compare their left operand with each value of their list, ANY and ALL with each element of
        // their array: ARRAY[…] counts its elements; another array (a string, a column) may hold thousands.
        const values = bodyOf(b.rexpr, 'List')?.items ?? bodyOf(b.rexpr, 'A_ArrayExpr')?.elements;
        const anyOrAll = b.kind === 'AEXPR_OP_ANY' || b.kind === 'AEXPR_OP_ALL';
        // A grown array (`('{' || … || '}')::text[]`, array_agg) may hold millions of elements.
        const right = values === undefined ? grown(b.rexpr) * (anyOrAll ? MAX_GROWN_READS + 1 : 1) : list(values).reduce((k: number, v) => k + grown(v), 0);
        return grown(b.lexpr) * (values === undefined ? (anyOrAll ? MAX_GROWN_READS + 1 : 1) : list(values).length) + right;
      }
      case 'MinMaxExpr':
      case 'FuncCall':
        return [...list(b.args), ...list(b.agg_order).map((o) => bodyOf(o, 'SortBy')?.node)].reduce((k: number, a) => k + grown(a), 0);
      case 'CaseExpr':
        return b.arg === undefined ? 0 : grown(b.arg) * list(b.args).length;
      case 'SubLink': {
        const first = this.subqueryOutputs.get(bodyOf(b.subselect, 'SelectStmt') ?? {})?.[0];
        if (b.subLinkType !== 'ANY_SUBLINK' && b.subLinkType !== 'ALL_SUBLINK') return 0;
        return grown(b.testexpr) + (first?.size.level === 2 ? 1 : 0);
      }
      default:
        return 0;
    }
  }

  // ---------------------------------------------------------------- helpers

  /**
   * Keeps the query's first guard 3 refusal. Once there is one, no other comparison is checked: each
   * refusal names the column's declared values (up to a thousand of 200 characters, an entity's), and
   * 1,815 comparisons of one query building that text each held the event loop for over a second.
   */
  private noteValue(check: () => string | undefined): void {
    if (this.valueRefusal === undefined) this.valueRefusal = check();
  }

  private expect(node: unknown, type: string): Body {
    const b = bodyOf(node, type);
    if (!b) throw new GuardRefusal(2, `Expected ${type} here; the construct ${nodeOf(node)?.type ?? 'found'} is not allowed.`);
    this.known(type, b);
    return b;
  }

  /** Refuses a node carrying a key this guard does not know (a construct it would otherwise not look at). */
  private known(type: string, b: Body): void {
    const allowed = KNOWN_KEYS[type];
    if (!allowed) return;
    for (const key of Object.keys(b)) if (!allowed.has(key)) throw new GuardRefusal(2, `The construct ${type}.${key} is not allowed.`);
  }
}

/** An operator or function of LONG_ARITHMETIC_OPERATORS or LONG_ARITHMETIC_FUNCTIONS. */
function longArithmetic(node: unknown): boolean {
  const op = bodyOf(node, 'A_Expr');
  if (op) return op.kind === 'AEXPR_OP' && LONG_ARITHMETIC_OPERATORS.has(names(op.name)?.at(-1) ?? '');
  const call = bodyOf(node, 'FuncCall');
  return call !== undefined && LONG_ARITHMETIC_FUNCTIONS.has(names(call.funcname)?.at(-1) ?? '');
}

/**
 * Operations that can grow a number's digits past those of what they read (NumberClass): a product of
 * two numbers of 1,000 digits has 2,000, a quotient by 1e-1000 adds 1,000 before the point, `10.0 ^ 131000`
 * has 131,001, a variance squares its values. The others keep them: `+`, `-` and `%` make no digit
 * outside those of their operands; sum adds a few, avg, stddev and sqrt at most 1,000 after the point.
 */
const DIGIT_GROWING_OPERATORS = new Set(['*', '/', '^']);
const DIGIT_KEEPING_OPERATORS = new Set(['+', '-', '%']);
const DIGIT_GROWING_FUNCTIONS = new Set(['power', 'div', 'variance', 'var_pop', 'var_samp']);
const DIGIT_KEEPING_FUNCTIONS = new Set(['sum', 'avg', 'abs', 'ceil', 'ceiling', 'floor', 'sign', 'mod', 'sqrt', 'stddev', 'stddev_pop', 'stddev_samp', 'round', 'trunc']);
/** Casts that keep their operand's text (so a long number's text stays long). */
const TEXT_TYPES = new Set(['text', 'varchar', 'bpchar', 'char']);

/**
 * to_char writes up to this many characters for each character of its pattern (`J`, a Julian day, 9
 * digits for a year of six; `RN` at most 15 characters, and once), and MAX_SHORT_PATTERN characters of
 * pattern at most 1,000 of text: what a value of its own may be.
 */
const TO_CHAR_EXPANSION = 10;
const MAX_SHORT_PATTERN = 100;

/**
 * A number literal, or a string PostgreSQL may read as one (`'1e131000'::numeric`, `1.0 + '1e131000'`,
 * or a part of it taken by substr), with an exponent beyond ±MAX_SHORT_EXPONENT: a long number from a
 * few characters. Any `e` followed by such digits counts (underscores between digits are read too).
 */
function longLiteral(c: Body): boolean {
  const fval = isBody(c.fval) && typeof c.fval.fval === 'string' ? c.fval.fval : undefined;
  const text = fval !== undefined ? (/^[+-]?0[xob]/i.test(fval) ? '' : fval) : isBody(c.sval) && typeof c.sval.sval === 'string' ? c.sval.sval : '';
  for (const m of text.matchAll(/[eE][+-]?([0-9_]*[0-9])/g)) if (Number(m[1]!.replaceAll('_', '')) > MAX_SHORT_EXPONENT) return true;
  return false;
}

/** round's or trunc's places written in the query as a whole number within ±MAX_SHORT_EXPONENT (`round(x, 2)`). */
function shortPlaces(node: unknown): boolean {
  const c = bodyOf(node, 'A_Const');
  if (!c || !isBody(c.ival)) return false;
  return Math.abs(typeof c.ival.ival === 'number' ? c.ival.ival : 0) <= MAX_SHORT_EXPONENT;
}

/**
 * The array elements a string constant may stand for, less the one node it counts: its commas.
 * Cast to an array type (`'{a,b,c}'::text[]`, or taken as one by ANY or ALL, `country = any
 * ('{FR,DE}')`), here or after a CTE or subquery column passed it on (`c.s::text[]`), each element
 * is a value of its own, which ANY, ALL and percentile_cont go through within one row's evaluation,
 * so each counts as a node (MAX_INLINED_NODES): one node of a 20,000-character query held 10,000 of
 * them. Counting every string's commas never undercounts (a quoted comma overcounts); a question's
 * strings hold few.
 */
function arrayLiteralElements(node: unknown): number {
  const c = bodyOf(node, 'A_Const');
  return c && isBody(c.sval) && typeof c.sval.sval === 'string' ? c.sval.sval.split(',').length - 1 : 0;
}

/** A number written in the query (`0.5`, `-1`, `0.5::float8`), or ARRAY[…] of them: percentile_disc's fractions. */
function fractions(node: unknown): boolean {
  const array = bodyOf(node, 'A_ArrayExpr');
  if (array) return list(array.elements).every(fraction);
  return fraction(node);
}

function fraction(node: unknown): boolean {
  const cast = bodyOf(node, 'TypeCast');
  if (cast) return !isBody(cast.typeName) || cast.typeName.arrayBounds === undefined ? fraction(cast.arg) : false;
  const c = bodyOf(node, 'A_Const');
  return c !== undefined && (c.ival !== undefined || c.fval !== undefined);
}

/** A derived relation (subquery or CTE) as an item. */
function derivedItem(alias: string | undefined, outputs: Output[]): Item {
  const columns = new Map<string, Origin | undefined>();
  const sizes = new Map<string, Size>();
  const weights = new Map<string, Weight>();
  let opaque = false;
  for (const o of outputs) {
    if (o.name === undefined) opaque = true;
    else if (!columns.has(o.name)) {
      columns.set(o.name, o.origin);
      sizes.set(o.name, o.size);
      weights.set(o.name, o.weight);
    }
  }
  return { alias, columns, sizes, weights, opaque };
}

/** The size of a column as read: a card column is bounded, a derived one that was built is grown. */
function columnSize(item: Item, column: string): Size {
  return readBack(item.sizes?.get(column), `a derived column (${item.alias ?? 'subquery'}.${column})`);
}

/**
 * A cast to char(n) (bpchar) pads every value to n characters whatever it reads: `'a'::char(10485760)`
 * is 10 MB from one letter, and `concat` of a hundred such casts 1 GB, so such a cast is no copy of
 * its operand (value-size.ts). A char(n) may pad to at most MAX_QUERY_CHARS, no longer than a
 * literal the query could hold; bpchar without a length does not pad.
 */
function paddedLength(typmods: unknown[]): void {
  if (typmods.length === 0) return;
  const text = typmods.length === 1 ? literalText(typmods[0]) : undefined;
  const n = text === undefined || text.trim() === '' ? Number.NaN : Number(text);
  if (n <= MAX_QUERY_CHARS) return;
  throw new GuardRefusal(
    2,
    `A cast to char(${text ?? '…'}) pads every value to that many characters: at most char(${MAX_QUERY_CHARS}) is allowed, no longer than the query itself; cast to text or varchar.`,
  );
}

/** Column aliases (`x(a, b)`) rename the first outputs. */
function renamed(outputs: Output[], aliases: string[]): Output[] {
  if (aliases.length > outputs.length) throw new GuardRefusal(2, 'More column aliases than columns.');
  return outputs.map((o, i) => (i < aliases.length ? { ...o, name: aliases[i] } : o));
}

/** A lone one-name column reference (`ORDER BY total`). */
function bareName(node: unknown): string | undefined {
  const fields = names(bodyOf(node, 'ColumnRef')?.fields);
  return fields?.length === 1 ? fields[0] : undefined;
}

/** Whether a bare name resolves to a known column at this level or one around it. */
function resolveBare(name: string, level: Level): 'found' | 'not found' {
  for (let l: Level | undefined = level; l; l = l.parent) {
    const r = lookUp(l.items, name);
    if (r === 'found') return 'found';
    if (r === 'maybe hidden') return 'not found';
  }
  return 'not found';
}

/**
 * A name among items: found, or possibly a column of a card relation's real table that the card
 * does not show (so PostgreSQL would read it), or absent.
 */
function lookUp(items: Item[], name: string): 'found' | 'maybe hidden' | 'absent' {
  if (items.some((i) => i.columns.has(name))) return 'found';
  return items.some((i) => i.card) ? 'maybe hidden' : 'absent';
}

/**
 * The name PostgreSQL gives an unnamed select-list expression, when it is certain: a column's
 * name, a function's name, or a cast's argument's. Anything else is left unknown.
 */
function figureName(node: unknown): string | undefined {
  const n = nodeOf(node);
  if (!n) return undefined;
  if (n.type === 'ColumnRef') {
    const fields = list(n.body.fields);
    return stringOf(fields[fields.length - 1]);
  }
  if (n.type === 'FuncCall') {
    const f = names(n.body.funcname);
    return f?.[f.length - 1];
  }
  if (n.type === 'TypeCast') return figureName(n.body.arg);
  return undefined;
}

export type { CardColumn, Output };
export { literalText };

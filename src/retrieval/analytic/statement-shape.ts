import { type Body, GuardRefusal, isBody, list, nodeOf } from './ast.js';

/**
 * The longest query the guards read, in characters. Parsing, walking, rendering and parsing again
 * run on the hub's event loop, and some of it grows faster than the text (5,000 CTEs, 128 KB, held
 * it for 5 s; 20,000, 200 s): a longer query is refused (guard 1) before it is parsed. A question
 * over a schema card needs a few hundred characters, a large one a few thousand.
 */
export const MAX_QUERY_CHARS = 20_000;

/** How a refusal names a statement type the parser reports (`DeleteStmt` -> `DELETE`). */
const STATEMENT_NAMES: Record<string, string> = {
  InsertStmt: 'INSERT',
  UpdateStmt: 'UPDATE',
  DeleteStmt: 'DELETE',
  MergeStmt: 'MERGE',
  CopyStmt: 'COPY',
  ExplainStmt: 'EXPLAIN',
  CallStmt: 'CALL',
  DoStmt: 'DO',
  ListenStmt: 'LISTEN',
  NotifyStmt: 'NOTIFY',
  UnlistenStmt: 'UNLISTEN',
  VacuumStmt: 'VACUUM or ANALYZE',
  PrepareStmt: 'PREPARE',
  ExecuteStmt: 'EXECUTE',
  DeallocateStmt: 'DEALLOCATE',
  VariableSetStmt: 'SET or RESET',
  VariableShowStmt: 'SHOW',
  TransactionStmt: 'a transaction command',
  CreateStmt: 'CREATE TABLE',
  CreateTableAsStmt: 'CREATE TABLE AS',
  ViewStmt: 'CREATE VIEW',
  DropStmt: 'DROP',
  TruncateStmt: 'TRUNCATE',
  AlterTableStmt: 'ALTER TABLE',
  GrantStmt: 'GRANT or REVOKE',
  GrantRoleStmt: 'GRANT or REVOKE of a role',
  CreateFunctionStmt: 'CREATE FUNCTION',
  LockStmt: 'LOCK',
  DiscardStmt: 'DISCARD',
  LoadStmt: 'LOAD',
  CheckPointStmt: 'CHECKPOINT',
  DeclareCursorStmt: 'DECLARE CURSOR',
  FetchStmt: 'FETCH',
  ClosePortalStmt: 'CLOSE',
  CreateRoleStmt: 'CREATE ROLE',
  AlterRoleStmt: 'ALTER ROLE',
  CreateSchemaStmt: 'CREATE SCHEMA',
  IndexStmt: 'CREATE INDEX',
  RuleStmt: 'CREATE RULE',
  CreateTrigStmt: 'CREATE TRIGGER',
  CreateExtensionStmt: 'CREATE EXTENSION',
  RefreshMatViewStmt: 'REFRESH MATERIALIZED VIEW',
  ReindexStmt: 'REINDEX',
  ClusterStmt: 'CLUSTER',
  CommentStmt: 'COMMENT',
  CreateSeqStmt: 'CREATE SEQUENCE',
  AlterSystemStmt: 'ALTER SYSTEM',
};

const WRITES = new Set(['InsertStmt', 'UpdateStmt', 'DeleteStmt', 'MergeStmt']);

export function statementName(type: string): string {
  return STATEMENT_NAMES[type] ?? type.replace(/Stmt$/, '').replace(/([a-z])([A-Z])/g, '$1 $2').toUpperCase();
}

/**
 * Guard 1: the parse is exactly one plain SELECT. Refused: several statements, anything but a
 * SELECT (DML, DDL, utility commands), and inside the SELECT at any depth a data-modifying WITH,
 * SELECT INTO, a locking clause (FOR UPDATE/SHARE), and WITH RECURSIVE (unbounded by construction).
 * Returns the SELECT's body.
 */
export function checkStatementShape(stmts: unknown[]): Body {
  if (stmts.length !== 1) {
    throw new GuardRefusal(1, stmts.length === 0 ? 'The query is empty.' : `Only one statement may run; the query holds ${stmts.length}.`);
  }
  const raw = (stmts[0] as { stmt?: unknown } | undefined)?.stmt;
  const node = nodeOf(raw);
  if (!node) throw new GuardRefusal(1, 'The query is not a statement that can be read.');
  if (node.type !== 'SelectStmt') throw new GuardRefusal(1, `Only a SELECT may run; this query is ${statementName(node.type)}.`);
  visit(raw);
  return node.body;
}

/** Walks every object of the tree: each SelectStmt body (wrapped, or a set operation's arm) and each write anywhere. */
function visit(value: unknown): void {
  if (Array.isArray(value)) {
    for (const item of value) visit(item);
    return;
  }
  if (!isBody(value)) return;
  for (const [key, child] of Object.entries(value)) {
    if (WRITES.has(key)) throw new GuardRefusal(1, `Only a SELECT may run; the query contains ${statementName(key)}.`);
    if (key === 'SelectStmt' || key === 'larg' || key === 'rarg') checkSelectBody(child);
    if (key === 'CommonTableExpr' && isBody(child)) {
      const inner = nodeOf(child.ctequery);
      if (inner && inner.type !== 'SelectStmt') {
        throw new GuardRefusal(1, `Only a SELECT may run; the WITH clause "${String(child.ctename)}" is ${statementName(inner.type)}.`);
      }
    }
    visit(child);
  }
}

/** The clauses of a SELECT that are not reading. `value` may be another node (a join's arm): it then has none of them. */
export function checkSelectBody(value: unknown): void {
  if (!isBody(value)) return;
  if (value.intoClause !== undefined) throw new GuardRefusal(1, 'SELECT INTO creates a table; only a plain SELECT may run.');
  if (list(value.lockingClause).length > 0) throw new GuardRefusal(1, 'FOR UPDATE / FOR SHARE lock rows; only a plain SELECT may run.');
  if (isBody(value.withClause) && value.withClause.recursive === true) {
    throw new GuardRefusal(1, 'WITH RECURSIVE is not allowed: a recursive query has no bound on its work.');
  }
}

/**
 * POST /graphql: a Relay connection over the partners. The server does not parse GraphQL; it reads
 * the page size and the cursor out of the query text and the variables with regular expressions,
 * and always answers the same `partners` connection with every node field.
 */
import type { Partner } from './data.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, type RequestContext, sendJson } from './http.js';

export function encodeCursor(id: number): string {
  return Buffer.from(`cursor:${id}`, 'utf8').toString('base64');
}

/** The id a cursor names, or undefined when it is not one of ours. */
export function decodeCursor(cursor: string): number | undefined {
  const match = /^cursor:(\d+)$/.exec(Buffer.from(cursor, 'base64').toString('utf8'));
  return match ? Number(match[1]) : undefined;
}

class GraphQLRefusal extends Error {}

function variableNamed(query: string, argument: string): string | undefined {
  return new RegExp(`\\b${argument}\\s*:\\s*\\$(\\w+)`).exec(query)?.[1];
}

function pageSize(query: string, variables: Record<string, unknown>): number {
  const literal = /\bfirst\s*:\s*(-?\d+)/.exec(query)?.[1];
  const raw = literal !== undefined ? Number(literal) : variables[variableNamed(query, 'first') ?? 'first'];
  if (raw === undefined || raw === null) return DEFAULT_PAGE_SIZE;
  if (typeof raw !== 'number' || !Number.isInteger(raw) || raw < 1) {
    throw new GraphQLRefusal(`first must be a positive integer, got ${JSON.stringify(raw)}`);
  }
  return Math.min(raw, MAX_PAGE_SIZE);
}

function afterCursor(query: string, variables: Record<string, unknown>): unknown {
  const literal = /\bafter\s*:\s*"([^"]*)"/.exec(query)?.[1];
  if (literal !== undefined) return literal;
  return variables[variableNamed(query, 'after') ?? 'after'];
}

function errors(ctx: RequestContext, status: number, message: string): void {
  sendJson(ctx.res, status, { errors: [{ message }], data: null });
}

export function handleGraphQL(ctx: RequestContext, bodyText: string) {
  let body: unknown;
  try {
    body = JSON.parse(bodyText);
  } catch {
    return errors(ctx, 400, 'the request body must be JSON: {"query": "...", "variables": {...}}');
  }
  const { query } = (body ?? {}) as { query?: unknown };
  let { variables } = (body ?? {}) as { variables?: unknown };
  if (typeof query !== 'string' || query.trim() === '') return errors(ctx, 400, 'the request body has no "query" string');
  if (typeof variables === 'string') {
    try {
      variables = JSON.parse(variables);
    } catch {
      return errors(ctx, 400, '"variables" is a string that is not JSON');
    }
  }
  const vars = (variables && typeof variables === 'object' ? variables : {}) as Record<string, unknown>;

  if (/boom/i.test(query)) return errors(ctx, 200, 'boom: the demo source fails any query mentioning boom');
  if (/nullData/i.test(query)) return sendJson(ctx.res, 200, { data: null });

  try {
    const first = pageSize(query, vars);
    const after = afterCursor(query, vars);
    let start = 0;
    if (after !== undefined && after !== null && after !== '') {
      const id = typeof after === 'string' ? decodeCursor(after) : undefined;
      if (id === undefined || id < 1 || id > ctx.data.size) throw new GraphQLRefusal(`invalid cursor ${JSON.stringify(after)}`);
      start = id; // ids run 1…N in array order, so the row after id k sits at index k
    }
    const nodes: readonly Partner[] = ctx.data.rows.slice(start, start + first);
    const edges = nodes.map((node) => ({ cursor: encodeCursor(node.id), node }));
    sendJson(ctx.res, 200, {
      data: {
        partners: {
          totalCount: ctx.data.size,
          edges,
          pageInfo: {
            hasNextPage: start + nodes.length < ctx.data.size,
            hasPreviousPage: start > 0,
            startCursor: edges[0]?.cursor ?? null,
            endCursor: edges.at(-1)?.cursor ?? null,
          },
        },
      },
    });
  } catch (error) {
    if (error instanceof GraphQLRefusal) return errors(ctx, 200, error.message);
    throw error;
  }
}

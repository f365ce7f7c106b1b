import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { generatePartners } from './data.js';
import { decodeCursor, encodeCursor } from './graphql.js';
import { type DemoSource, startDemoSource } from './server.js';

const N = 2400;
const API_KEY = { 'X-API-Key': 'demo-api-key' };
const QUERY = `query Partners($after: String) {
  partners(first: 100, after: $after) {
    edges { cursor node { id name city country credit_limit updated_at } }
    pageInfo { hasNextPage endCursor }
  }
}`;

interface Connection {
  totalCount: number;
  edges: { cursor: string; node: { id: number } }[];
  pageInfo: { hasNextPage: boolean; endCursor: string | null; hasPreviousPage: boolean; startCursor: string | null };
}
interface GraphQLBody {
  data: { partners: Connection } | null;
  errors?: { message: string }[];
}

let source: DemoSource;

beforeAll(async () => {
  source = await startDemoSource({ port: 0, host: '127.0.0.1', rows: N, log: () => {} });
});
afterAll(async () => {
  await source.close();
});

async function post(body: unknown, headers: Record<string, string> = API_KEY) {
  const res = await fetch(`${source.url}/graphql`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as GraphQLBody };
}

describe('POST /graphql', () => {
  it('pages through every row once with the after variable and endCursor', async () => {
    const seen: number[] = [];
    let after: string | null = null;
    let requests = 0;
    for (;;) {
      const { status, body } = await post({ query: QUERY, variables: { after } });
      requests++;
      expect(status).toBe(200);
      expect(body.errors).toBeUndefined();
      const conn = body.data!.partners;
      expect(conn.totalCount).toBe(N);
      for (const edge of conn.edges) expect(edge.cursor).toBe(encodeCursor(edge.node.id));
      seen.push(...conn.edges.map((e) => e.node.id));
      if (!conn.pageInfo.hasNextPage) break;
      after = conn.pageInfo.endCursor;
    }
    expect(requests).toBe(24);
    expect(seen).toEqual(Array.from({ length: N }, (_, i) => i + 1));
  });

  it('serves whole nodes, base64 cursors of cursor:<id>', async () => {
    const { body } = await post({ query: QUERY });
    const first = body.data!.partners.edges[0]!;
    expect(first.node).toEqual(generatePartners(1)[0]);
    expect(first.cursor).toBe(Buffer.from('cursor:1').toString('base64'));
    expect(decodeCursor(first.cursor)).toBe(1);
    expect(body.data!.partners.pageInfo).toMatchObject({ hasPreviousPage: false, startCursor: first.cursor });
  });

  it('reads the page size from a first: literal, a named variable or `first`; default 50, max 500', async () => {
    const count = async (query: string, variables: Record<string, unknown> = {}) =>
      (await post({ query, variables })).body.data!.partners.edges.length;
    expect(await count('{ partners { edges { node { id } } } }')).toBe(50);
    expect(await count('{ partners(first: 7) { edges { node { id } } } }')).toBe(7);
    expect(await count('{ partners(first: 9999) { edges { node { id } } } }')).toBe(500);
    expect(await count('query($n: Int) { partners(first: $n) { edges { node { id } } } }', { n: 12 })).toBe(12);
    expect(await count('query($first: Int) { partners(first: $first) { edges { node { id } } } }', { first: 13 })).toBe(13);
    expect(await count('query { partners { edges { node { id } } } }', { first: 14 })).toBe(14);
  });

  it('takes the cursor from whichever variable the query binds to after:, or a literal', async () => {
    const cursor = encodeCursor(2390);
    const bound = await post({ query: 'query($c: String) { partners(first: 5, after: $c) { edges { node { id } } } }', variables: { c: cursor } });
    expect(bound.body.data!.partners.edges.map((e) => e.node.id)).toEqual([2391, 2392, 2393, 2394, 2395]);
    const literal = await post({ query: `{ partners(first: 50, after: "${cursor}") { edges { node { id } } pageInfo { hasNextPage } } }` });
    expect(literal.body.data!.partners.edges.map((e) => e.node.id)).toEqual([2391, 2392, 2393, 2394, 2395, 2396, 2397, 2398, 2399, 2400]);
    expect(literal.body.data!.partners.pageInfo.hasNextPage).toBe(false);
    const end = await post({ query: QUERY, variables: { after: encodeCursor(N) } });
    expect(end.body.data!.partners).toMatchObject({ edges: [], pageInfo: { hasNextPage: false, endCursor: null } });
  });

  it('variables may arrive as a JSON string', async () => {
    const res = await post({ query: QUERY, variables: JSON.stringify({ after: encodeCursor(100) }) });
    expect(res.body.data!.partners.edges[0]!.node.id).toBe(101);
  });

  it('a query mentioning boom: HTTP 200 with an errors array and null data', async () => {
    const { status, body } = await post({ query: '{ partners(first: 10) { edges { node { id boom } } } }' });
    expect(status).toBe(200);
    expect(body.data).toBeNull();
    expect(body.errors).toHaveLength(1);
    expect(body.errors![0]!.message).toMatch(/boom/);
  });

  it('a query mentioning nullData: HTTP 200 with data null and no errors', async () => {
    const { status, body } = await post({ query: '{ nullData: partners(first: 10) { edges { node { id } } } }' });
    expect(status).toBe(200);
    expect(body).toEqual({ data: null });
  });

  it('a bad cursor or page size is a GraphQL error on HTTP 200', async () => {
    for (const variables of [{ after: 'not-a-cursor' }, { after: encodeCursor(99999) }, { first: -3 }, { first: 'ten' }]) {
      const query = 'query($after: String, $first: Int) { partners(first: $first, after: $after) { edges { node { id } } } }';
      const { status, body } = await post({ query, variables });
      expect(status).toBe(200);
      expect(body.data).toBeNull();
      expect(body.errors![0]!.message).toMatch(/cursor|first/);
    }
  });

  it('refuses a missing or wrong api key (401), a body that is not JSON or has no query (400), and GET (405)', async () => {
    expect((await post({ query: QUERY }, {})).status).toBe(401);
    expect((await post({ query: QUERY }, { 'X-API-Key': 'nope' })).status).toBe(401);
    expect((await post('not json')).status).toBe(400);
    expect((await post({ variables: {} })).status).toBe(400);
    expect((await fetch(`${source.url}/graphql`, { headers: API_KEY })).status).toBe(405);
  });
});

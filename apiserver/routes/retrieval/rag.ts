import { resolveScope } from '../../../src/admin/scope-access.js';
import { callerTenant, type Principal } from '../../../src/auth/principal.js';
import { NotFoundError, ScopeNotGranted, ValidationError } from '../../../src/errors.js';
import type { AreaServices } from '../../../src/runtime/services.js';
import { type JsonSchema, type ResponseDecl, route, type RouteDecl } from '../../route.js';
import { whileClientWaits } from '../client-gone.js';
import { errorBody, refusals } from '../schemas.js';

/**
 * Retrieval (docs/retrieval.md): search, chat on both doors, the scope and corpus lists, status and
 * the platform corpus rebuild. Every read applies the caller's scope grants: a scope-bound user
 * reads only granted tags (403 `scope not granted` when asking for another).
 */

const MAX_TEXT = 8000;
const MAX_TOP_K = 100;

const unavailable: ResponseDecl = { description: '`{error, hint}`: the embedding or chat port is not configured, or its backend did not answer', schema: errorBody };
const chatUnavailable: ResponseDecl = { ...unavailable, description: `${unavailable.description}; analytic: not one relation of the schema card fits \`svc.llm.context-chars\`` };
const scopeRefused = '; or JSON `{"error": "scope not granted"}`: a scope-bound user asked outside the grants';
/** A scope no connector or entity of the tenant declares (any more): the analytic doors read no card of it. */
const undeclared = "`no connector or entity of the tenant declares scope '<scope>'`";
const chatUndeclared: ResponseDecl = { description: `Analytic: \`{error, hint}\`, ${undeclared}; a card stored for it is kept, unread, until the scope is declared again`, schema: errorBody };

function platformRefusals(scoped: boolean): Record<number, ResponseDecl> {
  const floor = refusals(true);
  return scoped ? { ...floor, 403: { ...floor[403]!, description: `${floor[403]!.description}${scopeRefused}` } } : floor;
}

const topK = { type: 'integer', minimum: 1, maximum: MAX_TOP_K, description: `Number of chunks (default 10, at most ${MAX_TOP_K})` } as const;

const searchBody = {
  type: 'object',
  additionalProperties: false,
  required: ['query'],
  properties: {
    query: { type: 'string', maxLength: MAX_TEXT, description: 'What to look for; required, not blank' },
    topK,
    corpus: { type: 'string', maxLength: 200, description: 'Only this corpus (a connector\'s name, `system`, `workflow:<name>`)' },
    scope: { type: 'string', maxLength: 200, description: 'Only chunks of this tag; `all` or blank: no tag filter (a scope-bound user: the granted tags)' },
    filters: { type: 'object', description: 'Accepted and reserved: not applied' },
  },
} as const;

const chatBody = {
  type: 'object',
  additionalProperties: false,
  required: ['question'],
  properties: {
    question: { type: 'string', maxLength: MAX_TEXT, description: 'Required, not blank' },
    mode: { type: 'string', maxLength: 50, description: '`analytic` (any case) for text-to-SQL; anything else, or absent: semantic' },
    scope: { type: 'string', maxLength: 200, description: '`all`: no specific scope; blank or absent: the caller\'s default scope' },
    // corpus and topK are checked in semantic mode only (chat below): analytic mode ignores them, whatever they are (spec 2).
    corpus: { description: 'Semantic only: restrict to one corpus (a string of at most 200 characters); ignored in analytic mode, whatever its value' },
    topK: { description: `Semantic only: number of chunks, an integer from 1 to ${MAX_TOP_K} (default 10); ignored in analytic mode, whatever its value` },
  },
} as const;

const hitSchema: JsonSchema = {
  type: 'object',
  required: ['rowHash', 'content', 'similarity', 'metadata'],
  properties: {
    rowHash: { type: 'string', description: 'The row\'s hash (`GET /api/platform/data/row/{hash}`); empty for a chunk that is not a row' },
    content: { type: 'string' },
    similarity: { type: 'number', description: 'Cosine similarity, 1 = the same direction' },
    metadata: { type: 'object', required: ['row_hash', 'table'], properties: { row_hash: { type: ['string', 'null'] }, table: { type: ['string', 'null'] }, corpus: { type: 'string' } } },
  },
};

const semanticAnswer: JsonSchema = {
  type: 'object',
  description: 'Semantic mode',
  required: ['answer', 'citations', 'citedRows'],
  properties: {
    answer: { type: 'string', description: 'Inline `[row:<hash>]` tags for the rows the model used (a tag naming no retrieved row is removed)' },
    citations: { type: 'array', items: { type: 'string' }, description: 'The row hash of every retrieved row' },
    citedRows: {
      type: 'array',
      description: 'One per citation, in its order: the table and key of the row its retrieved chunk names',
      items: { type: 'object', required: ['rowHash', 'table', 'key'], properties: { rowHash: { type: 'string' }, table: { type: 'string' }, key: { type: 'string' } } },
    },
  },
};

const analyticAnswer: JsonSchema = {
  type: 'object',
  description: 'Analytic mode (a guard\'s refusal too: its message in `answer`, `rowCount` 0, `rows` `[]`)',
  required: ['answer', 'sql', 'rowCount', 'rows', 'otherDoors'],
  properties: {
    answer: { type: 'string' },
    sql: { type: 'string', description: 'The query that ran or was refused; empty when the model abstained' },
    rowCount: { type: 'integer' },
    rows: { type: 'array', items: { type: 'object' }, description: 'One column-to-value map per row, at most 500' },
    dataAsOf: { type: 'string', description: 'ISO 8601: the end of the scope\'s last completed run; absent without one, and on refusals' },
    otherDoors: { type: 'array', items: { type: 'string' }, description: '`lifecycle`, `conflicts` (pass over others): where else to ask when this door abstains' },
  },
};

/** Both doors answer either mode's answer. */
const chatAnswer: JsonSchema = { oneOf: [semanticAnswer, analyticAnswer] };

/** The tags a read may see (`undefined` for no tag filter), and the granted set of a scope-bound caller (`undefined` for everyone else). */
async function readableScopes(
  services: AreaServices,
  principal: Principal | undefined,
  requested: string | undefined,
  useDefault: boolean,
): Promise<{ scopes: string[] | undefined; granted: string[] | undefined }> {
  const access = await services.admin.users.scopeAccess(callerTenant(principal), principal);
  const resolved = resolveScope(requested, access, { useDefault });
  return { scopes: resolved.scope !== undefined ? [resolved.scope] : resolved.allowed, granted: access.bound ? access.granted : undefined };
}

/** The granted set of a scope-bound caller, `undefined` for everyone else. */
async function grantedScopes(services: AreaServices, principal: Principal | undefined): Promise<string[] | undefined> {
  const access = await services.admin.users.scopeAccess(callerTenant(principal), principal);
  return access.bound ? access.granted : undefined;
}

const scopeQuery = { type: 'object', required: ['scope'], properties: { scope: { type: 'string', maxLength: 200, description: 'The scope; not blank' } } } as const;

/** A required scope the caller may read (403 `scope not granted` outside a scope-bound caller's grants). */
async function askedScope(services: AreaServices, principal: Principal | undefined, scope: string | undefined): Promise<string> {
  const name = required(scope, 'scope').trim();
  const access = await services.admin.users.scopeAccess(callerTenant(principal), principal);
  if (access.bound && !access.granted.includes(name)) throw new ScopeNotGranted();
  return name;
}

function required(value: string | undefined, field: string): string {
  if (value === undefined || value.trim() === '') throw new ValidationError(`${field} is required`, field);
  return value;
}

async function chat(services: AreaServices, principal: Principal | undefined, body: { question?: string; mode?: string; scope?: string; corpus?: unknown; topK?: unknown }, signal: AbortSignal) {
  const question = required(body.question, 'question');
  const tenantId = callerTenant(principal);
  if (body.mode?.trim().toLowerCase() === 'analytic') {
    const access = await services.admin.users.scopeAccess(tenantId, principal);
    return services.retrieval.analytic(tenantId, question, resolveScope(body.scope, access), signal);
  }
  const corpus = body.corpus;
  if (corpus !== undefined && typeof corpus !== 'string') throw new ValidationError('corpus must be a string', 'corpus');
  if (typeof corpus === 'string' && corpus.length > 200) throw new ValidationError('corpus must be at most 200 characters', 'corpus');
  const topK = body.topK ?? 10;
  if (typeof topK !== 'number' || !Number.isInteger(topK)) throw new ValidationError('topK must be an integer', 'topK');
  if (topK < 1) throw new ValidationError('topK must be at least 1', 'topK');
  if (topK > MAX_TOP_K) throw new ValidationError(`topK must be at most ${MAX_TOP_K}`, 'topK');
  const { scopes } = await readableScopes(services, principal, body.scope, true);
  return services.retrieval.chat(tenantId, question, { topK, corpus: corpus || undefined, scopes }, signal);
}

const chatDescription =
  'Semantic mode: the nearest chunks of the caller\'s tenant (scope and corpus filters first) answer through the language model, which cites ' +
  '`[row:<hash>]`; `citations` lists every retrieved row. Analytic mode: one read-only SELECT over the scope\'s schema card, written by the ' +
  'model and checked by five deterministic guards; a refusal is a 200 whose `answer` is the refusal (docs/retrieval.md).';

export const ragRoutes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/platform/rag/search', operationId: 'ragSearch', summary: 'Semantic search over the tenant\'s chunks', tags: ['Retrieval'],
    auth: ['svc_integrator'],
    rateLimit: 'platform-search',
    audit: 'egress',
    body: searchBody,
    responses: {
      200: { description: 'The nearest chunks, best first', schema: { type: 'object', required: ['results'], properties: { results: { type: 'array', items: hitSchema } } } },
      400: { description: '`query is required`, or an invalid field', schema: errorBody },
      ...platformRefusals(true),
      503: unavailable,
    },
    handler: async ({ services, principal, body, ctx }) => {
      const query = required(body.query, 'query');
      const { scopes, granted } = await readableScopes(services, principal, body.scope, false);
      const results = await whileClientWaits(ctx, (signal) => services.retrieval.search(callerTenant(principal), { query, topK: body.topK ?? 10, corpus: body.corpus || undefined, scopes }, signal));
      // A chunk's other tags are named to a scope-bound caller only where granted: the scope list hides the others from them too.
      if (granted) for (const hit of results) hit.metadata.scopes = hit.metadata.scopes.filter((tag) => granted.includes(tag));
      return { results };
    },
  }),
  route({
    method: 'POST', path: '/api/platform/rag/chat', operationId: 'ragChatPlatform', summary: 'Ask a question (semantic or analytic), platform door', tags: ['Retrieval'],
    auth: ['svc_integrator'],
    rateLimit: 'platform-chat',
    audit: 'egress',
    description: chatDescription,
    body: chatBody,
    responses: {
      200: { description: 'The semantic answer `{answer, citations}`, or the analytic answer `{answer, sql, rowCount, rows, dataAsOf?, otherDoors}`', schema: chatAnswer },
      400: { description: '`question is required`, or an invalid field', schema: errorBody },
      ...platformRefusals(true),
      404: chatUndeclared,
      409: { description: 'Analytic: no schema card for the (declared) scope `{error, hint}`', schema: errorBody },
      503: chatUnavailable,
    },
    handler: ({ services, principal, body, ctx }) => whileClientWaits(ctx, (signal) => chat(services, principal, body, signal)),
  }),
  route({
    method: 'POST', path: '/api/rag/chat', operationId: 'ragChatUser', summary: 'Ask a question (semantic or analytic), user door', tags: ['Retrieval'],
    auth: ['svc_user'],
    rateLimit: 'user-chat',
    audit: 'egress',
    description: chatDescription,
    body: chatBody,
    responses: {
      200: { description: 'As the platform door: the semantic answer `{answer, citations}`, or the analytic answer `{answer, sql, rowCount, rows, dataAsOf?, otherDoors}`', schema: chatAnswer },
      400: { description: '`question is required`, or an invalid field', schema: errorBody },
      ...refusals(false),
      404: chatUndeclared,
      409: { description: 'Analytic: no schema card for the (declared) scope `{error, hint}`', schema: errorBody },
      503: chatUnavailable,
    },
    handler: ({ services, principal, body, ctx }) => whileClientWaits(ctx, (signal) => chat(services, principal, body, signal)),
  }),
  route({
    method: 'GET', path: '/api/platform/rag/scopes', operationId: 'ragScopes', summary: 'The tenant\'s scopes with their connectors and chunks', tags: ['Retrieval'],
    auth: ['svc_integrator'],
    responses: {
      200: {
        description: 'One entry per scope (a scope-bound user: granted scopes only)',
        schema: { type: 'array', items: { type: 'object', required: ['scope', 'connectors', 'chunks', 'lastIndexed'], properties: { scope: { type: 'string' }, connectors: { type: 'integer' }, chunks: { type: 'integer' }, lastIndexed: { type: 'string', description: 'ISO 8601, or empty when unknown' } } } },
      },
      ...platformRefusals(false),
    },
    handler: async ({ services, principal }) => services.retrieval.scopes(callerTenant(principal), await grantedScopes(services, principal)),
  }),
  route({
    method: 'GET', path: '/api/platform/rag/corpora', operationId: 'ragCorpora', summary: 'The corpora the caller can search', tags: ['Retrieval'],
    auth: ['svc_integrator'],
    responses: {
      200: {
        description: 'One entry per corpus (a scope-bound user: corpora with a granted tag only; untagged corpora are invisible to them)',
        schema: { type: 'array', items: { type: 'object', required: ['name', 'chunkCount'], properties: { name: { type: 'string' }, chunkCount: { type: 'integer' } } } },
      },
      ...platformRefusals(false),
    },
    handler: async ({ services, principal }) => services.retrieval.corpora(callerTenant(principal), await grantedScopes(services, principal)),
  }),
  route({
    method: 'GET', path: '/api/platform/rag/schema', operationId: 'ragSchema', summary: 'The schema card of a scope', tags: ['Retrieval'],
    auth: ['svc_integrator', 'svc_admin'],
    description: 'The relations and columns analytic chat may query, with labels, descriptions, examples and declared value domains.',
    query: scopeQuery,
    responses: {
      200: { description: 'The card `{scope, sourceType, enriched, updatedAt, relations[{name, columns[{name, type, label?, description?, examples?, values?}]}]}`', schema: { type: 'object' } },
      400: { description: '`scope is required`', schema: errorBody },
      ...platformRefusals(true),
      404: { description: `\`No schema card found for scope: <scope>\`: a declared scope without a card; or \`{error, hint}\`, ${undeclared}: a card stored for it is kept, unread, until the scope is declared again`, schema: errorBody },
    },
    handler: async ({ services, principal, query }) => {
      const scope = await askedScope(services, principal, query.scope);
      const stored = await services.retrieval.schemaCard(callerTenant(principal), scope, await grantedScopes(services, principal));
      if (!stored) throw new NotFoundError(`No schema card found for scope: ${scope}`);
      return { scope, sourceType: stored.sourceType, enriched: stored.enriched, updatedAt: stored.updatedAt.toISOString(), relations: stored.card.relations };
    },
  }),
  route({
    method: 'POST', path: '/api/platform/rag/rediscover', operationId: 'ragRediscover', summary: 'Discover a scope\'s schema card from its ingested tables', tags: ['Retrieval'],
    auth: ['svc_integrator', 'svc_admin'],
    description:
      'Reads the ext tables the scope\'s connectors write: their columns (not the raw payload), up to three examples each, and, for a text ' +
      'column with at most 20 distinct values each seen twice on average, those values as its declared domain. Replaces the scope\'s card. ' +
      'A scope no connector or entity of the tenant declares is a 404, nothing stored.',
    query: scopeQuery,
    responses: {
      200: {
        description: 'The rediscover summary',
        schema: { type: 'object', required: ['scope', 'tableCount', 'columnCount', 'enriched', 'sourceType'], properties: { scope: { type: 'string' }, tableCount: { type: 'integer' }, columnCount: { type: 'integer' }, enriched: { type: 'boolean' }, sourceType: { type: 'string' } } },
      },
      400: { description: '`scope is required`', schema: errorBody },
      404: { description: "`{error, hint}`: `no connector or entity of the tenant declares scope '<scope>'`; nothing stored", schema: errorBody },
      503: { description: '`{error, hint}`: the discovery, all its statements together, ran past `svc.analytic.statement-timeout`, or found no turn among the analytic queries within it; the scope keeps its previous card', schema: errorBody },
      ...platformRefusals(true),
    },
    handler: async ({ services, principal, query, ctx }) => {
      const scope = await askedScope(services, principal, query.scope);
      return whileClientWaits(ctx, (signal) => services.retrieval.rediscover(callerTenant(principal), scope, signal));
    },
  }),
  route({
    method: 'GET', path: '/api/platform/rag/status', operationId: 'ragStatus', summary: 'Index status and the embedding port', tags: ['Retrieval'],
    auth: ['svc_integrator', 'svc_admin'],
    responses: {
      200: {
        description: 'Provider and model read live from the embedding port (`none` without one)',
        schema: {
          type: 'object',
          required: ['indexed', 'chunks', 'indexedAt', 'provider', 'embeddingModel'],
          properties: {
            indexed: { type: 'boolean' },
            chunks: { type: 'integer' },
            indexedAt: { type: ['string', 'null'] },
            provider: { type: 'string' },
            embeddingModel: { type: 'string' },
            embedded: { type: 'integer', description: 'chunks with a vector of the configured model (0 without an embedding port); the others are still waiting for the indexer, or set aside' },
            setAside: { type: 'integer', description: 'chunks without a vector that the embedding model refused on their own (a text too long for its context, say): passed over until their retry time, then tried again' },
            pendingRows: { type: 'integer', description: 'ingested rows handed to the indexer that it has not made into chunks yet (not among `chunks`, not searchable yet)' },
            vectorSearch: { type: 'string', enum: ['memory', 'pgvector', 'none'], description: 'where search runs: in process, in the pgvector index, or nowhere (no embedding port)' },
          },
        },
      },
      ...platformRefusals(false),
    },
    handler: ({ services, principal }) => services.retrieval.status(callerTenant(principal)),
  }),
  route({
    method: 'POST', path: '/api/platform/rag/reindex', operationId: 'ragReindex', summary: 'Rebuild the platform corpus in the background', tags: ['Retrieval'],
    auth: ['svc_integrator', 'svc_admin'],
    description: 'Answers at once; the platform corpus (the API\'s operations, the manifest kinds, the hooks: tenant 0, corpus `system`) is rebuilt and embedded in the background. Chunks of ingested rows are not touched.',
    responses: { 202: { description: '`{status: "reindex_started"}`', schema: { type: 'object', required: ['status'], properties: { status: { const: 'reindex_started' } } } }, ...platformRefusals(false) },
    handler: ({ services, ctx }) => {
      services.retrieval.reindex();
      ctx.status = 202;
      return { status: 'reindex_started' };
    },
  }),
];

/**
 * The tenancy matrix: what one tenant ("mine") gets when it reaches for another tenant's ("theirs")
 * rows and resources. test/tenancy/matrix.test.ts runs every row against a real hub with two
 * tenants, and fails when a table with a `tenant_id` column, or a route of the route table, is not
 * here. A new tenant table or route joins by adding its row (docs/development.md, "The tenancy
 * matrix").
 *
 * Tables: the SQL each operation runs as the application role with `svc.tenant_id` set to mine,
 * aimed at their rows (`where tenant_id = <theirs>`), and the outcome: `none` (no row seen or
 * changed) or `denied` (a permission error). Their tenant must have at least one row in every table
 * before the checks run: the scenario in matrix.test.ts makes most of them; `seed` (SQL run as the
 * owner, `$1` = their tenant id) makes the rest.
 *
 * Endpoints: a call as mine (a token of my tenant with svc_user, svc_admin and svc_integrator, not
 * svc_superadmin) with a path naming their tenant or their resources, and the status it must get.
 * Placeholders: `{mine}`, `{theirs}` (tenant ids) and `{their.<fixture>}` (their resource ids,
 * matrix.test.ts). `excludes: true` also checks that the answer names none of their resources.
 * Whatever the status, none of their rows may change (every tenant table is fingerprinted before
 * and after). Routes that touch no tenant's data are listed in NOT_TENANT_SCOPED with the reason.
 */

export type SqlOutcome = 'none' | 'denied';

export interface TableCase {
  /** `schema.table`; `ext_t*.*` stands for every table of every tenant's ext schema. */
  table: string;
  select: SqlOutcome;
  update: SqlOutcome;
  delete: SqlOutcome;
  /** Owner SQL that gives their tenant (`$1`) a row, when the scenario does not. */
  seed?: string;
}

export interface EndpointCase {
  /** The route as declared: `METHOD /path/{param}`. */
  route: string;
  /** The path called, with placeholders. */
  path: string;
  expect: number;
  body?: unknown;
  /** Content type of a string body (default application/json). */
  type?: string;
  /** The answer must name none of their resources. */
  excludes?: true;
}

const NONE = { select: 'none', update: 'none', delete: 'none' } as const;

export const TABLES: TableCase[] = [
  { table: 'core.users', ...NONE },
  { table: 'core.orgs', ...NONE },
  { table: 'core.roles', ...NONE },
  { table: 'core.user_roles', ...NONE },
  { table: 'core.role_orgs', ...NONE },
  { table: 'core.user_scopes', ...NONE },
  { table: 'events.outbox', ...NONE },
  { table: 'platform.secrets', ...NONE },
  { table: 'platform.hook_overrides', ...NONE, seed: `insert into platform.hook_overrides (tenant_id, hook_id, enabled) values ($1, 'matrix-hook', false)` },
  { table: 'connectors.connectors', ...NONE },
  { table: 'connectors.endpoints', ...NONE },
  { table: 'connectors.runs', ...NONE },
  {
    table: 'connectors.run_chunk_counts',
    ...NONE,
    seed: `insert into connectors.run_chunk_counts (run_id, tenant_id, records_in, records_out, records_skipped, dead_letters)
           select id, $1, 1, 1, 0, 0 from connectors.runs where tenant_id = $1 limit 1`,
  },
  { table: 'connectors.dead_letters', ...NONE },
  { table: 'connectors.ext_tables', ...NONE },
  {
    table: 'connectors.schedule_slots',
    ...NONE,
    seed: `insert into connectors.schedule_slots (tenant_id, connector_id, slot, outcome)
           select $1, id, now(), 'claimed' from connectors.connectors where tenant_id = $1 limit 1`,
  },
  { table: 'ext_t*.*', ...NONE },
  { table: 'entities.entities', ...NONE },
  { table: 'processes.processes', ...NONE },
  { table: 'events.inbox', ...NONE },
  { table: 'exports.exports', ...NONE },
  { table: 'workflows.workflows', ...NONE },
  {
    table: 'workflows.spells',
    ...NONE,
    seed: `insert into workflows.spells (tenant_id, workflow_id, record_key, state, since)
           select $1, id, 'matrix', 'Lyon', now() from workflows.workflows where tenant_id = $1 limit 1`,
  },
  {
    table: 'exports.runs',
    ...NONE,
    seed: `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time, ended_at, failure_code, failure_reason)
           select $1, id, name, entity, scope, 'sftp', 'Failed', 'manual', now(), now(), 'publication', 'matrix' from exports.exports where tenant_id = $1 limit 1`,
  },
  {
    table: 'manifests.owners',
    ...NONE,
    seed: `insert into manifests.owners (tenant_id, kind, name, namespace, resource, uid) values ($1::bigint, 'Connector', 'matrix', 'matrix', 'matrix', 'matrix-uid-' || $1::bigint)`,
  },
  { table: 'audit.entries', ...NONE },
  { table: 'email.rules', ...NONE },
  {
    table: 'email.sends',
    ...NONE,
    seed: `insert into email.sends (tenant_id, event_id, rule_id, token, lease_until, finished_at, outcome)
           select $1, 1, id, gen_random_uuid(), now(), now(), 'sent' from email.rules where tenant_id = $1 limit 1`,
  },
  { table: 'hub.integrations', ...NONE },
  {
    table: 'hub.deliveries',
    ...NONE,
    seed: `insert into hub.deliveries (tenant_id, integration_id, kind, event_type, body)
           select $1, id, 'test', 'matrix.test', '{}' from hub.integrations where tenant_id = $1 limit 1`,
  },
  {
    table: 'hub.delivery_attempts',
    ...NONE,
    seed: `insert into hub.delivery_attempts (delivery_id, attempt, tenant_id, http_status, duration_ms, attempted_at)
           select id, 1, $1, 500, 1, now() from hub.deliveries where tenant_id = $1 limit 1`,
  },  {
    table: 'retrieval.chunks',
    ...NONE,
    // Embedded (a zero vector ranks last but is ranked), so a search that crossed tenants would show it.
    seed: `insert into retrieval.chunks (tenant_id, corpus, key, scopes, content, embedding, model, embedded_seq, embedded_at)
           values ($1, 'globex-corpus', 'globex-chunk', '{globex-scope}', 'globex chunk', decode(repeat('00', 2048), 'hex'), 'local:universal-sentence-encoder-lite',
                   nextval('retrieval.embedded_seq'), now())`,
  },
  {
    table: 'retrieval.pending',
    ...NONE,
    seed: `insert into retrieval.pending (tenant_id, connector_id, corpus, endpoint_uuid, table_name, row_hashes)
           values ($1, gen_random_uuid(), 'matrix', gen_random_uuid(), 'ext.matrix', '{}')`,
  },
  {
    table: 'retrieval.generations',
    ...NONE,
    seed: `insert into retrieval.generations (tenant_id, generation) values ($1, 1) on conflict do nothing`,
  },
  {
    table: 'retrieval.schema_cards',
    ...NONE,
    // Their card of the scope their connector declares (matrix.test.ts), which mine declares too.
    seed: `insert into retrieval.schema_cards (tenant_id, scope, source_type, card)
           values ($1, 'matrix-scope', 'discovered', '{"scope": "matrix-scope", "relations": [{"name": "ext.contacts", "columns": []}]}') on conflict do nothing`,
  },
];

/** Which fixture of theirs a path parameter names, by the collection before it. */
const THEIR_RESOURCE: Record<string, string> = { orgs: 'org', users: 'user', roles: 'role', 'email-rules': 'rule', integrations: 'integration', deliveries: 'delivery' };

/** Every `{tid}` route, called with their tenant id and their resources: refused before anything is read. */
const theirTenant = (route: string): EndpointCase => ({
  route,
  path: route
    .split(' ')[1]!
    .replace('{tid}', '{theirs}')
    .replace(/([a-z-]+)\/\{(?!theirs\})[a-zA-Z]+\}/g, (_m, collection: string) => `${collection}/{their.${THEIR_RESOURCE[collection] ?? collection}}`),
  expect: 403,
});

export const ENDPOINTS: EndpointCase[] = [
  // Identity and lists of my tenant: nothing of theirs in the answer.
  { route: 'GET /api/bff/v1/me', path: '/api/bff/v1/me', expect: 200, excludes: true },
  { route: 'GET /api/platform/events', path: '/api/platform/events', expect: 200, excludes: true },

  // Secrets (by name).
  { route: 'GET /api/platform/secrets', path: '/api/platform/secrets', expect: 200, excludes: true },
  { route: 'GET /api/platform/secrets/{name}', path: '/api/platform/secrets/{their.secret}', expect: 404 },
  { route: 'PUT /api/platform/secrets/{name}', path: '/api/platform/secrets/{their.secret}', expect: 404, body: { value: 'overwritten' } },
  { route: 'DELETE /api/platform/secrets/{name}', path: '/api/platform/secrets/{their.secret}', expect: 404 },
  // Creating a secret of their name makes mine; theirs is untouched (the fingerprint).
  { route: 'POST /api/platform/secrets', path: '/api/platform/secrets', expect: 201, body: { name: '{their.secret}', value: 'mine' } },

  // Hooks: declared by the hub, the override is per tenant; another tenant's needs svc_superadmin.
  { route: 'GET /api/platform/hooks', path: '/api/platform/hooks', expect: 200 },
  { route: 'POST /api/platform/hooks/{hookId}/toggle', path: '/api/platform/hooks/{their.hook}/toggle?tenantId={theirs}', expect: 403 },

  // The caller's own default scope: their user only; naming their scope stores mine, theirs is untouched.
  { route: 'GET /api/platform/users/me/scope', path: '/api/platform/users/me/scope', expect: 200, excludes: true },
  { route: 'PUT /api/platform/users/me/scope', path: '/api/platform/users/me/scope', expect: 200, body: { defaultScope: 'globex-scope' } },
  { route: 'POST /api/platform/rag/search', path: '/api/platform/rag/search', expect: 200, body: { query: 'globex chunk', topK: 100 }, excludes: true },
  // Filtered by their corpus or their scope: as for a corpus or scope no one has, nothing.
  { route: 'POST /api/platform/rag/search', path: '/api/platform/rag/search', expect: 200, body: { query: 'globex chunk', topK: 100, corpus: 'globex-corpus' }, excludes: true },
  { route: 'POST /api/platform/rag/search', path: '/api/platform/rag/search', expect: 200, body: { query: 'globex chunk', topK: 100, scope: 'globex-scope' }, excludes: true },
  // Analytic, on the scope both tenants declare: mine has no card of it (409), theirs is not read. On the scope
  // their entity alone declares: a 404, their declaration is not mine.
  { route: 'POST /api/platform/rag/chat', path: '/api/platform/rag/chat', expect: 409, body: { question: 'how many?', mode: 'analytic', scope: 'matrix-scope' } },
  { route: 'POST /api/rag/chat', path: '/api/rag/chat', expect: 409, body: { question: 'how many?', mode: 'analytic', scope: 'matrix-scope' } },
  { route: 'POST /api/platform/rag/chat', path: '/api/platform/rag/chat', expect: 404, body: { question: 'how many?', mode: 'analytic', scope: 'globex-scope' } },
  { route: 'GET /api/platform/rag/scopes', path: '/api/platform/rag/scopes', expect: 200, excludes: true },
  { route: 'GET /api/platform/rag/corpora', path: '/api/platform/rag/corpora', expect: 200, excludes: true },
  { route: 'GET /api/platform/rag/status', path: '/api/platform/rag/status', expect: 200, excludes: true },
  { route: 'GET /api/platform/rag/schema', path: '/api/platform/rag/schema?scope=matrix-scope', expect: 404 },
  // The summary names the scope asked for (theirs), so no `excludes`; the analytic doors above show their card and their declarations stay theirs.
  { route: 'POST /api/platform/rag/rediscover', path: '/api/platform/rag/rediscover?scope=globex-scope', expect: 404 },
  { route: 'POST /api/platform/rag/reindex', path: '/api/platform/rag/reindex', expect: 202 },

  // Organisations, users, roles, scopes.
  theirTenant('GET /api/tenants/{tid}/orgs'),
  theirTenant('GET /api/tenants/{tid}/orgs/tree'),
  theirTenant('GET /api/tenants/{tid}/orgs/{id}'),
  theirTenant('POST /api/tenants/{tid}/orgs'),
  theirTenant('PUT /api/tenants/{tid}/orgs/{id}'),
  theirTenant('DELETE /api/tenants/{tid}/orgs/{id}'),
  { route: 'GET /api/tenants/{tid}/orgs', path: '/api/tenants/{mine}/orgs', expect: 200, excludes: true },
  { route: 'GET /api/tenants/{tid}/orgs/tree', path: '/api/tenants/{mine}/orgs/tree', expect: 200, excludes: true },
  { route: 'GET /api/tenants/{tid}/orgs/tree', path: '/api/tenants/{mine}/orgs/tree?root={their.org}', expect: 404 },
  { route: 'GET /api/tenants/{tid}/orgs/{id}', path: '/api/tenants/{mine}/orgs/{their.org}', expect: 404 },
  { route: 'PUT /api/tenants/{tid}/orgs/{id}', path: '/api/tenants/{mine}/orgs/{their.org}', expect: 404, body: { name: 'taken over' } },
  { route: 'DELETE /api/tenants/{tid}/orgs/{id}', path: '/api/tenants/{mine}/orgs/{their.org}', expect: 404 },
  { route: 'POST /api/tenants/{tid}/orgs', path: '/api/tenants/{mine}/orgs', expect: 400, body: { code: 'mine-child', name: 'Child', parentId: '{their.org}' } },

  theirTenant('GET /api/tenants/{tid}/users'),
  theirTenant('GET /api/tenants/{tid}/users/{id}'),
  theirTenant('POST /api/tenants/{tid}/users'),
  theirTenant('PUT /api/tenants/{tid}/users/{id}'),
  theirTenant('POST /api/tenants/{tid}/users/{id}/unlock'),
  theirTenant('DELETE /api/tenants/{tid}/users/{id}'),
  theirTenant('GET /api/tenants/{tid}/users/{uid}/scopes'),
  theirTenant('PUT /api/tenants/{tid}/users/{uid}/scopes'),
  theirTenant('GET /api/tenants/{tid}/users/{uid}/roles'),
  theirTenant('PUT /api/tenants/{tid}/users/{uid}/roles/{roleId}'),
  theirTenant('DELETE /api/tenants/{tid}/users/{uid}/roles/{roleId}'),
  { route: 'GET /api/tenants/{tid}/users', path: '/api/tenants/{mine}/users', expect: 200, excludes: true },
  { route: 'GET /api/tenants/{tid}/users/{id}', path: '/api/tenants/{mine}/users/{their.user}', expect: 404 },
  { route: 'PUT /api/tenants/{tid}/users/{id}', path: '/api/tenants/{mine}/users/{their.user}', expect: 404, body: { name: 'taken over' } },
  { route: 'POST /api/tenants/{tid}/users/{id}/unlock', path: '/api/tenants/{mine}/users/{their.user}/unlock', expect: 404 },
  { route: 'DELETE /api/tenants/{tid}/users/{id}', path: '/api/tenants/{mine}/users/{their.user}', expect: 404 },
  { route: 'GET /api/tenants/{tid}/users/{uid}/scopes', path: '/api/tenants/{mine}/users/{their.user}/scopes', expect: 404 },
  { route: 'PUT /api/tenants/{tid}/users/{uid}/scopes', path: '/api/tenants/{mine}/users/{their.user}/scopes', expect: 404, body: { scopes: ['crm'] } },
  { route: 'GET /api/tenants/{tid}/users/{uid}/roles', path: '/api/tenants/{mine}/users/{their.user}/roles', expect: 404 },
  { route: 'PUT /api/tenants/{tid}/users/{uid}/roles/{roleId}', path: '/api/tenants/{mine}/users/{their.user}/roles/{their.role}', expect: 404 },
  { route: 'DELETE /api/tenants/{tid}/users/{uid}/roles/{roleId}', path: '/api/tenants/{mine}/users/{their.user}/roles/{their.role}', expect: 404 },

  theirTenant('GET /api/tenants/{tid}/roles'),
  theirTenant('POST /api/tenants/{tid}/roles'),
  theirTenant('GET /api/tenants/{tid}/roles/{roleId}'),
  theirTenant('GET /api/tenants/{tid}/roles/{roleId}/orgs'),
  theirTenant('PUT /api/tenants/{tid}/roles/{roleId}/orgs/{orgId}'),
  theirTenant('DELETE /api/tenants/{tid}/roles/{roleId}/orgs/{orgId}'),
  { route: 'GET /api/tenants/{tid}/roles', path: '/api/tenants/{mine}/roles', expect: 200, excludes: true },
  { route: 'GET /api/tenants/{tid}/roles/{roleId}', path: '/api/tenants/{mine}/roles/{their.role}', expect: 404 },
  { route: 'GET /api/tenants/{tid}/roles/{roleId}/orgs', path: '/api/tenants/{mine}/roles/{their.role}/orgs', expect: 404 },
  { route: 'PUT /api/tenants/{tid}/roles/{roleId}/orgs/{orgId}', path: '/api/tenants/{mine}/roles/{their.role}/orgs/{their.org}', expect: 404 },
  { route: 'DELETE /api/tenants/{tid}/roles/{roleId}/orgs/{orgId}', path: '/api/tenants/{mine}/roles/{their.role}/orgs/{their.org}', expect: 404 },

  // E-mail rules.
  theirTenant('GET /api/tenants/{tid}/email-rules'),
  theirTenant('POST /api/tenants/{tid}/email-rules'),
  theirTenant('GET /api/tenants/{tid}/email-rules/{id}'),
  theirTenant('PUT /api/tenants/{tid}/email-rules/{id}'),
  theirTenant('DELETE /api/tenants/{tid}/email-rules/{id}'),
  { route: 'GET /api/tenants/{tid}/email-rules', path: '/api/tenants/{mine}/email-rules', expect: 200, excludes: true },
  { route: 'GET /api/tenants/{tid}/email-rules/{id}', path: '/api/tenants/{mine}/email-rules/{their.rule}', expect: 404 },
  { route: 'PUT /api/tenants/{tid}/email-rules/{id}', path: '/api/tenants/{mine}/email-rules/{their.rule}', expect: 404, body: { enabled: false } },
  { route: 'DELETE /api/tenants/{tid}/email-rules/{id}', path: '/api/tenants/{mine}/email-rules/{their.rule}', expect: 404 },

  // Integrations and their deliveries.
  theirTenant('GET /api/tenants/{tid}/integrations'),
  theirTenant('POST /api/tenants/{tid}/integrations'),
  theirTenant('GET /api/tenants/{tid}/integrations/{id}'),
  theirTenant('PUT /api/tenants/{tid}/integrations/{id}'),
  theirTenant('DELETE /api/tenants/{tid}/integrations/{id}'),
  theirTenant('POST /api/tenants/{tid}/integrations/{id}/test'),
  theirTenant('GET /api/tenants/{tid}/integrations/{id}/deliveries'),
  theirTenant('GET /api/tenants/{tid}/integrations/{id}/deliveries/{did}'),
  theirTenant('POST /api/tenants/{tid}/integrations/{id}/deliveries/{did}/replay'),
  { route: 'GET /api/tenants/{tid}/integrations', path: '/api/tenants/{mine}/integrations', expect: 200, excludes: true },
  { route: 'GET /api/tenants/{tid}/integrations/{id}', path: '/api/tenants/{mine}/integrations/{their.integration}', expect: 404 },
  { route: 'PUT /api/tenants/{tid}/integrations/{id}', path: '/api/tenants/{mine}/integrations/{their.integration}', expect: 404, body: { enabled: false } },
  { route: 'DELETE /api/tenants/{tid}/integrations/{id}', path: '/api/tenants/{mine}/integrations/{their.integration}', expect: 404 },
  { route: 'POST /api/tenants/{tid}/integrations/{id}/test', path: '/api/tenants/{mine}/integrations/{their.integration}/test', expect: 404, body: { eventType: 'matrix.test' } },
  { route: 'GET /api/tenants/{tid}/integrations/{id}/deliveries', path: '/api/tenants/{mine}/integrations/{their.integration}/deliveries', expect: 404 },
  {
    route: 'GET /api/tenants/{tid}/integrations/{id}/deliveries/{did}',
    path: '/api/tenants/{mine}/integrations/{their.integration}/deliveries/{their.delivery}',
    expect: 404,
  },
  {
    route: 'POST /api/tenants/{tid}/integrations/{id}/deliveries/{did}/replay',
    path: '/api/tenants/{mine}/integrations/{their.integration}/deliveries/{their.delivery}/replay',
    expect: 404,
  },
  { route: 'GET /api/platform/deliveries', path: '/api/platform/deliveries', expect: 200, excludes: true },
  { route: 'GET /api/platform/deliveries', path: '/api/platform/deliveries?integrationId={their.integration}', expect: 404 },
  { route: 'POST /api/platform/deliveries/{id}/replay', path: '/api/platform/deliveries/{their.delivery}/replay', expect: 404 },

  // Connectors (by name), their endpoints and runs.
  { route: 'GET /api/connectors', path: '/api/connectors', expect: 200, excludes: true },
  { route: 'GET /api/connectors/{name}', path: '/api/connectors/{their.connector}', expect: 404 },
  { route: 'DELETE /api/connectors/{name}', path: '/api/connectors/{their.connector}', expect: 404 },
  { route: 'POST /api/connectors/{name}/endpoints/{id}/reset-cursor', path: '/api/connectors/{their.connector}/endpoints/{their.endpoint}/reset-cursor', expect: 404 },
  { route: 'POST /api/connectors/{name}/endpoints/{id}/purge', path: '/api/connectors/{their.connector}/endpoints/{their.endpoint}/purge', expect: 404 },
  { route: 'POST /api/connectors/{name}/runs', path: '/api/connectors/{their.connector}/runs', expect: 404, body: {} },
  { route: 'POST /api/connectors/{name}/preflight', path: '/api/connectors/{their.connector}/preflight', expect: 404 },
  { route: 'POST /api/connectors/{name}/draft', path: '/api/connectors/{their.connector}/draft', expect: 404, body: { path: '/partners' } },
  // Applying a manifest makes a connector of mine; ingesting CSV into their table's name fills my table.
  {
    route: 'POST /api/connectors/apply',
    path: '/api/connectors/apply',
    expect: 201,
    type: 'application/json',
    body: {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'mine-crm' },
      connector_type: 'rest-generic',
      spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'accounts', path: '/accounts', target: { table: 'ext.{their.table}', unique_key: '$.id' } }] },
    },
  },
  {
    route: 'POST /api/platform/sources/csv/ingest',
    path: '/api/platform/sources/csv/ingest?connector=mine-import&table={their.table}&key=id',
    expect: 200,
    type: 'text/csv',
    body: 'id,city\n1,Overwritten\n',
  },

  // A workflow or an export naming their entity, before I have one of that name (the entity case below makes it):
  // refused as for an entity no one has.
  {
    route: 'POST /api/workflows/apply',
    path: '/api/workflows/apply',
    expect: 400,
    type: 'application/json',
    body: { apiVersion: 'apps.svc.io/v1', kind: 'Workflow', metadata: { name: 'mine-cities' }, spec: { entity: '{their.entity}', stateColumn: 'city', states: ['Lyon', 'Paris'] } },
  },
  {
    route: 'POST /api/exports/apply',
    path: '/api/exports/apply',
    expect: 400,
    type: 'application/json',
    body: {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Export',
      metadata: { name: 'mine-daily' },
      spec: { scope: 'globex-scope', source: { entity: '{their.entity}' }, columns: ['id', 'city'], order: ['id'], format: { kind: 'csv' }, destination: { kind: 's3', bucket: 'my-bucket', filename: 'f.csv' }, mode: 'snapshot' },
    },
  },
  // Entities (by name, case-insensitive). Applying their entity's name over their table's name makes mine.
  { route: 'GET /api/entities', path: '/api/entities', expect: 200, excludes: true },
  { route: 'GET /api/entities/{name}', path: '/api/entities/{their.entity}', expect: 404 },
  { route: 'DELETE /api/entities/{name}', path: '/api/entities/{their.entity}', expect: 404 },
  {
    route: 'POST /api/entities/apply',
    path: '/api/entities/apply',
    expect: 201,
    type: 'application/json',
    body: {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: '{their.entity}' },
      spec: {
        scope: 'globex-scope',
        key: 'id',
        columns: [{ name: 'id', type: 'text' }, { name: 'city', type: 'text' }],
        sources: [{ table: 'ext.{their.table}', key: 'external_id', columns: { city: '$.city' } }],
      },
    },
  },
  // Processes (by name, case-insensitive) and the decision inbox. Applying their process's name makes mine.
  { route: 'GET /api/processes', path: '/api/processes', expect: 200, excludes: true },
  { route: 'GET /api/processes/{name}', path: '/api/processes/{their.process}', expect: 404 },
  { route: 'DELETE /api/processes/{name}', path: '/api/processes/{their.process}', expect: 404 },
  {
    route: 'POST /api/processes/apply',
    path: '/api/processes/apply',
    expect: 201,
    type: 'application/json',
    body: { apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name: '{their.process}' }, spec: { event: 'connector.run.*', decision: 'decision.mine' } },
  },
  // A process of mine may not mint their workflow's dormancy type (nor any tenant's: only the hub emits decision.dormant.*).
  {
    route: 'POST /api/processes/apply',
    path: '/api/processes/apply',
    expect: 400,
    type: 'application/json',
    body: { apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name: 'mine-dormant' }, spec: { event: 'connector.run.*', decision: 'decision.dormant.{their.workflow}' } },
  },
  { route: 'GET /api/inbox', path: '/api/inbox', expect: 200, excludes: true },
  // A page after a cursor made from their item's id (the cursor's own form, matrix.test.ts): still only mine.
  { route: 'GET /api/inbox', path: '/api/inbox?before={their.decisionCursor}', expect: 200, excludes: true },
  { route: 'POST /api/inbox/{id}/ack', path: '/api/inbox/{their.decision}/ack', expect: 404 },
  // Workflows (by name, case-insensitive). Applying their workflow's name over my entity of their
  // entity's name (the entity case above made it) makes mine.
  { route: 'GET /api/platform/workflows', path: '/api/platform/workflows', expect: 200, excludes: true },
  { route: 'GET /api/platform/workflows/{name}', path: '/api/platform/workflows/{their.workflow}', expect: 404 },
  { route: 'DELETE /api/workflows/{name}', path: '/api/workflows/{their.workflow}', expect: 404 },
  {
    route: 'POST /api/workflows/apply',
    path: '/api/workflows/apply',
    expect: 201,
    type: 'application/json',
    body: {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Workflow',
      metadata: { name: '{their.workflow}' },
      spec: { entity: '{their.entity}', stateColumn: 'city', states: ['Lyon', 'Paris'], dormancy: { after: '30d' } },
    },
  },
  // Exports (by name) and their runs; the download of their entity. Applying their export's name
  // over my entity of their entity's name (the entity case above made it) makes mine.
  { route: 'GET /api/exports', path: '/api/exports', expect: 200, excludes: true },
  { route: 'GET /api/exports/{name}', path: '/api/exports/{their.export}', expect: 404 },
  { route: 'DELETE /api/exports/{name}', path: '/api/exports/{their.export}', expect: 404 },
  { route: 'POST /api/exports/{name}/runs', path: '/api/exports/{their.export}/runs', expect: 404 },
  { route: 'GET /api/exports/{name}/runs', path: '/api/exports/{their.export}/runs', expect: 404 },
  { route: 'GET /api/exports/{name}/runs/{id}', path: '/api/exports/{their.export}/runs/{their.exportRun}', expect: 404 },
  { route: 'POST /api/exports/{name}/runs/{id}/retry', path: '/api/exports/{their.export}/runs/{their.exportRun}/retry', expect: 404 },
  { route: 'POST /api/exports/{name}/runs/{id}/cancel', path: '/api/exports/{their.export}/runs/{their.exportRun}/cancel', expect: 404 },
  // My entity of their entity's name (made above) reads my rows only.
  { route: 'GET /api/exports/entities/{entity}/download', path: '/api/exports/entities/{their.entity}/download', expect: 200, excludes: true },
  {
    route: 'POST /api/exports/apply',
    path: '/api/exports/apply',
    expect: 201,
    type: 'application/json',
    body: {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Export',
      metadata: { name: '{their.export}' },
      spec: {
        scope: 'globex-scope',
        source: { entity: '{their.entity}' },
        columns: ['id', 'city'],
        order: ['id'],
        format: { kind: 'csv' },
        destination: { kind: 's3', bucket: 'their-bucket', filename: 'f.csv' },
        mode: 'snapshot',
      },
    },
  },
  // My trail holds my own calls, whose paths name their resources (the calls above), so the check is on
  // the entries of their admin (`globex-admin`, matrix.test.ts's scenario): none of them is mine to see.
  { route: 'GET /api/platform/audit', path: '/api/platform/audit?actor=globex-admin', expect: 200, excludes: true },
  { route: 'GET /api/platform/runs', path: '/api/platform/runs', expect: 200, excludes: true },
  { route: 'GET /api/platform/runs', path: '/api/platform/runs?connector=globex-import', expect: 200, excludes: true },
  { route: 'GET /api/platform/runs/{id}', path: '/api/platform/runs/{their.run}', expect: 404 },
  { route: 'POST /api/platform/runs/{id}/cancel', path: '/api/platform/runs/{their.run}/cancel', expect: 404 },
  { route: 'GET /api/platform/dlq', path: '/api/platform/dlq', expect: 200, excludes: true },
  { route: 'GET /api/platform/dlq', path: '/api/platform/dlq?run={their.run}', expect: 200, excludes: true },
  { route: 'GET /api/platform/dlq', path: '/api/platform/dlq?connector=globex-import', expect: 200, excludes: true },
  { route: 'GET /api/platform/dlq/{id}', path: '/api/platform/dlq/{their.dlq}', expect: 404 },
  { route: 'POST /api/platform/dlq/{id}/replayed', path: '/api/platform/dlq/{their.dlq}/replayed', expect: 404 },
  { route: 'POST /api/platform/dlq/{id}/discard', path: '/api/platform/dlq/{their.dlq}/discard', expect: 404 },
  { route: 'DELETE /api/platform/dlq/{id}', path: '/api/platform/dlq/{their.dlq}', expect: 404 },
  { route: 'GET /api/platform/data/row/{hash}', path: '/api/platform/data/row/{their.hash}', expect: 404 },
];

/** Routes that read or write no tenant's data, or act on every tenant by design, and why. */
export const NOT_TENANT_SCOPED: Record<string, string> = {
  'GET /q/health': 'public health probe',
  'GET /q/health/live': 'public health probe',
  'GET /q/health/ready': 'public health probe',
  'GET /q/metrics': 'public metrics; the CSV ingest series name a tenant\'s connector with its tenant id, each tenant\'s series its own (apiserver/routes/connectors/connector-runs.test.ts)',
  'GET /api/platform/health': 'the hub\'s health, no tenant data',
  'GET /api/platform/migrations': 'schema versions, no tenant data',
  'GET /api/tenants': 'platform administration: svc_superadmin only (apiserver/routes/admin/tenants.test.ts)',
  'GET /api/tenants/{id}': 'platform administration: svc_superadmin only (apiserver/routes/admin/tenants.test.ts)',
  'POST /api/tenants': 'platform administration: svc_superadmin only (apiserver/routes/admin/tenants.test.ts)',
  'PUT /api/tenants/{id}': 'platform administration: svc_superadmin only (apiserver/routes/admin/tenants.test.ts)',
  'DELETE /api/tenants/{id}': 'platform administration: svc_superadmin only (apiserver/routes/admin/tenants.test.ts)',
  'GET /api/platform/admin/tenants': 'platform administration: svc_superadmin only (apiserver/routes/admin/tenants.test.ts)',
  'GET /api/platform/events/stream': 'a live stream; its tenant filter is tested in apiserver/routes/events/event-stream.test.ts',
  'POST /api/connectors/validate': 'checks a manifest; reads and stores nothing',
  'POST /api/connectors/scaffold': 'drafts a manifest from a document; reads and stores no tenant data',
};

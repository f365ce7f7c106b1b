import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { client, devClient, ownerClient, type Client } from '../../test/harness/api-client.js';
import { ITEM_ENTITY, itemS3Export } from '../../test/harness/export-manifests.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { type Receiver, startReceiver } from '../../test/harness/receiver.js';
import { startS3, type TestS3 } from '../../test/harness/s3.js';
import { startSilentEndpoint } from '../../test/harness/silent-endpoint.js';
import { until } from '../../test/harness/until.js';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { Config } from '../config/config.js';
import { ExtSchema } from '../connectors/target/ddl.js';
import { prepareRow } from '../connectors/target/rows.js';
import { upsertChunk } from '../connectors/target/writer.js';
import { EgressPolicy } from '../egress/policy.js';
import type { Database, Tx } from '../db/database.js';
import { createExportServices } from '../exports/services.js';
import { embeddingFromConfig } from '../retrieval/embedding/from-config.js';
import { embedPending, expandPending, pendingIndexer } from '../retrieval/indexer.js';

/**
 * Error texts the hub stores and answers later are masked as its log lines are
 * (src/observability/logger.ts, `storableMessage`): a credential in an address (`user:pass@`, query
 * values), the hub's own secrets (a configured key), the unit of work's (a connector's token) and
 * Bearer credentials, each failure made to happen for real with the credential in its message,
 * the table and the API answer read back. What locates the fault (the status, the names) stays.
 */

/** A credential in an address, as an upstream's error body or a database error may quote one. */
const CREDENTIAL_URL = 'https://svc-reader:Vault-pa55-word@vault.internal.example/v1/kv';
const MASKED_URL = 'https://***@vault.internal.example/v1/kv';
/** A bearer credential of another system, quoted in an error text. */
const BEARER = 'Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ';
const SECRET_PARTS = ['Vault-pa55-word', 'svc-reader:', 'eyJhbGciOiJIUzI1NiJ9'];

function expectNoCredential(text: unknown, more: string[] = []): void {
  const json = JSON.stringify(text);
  for (const part of [...SECRET_PARTS, ...more]) expect(json).not.toContain(part);
}

describe('through the hub: a connector run and an export run that fail with a credential in their error', () => {
  const TOKEN = 'tenant-upstream-token-4f7c1e9a';
  /** A credential of the hub's own configuration (svc.mail.password), which a tenant must not be able to test guesses against. */
  const HUB_PASSWORD = 'mail-pa55word';
  let hub: TestHub;
  let owner: pg.Client;
  let api: Client;
  let upstream: Receiver;
  let s3: TestS3;

  beforeAll(async () => {
    // The upstream echoes the request's Authorization header (the connector's token) and quotes an address with its credentials.
    upstream = await startReceiver((_path, { headers }) => ({
      status: 500,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ error: `backend ${CREDENTIAL_URL} unavailable`, request: { authorization: headers.authorization }, upstream: BEARER }),
    }));
    s3 = await startS3({ region: 'eu-west-3' });
    s3.createBucket('drops');
    hub = await startTestHub({
      'svc.secret.master-key': Buffer.alloc(32, 5).toString('base64'),
      'svc.connectors.retry.base-delay': '1ms',
      'svc.connectors.retry.max-delay': '1ms',
      'svc.export.heartbeat-every': '100ms',
      'svc.mail.password': HUB_PASSWORD,
    });
    owner = await ownerClient(hub.ownerUrl);
    api = devClient(hub.url, 1);
    for (const [name, value] of [['UPSTREAM_TOKEN', TOKEN], ['S3_KEY', s3.accessKeyId], ['S3_SECRET', s3.secretAccessKey]] as const) {
      expect((await api.post('/api/platform/secrets', { name, value })).status).toBe(201);
    }
  }, 60_000);

  afterAll(async () => {
    await owner?.end();
    await hub?.stop();
    await upstream?.close();
    await s3?.stop();
  });

  /** Connector `name` (bearer UPSTREAM_TOKEN) reading `baseUrl`, run once until it fails: the run's id and API record. */
  async function failedRun(name: string, baseUrl: string): Promise<{ id: string; record: { errorMessage: string } }> {
    const applied = await api.post('/api/connectors/apply', {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name },
      connector_type: 'rest-generic',
      spec: { base_url: baseUrl, auth: { kind: 'bearer', token_env: 'UPSTREAM_TOKEN' }, endpoints: [{ id: 'items', path: '/items', target: { table: `ext.${name}`, unique_key: '$.id' } }] },
    });
    expect(applied.status).toBeLessThan(300);
    const started = await api.post(`/api/connectors/${name}/runs`, {});
    expect(started.status).toBe(202);
    const id = (started.body as { runs: Array<{ id: string }> }).runs[0]!.id;
    const record = await until('the run to fail', async () => {
      const got = await api.get(`/api/platform/runs/${id}`);
      return (got.body as { status: string }).status === 'Failed' && (got.body as { errorMessage: string });
    });
    return { id, record };
  }

  /** Entity `item` applied over `ext.items` holding one row (kept if an earlier test made it). */
  async function oneItem(): Promise<void> {
    await hub.services.connectors.ext.ensureTable(1, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
    await owner.query(
      `insert into ext_t1.items (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label)
         values (1, 'k1', 'h1', '{}', '00000000-0000-0000-0000-0000000000c5', '00000000-0000-0000-0000-0000000000e5', 'label 1') on conflict do nothing`,
    );
    expect((await api.post('/api/entities/apply', ITEM_ENTITY)).status).toBeLessThan(300);
  }

  it('a run failed by an upstream 500 echoing the token and a credential URL: neither its record, its API answers nor its event holds them; the status does', async () => {
    const { id, record } = await failedRun('leaky', upstream.url);

    const { rows } = await owner.query<{ error_message: string }>('select error_message from connectors.runs where id = $1', [id]);
    const { rows: events } = await owner.query<{ payload: { error_message: string } }>(`select payload from events.outbox where type = 'connector.run.failed' and payload->>'run_id' = $1`, [id]);
    const listed = await api.get('/api/platform/runs?limit=10');
    for (const text of [rows[0]!.error_message, record.errorMessage, events[0]!.payload.error_message, listed.body]) expectNoCredential(text, [TOKEN]);
    expect(rows[0]!.error_message).toMatch(/^upstream returned HTTP 500 \(transient\)/);
    expect(rows[0]!.error_message).toContain(`backend ${MASKED_URL} unavailable`);
    expect(rows[0]!.error_message).toContain('Bearer [REDACTED]');
    expect(record.errorMessage).toBe(rows[0]!.error_message);
    expect(events[0]!.payload.error_message).toBe(rows[0]!.error_message);
  }, 60_000);

  it('a run failed by an upstream quoting guesses at the hub\'s own credentials: each guess is stored as the upstream sent it, the right one as a wrong one (no oracle)', async () => {
    // Masking the hub's secrets in what a tenant's own upstream sent would tell the tenant which of its guesses is one
    // (`welcome1 [REDACTED] letmein`); the hub never sends its credentials to a tenant's upstream, and the pre-flight
    // shows the same text unmasked. The tenant's own credentials, addresses' and Bearer credentials stay masked.
    const guessing = await startReceiver(() => ({ status: 500, body: `guesses: welcome1 ${HUB_PASSWORD} mail-pa55wore ${TOKEN}` }));
    try {
      const { record } = await failedRun('guessing', guessing.url);
      expect(record.errorMessage).toBe(`upstream returned HTTP 500 (transient) — refusing to ingest its body as data: guesses: welcome1 ${HUB_PASSWORD} mail-pa55wore [REDACTED]`);
    } finally {
      await guessing.close();
    }
  }, 60_000);

  it('an export run whose snapshot query fails with a database error quoting a credential URL: neither its record nor its API answer holds it; the reason does', async () => {
    await hub.services.connectors.ext.ensureTable(1, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
    await owner.query(
      `insert into ext_t1.items (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label)
         values (1, 'k1', 'h1', '{}', '00000000-0000-0000-0000-0000000000c5', '00000000-0000-0000-0000-0000000000e5', 'label 1')`,
    );
    expect((await api.post('/api/entities/apply', ITEM_ENTITY)).status).toBe(201);
    // A row policy whose check fails reading, as a policy calling out to a foreign server would: its message quotes the address it used.
    await owner.query(`create function public.test_leaky_policy() returns boolean language plpgsql as $$
      begin raise exception 'row check against ${CREDENTIAL_URL} failed (${BEARER})'; end $$`);
    await owner.query('create policy test_leaky on ext_t1.items as restrictive for select using (public.test_leaky_policy())');
    try {
      expect((await api.post('/api/exports/apply', itemS3Export('leaky', s3.endpoint))).status).toBeLessThan(300);
      const started = await api.post('/api/exports/leaky/runs', {});
      expect(started.status).toBe(202);
      const id = (started.body as { runId: string }).runId;
      const run = await until('the export run to fail', async () => {
        const got = await api.get(`/api/exports/leaky/runs/${id}`);
        return (got.body as { status: string }).status === 'Failed' && (got.body as { failureCode: string; failureReason: string });
      });
      const { rows } = await owner.query<{ failure_reason: string }>('select failure_reason from exports.runs where id = $1', [id]);
      const listed = await api.get('/api/exports/leaky/runs');
      for (const text of [rows[0]!.failure_reason, run.failureReason, listed.body]) expectNoCredential(text, [s3.secretAccessKey]);
      expect(run.failureCode).toBe('generation');
      expect(rows[0]!.failure_reason).toContain(`row check against ${MASKED_URL} failed (Bearer [REDACTED])`);
      expect(run.failureReason).toBe(rows[0]!.failure_reason);
    } finally {
      await owner.query('drop policy test_leaky on ext_t1.items');
    }
  }, 60_000);

  it('an export run failed by an S3-compatible store answering guesses at the hub\'s own credentials as its error code: stored as the store sent it, the right one as a wrong one (no oracle)', async () => {
    await oneItem();
    const outcomes: Record<string, string> = {};
    for (const guess of [HUB_PASSWORD, 'mail-pa55wore']) {
      const store = await startReceiver(() => ({ status: 400, headers: { 'content-type': 'application/xml' }, body: `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${guess}</Code><Message>m</Message></Error>` }));
      try {
        const name = `guess-${Object.keys(outcomes).length}`;
        expect((await api.post('/api/exports/apply', itemS3Export(name, store.url))).status).toBeLessThan(300);
        const id = ((await api.post(`/api/exports/${name}/runs`, {})).body as { runId: string }).runId;
        const run = await until('the export run to fail', async () => {
          const got = await api.get(`/api/exports/${name}/runs/${id}`);
          return (got.body as { status: string }).status === 'Failed' && (got.body as { failureReason: string });
        });
        outcomes[guess] = run.failureReason.replace(name, 'NAME');
      } finally {
        await store.close();
      }
    }
    expect(outcomes[HUB_PASSWORD]).toContain(`HTTP 400 ${HUB_PASSWORD} while publishing`);
    expect(outcomes[HUB_PASSWORD]!.replace(HUB_PASSWORD, 'GUESS')).toBe(outcomes['mail-pa55wore']!.replace('mail-pa55wore', 'GUESS'));
  }, 60_000);

  it('an export run failed on its definition, which quotes the names the tenant chose: a name guessing at the hub\'s own credentials is stored as written, the right one as a wrong one (no oracle)', async () => {
    const outcomes: Record<string, string> = {};
    for (const guess of [HUB_PASSWORD, 'mail-pa55wore']) {
      // An entity named after the guess, over a table that does not exist (applied with a warning): its export fails `definition`.
      const entity = { ...ITEM_ENTITY, metadata: { name: guess }, spec: { ...ITEM_ENTITY.spec, sources: [{ ...ITEM_ENTITY.spec.sources[0]!, table: 'ext.not_there' }] } };
      expect((await api.post('/api/entities/apply', entity)).status).toBeLessThan(300);
      const name = `definition-${Object.keys(outcomes).length}`;
      const exp = itemS3Export(name, s3.endpoint);
      expect((await api.post('/api/exports/apply', { ...exp, spec: { ...exp.spec, source: { entity: guess } } })).status).toBeLessThan(300);
      const id = ((await api.post(`/api/exports/${name}/runs`, {})).body as { runId: string }).runId;
      const run = await until('the export run to fail', async () => {
        const got = await api.get(`/api/exports/${name}/runs/${id}`);
        return (got.body as { status: string }).status === 'Failed' && (got.body as { failureCode: string; failureReason: string });
      });
      expect(run.failureCode).toBe('definition');
      outcomes[guess] = run.failureReason;
    }
    expect(outcomes[HUB_PASSWORD]).toContain(`entity ${HUB_PASSWORD}`);
    expect(outcomes[HUB_PASSWORD]!.replace(HUB_PASSWORD, 'GUESS')).toBe(outcomes['mail-pa55wore']!.replace('mail-pa55wore', 'GUESS'));
  }, 60_000);

  it('an export run cancelled by a user whose name guesses at the hub\'s own credentials: the reason names the user as written, the right guess as a wrong one (no oracle)', async () => {
    await oneItem();
    // A destination that never answers: the run stays Running until it is cancelled.
    const silent = await startSilentEndpoint();
    const outcomes: Record<string, string> = {};
    try {
      for (const guess of [HUB_PASSWORD, 'mail-pa55wore']) {
        const name = `cancelled-${Object.keys(outcomes).length}`;
        expect((await api.post('/api/exports/apply', itemS3Export(name, silent.url))).status).toBeLessThan(300);
        const id = ((await api.post(`/api/exports/${name}/runs`, {})).body as { runId: string }).runId;
        await until('the run to reach the destination', async () => silent.sockets.size > 0);
        const user = client(hub.url, { 'X-Tenant-ID': '1', 'X-User-ID': guess });
        expect((await user.post(`/api/exports/${name}/runs/${id}/cancel`, {})).status).toBe(202);
        const run = await until('the cancelled run to end', async () => {
          const got = await api.get(`/api/exports/${name}/runs/${id}`);
          return (got.body as { status: string }).status === 'Failed' && (got.body as { failureCode: string; failureReason: string });
        });
        expect(run.failureCode).toBe('interrupted');
        outcomes[guess] = run.failureReason;
        for (const socket of silent.sockets) socket.destroy();
      }
    } finally {
      await silent.close();
    }
    expect(outcomes[HUB_PASSWORD]).toContain(`cancelled by ${HUB_PASSWORD} during the run`);
    expect(outcomes[HUB_PASSWORD]!.replace(HUB_PASSWORD, 'GUESS')).toBe(outcomes['mail-pa55wore']!.replace('mail-pa55wore', 'GUESS'));
  }, 60_000);

  it('an export run failed by the hub\'s own database as it checks the run before publishing (a publication failure): the hub\'s credential in the error is masked', async () => {
    // Coded `publication` as the destination's own refusals are, but the hub's failure: masked with the hub's credentials.
    await oneItem();
    expect((await api.post('/api/exports/apply', itemS3Export('fenced', s3.endpoint))).status).toBeLessThan(300);
    // The hub's database, but for the publication fence's transaction (the worker pool), which fails quoting the hub's credential.
    const real = hub.services.db;
    const failing = Object.create(real) as Database;
    failing.crossTenant = ((job: string, fn: (tx: Tx) => Promise<unknown>) =>
      job === 'export-publication' ? Promise.reject(new Error(`password authentication failed (tried ${HUB_PASSWORD})`)) : real.crossTenant(job, fn)) as Database['crossTenant'];
    const services = createExportServices({ config: hub.config, db: failing, secrets: hub.services.secrets, egress: new EgressPolicy({ denyPrivate: false }) });
    try {
      const run = await services.runNow(1, 'fenced');
      expect(run).toMatchObject({ status: 'Failed', failureCode: 'publication' });
      expect(run.failureReason).toBe("the run's record could not be checked before publishing (password authentication failed (tried [REDACTED])); nothing was published. Retry it");
      const { rows } = await owner.query<{ failure_reason: string }>('select failure_reason from exports.runs where id = $1', [run.id]);
      expect(rows[0]!.failure_reason).toBe(run.failureReason);
    } finally {
      await services.close();
    }
  }, 60_000);
});

describe('the retrieval indexer: an entry and a chunk set aside with an error quoting a credential', () => {
  let t: MigratedDatabase;
  let ext: ExtSchema;
  const connectorId = '00000000-0000-4000-8000-0000000000c1';
  const endpointUuid = '00000000-0000-4000-8000-0000000000e1';

  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme' });
    ext = new ExtSchema(t.ownerUrl, TEST_ROLES);
    await ext.ensureTable(1, 'ext.notes', []);
  });
  afterAll(async () => {
    await ext?.close();
    await t?.close();
  });

  it('an entry whose expansion fails with a database error quoting a credential URL and a bearer token: last_error keeps the message without them', async () => {
    await t.owner.query(`create function retrieval.test_leaky() returns trigger language plpgsql as $$
      begin raise exception 'chunk store ${CREDENTIAL_URL} refused (${BEARER})'; end $$`);
    await t.owner.query('create trigger test_leaky before insert on retrieval.chunks for each row execute function retrieval.test_leaky()');
    try {
      const target = { kind: 'hybrid' as const, table: 'ext.notes', unique_key: '$.id', promote: [] };
      const rows = [prepareRow({ id: 'n1', text: 'a note' }, target)];
      const ids = { tenantId: 1, connectorId, endpointUuid };
      await t.db.withTenant(1, async (tx) => {
        await upsertChunk(tx, target, rows, ids);
        await pendingIndexer.rowsWritten(tx, { ...ids, connectorName: 'notes', table: target.table, scopes: [], rows });
      });
      expect(await expandPending(t.db)).toBe(1);
      const { rows: pending } = await t.owner.query<{ attempts: number; last_error: string }>('select attempts, last_error from retrieval.pending');
      expect(pending).toEqual([{ attempts: 1, last_error: `chunk store ${MASKED_URL} refused (Bearer [REDACTED])` }]);
      expectNoCredential(pending);
    } finally {
      await t.owner.query('drop trigger test_leaky on retrieval.chunks');
      await t.owner.query('delete from retrieval.pending');
    }
  });

  it('a chunk an OpenAI-compatible endpoint refuses with an error quoting the configured key: embed_error keeps the status and the reason without it', async () => {
    const KEY = 'sk-test-9c1d2e3f4a5b6c7d8e9f';
    const endpoint = await startReceiver((_path, { headers }) => ({
      status: 400,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ error: { message: `input rejected for ${String(headers.authorization)} (key ${KEY}): too long`, type: 'invalid_request_error' } }),
    }));
    try {
      const config = Config.load({
        env: {},
        overrides: { 'svc.config': '/nonexistent-svc-config.yaml', 'svc.embedding.provider': 'openai', 'svc.embedding.base-url': `${endpoint.url}/v1`, 'svc.embedding.api-key': KEY, 'svc.embedding.dimensions': 4 },
      });
      const port = embeddingFromConfig(config, EgressPolicy.open())!;
      await t.owner.query(
        `insert into retrieval.chunks (tenant_id, corpus, row_hash, table_name, external_id, content) values (1, 'crm', md5('x'), 'ext.rows', 'x1', 'a text too long')`,
      );
      expect(await embedPending(t.db, port, 8)).toBe(0);
      const { rows } = await t.owner.query<{ embed_attempts: number; embed_error: string }>('select embed_attempts, embed_error from retrieval.chunks');
      expect(rows).toHaveLength(1);
      expect(rows[0]!.embed_attempts).toBe(1);
      expect(rows[0]!.embed_error).toMatch(/^the embedding endpoint answered HTTP 400: /);
      expect(rows[0]!.embed_error).toContain('Bearer [REDACTED]');
      expect(rows[0]!.embed_error).toContain('too long');
      expect(rows[0]!.embed_error).not.toContain(KEY);
      expect(rows[0]!.embed_error).not.toContain(KEY.slice(3));
    } finally {
      await endpoint.close();
    }
  });
});

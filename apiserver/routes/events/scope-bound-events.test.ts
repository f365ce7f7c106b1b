import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type Client, client, devClient } from '../../../test/harness/api-client.js';
import { applyDomainWorkflows, boundUser, connector, SCOPE_REFUSED } from '../../../test/harness/scope-manifests.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';
import type { PageReader } from '../../../src/connectors/runner.js';
import type { ConnectorSpec } from '../../../src/connectors/types.js';
import { CONNECTOR_RUN } from '../../../src/events/scoped-families.js';

/**
 * A scope-bound caller (docs/admin.md, "Scopes") holding every role cannot subscribe to, nor reach a
 * subscription to, the event families that carry one domain's data (`connector.run.*`,
 * `data.row.changed`, `decision.dormant.*`): events carry no scopes. The one exception is an exact
 * `decision.dormant.<workflow>` of a workflow of their scopes. Before, integrations and e-mail rules
 * were governed by roles alone: a user bound to `crm` holding svc_admin subscribed to erp's runs,
 * rows and dormant records, and read, changed and replayed erp's deliveries.
 */

const T = 1;
let hub: TestHub;
let api: Client;
let crm: Client;
/** The bound user's headers (the stream is read with fetch). */
let crmHeaders: Record<string, string>;

/** Patterns that can match an event of erp's (or any domain's) runs, rows or dormant records. */
const SCOPED = [
  'connector.run.completed', 'connector.run.*', 'connector.*', 'data.row.changed', 'data.row.*', 'data.*',
  'decision.*', 'decision.dormant.*', 'decision.dormant.erp-flow', 'decision.dormant.shared-flow', 'decision.dormant.no-such-flow',
];

beforeAll(async () => {
  // Short heartbeats: a scope-bound stream reads what its caller holds again at each.
  hub = await startTestHub({ 'svc.events.stream.heartbeat': '200ms' });
  api = devClient(hub.url, T);
  crmHeaders = await boundUser(api, T, 'crm-only', ['crm']);
  crm = client(hub.url, crmHeaders);
  for (const c of [connector('erp', ['erp']), connector('crm', ['crm'])]) expect((await api.post('/api/connectors/apply', c)).status).toBe(201);
  await applyDomainWorkflows(api);
}, 60_000);

afterAll(async () => {
  await hub?.stop();
});

const names = (r: { body: unknown }) => (r.body as Array<{ name: string }>).map((x) => x.name);

describe('a scope-bound caller and integrations', () => {
  const base = `/api/tenants/${T}/integrations`;
  const hook = (name: string, eventTypes: string[]) => ({ name, targetUrl: `https://hooks.example.com/${name}`, eventTypes });
  let erpHook: number;
  let ownHook: number;
  /** A delivery of integration `id` recorded as an event's; its id. */
  const deliveryOf = async (id: number, type: string) =>
    (
      await hub.services.db.withTenant(T, (tx) =>
        tx.query<{ id: string }>(
          `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, attempts, succeeded)
           values (core.current_tenant(), $1, 'event', null, $2, '{"secret":"of erp"}', 1, false) returning id::text`,
          [id, type],
        ),
      )
    ).rows[0]!.id;
  const deliveryIds = (r: { body: unknown }) => (r.body as Array<{ id: number }>).map((d) => String(d.id));

  beforeAll(async () => {
    erpHook = ((await api.post(base, hook('erp-runs', ['connector.run.*']))).body as { id: number }).id;
    ownHook = ((await crm.post(base, hook('crm-dormant', ['org.created', 'decision.dormant.crm-flow']))).body as { id: number }).id;
    expect(ownHook).toEqual(expect.any(Number));
  });

  it('cannot create one whose event types can match runs, rows or dormant records other than their own workflows\'', async () => {
    for (const [i, type] of SCOPED.entries()) {
      expect({ type, answer: await crm.post(base, hook(`refused-${i}`, ['org.created', type])) }).toMatchObject({ type, answer: SCOPE_REFUSED });
    }
    expect(names(await api.get(base))).toEqual(['erp-runs', 'crm-dormant']);
  });

  it("neither lists nor reads, changes, tests or deletes another's; its own stays theirs until widened", async () => {
    expect(names(await crm.get(base))).toEqual(['crm-dormant']);
    expect(await crm.get(`${base}/${erpHook}`)).toMatchObject(SCOPE_REFUSED);
    expect(await crm.put(`${base}/${erpHook}`, { eventTypes: ['org.created'] })).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post(`${base}/${erpHook}/test`, { eventType: 'org.created' })).toMatchObject(SCOPE_REFUSED);
    expect(await crm.del(`${base}/${erpHook}`)).toMatchObject(SCOPE_REFUSED);
    expect(await api.get(`${base}/${erpHook}`)).toMatchObject({ status: 200, body: { eventTypes: ['connector.run.*'], deletedAt: null } });
    expect(await crm.put(`${base}/${ownHook}`, { eventTypes: ['org.created', 'data.row.changed'] })).toMatchObject(SCOPE_REFUSED);
    expect(await crm.get(`${base}/${ownHook}`)).toMatchObject({ status: 200, body: { eventTypes: ['org.created', 'decision.dormant.crm-flow'] } });
    expect(await crm.put(`${base}/${ownHook}`, { eventTypes: ['org.updated'] })).toMatchObject({ status: 200, body: { eventTypes: ['org.updated'] } });
  });

  it("neither lists, reads nor replays another's deliveries", async () => {
    const erp = await deliveryOf(erpHook, 'connector.run.completed');
    const own = await deliveryOf(ownHook, 'org.updated');
    expect(deliveryIds(await api.get('/api/platform/deliveries'))).toEqual(expect.arrayContaining([erp, own]));
    expect(deliveryIds(await crm.get('/api/platform/deliveries'))).toEqual([own]);
    expect(await crm.get(`/api/platform/deliveries?integrationId=${erpHook}`)).toMatchObject(SCOPE_REFUSED);
    expect(deliveryIds(await crm.get(`/api/platform/deliveries?integrationId=${ownHook}`))).toEqual([own]);
    expect(await crm.get(`${base}/${erpHook}/deliveries`)).toMatchObject(SCOPE_REFUSED);
    expect(await crm.get(`${base}/${erpHook}/deliveries/${erp}`)).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post(`${base}/${erpHook}/deliveries/${erp}/replay`)).toMatchObject(SCOPE_REFUSED);
    expect(await crm.post(`/api/platform/deliveries/${erp}/replay`)).toMatchObject(SCOPE_REFUSED);
    expect(deliveryIds(await api.get(`${base}/${erpHook}/deliveries`))).toEqual([erp]);
    expect(await crm.get(`${base}/${ownHook}/deliveries/${own}`)).toMatchObject({ status: 200, body: { eventType: 'org.updated' } });
  });
});

describe('a scope-bound caller and e-mail rules', () => {
  const base = `/api/tenants/${T}/email-rules`;
  const rule = (name: string, eventTypes: string[]) => ({ name, eventTypes, recipient: 'ops@example.com' });
  let erpRule: number;
  let ownRule: number;

  beforeAll(async () => {
    erpRule = ((await api.post(base, rule('erp-rows', ['data.row.changed']))).body as { id: number }).id;
    ownRule = ((await crm.post(base, rule('crm-dormant', ['decision.dormant.crm-flow']))).body as { id: number }).id;
    expect(ownRule).toEqual(expect.any(Number));
  });

  it('cannot create one whose event types can match runs, rows or dormant records other than their own workflows\'', async () => {
    for (const [i, type] of SCOPED.entries()) {
      expect({ type, answer: await crm.post(base, rule(`refused-${i}`, [type])) }).toMatchObject({ type, answer: SCOPE_REFUSED });
    }
    expect(names(await api.get(base))).toEqual(['erp-rows', 'crm-dormant']);
  });

  it("neither lists nor reads, changes or deletes another's, nor widens their own", async () => {
    expect(names(await crm.get(base))).toEqual(['crm-dormant']);
    expect(await crm.get(`${base}/${erpRule}`)).toMatchObject(SCOPE_REFUSED);
    expect(await crm.put(`${base}/${erpRule}`, { eventTypes: ['org.created'] })).toMatchObject(SCOPE_REFUSED);
    expect(await crm.del(`${base}/${erpRule}`)).toMatchObject(SCOPE_REFUSED);
    expect(await api.get(`${base}/${erpRule}`)).toMatchObject({ status: 200, body: { eventTypes: ['data.row.changed'] } });
    expect(await crm.put(`${base}/${ownRule}`, { eventTypes: ['connector.*'] })).toMatchObject(SCOPE_REFUSED);
    expect(await crm.get(`${base}/${ownRule}`)).toMatchObject({ status: 200, body: { eventTypes: ['decision.dormant.crm-flow'] } });
    expect((await crm.del(`${base}/${ownRule}`)).status).toBe(204);
  });
});

describe('a scope-bound caller and the decision inbox', () => {
  /** A decision of that type written as the hub writes one (it lands in the inbox too); its inbox id. */
  const decide = async (type: string, payload: Record<string, unknown>) => {
    await hub.services.db.withTenant(T, (tx) => hub.services.events.emit(tx, type, payload));
    const { rows } = await hub.services.db.withTenant(T, (tx) => tx.query<{ id: string }>('select id::text from events.inbox where type = $1 order by id desc limit 1', [type]));
    return rows[0]!.id;
  };
  const dormant = (workflow: string, key: string) => decide(`decision.dormant.${workflow}`, { workflow, key, state: 'open', since: '2026-01-01T00:00:00Z' });
  const types = (r: { body: unknown }) => (r.body as Array<{ type: string }>).map((i) => i.type).sort();
  let erp: string;
  let shared: string;
  let gone: string;
  let own: string;

  beforeAll(async () => {
    erp = await dormant('erp-flow', 'erp-key');
    shared = await dormant('shared-flow', 'shared-key');
    gone = await dormant('deleted-flow', 'old-key');
    own = await dormant('crm-flow', 'crm-key');
    await decide('decision.review', { message: 'a process decision' });
  });

  it("lists only the dormancy decisions of workflows every scope of which they hold (and the processes' decisions)", async () => {
    const all = ['decision.dormant.crm-flow', 'decision.dormant.deleted-flow', 'decision.dormant.erp-flow', 'decision.dormant.shared-flow', 'decision.review'];
    expect(types(await api.get('/api/inbox'))).toEqual(all);
    expect(types(await crm.get('/api/inbox'))).toEqual(['decision.dormant.crm-flow', 'decision.review']);
    expect(types(await crm.get('/api/inbox?limit=1'))).toEqual(['decision.review']);
  });

  it("cannot acknowledge another domain's, nor a deleted workflow's", async () => {
    for (const id of [erp, shared, gone]) expect(await crm.post(`/api/inbox/${id}/ack`)).toMatchObject(SCOPE_REFUSED);
    expect(await api.get('/api/inbox?acked=true')).toMatchObject({ status: 200, body: [] });
    expect(await crm.post(`/api/inbox/${own}/ack`)).toMatchObject({ status: 200, body: { type: 'decision.dormant.crm-flow', ackedBy: expect.any(String) } });
    expect((await crm.post('/api/inbox/999999999/ack')).status).toBe(404);
  });
});

describe('a scope-bound caller and the live event stream', () => {
  type Seen = { topic: string; payload: Record<string, unknown> };

  /**
   * Opens the stream as `headers`; `through(marker)` waits for the org.created named `marker` and
   * answers what came from the previous marker (or the start) up to it; `close()` leaves.
   */
  async function openStream(headers: Record<string, string>, query = '') {
    const controller = new AbortController();
    const res = await fetch(`${hub.url}/api/platform/events/stream${query}`, { headers, signal: controller.signal });
    expect(res.status).toBe(200);
    const seen: Seen[] = [];
    void (async () => {
      const decoder = new TextDecoder();
      let text = '';
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        text += decoder.decode(chunk, { stream: true });
        for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
          const data = text.slice(0, end).split('\n').find((line) => line.startsWith('data: '));
          text = text.slice(end + 2);
          if (data) {
            const envelope = JSON.parse(data.slice(6)) as { topic: string; payload: string };
            seen.push({ topic: envelope.topic, payload: JSON.parse(envelope.payload) });
          }
        }
      }
    })().catch(() => undefined);
    let from = 0;
    return {
      async through(marker: string): Promise<string[]> {
        const at = await until(`the marker ${marker}`, () => seen.findIndex((e) => e.payload.name === marker) + 1, { detail: () => JSON.stringify(seen) });
        const since = seen.slice(from, at);
        from = at;
        return since.map((e) => `${e.topic} ${String(e.payload.connector_id ?? e.payload.entity ?? e.payload.name ?? '')}`);
      },
      close: () => controller.abort(),
    };
  }

  const idOf = async (name: string) =>
    (await hub.services.db.withTenant(T, (tx) => tx.query<{ id: string }>('select id::text from connectors.connectors where name = $1', [name]))).rows[0]!.id;
  const emit = (type: string, payload: Record<string, unknown>) => hub.services.db.withTenant(T, (tx) => hub.services.events.emit(tx, type, payload));
  /** An event put in the outbox as it is, not checked against the catalog (one the hub wrote before a field was declared). */
  const outboxed = (type: string, payload: Record<string, unknown>) =>
    hub.services.db.withTenant(T, (tx) => tx.query('insert into events.outbox (tenant_id, type, payload) values (core.current_tenant(), $1, $2::jsonb)', [type, JSON.stringify(payload)]));
  const mark = async () => (await hub.services.db.withTenant(T, (tx) => tx.query<{ id: string }>('select coalesce(max(id), 0)::text as id from events.outbox'))).rows[0]!.id;
  let ids: { erp: string; crm: string };

  /** One event of each kind, then the marker. */
  async function emitEach(marker: string): Promise<void> {
    const started = (connectorId: string) => ({ run_id: 'r1', connector_id: connectorId, endpoint_id: 'e1', sync_mode: 'full', trigger: 'test' });
    const row = (table: string) => ({ entity: table, entity_key: 'k1', op: 'insert', run_id: 'r1' });
    await emit('connector.run.started', started(ids.erp));
    await emit('connector.run.started', started(ids.crm));
    // Run ends written before their payload named the connector (the hub's catalog now refuses such
    // a payload, so they are put in the outbox as they were): they name none, and are left out.
    await outboxed('connector.run.completed', { run_id: 'r1', endpoint_id: 'e1', records_in: 1, records_out: 1, duration_ms: 1, tables: {} });
    await outboxed('connector.run.failed', { run_id: 'r1', error_message: 'x', retryable: false });
    await emit('data.row.changed', row('ext.erp_rows'));
    await emit('data.row.changed', row('ext.crm_rows'));
    await emit('data.row.changed', row('ext.nobody_writes'));
    for (const workflow of ['erp-flow', 'crm-flow', 'shared-flow']) await emit(`decision.dormant.${workflow}`, { workflow, key: 'k1', state: 'open', since: 'now' });
    await emit('org.created', { orgId: 1, tenantId: T, name: marker });
  }

  beforeAll(async () => {
    ids = { erp: await idOf('erp'), crm: await idOf('crm') };
  });

  const expected = (marker: string) => () => [
    `connector.run.started ${ids.crm}`,
    'data.row.changed ext.crm_rows',
    'decision.dormant.crm-flow ',
    `org.created ${marker}`,
  ];

  it("leaves out, live, the runs, rows and dormant records of objects not all of whose scopes they hold, and those naming none", async () => {
    const [bound, unbound] = [await openStream(crmHeaders), await openStream({ 'X-Tenant-ID': String(T) })];
    // A live stream may begin with events written just before it opened (the poller's position): a first marker passes them.
    await emit('org.created', { orgId: 1, tenantId: T, name: 'live-start' });
    for (const stream of [bound, unbound]) await stream.through('live-start');
    await emitEach('live-marker');
    expect(await bound.through('live-marker')).toEqual(expected('live-marker')());
    expect(await unbound.through('live-marker')).toHaveLength(11);
    bound.close();
    unbound.close();
  });

  it('leaves them out of a resume too', async () => {
    const from = await mark();
    await emitEach('resume-marker');
    const [bound, unbound] = [await openStream(crmHeaders, `?lastEventId=${from}`), await openStream({ 'X-Tenant-ID': String(T) }, `?lastEventId=${from}`)];
    expect(await bound.through('resume-marker')).toEqual(expected('resume-marker')());
    expect(await unbound.through('resume-marker')).toHaveLength(11);
    bound.close();
    unbound.close();
  });

  it("shows the end of a run of a connector of theirs (completed, failed), not of another's", async () => {
    const [bound, unbound] = [await openStream(crmHeaders), await openStream({ 'X-Tenant-ID': String(T) })];
    await emit('org.created', { orgId: 1, tenantId: T, name: 'ends-start' });
    for (const stream of [bound, unbound]) await stream.through('ends-start');
    /** A real run of `name` through the hub's runner, reading from `reader` (no source is asked). */
    const run = async (name: string, reader: PageReader) => {
      const spec = (await hub.services.connectors.byName(T, name)) as ConnectorSpec;
      const [ended] = await (await hub.services.connectors.runner.trigger(T, spec, { triggeredBy: 'manual:test', reader })).done;
      return ended!;
    };
    const empty: PageReader = { async *read() {} };
    const failing: PageReader = {
      // biome-ignore lint/correctness/useYield: a source that fails before its first page
      async *read() {
        throw Object.assign(new Error('the source is down'), { retryable: false });
      },
    };
    const runs = [await run('crm', empty), await run('erp', empty), await run('crm', failing)];
    expect(runs.map((r) => r.status)).toEqual(['Completed', 'Completed', 'Failed']);
    await emit('org.created', { orgId: 1, tenantId: T, name: 'ends-marker' });
    const runEvents = (seen: string[]) => seen.filter((e) => e.startsWith(CONNECTOR_RUN));
    const [crm, erp] = [`${ids.crm}`, `${ids.erp}`];
    expect(runEvents(await bound.through('ends-marker'))).toEqual([
      `connector.run.started ${crm}`, `connector.run.completed ${crm}`, `connector.run.started ${crm}`, `connector.run.failed ${crm}`,
    ]);
    expect(runEvents(await unbound.through('ends-marker'))).toEqual([
      `connector.run.started ${crm}`, `connector.run.completed ${crm}`, `connector.run.started ${erp}`, `connector.run.completed ${erp}`,
      `connector.run.started ${crm}`, `connector.run.failed ${crm}`,
    ]);
    bound.close();
    unbound.close();
  });

  it('filters the stream of a user bound while it is open from the next heartbeat on, and no longer once they are unbound again', async () => {
    const created = await api.post(`/api/tenants/${T}/users`, { login: 'bound-later', name: 'bound-later' });
    const userId = (created.body as { id: number }).id;
    const scopes = (list: string[]) => api.put(`/api/tenants/${T}/users/${userId}/scopes`, { scopes: list });
    const stream = await openStream({ 'X-Tenant-ID': String(T), 'X-User-ID': String(userId) });
    await emit('org.created', { orgId: 1, tenantId: T, name: 'later-start' });
    await stream.through('later-start');
    let round = 0;
    /** A run of erp's and one of crm's starting, then a marker: what the stream showed of them. */
    const runStarts = async () => {
      const marker = `later-${++round}`;
      for (const id of [ids.erp, ids.crm]) await emit('connector.run.started', { run_id: `l${round}`, connector_id: id, endpoint_id: 'e1', sync_mode: 'full', trigger: 'test' });
      await emit('org.created', { orgId: 1, tenantId: T, name: marker });
      return stream.through(marker);
    };
    expect(await runStarts()).toEqual([`connector.run.started ${ids.erp}`, `connector.run.started ${ids.crm}`, 'org.created later-1']);
    expect((await scopes(['crm'])).status).toBe(200);
    // Each round waits for its marker; the stream's next heartbeat asks whether its user is bound now.
    const filtered = await until('erp\'s run left out', async () => {
      const seen = await runStarts();
      return seen.length === 2 && seen;
    }, { timeoutMs: 10_000, everyMs: 50 });
    expect(filtered).toEqual([`connector.run.started ${ids.crm}`, `org.created later-${round}`]);
    expect(await runStarts()).toEqual([`connector.run.started ${ids.crm}`, `org.created later-${round}`]);
    expect((await scopes([])).status).toBe(200);
    await until('erp\'s run shown again', async () => (await runStarts()).length === 3, { timeoutMs: 10_000, everyMs: 50 });
    stream.close();
  });

  it('leaves out the runs of a connector of theirs from the heartbeat after it was given another domain\'s scope', async () => {
    expect((await api.post('/api/connectors/apply', connector('crm-moving', ['crm']))).status).toBe(201);
    const moving = await idOf('crm-moving');
    const stream = await openStream(crmHeaders);
    await emit('org.created', { orgId: 1, tenantId: T, name: 'moving-start' });
    await stream.through('moving-start');
    let round = 0;
    /** A run of crm-moving starting, then a marker: what the stream showed of them. */
    const runStarts = async () => {
      const marker = `moving-${++round}`;
      await emit('connector.run.started', { run_id: `m${round}`, connector_id: moving, endpoint_id: 'e1', sync_mode: 'full', trigger: 'test' });
      await emit('org.created', { orgId: 1, tenantId: T, name: marker });
      return stream.through(marker);
    };
    expect(await runStarts()).toEqual([`connector.run.started ${moving}`, 'org.created moving-1']);
    expect((await api.post('/api/connectors/apply', connector('crm-moving', ['erp']))).status).toBe(200);
    // Each round waits for its marker; the stream's next heartbeat reads the new scopes.
    await until('the re-scoped connector left out', async () => (await runStarts()).length === 1, { timeoutMs: 10_000, everyMs: 50 });
    stream.close();
  });
});

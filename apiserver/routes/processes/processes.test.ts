import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { stringify } from 'yaml';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { type Receiver, startReceiver } from '../../../test/harness/receiver.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';
import { until } from '../../../test/harness/until.js';

/**
 * Processes and the decision inbox through HTTP (docs/processes.md): apply errors by field, a
 * condition true and false on the events of real CSV ingest runs, the decision's payload and its
 * inbox item, ack (event, idempotent second ack, 404s), a webhook integration subscribed to the
 * decision type, tenants apart; then the role gates with real tokens.
 */

let hub: TestHub;
let owner: pg.Client;
let receiver: Receiver;

beforeAll(async () => {
  receiver = await startReceiver();
  hub = await startTestHub(
    { 'svc.process.sweep-every': '200ms', 'svc.webhook.sweep-every': '200ms', 'svc.leader.check-every': '200ms', 'svc.egress.deny-private': false },
    undefined,
    { background: true },
  );
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other')`);
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await receiver?.close();
});

interface Reply {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: answers are read field by field in the assertions
  body: any;
}

async function call(method: string, path: string, options: { tenant?: number; body?: unknown; type?: string; user?: string } = {}): Promise<Reply> {
  const headers: Record<string, string> = { 'X-Tenant-ID': String(options.tenant ?? 1) };
  if (options.user) headers['X-User-ID'] = options.user;
  let body: string | undefined;
  if (options.body !== undefined) {
    headers['Content-Type'] = options.type ?? 'application/json';
    body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
  }
  const res = await fetch(`${hub.url}${path}`, { method, headers, body });
  const text = await res.text();
  return { status: res.status, body: text && res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : text };
}

function processManifest(name: string, spec: Record<string, unknown>) {
  return { apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name }, spec };
}

const csvConnector = {
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name: 'csv-crm' },
  connector_type: 'rest-generic',
  spec: { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'rows', path: '/rows', target: { table: 'ext.csv_partners', unique_key: '$.code' } }] },
};

async function ingest(rows: number, tenant = 1): Promise<string> {
  const lines = Array.from({ length: rows }, (_, i) => `P${i},p${i}@x`).join('\n');
  const res = await call('POST', '/api/platform/sources/csv/ingest?connector=csv-crm&table=csv_partners&key=code', { tenant, body: `code,email\n${lines}\n`, type: 'text/csv' });
  expect(res.status).toBe(200);
  return res.body.runId ?? res.body.id ?? res.body.run_id;
}

async function outbox(type: string, tenant = 1): Promise<Array<{ id: number; payload: Record<string, unknown> }>> {
  const { rows } = await owner.query('select id::int as id, payload from events.outbox where type = $1 and tenant_id = $2 order by id', [type, tenant]);
  return rows;
}

describe('apply', () => {
  it('creates (201), updates (200), reads and lists the record; the single GET adds the manifest', async () => {
    const m = processManifest('Big-Runs', { event: 'connector.run.*', when: 'payload.records_out > 2', decision: 'decision.big-run', message: 'Run {{payload.run_id}} wrote {{payload.records_out}} rows' });
    expect(await call('POST', '/api/processes/apply', { body: stringify(m), type: 'application/yaml' })).toEqual({ status: 201, body: { name: 'big-runs', unchanged: false, warnings: [] } });
    expect((await call('POST', '/api/processes/apply', { body: m })).status).toBe(200);
    const list = await call('GET', '/api/processes');
    expect(list.body).toEqual([
      { name: 'big-runs', event: 'connector.run.*', when: 'payload.records_out > 2', decision: 'decision.big-run', message: 'Run {{payload.run_id}} wrote {{payload.records_out}} rows', createdAt: expect.any(String), updatedAt: expect.any(String) },
    ]);
    const one = await call('GET', '/api/processes/BIG-RUNS');
    expect(one.status).toBe(200);
    expect(one.body.manifest).toEqual(m);
    expect((await call('GET', '/api/processes', { tenant: 2 })).body).toEqual([]);
    expect((await call('GET', '/api/processes/big-runs', { tenant: 2 })).status).toBe(404);
  });

  it.each([
    ['a CEL syntax error', { event: 'connector.run.*', when: 'payload.x >', decision: 'decision.a' }, 'spec.when'],
    ['a CEL type error', { event: 'connector.run.*', when: 'type > 1', decision: 'decision.a' }, 'spec.when'],
    ['an unknown CEL variable', { event: 'connector.run.*', when: 'records_out > 1', decision: 'decision.a' }, 'spec.when'],
    ['a CEL condition that is not a bool', { event: 'connector.run.*', when: '"yes"', decision: 'decision.a' }, 'spec.when'],
    ['CEL nested too deep', { event: 'connector.run.*', when: 'payload.l.all(a, payload.l.all(b, payload.l.all(c, a == b)))', decision: 'decision.a' }, 'spec.when'],
    ['a matches() pattern that is not a regular expression', { event: 'connector.run.*', when: 'payload.x.matches("(")', decision: 'decision.a' }, 'spec.when'],
    ['a decision without the prefix', { event: 'connector.run.*', decision: 'big-run' }, 'spec.decision'],
    ['a glob matching only decisions', { event: 'decision.*', decision: 'decision.a' }, 'spec.event'],
    ['an exact decision type', { event: 'decision.big-run', decision: 'decision.a' }, 'spec.event'],
    ['a bare *', { event: '*', decision: 'decision.a' }, 'spec.event'],
    ['a glob in the middle', { event: 'connector.*.completed', decision: 'decision.a' }, 'spec.event'],
    ['no event', { decision: 'decision.a' }, 'spec.event'],
    ['an unknown key', { event: 'connector.run.*', decision: 'decision.a', on: 'x' }, 'spec.on'],
  ])('refuses %s with a 400 naming the field', async (_what, spec, field) => {
    const res = await call('POST', '/api/processes/apply', { body: processManifest('bad', spec) });
    expect(res.status).toBe(400);
    expect(res.body.field).toBe(field);
  });

  it('names the regular expression error of a matches() pattern', async () => {
    const res = await call('POST', '/api/processes/apply', { body: processManifest('bad-regex', { event: 'org.created', when: 'payload.name.matches("^(a")', decision: 'decision.a' }) });
    expect(res).toEqual({ status: 400, body: { error: 'spec.when gives matches() a pattern that is not a valid regular expression: Invalid regular expression: /^(a/: Unterminated group', field: 'spec.when' } });
    expect((await call('GET', '/api/processes/bad-regex')).status).toBe(404);
  });

  it('refuses a new process past 100 in a tenant with a 400 naming the limit; an update still goes', async () => {
    await owner.query(`insert into core.tenants (id, code, name) values (3, 'capped', 'Capped')`);
    for (let i = 0; i < 100; i++) {
      expect((await call('POST', '/api/processes/apply', { tenant: 3, body: processManifest(`p-${i}`, { event: 'cap.test', decision: 'decision.capped' }) })).status).toBe(201);
    }
    expect(await call('POST', '/api/processes/apply', { tenant: 3, body: processManifest('one-more', { event: 'cap.test', decision: 'decision.capped' }) })).toEqual({
      status: 400,
      body: { error: 'this tenant has 100 processes, the most a tenant may have (100): delete one before applying a new process one-more (an existing name can still be updated)', field: 'metadata.name' },
    });
    expect((await call('POST', '/api/processes/apply', { tenant: 3, body: processManifest('p-0', { event: 'cap.test', decision: 'decision.other' }) })).status).toBe(200);
    expect((await call('GET', '/api/processes', { tenant: 3 })).body).toHaveLength(100);
  });

  it('refuses a name that is not a slug', async () => {
    const res = await call('POST', '/api/processes/apply', { body: processManifest('not a slug', { event: 'a.b', decision: 'decision.a' }) });
    expect(res).toMatchObject({ status: 400, body: { field: 'metadata.name' } });
  });

  it('deletes (204), then 404', async () => {
    expect((await call('POST', '/api/processes/apply', { body: processManifest('gone', { event: 'a.b', decision: 'decision.gone' }) })).status).toBe(201);
    expect((await call('DELETE', '/api/processes/gone', { tenant: 2 })).status).toBe(404);
    expect((await call('DELETE', '/api/processes/Gone')).status).toBe(204);
    expect((await call('DELETE', '/api/processes/Gone')).body).toEqual({ error: 'process gone not found' });
  });
});

describe('the consumer, the inbox and acks', () => {
  let integrationReceived = 0;

  it('emits one decision per matching event whose condition holds, lands it in the inbox and delivers it to a subscribed integration', async () => {
    const integ = await call('POST', '/api/tenants/1/integrations', { body: { name: 'decisions', targetUrl: `${receiver.url}/decisions`, authMode: 'NONE', eventTypes: ['decision.big-run'] } });
    expect(integ.status).toBe(201);
    expect((await call('POST', '/api/connectors/apply', { body: stringify(csvConnector), type: 'application/yaml' })).status).toBe(201);
    await ingest(5); // completed with records_out 5 > 2: a decision
    await ingest(1); // records_out 1: none (started events have no records_out: the failing condition is false)
    const decisions = await until('the decision', async () => {
      const d = await outbox('decision.big-run');
      return d.length >= 1 && d;
    });
    const completed = (await outbox('connector.run.completed')).filter((e) => e.payload.records_out === 5)[0]!;
    expect(decisions).toHaveLength(1);
    expect(decisions[0]!.payload).toEqual({ process: 'big-runs', message: `Run ${completed.payload.run_id} wrote 5 rows`, sourceEventId: completed.id, sourceType: 'connector.run.completed' });

    // The second run was seen too: wait for the consumer to pass it, then still only one decision.
    const lastCompleted = (await outbox('connector.run.completed')).at(-1)!;
    await until('the process cursor past the second run', async () => {
      const { rows } = await owner.query(`select last_id::int as last_id from events.consumer_cursors where consumer = 'processes'`);
      return rows[0]?.last_id >= lastCompleted.id;
    });
    expect(await outbox('decision.big-run')).toHaveLength(1);

    const inbox = await call('GET', '/api/inbox');
    expect(inbox.status).toBe(200);
    expect(inbox.body).toEqual([
      {
        id: expect.any(Number),
        eventId: decisions[0]!.id,
        type: 'decision.big-run',
        message: `Run ${completed.payload.run_id} wrote 5 rows`,
        payload: decisions[0]!.payload,
        createdAt: expect.any(String),
        ackedAt: null,
        ackedBy: null,
      },
    ]);
    expect((await call('GET', '/api/inbox', { tenant: 2 })).body).toEqual([]);

    const [delivery] = await receiver.waitFor(1, '/decisions');
    expect(delivery!.headers['x-svc-event']).toBe('decision.big-run');
    expect(delivery!.headers['x-svc-event-id']).toBe(String(decisions[0]!.id));
    expect(JSON.parse(delivery!.body)).toMatchObject(decisions[0]!.payload);
    integrationReceived = receiver.on('/decisions').length;
    expect(integrationReceived).toBe(1);
  });

  it('acks once: the item with the caller\'s login, annotation.decision.acked; a second ack is unchanged and emits nothing', async () => {
    // A decision of this case's own (every decision.* event lands in the inbox as it is written).
    await hub.services.db.withTenant(1, (tx) => hub.services.events.emit(tx, 'decision.to-ack', { process: 'acking', message: 'ack me' }));
    const item = ((await call('GET', '/api/inbox?acked=false')).body as Array<{ id: number; type: string }>).find((i) => i.type === 'decision.to-ack')!;
    const acks = async () => (await outbox('annotation.decision.acked')).map((e) => e.payload).filter((p) => p.decision_id === item.id);
    const first = await call('POST', `/api/inbox/${item.id}/ack`, { user: 'alice' });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ ...item, ackedAt: expect.any(String), ackedBy: 'alice' });
    expect(await acks()).toEqual([{ decision_id: item.id, by: 'alice' }]);
    const second = await call('POST', `/api/inbox/${item.id}/ack`, { user: 'bob' });
    expect(second).toEqual({ status: 200, body: first.body });
    expect(await acks()).toHaveLength(1);
    expect(((await call('GET', '/api/inbox?acked=false')).body as Array<{ id: number }>).map((i) => i.id)).not.toContain(item.id);
    expect((await call('GET', '/api/inbox?acked=true&limit=1')).body).toEqual([first.body]);
    // Another tenant's item, an unknown id, a non-number: 404.
    for (const [path, tenant] of [[`/api/inbox/${item.id}/ack`, 2], ['/api/inbox/999999/ack', 1], ['/api/inbox/abc/ack', 1]] as const) {
      expect(await call('POST', path, { tenant })).toEqual({ status: 404, body: { error: 'decision not found' } });
    }
  });

  it.each([
    ['limit=0', 'limit'],
    ['limit=201', 'limit'],
    ['limit=ten', 'limit'],
    // Written otherwise than as a decimal number: not read as one (a blank was 0, 0x10 was 16).
    ['limit=%20', 'limit'],
    ['limit=', 'limit'],
    ['limit=0x10', 'limit'],
    ['limit=1e1', 'limit'],
    ['acked=yes', 'acked'],
  ])('refuses %s with a 400 naming the parameter', async (query, field) => {
    const res = await call('GET', `/api/inbox?${query}`);
    expect(res.status).toBe(400);
    expect(res.body.field).toBe(field);
    if (/%20|0x|1e1|=$/.test(query)) expect(res.body.error).toBe('limit must be an integer');
  });

  it('a limit written otherwise than the one way whose value is out of range is refused for the range, as that value is', async () => {
    // `limit=-0` said "must be written 0, not -0", though 0 is refused too (minimum 1).
    for (const [query, error] of [
      ['limit=-0', 'limit must be at least 1'], ['limit=00', 'limit must be at least 1'], ['limit=%2B0', 'limit must be at least 1'], ['limit=0.0', 'limit must be at least 1'],
      ['limit=-01', 'limit must be at least 1'], ['limit=0201', 'limit must be at most 200'], ['limit=201.0', 'limit must be at most 200'], ['limit=%2B99999999999999999999', 'limit must be at most 200'],
    ] as const) {
      expect({ query, ...(await call('GET', `/api/inbox?${query}`)) }).toEqual({ query, status: 400, body: { error, field: 'limit' } });
    }
    // The same answer as the number written the one way.
    expect(await call('GET', '/api/inbox?limit=0')).toEqual({ status: 400, body: { error: 'limit must be at least 1', field: 'limit' } });
    // The inbox's limit is 1 to 200 (not capped as the runs list's): 201 is refused, naming the range.
    expect(await call('GET', '/api/inbox?limit=201')).toEqual({ status: 400, body: { error: 'limit must be at most 200', field: 'limit' } });
    // Within the range, the one way to write it is named.
    expect((await call('GET', '/api/inbox?limit=05')).body).toEqual({ error: 'limit must be written 5, not 05', field: 'limit', hint: 'write an integer without leading zeros, sign or fraction' });
  });

  it('never feeds decisions to processes, and decisions from any source land in the inbox', async () => {
    // The consumer past every event written so far (the acks of the tests above among them): a process sees only
    // events after its apply, and a consumer running behind (a loaded machine) would show it those acks too.
    const { rows: head } = await owner.query('select coalesce(max(id), 0)::int as id from events.outbox');
    await until('the process cursor past the events so far', async () => {
      const { rows } = await owner.query(`select last_id::int as last_id from events.consumer_cursors where consumer = 'processes'`);
      return rows[0]?.last_id >= head[0].id;
    });
    // A process on every annotation.* event: the ack below emits one, so a decision follows; no process sees decisions.
    expect((await call('POST', '/api/processes/apply', { body: processManifest('acks', { event: 'annotation.*', decision: 'decision.acked-seen', message: '{{payload.by}} acked {{payload.decision_id}}; {{payload.nothing}}|{{payload}}' }) })).status).toBe(201);
    // A fresh decision to ack, written as the workflow sweep would (a decision with no message).
    await owner.query(`insert into events.outbox (tenant_id, type, payload) values (1, 'decision.dormant.onboarding', '{"workflow":"onboarding","key":"P1","state":"prospect","since":"2026-01-01T00:00:00Z","after":"30d"}')`);
    // The owner's insert bypasses the EventWriter; the hub's own writer is what fills the inbox.
    await owner.query(`insert into events.inbox (tenant_id, event_id, type, payload) select tenant_id, id, type, payload from events.outbox where type = 'decision.dormant.onboarding'`);
    const dormant = (await call('GET', '/api/inbox?limit=1')).body[0];
    expect(dormant.message).toBe('Record P1 of workflow onboarding has been prospect since 2026-01-01T00:00:00Z');
    expect((await call('POST', `/api/inbox/${dormant.id}/ack`, { user: 'carol' })).status).toBe(200);
    const seen = await until('the decision on the ack', async () => {
      const d = await outbox('decision.acked-seen');
      return d.length >= 1 && d;
    });
    expect(seen[0]!.payload.message).toBe(`carol acked ${dormant.id}; |{"by":"carol","decision_id":${dormant.id}}`);
    // The decision.acked-seen and decision.big-run events never triggered anything themselves.
    const lastDecision = (await outbox('decision.acked-seen')).at(-1)!;
    await until('the process cursor past the decisions', async () => {
      const { rows } = await owner.query(`select last_id::int as last_id from events.consumer_cursors where consumer = 'processes'`);
      return rows[0]?.last_id >= lastDecision.id;
    });
    expect(await outbox('decision.acked-seen')).toHaveLength(1);
  });

  it('a process watching data.row.changed makes CSV ingestion emit it, and reacts to it', async () => {
    expect((await call('POST', '/api/processes/apply', { body: processManifest('rows', { event: 'data.row.changed', when: 'payload.op == "insert" && payload.entity_key == "N1"', decision: 'decision.new-row', message: 'new {{payload.entity_key}}' }) })).status).toBe(201);
    const res = await call('POST', '/api/platform/sources/csv/ingest?connector=csv-rows&table=csv_rows&key=code', { body: 'code,email\nN1,a@x\nN2,b@x\n', type: 'text/csv' });
    expect(res.status).toBe(200);
    expect((await outbox('data.row.changed')).map((e) => e.payload.entity_key).sort()).toEqual(['N1', 'N2']);
    const decisions = await until('the new-row decision', async () => {
      const d = await outbox('decision.new-row');
      return d.length >= 1 && d;
    });
    expect(decisions.map((d) => d.payload.message)).toEqual(['new N1']);
  });

  it('refuses a decision.* type in the integration test operation', async () => {
    const integ = await call('GET', '/api/tenants/1/integrations');
    const id = integ.body.find((i: { name: string }) => i.name === 'decisions').id;
    const res = await call('POST', `/api/tenants/1/integrations/${id}/test`, { body: { eventType: 'decision.big-run' } });
    expect(res.status).toBe(400);
  });
});

describe('role gates (real tokens)', () => {
  let issuer: TestIssuer;
  let oidc: TestHub;

  beforeAll(async () => {
    issuer = await startIssuer();
    oidc = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri, 'svc.datasource.url': hub.ownerUrl });
  });

  afterAll(async () => {
    await oidc?.stop();
    await issuer?.close();
  });

  async function as(roles: string[], method: string, path: string, body?: unknown) {
    const headers: Record<string, string> = { Authorization: `Bearer ${await issuer.mint({ realm_access: { roles }, tenant_id: 1 }, { subject: 'roles-test' })}` };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(`${oidc.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return res.status;
  }

  const gated = processManifest('gated', { event: 'a.b', decision: 'decision.gated' });
  const cases: Array<[string, string, string[][], string[][], unknown]> = [
    ['POST', '/api/processes/apply', [['svc_admin']], [['svc_integrator'], ['svc_user']], gated],
    ['GET', '/api/processes', [['svc_admin'], ['svc_integrator']], [['svc_user']], undefined],
    ['GET', '/api/processes/gated', [['svc_admin'], ['svc_integrator']], [['svc_user']], undefined],
    ['GET', '/api/inbox', [['svc_user']], [['svc_admin', 'svc_integrator']], undefined],
    ['POST', '/api/inbox/999999/ack', [['svc_user']], [['svc_admin', 'svc_integrator']], undefined],
    ['DELETE', '/api/processes/gated', [['svc_admin']], [['svc_integrator'], ['svc_user']], undefined],
  ];

  it.each(cases)('%s %s', async (method, path, pass, refused, body) => {
    for (const roles of refused) expect([roles, await as(roles, method, path, body)]).toEqual([roles, 403]);
    for (const roles of pass) expect([roles, await as(roles, method, path, body)]).not.toEqual([roles, 403]);
  });
});

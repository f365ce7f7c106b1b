import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { ISO, ownerClient } from '../../../test/harness/api-client.js';
import { captureLogs } from '../../../test/harness/log-capture.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';
import { until } from '../../../test/harness/until.js';

/**
 * Workflow manifests through HTTP (docs/workflows.md): apply (YAML and JSON, create and update,
 * errors naming their field), list, read, delete, the lifecycle corpus, tenants apart; the dormancy
 * sweep (called directly, then once through the leader's clock with a shortened
 * `svc.workflow.sweep.every`), with `after: 1s` so that spells come due within the test; then the
 * role gates with real tokens.
 */

let hub: TestHub;
let owner: pg.Client;
const CONNECTOR = '00000000-0000-0000-0000-00000000000c';
const ENDPOINT = '00000000-0000-0000-0000-00000000000e';

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other')`);
  await hub.services.connectors.ext.ensureTable(1, 'ext.partners', [{ name: 'status', path: '$.status', type: 'text' }]);
  const entity = await call('POST', '/api/entities/apply', { body: stringify(partnerEntity) });
  expect(entity.status).toBe(201);
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

type Json = Record<string, unknown>;

const partnerEntity = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name: 'partner' },
  spec: {
    scope: ['crm', 'sales'],
    key: 'partner_id',
    columns: [
      { name: 'partner_id', type: 'text' },
      { name: 'status', type: 'text' },
      { name: 'name', type: 'text' },
    ],
    sources: [{ table: 'ext.partners', key: 'external_id', columns: { partner_id: 'external_id', status: 'status', name: '$.name' } }],
  },
};

async function call(method: string, path: string, options: { tenant?: number; body?: string; type?: string } = {}) {
  const headers: Record<string, string> = { 'X-Tenant-ID': String(options.tenant ?? 1) };
  if (options.body !== undefined) headers['Content-Type'] = options.type ?? 'application/yaml';
  const res = await fetch(`${hub.url}${path}`, { method, headers, body: options.body });
  const text = await res.text();
  return { status: res.status, text, body: text && res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : undefined };
}

function manifest(name: string, spec: Json = {}): Json {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Workflow',
    metadata: { name },
    spec: {
      entity: 'Partner',
      stateColumn: 'status',
      states: ['prospect', 'active', 'closed'],
      transitions: [
        { from: 'prospect', to: 'active' },
        { from: 'active', to: 'closed' },
      ],
      dormancy: { after: '30d', states: ['prospect', 'active'] },
      ...spec,
    },
  };
}

const apply = (m: Json, tenant = 1) => call('POST', '/api/workflows/apply', { tenant, body: stringify(m) });

/** Sets (or inserts) partner rows of tenant 1: `[key, status]`. */
async function partners(list: Array<[string, string | null]>) {
  for (const [key, status] of list) {
    const updated = await owner.query('update ext_t1.partners set status = $2 where external_id = $1', [key, status]);
    if (updated.rowCount) continue;
    await owner.query(
      `insert into ext_t1.partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status)
       values (1, $1, md5($1 || random()::text), $2, $3, $4, $5)`,
      [key, JSON.stringify({ name: `Partner ${key}` }), CONNECTOR, ENDPOINT, status],
    );
  }
}

async function decisions(workflow: string): Promise<Json[]> {
  const { rows } = await owner.query(`select payload from events.outbox where tenant_id = 1 and type = $1 order by id`, [`decision.dormant.${workflow}`]);
  return rows.map((r) => r.payload as Json);
}

async function spell(workflow: string, key: string): Promise<{ state: string; since: Date; notified_at: Date | null; due: boolean } | undefined> {
  const { rows } = await owner.query(
    `select s.state, s.since, s.notified_at, s.since <= now() - interval '1 second' as due
       from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.tenant_id = 1 and w.name = $1 and s.record_key = $2`,
    [workflow, key],
  );
  return rows[0];
}

describe('apply', () => {
  it('creates (201) from YAML and updates (200) from JSON; the record as section 5a, the entity as stored, the scope defaulting to the entity\'s first', async () => {
    const created = await apply(manifest('Partner-Status'));
    expect(created).toMatchObject({ status: 201, body: { name: 'partner-status', warnings: [] } });
    const again = await call('POST', '/api/workflows/apply', { body: JSON.stringify(manifest('partner-status', { scope: 'sales' })), type: 'application/json' });
    expect(again).toMatchObject({ status: 200, body: { name: 'partner-status', warnings: [] } });

    const list = await call('GET', '/api/platform/workflows');
    expect(list.status).toBe(200);
    expect(list.body).toEqual([
      {
        name: 'partner-status',
        entity: 'partner',
        scope: 'sales',
        stateColumn: 'status',
        states: ['prospect', 'active', 'closed'],
        transitions: [
          { from: 'prospect', to: 'active' },
          { from: 'active', to: 'closed' },
        ],
        dormancy: { after: '30d', states: ['prospect', 'active'] },
        createdAt: expect.stringMatching(ISO),
        updatedAt: expect.stringMatching(ISO),
      },
    ]);
    const one = await call('GET', '/api/platform/workflows/PARTNER-status');
    expect(one.body).toEqual({ ...list.body[0], manifest: manifest('partner-status', { scope: 'sales' }) });

    const defaults = await apply(manifest('defaults', { transitions: undefined, dormancy: { after: 'P30D' } }));
    expect(defaults.status).toBe(201);
    expect((await call('GET', '/api/platform/workflows/defaults')).body).toMatchObject({
      scope: 'crm',
      transitions: [],
      dormancy: { after: 'P30D', states: ['prospect', 'active', 'closed'] },
    });
  });

  it('warns about a scope the entity does not declare', async () => {
    const r = await apply(manifest('elsewhere', { scope: 'finance' }));
    expect(r).toMatchObject({ status: 201, body: { warnings: [{ field: 'spec.scope', message: 'finance is not a scope of entity partner (crm, sales)' }] } });
  });

  it.each([
    ['an unknown entity', { entity: 'nobody' }, 'spec.entity', 'spec.entity "nobody" is not an applied Entity of this tenant'],
    ['a state column that is not canonical', { stateColumn: 'colour' }, 'spec.stateColumn', 'spec.stateColumn "colour" is not a canonical column of entity partner (partner_id, status, name)'],
    ['a transition to an undeclared state', { transitions: [{ from: 'prospect', to: 'active' }, { from: 'active', to: 'gone' }] }, 'spec.transitions[1].to', 'spec.transitions[1].to "gone" is not one of spec.states (prospect, active, closed)'],
    ['a transition from an undeclared state', { transitions: [{ from: 'lead', to: 'active' }] }, 'spec.transitions[0].from', expect.stringContaining('"lead" is not one of spec.states')],
    ['a dormancy state not declared', { dormancy: { after: '2h', states: ['active', 'asleep'] } }, 'spec.dormancy.states[1]', expect.stringContaining('"asleep" is not one of spec.states')],
    ['a duration with an unknown unit', { dormancy: { after: '30x' } }, 'spec.dormancy.after', expect.stringContaining('spec.dormancy.after "30x" must be a duration')],
    ['a zero duration', { dormancy: { after: '0d' } }, 'spec.dormancy.after', expect.stringContaining('"0d"')],
    ['an ISO-8601 duration without a number', { dormancy: { after: 'PT' } }, 'spec.dormancy.after', expect.stringContaining('"PT"')],
    ['a duplicate state', { states: ['active', 'active'] }, 'spec.states[1]', 'duplicate state "active": spec.states[0] has it too'],
    ['no states', { states: [] }, 'spec.states', expect.any(String)],
    ['no state column', { stateColumn: undefined }, 'spec.stateColumn', expect.stringContaining('stateColumn')],
    ['an unknown field', { colour: 'red' }, 'spec.colour', expect.any(String)],
  ])('400 for %s, naming %s', async (_what, spec, field, message) => {
    const r = await apply(manifest('broken', spec));
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ field, error: message });
    expect((await call('GET', '/api/platform/workflows/broken')).status).toBe(404);
  });

  it('400 for another kind or a bad name', async () => {
    expect((await apply({ ...manifest('x'), kind: 'Entity' })).body).toMatchObject({ field: 'kind' });
    expect((await apply(manifest('-x-'))).body).toMatchObject({ field: 'metadata.name' });
  });

  it('accepts the duration forms 90s, 15m, 2h, 30d, PT15M, P1Y2M', async () => {
    for (const after of ['90s', '15m', '2h', '30d', 'PT15M', 'P1Y2M', 'P2W']) {
      const r = await apply(manifest('durations', { dormancy: { after } }));
      expect({ after, status: r.status }).toEqual({ after, status: r.status === 201 ? 201 : 200 });
    }
  });

  it('indexes the lifecycle as corpus workflow:<name>, chunks without a row hash tagged with the scope; delete removes them (204, then 404)', async () => {
    await apply(manifest('indexed'));
    const { rows } = await owner.query(`select key, row_hash, scopes, content from retrieval.chunks where tenant_id = 1 and corpus = 'workflow:indexed' order by key`);
    expect(rows.map((r) => r.key)).toEqual(['lifecycle', 'state:active', 'state:closed', 'state:prospect']);
    expect(rows.every((r) => r.row_hash === null && r.scopes.join() === 'crm')).toBe(true);
    expect(rows[0].content).toContain('States: prospect, active, closed. Transitions: prospect -> active, active -> closed.');
    expect(rows[0].content).toContain('decision.dormant.indexed');
    expect((await call('DELETE', '/api/workflows/Indexed')).status).toBe(204);
    expect(await call('DELETE', '/api/workflows/INDEXED')).toMatchObject({ status: 404, body: { error: 'workflow indexed not found' } });
    expect((await owner.query(`select count(*)::int as n from retrieval.chunks where corpus = 'workflow:indexed'`)).rows[0].n).toBe(0);
  });

  it('keeps tenants apart', async () => {
    expect((await call('GET', '/api/platform/workflows', { tenant: 2 })).body).toEqual([]);
    expect((await call('GET', '/api/platform/workflows/partner-status', { tenant: 2 })).status).toBe(404);
    expect((await call('DELETE', '/api/workflows/partner-status', { tenant: 2 })).status).toBe(404);
    // Tenant 2 has no entity partner.
    expect((await apply(manifest('partner-status'), 2)).body).toMatchObject({ field: 'spec.entity' });
  });
});

describe('dormancy', () => {
  const sweep = () => hub.services.workflows.sweep();

  it('fires once per spell after `after`, again after a change of state; never outside dormancy.states; not after the record disappeared', async () => {
    await partners([
      ['p1', 'prospect'],
      ['p2', 'closed'],
      ['p3', 'prospect'],
      ['p4', null],
    ]);
    expect((await apply(manifest('dorm', { dormancy: { after: '1s', states: ['prospect', 'active'] } }))).status).toBe(201);
    const applied = (await owner.query(`select tracked_since from workflows.workflows where tenant_id = 1 and name = 'dorm'`)).rows[0].tracked_since as Date;
    await sweep();
    // Records already there when the workflow was applied are in their state since the apply.
    expect(await spell('dorm', 'p1')).toMatchObject({ state: 'prospect', since: applied, notified_at: null });
    expect(await spell('dorm', 'p4')).toBeUndefined();

    // p3 disappears before its spell comes due.
    await owner.query(`delete from ext_t1.partners where external_id = 'p3'`);
    await sweep();
    expect(await spell('dorm', 'p3')).toBeUndefined();

    await until('p1 and p2 due', async () => (await spell('dorm', 'p1'))?.due && (await spell('dorm', 'p2'))?.due);
    await sweep();
    expect(await decisions('dorm')).toEqual([
      { workflow: 'dorm', entity: 'partner', scope: 'crm', key: 'p1', state: 'prospect', since: applied.toISOString(), after: '1s' },
    ]);
    expect((await decisions('dorm'))[0]!.since).toMatch(/Z$/);
    // Once per spell: more sweeps, nothing more.
    await sweep();
    await sweep();
    expect(await decisions('dorm')).toHaveLength(1);

    // A change of state (declared or not) starts a new spell, which fires once it is due.
    await partners([['p1', 'active']]);
    await sweep();
    const second = await spell('dorm', 'p1');
    expect(second).toMatchObject({ state: 'active', notified_at: null });
    expect(second!.since.getTime()).toBeGreaterThan(applied.getTime());
    await until('p1 due again', async () => (await spell('dorm', 'p1'))?.due);
    await sweep();
    await sweep();
    const all = await decisions('dorm');
    expect(all).toHaveLength(2);
    expect(all[1]).toEqual({ workflow: 'dorm', entity: 'partner', scope: 'crm', key: 'p1', state: 'active', since: second!.since.toISOString(), after: '1s' });
    // p2 (closed) and p3 (gone) never fired.
    expect(all.map((d) => d.key)).toEqual(['p1', 'p1']);
  });

  it('a re-apply keeps the spells (no second decision); another state column starts them afresh', async () => {
    // A workflow and a record of this case's own (closed: a state no other case's workflow watches).
    await partners([['k1', 'closed']]);
    const dormancy = { after: '1s', states: ['closed'] };
    expect((await apply(manifest('kept', { dormancy }))).status).toBe(201);
    await sweep();
    await until('k1 due', async () => (await spell('kept', 'k1'))?.due);
    await sweep();
    const announced = async () => (await decisions('kept')).filter((d) => d.key === 'k1');
    expect(await announced()).toHaveLength(1);

    expect((await apply(manifest('kept', { dormancy, transitions: [] }))).body).toMatchObject({ unchanged: false });
    expect(await spell('kept', 'k1')).toMatchObject({ state: 'closed', notified_at: expect.any(Date) });
    await sweep();
    expect(await announced()).toHaveLength(1);

    await apply(manifest('kept', { stateColumn: 'name', states: ['Partner k1'], transitions: [], dormancy: { after: '1s' } }));
    expect(await spell('kept', 'k1')).toBeUndefined();
    await sweep();
    expect(await spell('kept', 'k1')).toMatchObject({ state: 'Partner k1', notified_at: null });
  });

  it('passes over a workflow whose entity cannot be read yet (its source table not written), and over one whose entity was deleted', async () => {
    const ghost = { ...partnerEntity, metadata: { name: 'ghost' }, spec: { ...partnerEntity.spec, sources: [{ table: 'ext.ghosts', key: 'external_id', columns: { partner_id: 'external_id', status: 'status', name: '$.name' } }] } };
    expect((await call('POST', '/api/entities/apply', { body: stringify(ghost) })).status).toBe(201);
    expect((await apply(manifest('haunted', { entity: 'ghost' }))).status).toBe(201);
    const logs = captureLogs('info');
    let before: Awaited<ReturnType<typeof sweep>>;
    let after: Awaited<ReturnType<typeof sweep>>;
    try {
      before = await sweep();
      await sweep();
      expect((await call('DELETE', '/api/entities/ghost')).status).toBe(204);
      after = await sweep();
    } finally {
      logs.restore();
    }
    // Said at info once per reason (not at every tick): the missing table, then the missing entity.
    const skips = logs.lines().filter((l) => l.workflow === 'haunted').map((l) => l.msg);
    expect(skips).toEqual([
      'workflow haunted is not swept until its entity can be read: source table ext.ghosts of entity ghost does not exist',
      'workflow haunted is not swept until its entity can be read: entity ghost does not exist',
    ]);
    // The other workflows are swept as before; this one counts in neither.
    expect(after.workflows).toBe(before.workflows);
    const { rows } = await owner.query(`select count(*)::int as n from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = 'haunted'`);
    expect(rows[0].n).toBe(0);
    expect((await call('DELETE', '/api/workflows/haunted')).status).toBe(204);
  });

  it('two sweeps at once (two replicas) still announce each spell once', async () => {
    await partners([
      ['r1', 'prospect'],
      ['r2', 'active'],
    ]);
    await apply(manifest('racing', { dormancy: { after: '1s', states: ['prospect', 'active'] } }));
    await sweep();
    await until('r1 and r2 due', async () => (await spell('racing', 'r1'))?.due && (await spell('racing', 'r2'))?.due);
    await Promise.all([sweep(), sweep(), sweep()]);
    const fired = (await decisions('racing')).filter((d) => d.key === 'r1' || d.key === 'r2');
    expect(fired.map((d) => d.key).sort()).toEqual(['r1', 'r2']);
  });

  it('leaves a deactivated tenant\'s workflows out: its spells stay as they were and nothing is announced; an active tenant\'s are swept', async () => {
    await owner.query(`insert into core.tenants (id, code, name) values (5, 'dormant', 'Dormant')`);
    await hub.services.connectors.ext.ensureTable(5, 'ext.partners', [{ name: 'status', path: '$.status', type: 'text' }]);
    expect((await call('POST', '/api/entities/apply', { tenant: 5, body: stringify(partnerEntity) })).status).toBe(201);
    await owner.query(
      `insert into ext_t5.partners (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status)
       values (5, 'd1', md5('d1'), '{"name":"Partner d1"}', $1, $2, 'prospect')`,
      [CONNECTOR, ENDPOINT],
    );
    await partners([['d1', 'prospect']]);
    const lively = manifest('lively', { dormancy: { after: '1s', states: ['prospect'] } });
    for (const tenant of [1, 5]) expect((await apply(lively, tenant)).status).toBe(201);
    await sweep();
    const spellOf = async (tenant: number) =>
      (
        await owner.query<{ due: boolean; notified_at: Date | null }>(
          `select s.since <= now() - interval '1 second' as due, s.notified_at
             from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.tenant_id = $1 and w.name = 'lively' and s.record_key = 'd1'`,
          [tenant],
        )
      ).rows[0];
    await until('d1 due in both tenants', async () => (await spellOf(1))?.due && (await spellOf(5))?.due);
    expect((await call('DELETE', '/api/tenants/5')).status).toBe(204);
    await sweep();
    expect((await decisions('lively')).filter((d) => d.key === 'd1')).toHaveLength(1);
    const announced = await owner.query<{ n: number }>(`select count(*)::int as n from events.outbox where tenant_id = 5 and type like 'decision.dormant.%'`);
    expect(announced.rows[0]!.n).toBe(0);
    expect(await spellOf(5)).toMatchObject({ notified_at: null });
  });

  it('over an entity fused from two sources, in batches of two: one spell per record across batch boundaries, the gone ones ended, each due spell announced once', async () => {
    await hub.services.connectors.ext.ensureTable(1, 'ext.fused_a', [{ name: 'status', path: '$.status', type: 'text' }]);
    await hub.services.connectors.ext.ensureTable(1, 'ext.fused_b', []);
    const row = (table: string, key: string, data: Json, status?: string | null) =>
      owner.query(
        `insert into ext_t1.${table} (tenant_id, external_id, row_hash, data, connector_id, endpoint_id${status === undefined ? '' : ', status'})
         values (1, $1, md5($1), $2, $3, $4${status === undefined ? '' : ', $5'})`,
        [key, JSON.stringify(data), CONNECTOR, ENDPOINT, ...(status === undefined ? [] : [status])],
      );
    const states = ['prospect', 'active', 'closed'];
    for (let i = 1; i <= 7; i++) await row('fused_a', `a0${i}`, {}, states[i % 3]);
    // The second source keys its rows by a JSONPath: one record it shares with the first (whose
    // state wins), two of its own, one without a state (no spell).
    await row('fused_b', 'x1', { code: 'a03', status: 'closed' });
    await row('fused_b', 'x2', { code: 'b01', status: 'prospect' });
    await row('fused_b', 'x3', { code: 'b02', status: 'active' });
    await row('fused_b', 'x4', { code: 'b03' });
    const fused = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'fused' },
      spec: {
        scope: 'crm',
        key: 'id',
        columns: [
          { name: 'id', type: 'text' },
          { name: 'status', type: 'text' },
        ],
        sources: [
          { table: 'ext.fused_a', key: 'external_id', columns: { id: 'external_id', status: 'status' } },
          { table: 'ext.fused_b', key: '$.code', columns: { status: '$.status' } },
        ],
      },
    };
    expect((await call('POST', '/api/entities/apply', { body: stringify(fused) })).status).toBe(201);
    expect((await apply(manifest('fused-status', { entity: 'fused', transitions: [], dormancy: { after: '1s', states: ['prospect'] } }))).status).toBe(201);
    const small = await startTestHub({ 'svc.datasource.url': hub.ownerUrl, 'svc.workflow.sweep.batch': 2 });
    try {
      const spells = async () =>
        (await owner.query(`select s.record_key, s.state from workflows.spells s join workflows.workflows w on w.id = s.workflow_id where w.name = 'fused-status' order by s.record_key`)).rows.map((r) => `${r.record_key}:${r.state}`);
      const first = await small.services.workflows.sweep();
      expect(first.records).toBeGreaterThanOrEqual(10);
      expect(await spells()).toEqual(['a01:active', 'a02:closed', 'a03:prospect', 'a04:active', 'a05:closed', 'a06:prospect', 'a07:active', 'b01:prospect', 'b02:active']);

      // Gone: one in the middle of a batch, one at a batch's end, the last of all.
      await owner.query(`delete from ext_t1.fused_a where external_id in ('a02', 'a04')`);
      await owner.query(`delete from ext_t1.fused_b where external_id = 'x3'`);
      await small.services.workflows.sweep();
      expect(await spells()).toEqual(['a01:active', 'a03:prospect', 'a05:closed', 'a06:prospect', 'a07:active', 'b01:prospect']);

      await until('the prospects due', async () => (await spell('fused-status', 'a03'))?.due && (await spell('fused-status', 'b01'))?.due);
      await small.services.workflows.sweep();
      await small.services.workflows.sweep();
      // In key order only when announced by one sweep: the spells date from the apply, and a sweep under way when they
      // came due announced the later batches' (a06, b01) and left a03's, in a batch it had passed, to the next.
      expect((await decisions('fused-status')).map((d) => `${d.key}:${d.state}`).sort()).toEqual(['a03:prospect', 'a06:prospect', 'b01:prospect']);
    } finally {
      await small.stop();
    }
  });

  it('a record whose key is too long for the spells\' index is left out with one warning per workflow and sweep; the others are swept', async () => {
    // Keyed by a JSONPath (a key in data is not indexed at the source, unlike external_id).
    // Random hex: a key PostgreSQL cannot compress, 4,003 bytes (a btree entry takes at most 2,704).
    const long = `lk-${randomBytes(2000).toString('hex')}`;
    const wide = `lk-${'€'.repeat(1001)}`; // 1,004 characters, 3,006 bytes
    const bound = `lk-${randomBytes(1000).toString('hex')}`.slice(0, 2000); // exactly 2,000 bytes: tracked
    await hub.services.connectors.ext.ensureTable(1, 'ext.long_keys', [{ name: 'status', path: '$.status', type: 'text' }]);
    for (const [i, code] of ['lk-short', long, wide, bound].entries()) {
      await owner.query(
        `insert into ext_t1.long_keys (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, status) values (1, $1, md5($1), $2, $3, $4, 'prospect')`,
        [`row-${i}`, JSON.stringify({ code }), CONNECTOR, ENDPOINT],
      );
    }
    const entity = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'long-keyed' },
      spec: {
        scope: 'crm',
        key: 'code',
        columns: [
          { name: 'code', type: 'text' },
          { name: 'status', type: 'text' },
        ],
        sources: [{ table: 'ext.long_keys', key: '$.code', columns: { status: 'status' } }],
      },
    };
    expect((await call('POST', '/api/entities/apply', { body: stringify(entity) })).status).toBe(201);
    expect((await apply(manifest('longkeys', { entity: 'long-keyed', transitions: [], dormancy: { after: '1s', states: ['prospect'] } }))).status).toBe(201);
    const logs = captureLogs('warn');
    let first: Awaited<ReturnType<typeof sweep>>;
    try {
      first = await sweep();
      await until('the short keys due', async () => (await spell('longkeys', 'lk-short'))?.due && (await spell('longkeys', bound))?.due);
      await sweep();
    } finally {
      logs.restore();
    }
    expect(first.skipped).toBe(2);
    expect(await spell('longkeys', long)).toBeUndefined();
    expect(await spell('longkeys', wide)).toBeUndefined();
    expect((await decisions('longkeys')).map((d) => d.key).sort()).toEqual([bound, 'lk-short'].sort());
    // Said once per sweep for this workflow, not once per record or batch; no sweep failed.
    const lines = logs.lines().filter((l) => l.workflow === 'longkeys');
    expect(lines.map((l) => l.msg)).toEqual([expect.stringMatching(/^workflow longkeys: 2 record\(s\) of entity long-keyed not tracked, their key longer than 2000 bytes \(the first begins "lk-/), expect.any(String)]);
    expect(lines[1]!.msg).toBe(lines[0]!.msg);
    expect(logs.lines().filter((l) => l.msg === 'workflow sweep failed for one workflow')).toEqual([]);
    expect((await call('DELETE', '/api/workflows/longkeys')).status).toBe(204);
  });

  it('runs on the leader\'s clock every svc.workflow.sweep.every', async () => {
    await partners([['c1', 'prospect']]);
    await apply(manifest('clocked', { dormancy: { after: '1s', states: ['prospect'] } }));
    const background = await startTestHub({ 'svc.datasource.url': hub.ownerUrl, 'svc.workflow.sweep.every': '200ms', 'svc.leader.backend': 'postgres', 'svc.leader.check-every': '500ms' }, undefined, { background: true });
    try {
      const fired = await until('a decision from the clock', async () => (await decisions('clocked')).find((d) => d.key === 'c1'), 15_000);
      expect(fired).toMatchObject({ workflow: 'clocked', state: 'prospect', after: '1s' });
    } finally {
      await background.stop();
    }
    expect((await decisions('clocked')).filter((d) => d.key === 'c1')).toHaveLength(1);
  }, 30_000);
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

  async function as(roles: string[] | null, method: string, path: string, body?: unknown) {
    const headers: Record<string, string> = {};
    if (roles) headers.Authorization = `Bearer ${await issuer.mint({ realm_access: { roles }, tenant_id: 1 }, { subject: 'roles-test' })}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(`${oidc.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, text: await res.text() };
  }

  it('apply and delete: svc_admin; anyone else an empty 403; no token 401', async () => {
    expect((await as(['svc_admin'], 'POST', '/api/workflows/apply', manifest('gated'))).status).toBe(201);
    for (const roles of [['svc_integrator'], ['svc_user'], ['svc_superadmin']]) {
      expect(await as(roles, 'POST', '/api/workflows/apply', manifest('gated'))).toEqual({ status: 403, text: '' });
      expect(await as(roles, 'DELETE', '/api/workflows/gated')).toEqual({ status: 403, text: '' });
    }
    expect((await as(null, 'POST', '/api/workflows/apply', manifest('gated'))).status).toBe(401);
    expect((await as(['svc_admin'], 'DELETE', '/api/workflows/gated')).status).toBe(204);
  });

  it.each(['/api/platform/workflows', '/api/platform/workflows/partner-status'])('GET %s: svc_integrator plus svc_admin or svc_superadmin', async (path) => {
    expect((await as(['svc_integrator', 'svc_admin'], 'GET', path)).status).toBe(200);
    expect((await as(['svc_integrator', 'svc_superadmin'], 'GET', path)).status).toBe(200);
    // svc_integrator alone: the route's own roles are missing (an empty 403).
    expect(await as(['svc_integrator'], 'GET', path)).toEqual({ status: 403, text: '' });
    // Without svc_integrator: the /api/platform floor's plain-text 403.
    expect(await as(['svc_admin'], 'GET', path)).toEqual({ status: 403, text: 'missing role svc_integrator' });
    expect(await as(null, 'GET', path)).toEqual({ status: 401, text: 'authentication required' });
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { MIGRATION_SETS, readMigrations } from '../../../src/db/migrations.js';
import { lazyCounter } from '../../../src/observability/metrics.js';
import { createTestDatabase } from '../../../test/harness/database.js';
import { captureLogs } from '../../../test/harness/log-capture.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';
import { route, type RouteDecl } from '../../route.js';

/** Probe routes mounted through the real pipeline (gate, validation, error mapper). */
const probes: RouteDecl[] = [
  route({
    method: 'POST', path: '/api/probe/echo', operationId: 'probeEcho', summary: 'echo', tags: ['Probe'], auth: ['svc_user'],
    body: { type: 'object', required: ['name'], additionalProperties: false, properties: { name: { type: 'string', minLength: 1 }, items: { type: 'array', items: { type: 'object', properties: { n: { type: 'integer' } } } } } },
    query: { type: 'object', properties: { limit: { type: 'integer', minimum: 1, maximum: 200, default: 50 } } },
    responses: { 200: { description: 'echo' } },
    handler: ({ body, query }) => ({ body, query }),
  }),
  route({
    method: 'GET', path: '/api/probe/boom', operationId: 'probeBoom', summary: 'throws', tags: ['Probe'], auth: ['svc_user'],
    responses: { 500: { description: 'internal' } },
    handler: () => {
      throw new Error('secret internals at /srv/app/db.ts:42');
    },
  }),
  route({
    method: 'GET', path: '/api/probe/slow', operationId: 'probeSlow', summary: 'slow', tags: ['Probe'], auth: 'public',
    responses: { 200: { description: 'done' } },
    handler: async () => {
      slow.enter();
      await slow.released;
      return { done: true };
    },
  }),
];

/** The slow probe signals that it is running (`entered`) and answers once the test releases it. */
let slow = holdSlow();
function holdSlow() {
  let enter!: () => void;
  let release!: () => void;
  const entered = new Promise<void>((resolve) => (enter = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  return { enter, entered, release, released };
}

let hub: TestHub;

beforeAll(async () => {
  hub = await startTestHub({}, probes);
});

afterAll(async () => {
  await hub.stop();
});

const dev = { 'X-Tenant-ID': '1' };

describe('health', () => {
  it('/q/health/live, /q/health/ready and /q/health answer UP without a token', async () => {
    for (const path of ['/q/health/live', '/q/health/ready', '/q/health']) {
      const res = await fetch(`${hub.url}${path}`);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { status: string; checks: Array<{ name: string; status: string }> };
      expect(body.status).toBe('UP');
      expect(body.checks.every((c) => c.status === 'UP')).toBe(true);
    }
    const ready = (await (await fetch(`${hub.url}/q/health/ready`)).json()) as { checks: Array<{ name: string }> };
    expect(ready.checks.map((c) => c.name)).toEqual(['database', 'migrations']);
  });

  it('adds the checks a role registers to readiness (and to /q/health), not to liveness', async () => {
    let status: 'UP' | 'DOWN' = 'DOWN';
    const check = () => ({ name: 'operator', status, data: { role: 'leader' } });
    hub.services.readinessChecks.push(check);
    try {
      const down = await fetch(`${hub.url}/q/health/ready`);
      expect(down.status).toBe(503);
      expect(((await down.json()) as { checks: unknown[] }).checks).toContainEqual({ name: 'operator', status: 'DOWN', data: { role: 'leader' } });
      expect((await fetch(`${hub.url}/q/health`)).status).toBe(503);
      expect((await fetch(`${hub.url}/q/health/live`)).status).toBe(200);
      status = 'UP';
      expect((await fetch(`${hub.url}/q/health/ready`)).status).toBe(200);
    } finally {
      hub.services.readinessChecks.splice(hub.services.readinessChecks.indexOf(check), 1);
    }
  });

  it('probes that arrive together share one database check, so a flood of them takes one connection of the pool', async () => {
    // The database check holds until released; a check of the role counts the probes that arrived.
    let pings = 0;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const ping = hub.services.ping;
    hub.services.ping = async () => {
      pings++;
      await released;
      return ping();
    };
    let arrived = 0;
    const check = () => {
      arrived++;
      return { name: 'counted', status: 'UP' as const };
    };
    hub.services.readinessChecks.push(check);
    try {
      const probes = Array.from({ length: 20 }, (_, i) => fetch(`${hub.url}/q/health${i % 2 ? '/ready' : ''}`));
      await until('every probe to reach readiness', () => arrived === 20);
      release();
      const answers = await Promise.all(probes);
      expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
      expect(pings).toBe(1);
      // The next probe checks again.
      expect((await fetch(`${hub.url}/q/health/ready`)).status).toBe(200);
      expect(pings).toBe(2);
    } finally {
      hub.services.ping = ping;
      hub.services.readinessChecks.splice(hub.services.readinessChecks.indexOf(check), 1);
    }
  });

  it('a migration history the database does not answer for is a DOWN check after svc.health.database-timeout, and the next probe checks again', async () => {
    const owner = new pg.Client({ connectionString: hub.ownerUrl });
    await owner.connect();
    try {
      await owner.query('begin');
      await owner.query('lock table public.svc_schema_history in access exclusive mode');
      const started = Date.now();
      const res = await fetch(`${hub.url}/q/health/ready`, { signal: AbortSignal.timeout(15_000) });
      expect(res.status).toBe(503);
      expect(((await res.json()) as { checks: unknown[] }).checks).toContainEqual({ name: 'migrations', status: 'DOWN', data: { error: 'the database did not answer within 2000 ms' } });
      expect(Date.now() - started).toBeLessThan(8_000);
    } finally {
      await owner.query('rollback');
      await owner.end();
    }
    expect((await fetch(`${hub.url}/q/health/ready`)).status).toBe(200);
  });

  it('reads no migration file to answer a probe: those of the build were read at start', async () => {
    // Every folder of migrations moved away after the start: a probe that read them would fail.
    const dirs = MIGRATION_SETS.map((set) => set.dir);
    for (const set of MIGRATION_SETS) set.dir = `/nonexistent/${set.dir}`;
    try {
      const res = await fetch(`${hub.url}/q/health/ready`);
      expect(await res.json()).toEqual({ status: 'UP', checks: [{ name: 'database', status: 'UP' }, { name: 'migrations', status: 'UP', data: { pending: 0 } }] });
      expect(res.status).toBe(200);
    } finally {
      for (const [i, set] of MIGRATION_SETS.entries()) set.dir = dirs[i]!;
    }
  });

  it('is not ready while migrations are pending, and says how many', async () => {
    const pending = await startTestHub({ 'svc.datasource.url': await createTestDatabase(), 'svc.migrate.on-start': false });
    try {
      const res = await fetch(`${pending.url}/q/health/ready`);
      expect(res.status).toBe(503);
      const body = (await res.json()) as { status: string; checks: Array<{ name: string; status: string; data?: { pending?: number } }> };
      expect(body.status).toBe('DOWN');
      const files = readMigrations().length;
      expect(body.checks.find((c) => c.name === 'migrations')).toMatchObject({ status: 'DOWN', data: { pending: files } });
      const live = await fetch(`${pending.url}/q/health/live`);
      expect(live.status).toBe(200);
      const status = await (await fetch(`${pending.url}/api/platform/migrations`)).json();
      expect(status).toEqual(
        MIGRATION_SETS.map((set) => ({ schema: set.schema, currentVersion: '0', pending: readMigrations([set]).length, lastApplied: null })),
      );
      const tenantCall = await fetch(`${pending.url}/api/bff/v1/me`, { headers: dev });
      expect(tenantCall.status).toBe(503);
      expect(((await tenantCall.json()) as { error: string }).error).toBe('database not migrated: run svc-hub migrate');
    } finally {
      await pending.stop();
    }
  });

  it('a column dropped by hand from a migrated database: a 503 saying to migrate, as a missing table, with the column named in the log', async () => {
    const altered = await startTestHub();
    const logs = captureLogs('warn');
    const owner = new pg.Client({ connectionString: altered.ownerUrl });
    await owner.connect();
    try {
      await owner.query('alter table platform.secrets drop column deleted_at');
      const res = await fetch(`${altered.url}/api/platform/secrets`, { headers: dev });
      // Was: 500 internal error (42703 undefined column), where 42P01 answered this 503.
      expect(res.status).toBe(503);
      expect(await res.json()).toEqual({ error: 'database not migrated: run svc-hub migrate', hint: 'see GET /api/platform/migrations' });
      expect(logs.lines().find((l) => l.msg === 'the database lacks a table, column or function the request needs')).toMatchObject({
        code: '42703',
        err: expect.stringContaining('deleted_at'),
      });
    } finally {
      logs.restore();
      await owner.end();
      await altered.stop();
    }
  });

  it('/api/platform/health reports the platform and its modules', async () => {
    const res = await fetch(`${hub.url}/api/platform/health`, { headers: dev });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ platform: 'ok', modules: { core: '0.1' } });
  });

  it('/api/platform/migrations lists each schema with its version', async () => {
    const res = await fetch(`${hub.url}/api/platform/migrations`, { headers: dev });
    const body = (await res.json()) as Array<Record<string, unknown>>;
    expect(body.map((s) => s.schema)).toEqual(MIGRATION_SETS.map((set) => set.schema));
    const coreVersion = Math.max(...readMigrations(MIGRATION_SETS.filter((s) => s.schema === 'core')).map((m) => m.version));
    expect(body[0]).toMatchObject({ schema: 'core', currentVersion: String(coreVersion), pending: 0 });
    for (const entry of body) expect(entry.pending).toBe(0);
    expect(new Date(body[0]!.lastApplied as string).getTime()).toBeGreaterThan(Date.now() - 600_000);
  });
});

describe('metrics', () => {
  it('serves the text exposition format with process metrics', async () => {
    const res = await fetch(`${hub.url}/q/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    expect(text).toContain('# TYPE process_cpu_user_seconds_total counter');
    expect(text).toContain('nodejs_eventloop_lag_seconds');
  });

  it('registers a metric lazily: absent until first used', async () => {
    const probe = lazyCounter({ name: 'svc_probe_total', help: 'probe', labelNames: ['status'] });
    expect(await (await fetch(`${hub.url}/q/metrics`)).text()).not.toContain('svc_probe_total');
    probe().inc({ status: 'Completed' });
    expect(await (await fetch(`${hub.url}/q/metrics`)).text()).toContain('svc_probe_total{status="Completed"} 1');
  });
});

describe('errors', () => {
  it('an unknown path is a JSON 404', async () => {
    const res = await fetch(`${hub.url}/api/nothing/here`, { headers: dev });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'not found' });
  });

  it('a body that is not JSON is a 400 naming the problem', async () => {
    const res = await fetch(`${hub.url}/api/probe/echo`, { method: 'POST', headers: { ...dev, 'Content-Type': 'application/json' }, body: '{"name": ' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/body is not valid/);
  });

  it('schema violations name the field', async () => {
    const post = (body: unknown, query = '') =>
      fetch(`${hub.url}/api/probe/echo${query}`, { method: 'POST', headers: { ...dev, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    let res = await post({});
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: 'name is required', field: 'name' });
    res = await post({ name: 'x', items: [{ n: 1 }, { n: 'two' }] });
    expect(await res.json()).toEqual({ error: 'items[1].n must be an integer', field: 'items[1].n' });
    res = await post({ name: 'x', colour: 'red' });
    expect(await res.json()).toEqual({ error: 'colour is not a known field', field: 'colour' });
    res = await post({ name: 'x' }, '?limit=500');
    expect(res.status).toBe(400);
    expect(((await res.json()) as { field: string }).field).toBe('limit');
    res = await post({ name: 'x' }, '?limit=20');
    expect(await res.json()).toEqual({ body: { name: 'x' }, query: { limit: 20 } });
    res = await post({ name: 'x' });
    expect(await res.json()).toEqual({ body: { name: 'x' }, query: { limit: 50 } });
  });

  it('an unexpected failure is a 500 with no stack or message, and a request id to quote', async () => {
    const res = await fetch(`${hub.url}/api/probe/boom`, { headers: dev });
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(text).not.toContain('secret internals');
    expect(text).not.toContain('.ts');
    expect(JSON.parse(text)).toEqual({ error: 'internal error', requestId: res.headers.get('x-request-id') });
  });

  it('keeps a sane caller request id and replaces an unsafe one', async () => {
    const kept = await fetch(`${hub.url}/q/health/live`, { headers: { 'X-Request-Id': 'abc-123' } });
    expect(kept.headers.get('x-request-id')).toBe('abc-123');
    const replaced = await fetch(`${hub.url}/q/health/live`, { headers: { 'X-Request-Id': 'a b<script>' } });
    expect(replaced.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    // At most 128 characters, of ASCII letters and digits and _ . : - (no space, tab or non-ASCII
    // letter; Node's parser refuses other control characters): anything else is replaced, never cut.
    const longest = `${'a'.repeat(120)}:trace.1`;
    expect((await fetch(`${hub.url}/q/health/live`, { headers: { 'X-Request-Id': longest } })).headers.get('x-request-id')).toBe(longest);
    for (const given of [`${longest}9`, 'caf\u00e9', 'a\tb']) {
      const res = await fetch(`${hub.url}/q/health/live`, { headers: { 'X-Request-Id': given } });
      expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    }
  });
});

describe('graceful shutdown', () => {
  it('finishes in-flight requests, refuses new connections, closes the pools', async () => {
    const own = await startTestHub({}, probes);
    slow = holdSlow();
    const inFlight = fetch(`${own.url}/api/probe/slow`);
    await slow.entered;
    const stopped = own.stop();
    slow.release();
    const res = await inFlight;
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ done: true });
    await stopped;
    await expect(fetch(`${own.url}/q/health/live`)).rejects.toThrow();
    await expect(own.services.db.ping()).rejects.toThrow();
  });

  it('cuts requests that outlive the grace period', async () => {
    const own = await startTestHub({ 'svc.http.shutdown-grace': '100ms' }, probes);
    slow = holdSlow();
    const inFlight = fetch(`${own.url}/api/probe/slow`).then(
      () => 'answered',
      () => 'cut',
    );
    await slow.entered;
    // The request is never released before the hub has stopped: a stop that waited for it would never end.
    await own.stop();
    expect(await inFlight).toBe('cut');
    slow.release();
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { latestSlot } from '../src/connectors/schedule.js';
import { startDemoSource } from '../src/demo-source/server.js';
import { captureLogs } from '../test/harness/log-capture.js';
import { until } from '../test/harness/until.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { parseRunArgs, runCommand } from './run.js';

/** `svc-hub run connector …`: one run per endpoint in process, the scheduled slot claimed once. */

let hub: TestHub;
let demo: Awaited<ReturnType<typeof startDemoSource>>;
/** The demo source's access lines (`GET /path 500 1.2ms`), each once its answer went. */
const answered: string[] = [];

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 300, log: (line) => answered.push(line) });
  hub = await startTestHub();
  const now = new Date();
  const outside = `${String((now.getUTCHours() + 2) % 24).padStart(2, '0')}:00-${String((now.getUTCHours() + 3) % 24).padStart(2, '0')}:00`;
  const endpoint = (id: string, path: string) => ({
    id,
    path,
    pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 100, response_path: '$.data', total_path: '$.total' },
    target: { kind: 'hybrid', table: `ext.cli_${id}`, unique_key: '$.id' },
  });
  for (const [name, spec] of [
    ['every-minute', { schedule: '* * * * *', endpoints: [endpoint('open', '/open/partners')] }],
    ['fenced', { schedule: '* * * * *', window: outside, endpoints: [endpoint('fenced', '/open/partners')] }],
    ['liar', { endpoints: [endpoint('liar', '/liar/partners')] }],
    ['yearly', { schedule: '0 0 1 1 *', endpoints: [endpoint('yearly', '/open/partners')] }],
    ['down', { endpoints: [endpoint('down', '/down/partners')] }],
    ['dormant', { schedule: '* * * * *', endpoints: [{ ...endpoint('dormant', '/open/partners'), enabled: false }] }],
  ] as const) {
    const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec: { base_url: demo.url, ...spec } };
    const res = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' }, body: JSON.stringify(manifest) });
    expect(res.status).toBe(201);
  }
});

afterAll(async () => {
  await hub?.stop();
  await demo?.close();
});

/**
 * The `yearly` connector or export (cron `0 0 1 1 *`) as last applied 61 s after its latest slot:
 * `--scheduled` finds no slot due; applied 59 s after it: the slot runs. Returns the slot and what
 * the second call printed (exit code 0 checked).
 */
async function noBackFill(kind: 'connector' | 'export'): Promise<{ slot: Date; lines: string[] }> {
  const slot = latestSlot('0 0 1 1 *', new Date());
  const table = kind === 'connector' ? 'connectors.connectors' : 'exports.exports';
  const owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  try {
    const appliedAt = (seconds: number) => owner.query(`update ${table} set updated_at = $1 where name = 'yearly'`, [new Date(slot.getTime() + seconds * 1000)]);
    await appliedAt(61);
    expect((await cli([kind, 'yearly', '--tenant', 'default', '--scheduled'])).lines).toEqual([`${kind} yearly has no schedule slot due`]);
    await appliedAt(59);
    const { code, lines } = await cli([kind, 'yearly', '--tenant', 'default', '--scheduled']);
    expect(code).toBe(0);
    return { slot, lines };
  } finally {
    await owner.end();
  }
}

async function cli(args: string[]): Promise<{ code: number; lines: string[] }> {
  const lines: string[] = [];
  const code = await runCommand(hub.config, args, (line) => lines.push(line));
  return { code, lines };
}

describe('svc-hub run connector', () => {
  it('runs every endpoint once, prints one line per run, exits 0', async () => {
    const { code, lines } = await cli(['connector', 'every-minute', '--tenant', 'default']);
    expect(code).toBe(0);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^every-minute\/open Completed in=300 out=300 skipped=0 dead=0 \d+ms run=[0-9a-f-]{36}$/);
  });

  it('--scheduled takes the latest due slot once, however many jobs fire', async () => {
    // Three jobs fire at once (a CronJob overlapping a hub's own tick, say).
    const jobs = await Promise.all([1, 2, 3].map(() => cli(['connector', 'every-minute', '--tenant', 'default', '--scheduled'])));
    for (const job of jobs) expect(job.code).toBe(0);
    const outcomes = jobs.map((r) => r.lines[0]!);
    const ran = outcomes.filter((l) => l.includes(' Completed '));
    const skippedSlots = outcomes.map((l) => /^slot (\S+) already ran: skipped$/.exec(l)?.[1]).filter((slot): slot is string => slot !== undefined);
    expect(ran.length + skippedSlots.length).toBe(3);
    expect(ran.length).toBeGreaterThanOrEqual(1);
    // The ledger: every scheduled run names its slot, and no slot ran twice. The jobs normally share
    // one minute (one run, two skips); if the minute turned between them, each new slot runs once.
    const owner = new pg.Client({ connectionString: hub.ownerUrl });
    await owner.connect();
    try {
      const { rows } = await owner.query<{ slot: Date; runs: number }>(
        `select slot, count(*)::int as runs from connectors.runs where connector_name = 'every-minute' and triggered_by = 'schedule' group by slot order by slot`,
      );
      expect(rows.every((r) => r.slot !== null && r.runs === 1)).toBe(true);
      expect(rows).toHaveLength(ran.length);
      const claimed = rows.map((r) => r.slot.toISOString());
      for (const slot of skippedSlots) expect(claimed).toContain(slot);
    } finally {
      await owner.end();
    }
  });

  it('--scheduled honours the window fence: the slot is skipped, never queued', async () => {
    const { code, lines } = await cli(['connector', 'fenced', '--tenant', 'default', '--scheduled']);
    expect(code).toBe(0);
    expect(lines[0]).toMatch(/is outside the window: skipped$/);
    const runs = (await (await fetch(`${hub.url}/api/platform/runs`, { headers: { 'X-Tenant-ID': '1' } })).json()) as Array<{ connector: string }>;
    expect(runs.some((r) => r.connector === 'fenced')).toBe(false);
  });

  it('--scheduled: a slot that fell due more than a minute before the last apply is not due; one due in the minute before it runs', async () => {
    const { slot, lines } = await noBackFill('connector');
    expect(lines[0]).toMatch(/^yearly\/yearly Completed /);
    const owner = new pg.Client({ connectionString: hub.ownerUrl });
    await owner.connect();
    const { rows } = await owner.query<{ slot: Date }>("select slot from connectors.runs where connector_name = 'yearly'").finally(() => owner.end());
    expect(rows.map((r) => r.slot.toISOString())).toEqual([slot.toISOString()]);
  });

  it('a connector whose endpoints are all disabled: no run, exit 1 saying why; its scheduled slot runs nothing, exit 0', async () => {
    expect(await cli(['connector', 'dormant', '--tenant', 'default'])).toEqual({
      code: 1,
      lines: ['error: connector dormant has no enabled endpoint: every endpoint of it is disabled (enabled: false in its manifest); no run was started (enable an endpoint (enabled: true) and apply the manifest again)'],
    });
    expect(await cli(['connector', 'dormant', '--tenant', 'default', '--scheduled'])).toEqual({ code: 0, lines: [] });
    const runs = (await (await fetch(`${hub.url}/api/platform/runs?connector=dormant`, { headers: { 'X-Tenant-ID': '1' } })).json()) as unknown[];
    expect(runs).toEqual([]);
  });

  it('exits 1 when a run failed, with the error on the line', async () => {
    const { code, lines } = await cli(['connector', 'liar', '--tenant', 'default']);
    expect(code).toBe(1);
    expect(lines[0]).toContain('liar/liar Failed');
    expect(lines[0]).toContain('the source declared 300 rows but this run returned 200');
  });

  it('stops on its signal (SIGINT, SIGTERM): the run in flight ends Failed interrupted at once, not after its retries', async () => {
    // A 20 s back-off on a source that answers 500: without the stop, the run would take minutes.
    const config = hub.config.with({ 'svc.connectors.retry.base-delay': '20s', 'svc.connectors.retry.max-delay': '60s' });
    const stop = new AbortController();
    const lines: string[] = [];
    const done = runCommand(config, ['connector', 'down', '--tenant', 'default'], (line) => lines.push(line), stop.signal);
    const owner = new pg.Client({ connectionString: hub.ownerUrl });
    await owner.connect();
    try {
      await until('the run to start', async () => (await owner.query("select 1 from connectors.runs where connector_name = 'down' and status = 'Running'")).rows.length > 0, 20_000);
      // Its first request answered 500: backing off.
      await until('the source to answer the run 500', () => answered.some((line) => /^GET \/down\/partners\S* 500 /.test(line)), 20_000);
      const stopping = Date.now();
      stop.abort();
      expect(await done).toBe(1);
      expect(Date.now() - stopping).toBeLessThan(5_000);
      expect(lines[0]).toBe('stopping: the run ends Failed interrupted');
      expect(lines[1]).toMatch(/^down\/down Failed .*interrupted/);
      const { rows } = await owner.query("select status, error_message from connectors.runs where connector_name = 'down' order by started_at desc limit 1");
      expect(rows[0]).toMatchObject({ status: 'Failed', error_message: expect.stringContaining('interrupted') });
    } finally {
      await owner.end();
    }
  });

  it('names what is missing', async () => {
    expect((await cli(['connector', 'nope', '--tenant', 'default'])).lines[0]).toBe('connector nope not found in tenant default');
    expect((await cli(['connector', 'liar', '--tenant', 'ghost'])).lines[0]).toBe('tenant ghost not found');
    // The system tenant's code names no tenant: nothing runs as tenant 0.
    expect((await cli(['connector', 'liar', '--tenant', 'system'])).lines[0]).toBe('tenant system not found');
    expect((await cli(['export', 'liar', '--tenant', 'system'])).lines[0]).toBe('tenant system not found');
    expect(parseRunArgs(['connector', 'x'])).toBe('--tenant CODE is required');
    expect(parseRunArgs(['connector', 'x', '--tenant'])).toBe('--tenant needs a value');
    expect(parseRunArgs(['job', 'x'])).toBe("unknown run target 'job'");
    expect(parseRunArgs(['connector', 'x', '--tenant', 'a', '--fast'])).toBe("unexpected argument '--fast'");
  });
});

describe('svc-hub run export', () => {
  let s3: Awaited<ReturnType<typeof import('../test/harness/s3.js').startS3>>;

  beforeAll(async () => {
    const { startS3 } = await import('../test/harness/s3.js');
    s3 = await startS3();
    s3.createBucket('drops');
    const call = (path: string, body: unknown) =>
      fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    expect((await call('/api/platform/secrets', { name: 'KEY', value: s3.accessKeyId })).status).toBe(201);
    expect((await call('/api/platform/secrets', { name: 'SECRET', value: s3.secretAccessKey })).status).toBe(201);
    const entity = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'partner' },
      spec: { scope: 'crm', key: 'id', columns: [{ name: 'id', type: 'text' }, { name: 'name', type: 'text' }], sources: [{ table: 'ext.cli_open', key: 'external_id', columns: { id: 'external_id', name: '$.name' } }] },
    };
    expect((await call('/api/entities/apply', entity)).status).toBe(201);
    const exportOf = (name: string, filename: string, schedule?: string) => ({
      apiVersion: 'apps.svc.io/v1',
      kind: 'Export',
      metadata: { name },
      spec: {
        scope: 'crm',
        source: { entity: 'partner' },
        columns: ['id', 'name'],
        order: ['id'],
        format: { kind: 'csv' },
        destination: { kind: 's3', bucket: 'drops', filename, endpoint: s3.endpoint, region: s3.region, access_key_env: 'KEY', secret_key_env: 'SECRET' },
        mode: 'snapshot',
        ...(schedule ? { schedule } : {}),
      },
    });
    expect((await call('/api/exports/apply', exportOf('once', 'once.csv'))).status).toBe(201);
    expect((await call('/api/exports/apply', exportOf('cron', 'cron-${timestamp}.csv', '* * * * *'))).status).toBe(201);
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the export's own file-name token
    expect((await call('/api/exports/apply', exportOf('busy', 'busy-${timestamp}.csv', '* * * * *'))).status).toBe(201);
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the export's own file-name token
    expect((await call('/api/exports/apply', exportOf('yearly', 'yearly-${timestamp}.csv', '0 0 1 1 *'))).status).toBe(201);
  });

  afterAll(async () => {
    await s3?.stop();
  });

  it('runs an export once in process, prints its receipt, and exits 1 when a second run collides', async () => {
    const first = await cli(['export', 'once', '--tenant', 'default']);
    expect(first.code).toBe(0);
    expect(first.lines[0]).toMatch(/^export once Completed run=[0-9a-f-]{36} attempt=1 rows=300 bytes=\d+ sha256=[0-9a-f]{64} location=s3:\/\/drops\/once\.csv$/);
    expect(s3.getObject('drops', 'once.csv')?.body.toString().split('\r\n')).toHaveLength(302);
    const second = await cli(['export', 'once', '--tenant', 'default']);
    expect(second.code).toBe(1);
    expect(second.lines[0]).toMatch(/^export once Failed run=\S+ attempt=1 failureCode=collision reason=".+"$/);
  });

  it('--scheduled runs the latest due slot once, its file named for the slot', async () => {
    const runs = await Promise.all([1, 2].map(() => cli(['export', 'cron', '--tenant', 'default', '--scheduled'])));
    const started = runs.filter((r) => r.lines[0]?.startsWith('export cron Completed'));
    // The second may find the first's run in flight: it waits for it, then finds the slot ran.
    const skipped = runs.filter((r) => /^slot \S+ already ran: skipped$/.test(r.lines.at(-1) ?? ''));
    expect(started.length + skipped.length).toBe(2);
    expect(started.length).toBeGreaterThanOrEqual(1);
    expect(started[0]!.lines[0]).toMatch(/location=s3:\/\/drops\/cron-\d{8}T\d{4}00Z\.csv$/);
  });

  it('--scheduled: a slot that finds a run of the export in flight (a manual run of another process) waits for it to end, then runs; a stop ends the wait', async () => {
    const owner = new pg.Client({ connectionString: hub.ownerUrl });
    await owner.connect();
    // A run of export `busy` as another process records one it runs (its heartbeat fresh).
    const inFlight = async () =>
      (
        await owner.query<{ id: string }>(
          `insert into exports.runs (tenant_id, export_id, export_name, entity, scope, destination, status, trigger, artifact_time)
           select 1, id, name, entity, scope, 's3', 'Running', 'manual', now() from exports.exports where name = 'busy' returning id`,
        )
      ).rows[0]!.id;
    const end = (id: string) => owner.query("update exports.runs set status = 'Failed', ended_at = now(), failure_code = 'interrupted', failure_reason = 'test' where id = $1", [id]);
    try {
      let manual = await inFlight();
      const lines: string[] = [];
      const done = runCommand(hub.config, ['export', 'busy', '--tenant', 'default', '--scheduled'], (line) => lines.push(line));
      await until('the slot waits', () => lines.length > 0);
      expect(lines[0]).toMatch(/^slot \S+ waits: a run is in flight; it runs once that run has ended$/);
      await end(manual);
      expect(await done).toBe(0);
      expect(lines[1]).toMatch(/^export busy Completed run=\S+ attempt=1 rows=300 .*location=s3:\/\/drops\/busy-\d{8}T\d{4}00Z\.csv$/);
      const { rows } = await owner.query("select trigger, slot is not null as slotted, status from exports.runs where export_name = 'busy' and trigger = 'scheduled'");
      expect(rows).toEqual([{ trigger: 'scheduled', slotted: true, status: 'Completed' }]);

      // Waiting, the job's pod deleted (SIGTERM): no run, exit 1.
      manual = await inFlight();
      await owner.query("delete from exports.runs where export_name = 'busy' and trigger = 'scheduled'");
      const stop = new AbortController();
      const stopped: string[] = [];
      const waiting = runCommand(hub.config, ['export', 'busy', '--tenant', 'default', '--scheduled'], (line) => stopped.push(line), stop.signal);
      await until('the slot waits', () => stopped.length > 0);
      stop.abort();
      expect(await waiting).toBe(1);
      expect(stopped).toContainEqual(expect.stringMatching(/^stopped while slot \S+ waited for the run in flight: not run$/));
      await end(manual);
      expect((await owner.query("select 1 from exports.runs where export_name = 'busy' and trigger = 'scheduled'")).rows).toEqual([]);
    } finally {
      await owner.query("update exports.runs set status = 'Failed', ended_at = now(), failure_code = 'interrupted', failure_reason = 'test' where export_name = 'busy' and status = 'Running'");
      await owner.end();
    }
  });

  it('--scheduled: a slot that fell due more than a minute before the last apply is not due; one due in the minute before it runs', async () => {
    const { slot, lines } = await noBackFill('export');
    const stamp = slot.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
    expect(lines[0]).toMatch(new RegExp(`^export yearly Completed .*location=s3://drops/yearly-${stamp}\\.csv$`));
  });

  it('an export the tenant does not have: one line, exit 1, no error logged with a stack (docs/operations.md)', async () => {
    const logs = captureLogs('info');
    try {
      const { code, lines } = await cli(['export', 'nope', '--tenant', 'default']);
      expect(code).toBe(1);
      expect(lines).toEqual(['error: export nope not found']);
      expect(logs.lines().filter((l) => l.msg === 'svc-hub run failed' || l.err !== undefined)).toEqual([]);
    } finally {
      logs.restore();
    }
  });

  it('parses its arguments', () => {
    expect(parseRunArgs(['export', 'x', '--tenant', 'a', '--scheduled'])).toEqual({ kind: 'export', name: 'x', tenant: 'a', scheduled: true });
    expect(parseRunArgs(['export', 'x', '--tenant', 'a', '--endpoint', 'e'])).toBe("unexpected argument '--endpoint'");
    expect(parseRunArgs(['export'])).toBe('an export NAME is required');
  });
});

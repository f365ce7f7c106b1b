import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { startDemoSource } from '../src/demo-source/server.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { parseRunArgs, runCommand } from './run.js';

/** `svc-hub run connector …`: one run per endpoint in process, the scheduled slot claimed once. */

let hub: TestHub;
let demo: Awaited<ReturnType<typeof startDemoSource>>;

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 300, log: () => undefined });
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

  it('exits 1 when a run failed, with the error on the line', async () => {
    const { code, lines } = await cli(['connector', 'liar', '--tenant', 'default']);
    expect(code).toBe(1);
    expect(lines[0]).toContain('liar/liar Failed');
    expect(lines[0]).toContain('the source declared 300 rows but this run returned 200');
  });

  it('names what is missing', async () => {
    expect((await cli(['connector', 'nope', '--tenant', 'default'])).lines[0]).toBe('connector nope not found in tenant default');
    expect((await cli(['connector', 'liar', '--tenant', 'ghost'])).lines[0]).toBe('tenant ghost not found');
    expect(parseRunArgs(['connector', 'x'])).toBe('--tenant CODE is required');
    expect(parseRunArgs(['connector', 'x', '--tenant'])).toBe('--tenant needs a value');
    expect(parseRunArgs(['job', 'x'])).toBe("unknown run target 'job'");
    expect(parseRunArgs(['connector', 'x', '--tenant', 'a', '--fast'])).toBe("unexpected argument '--fast'");
  });
});

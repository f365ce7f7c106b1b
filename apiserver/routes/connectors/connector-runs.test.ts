import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { startDemoSource } from '../../../src/demo-source/server.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { runEnded } from '../../../test/harness/runs.js';
import { until } from '../../../test/harness/until.js';
import { ownerClient } from '../../../test/harness/api-client.js';

/**
 * Connector runs end to end: manifests applied over HTTP, runs against the real demo source through
 * the real engine, rows in ext.* tables, the run ledger, dead letters, row hashes and the events.
 */

let hub: TestHub;
let demo: Awaited<ReturnType<typeof startDemoSource>>;
let owner: pg.Client;

const H = { 'X-Tenant-ID': '1' };

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 2400, log: () => undefined });
  hub = await startTestHub({ 'svc.credentials.env-allow': 'DEMO_SVC_*', 'svc.connectors.retry.base-delay': '5ms', 'svc.connectors.retry.max-delay': '20ms' });
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'other', 'Other')`);
  process.env.DEMO_SVC_PASSWORD = 'demo-password';
  process.env.DEMO_SVC_TOKEN = 'demo-bearer-token';
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await demo?.close();
});

type Run = { id: string; status: string; recordsIn: number; recordsOut: number; recordsSkipped: number; deadLetterCount: number; errorMessage: string | null; chunkCount: number; endpoint: string };

function manifest(name: string, endpoints: unknown[], spec: Record<string, unknown> = {}) {
  return stringify({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    scopes: ['partners'],
    spec: { base_url: demo.url, auth: { kind: 'basic', username: 'demo', password_env: 'DEMO_SVC_PASSWORD' }, ...spec, endpoints },
  });
}

const offsetEndpoint = (id: string, path: string, table: string, extra: Record<string, unknown> = {}) => ({
  id,
  path,
  pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 200, response_path: '$.data', total_path: '$.total' },
  target: {
    kind: 'hybrid',
    table,
    unique_key: '$.id',
    promote: [
      { name: 'name', path: '$.name', type: 'text' },
      { name: 'credit_limit', path: '$.credit_limit', type: 'bigint' },
      { name: 'updated_at', path: '$.updated_at', type: 'timestamptz', transform: 'parse_iso8601' },
    ],
  },
  ...extra,
});

async function apply(yaml: string, tenant = '1') {
  const res = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': tenant, 'Content-Type': 'application/yaml' }, body: yaml });
  expect([200, 201]).toContain(res.status);
}

async function run(name: string, body?: unknown, tenant = '1'): Promise<Run[]> {
  const res = await fetch(`${hub.url}/api/connectors/${name}/runs`, {
    method: 'POST',
    headers: { 'X-Tenant-ID': tenant, 'Content-Type': 'application/json' },
    body: JSON.stringify(body ?? {}),
  });
  expect(res.status).toBe(202);
  const { runs } = (await res.json()) as { runs: Array<{ id: string }> };
  return Promise.all(runs.map((r) => finished(r.id, tenant)));
}

const finished = (id: string, tenant = '1'): Promise<Run> => runEnded<Run>(hub.url, id, { 'X-Tenant-ID': tenant });

describe('connector runs against the demo source', () => {
  it('reads every page into ext.<table>: 2400 rows, counters that balance, typed promoted columns', async () => {
    await apply(manifest('partners', [offsetEndpoint('offset', '/offset/partners', 'ext.partners')]));
    const [first] = await run('partners');
    expect(first).toMatchObject({ status: 'Completed', recordsIn: 2400, recordsOut: 2400, recordsSkipped: 0, deadLetterCount: 0, errorMessage: null, endpoint: 'offset' });
    expect(first!.chunkCount).toBeGreaterThanOrEqual(3);
    const { rows } = await owner.query('select count(*)::int as n, count(distinct external_id)::int as ids, min(credit_limit) > 0 as typed from ext_t1.partners where tenant_id = 1');
    expect(rows[0]).toEqual({ n: 2400, ids: 2400, typed: true });
    const sample = await owner.query(`select name, updated_at, data->>'name' as payload_name, row_hash from ext_t1.partners where external_id = '7'`);
    expect(sample.rows[0].name).toBe(sample.rows[0].payload_name);
    expect(sample.rows[0].updated_at).toBeInstanceOf(Date);

    // A re-run rewrites every row it reads and duplicates none.
    const [second] = await run('partners');
    expect(second).toMatchObject({ status: 'Completed', recordsIn: 2400, recordsOut: 2400 });
    const again = await owner.query('select count(*)::int as n from ext_t1.partners where tenant_id = 1');
    expect(again.rows[0].n).toBe(2400);

    // The row hash leads back to the source row, as strings, in the current tenant only.
    const row = await fetch(`${hub.url}/api/platform/data/row/${sample.rows[0].row_hash}`, { headers: H });
    expect(row.status).toBe(200);
    const flat = (await row.json()) as Record<string, string>;
    expect(flat.id).toBe('7');
    expect(Object.values(flat).every((v) => typeof v === 'string')).toBe(true);
    const other = await fetch(`${hub.url}/api/platform/data/row/${sample.rows[0].row_hash}`, { headers: { 'X-Tenant-ID': '2' } });
    expect(other.status).toBe(404);

    // The lifecycle events, in the outbox with their catalog payloads.
    const events = await owner.query(`select type, payload from events.outbox where payload->>'run_id' = $1 order by id`, [first!.id]);
    expect(events.rows.map((e) => e.type)).toEqual(['connector.run.started', 'connector.run.completed']);
    expect(events.rows[1].payload).toMatchObject({ records_in: 2400, records_out: 2400, tables: { 'ext.partners': 2400 } });
  });

  it('a disabled endpoint named is a 400 naming it, an unknown one a 404; nothing runs', async () => {
    await apply(manifest('switched', [offsetEndpoint('live', '/offset/partners', 'ext.switched'), { ...offsetEndpoint('paused', '/offset/partners', 'ext.switched'), enabled: false }]));
    const post = (endpoint: string) =>
      fetch(`${hub.url}/api/connectors/switched/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: JSON.stringify({ endpoint }) });
    const disabled = await post('paused');
    expect(disabled.status).toBe(400);
    expect(await disabled.json()).toEqual({ error: 'endpoint paused is disabled', field: 'endpoint' });
    const unknown = await post('nope');
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ error: 'connector switched has no endpoint nope' });
    const runs = await owner.query("select count(*)::int as n from connectors.runs where connector_name = 'switched'");
    expect(runs.rows[0].n).toBe(0);
  });

  it('a connector whose endpoints are all disabled is a 409 saying so, not a 202 with no run; nothing runs', async () => {
    await apply(manifest('dormant', [{ ...offsetEndpoint('a', '/offset/partners', 'ext.dormant'), enabled: false }, { ...offsetEndpoint('b', '/offset/partners', 'ext.dormant'), enabled: false }]));
    const res = await fetch(`${hub.url}/api/connectors/dormant/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });
    expect({ status: res.status, body: await res.json() }).toEqual({
      status: 409,
      body: {
        error: 'connector dormant has no enabled endpoint: every endpoint of it is disabled (enabled: false in its manifest); no run was started',
        hint: 'enable an endpoint (enabled: true) and apply the manifest again',
      },
    });
    const runs = await owner.query("select count(*)::int as n from connectors.runs where connector_name = 'dormant'");
    expect(runs.rows[0].n).toBe(0);
  });

  it('an endpoint or connector name longer than the manifest allows (63) is a 400 naming it, never quoted back; nothing runs', async () => {
    await apply(manifest('bounded', [offsetEndpoint('live', '/offset/partners', 'ext.bounded')]));
    const long = 'e'.repeat(100_000);
    const named = await fetch(`${hub.url}/api/connectors/bounded/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: JSON.stringify({ endpoint: long }) });
    expect(named.status).toBe(400);
    const namedText = await named.text();
    expect(JSON.parse(namedText)).toMatchObject({ error: 'endpoint must be at most 63 characters', field: 'endpoint' });
    expect(namedText.length).toBeLessThan(1000);
    const atBound = await fetch(`${hub.url}/api/connectors/bounded/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: JSON.stringify({ endpoint: 'e'.repeat(63) }) });
    expect(atBound.status).toBe(404);
    const longName = 'c'.repeat(4000);
    const paths: [string, string][] = [['POST', `${longName}/runs`], ['GET', longName], ['DELETE', longName], ['POST', `${longName}/preflight`], ['POST', `bounded/endpoints/${longName}/reset-cursor`]];
    for (const [method, path] of paths) {
      const res = await fetch(`${hub.url}/api/connectors/${path}`, { method, headers: { ...H, 'Content-Type': 'application/json' }, body: method === 'POST' ? '{}' : undefined });
      const text = await res.text();
      expect({ path: path.slice(-20), status: res.status, quoted: text.includes(longName) }).toEqual({ path: path.slice(-20), status: 400, quoted: false });
    }
    const runs = await owner.query("select count(*)::int as n from connectors.runs where connector_name = 'bounded'");
    expect(runs.rows[0].n).toBe(0);
  });

  it('never reports a short extract as complete: the liar fails naming both figures, rows stay', async () => {
    await apply(manifest('liar', [offsetEndpoint('liar', '/liar/partners', 'ext.liar_partners')]));
    const [result] = await run('liar');
    expect(result!.status).toBe('Failed');
    expect(result!.errorMessage).toBe('the source declared 2400 rows but this run returned 2300 — refusing to report a partial extract as a complete one');
    const { rows } = await owner.query('select count(*)::int as n from ext_t1.liar_partners');
    expect(rows[0].n).toBe(2300);
    const failed = await owner.query(`select payload from events.outbox where type = 'connector.run.failed' and payload->>'run_id' = $1`, [result!.id]);
    expect(failed.rows[0].payload.error_message).toBe(result!.errorMessage);
  });

  it('an outage fails the run with the upstream status and body; flaky sources are retried to completion', async () => {
    await apply(
      manifest('faults', [
        offsetEndpoint('down', '/down/partners', 'ext.down_partners'),
        offsetEndpoint('flaky', '/flaky/partners', 'ext.flaky_partners'),
      ]),
    );
    const [down, flaky] = await run('faults');
    expect(down!.status).toBe('Failed');
    expect(down!.errorMessage).toMatch(/^upstream returned HTTP 500 \(transient\) — refusing to ingest its body as data: /);
    expect(down!.recordsIn).toBe(0);
    expect(flaky).toMatchObject({ status: 'Completed', recordsIn: 2400, recordsOut: 2400 });
  });

  it('watermark: the first run reads everything, the next sends the stored mark and reads only what changed since', async () => {
    await apply(
      manifest('incremental', [
        offsetEndpoint('changes', '/offset/partners', 'ext.partner_changes', { incremental: { mode: 'watermark', param: 'updated_since', watermark_path: '$.updated_at' } }),
      ]),
    );
    const [first] = await run('incremental');
    expect(first).toMatchObject({ status: 'Completed', recordsIn: 2400 });
    const mark = await owner.query(`select watermark from connectors.endpoints where endpoint_id = 'changes'`);
    const max = await owner.query(`select max(data->>'updated_at') as m from ext_t1.partner_changes`);
    expect(mark.rows[0].watermark).toBe(max.rows[0].m);
    const [second] = await run('incremental');
    // updated_since is inclusive: the newest row comes back, nothing else.
    expect(second).toMatchObject({ status: 'Completed', recordsIn: 1, recordsOut: 1 });
    const reset = await fetch(`${hub.url}/api/connectors/incremental/endpoints/changes/reset-cursor`, { method: 'POST', headers: H });
    expect(reset.status).toBe(204);
    const [third] = await run('incremental');
    expect(third).toMatchObject({ recordsIn: 2400 });
  });

  it('reaching the page budget ends the run Partial with everything it read written', async () => {
    const small = await startTestHub({ 'svc.credentials.env-allow': 'DEMO_SVC_*', 'svc.datasource.url': hub.ownerUrl, 'svc.connectors.max-pages': 3, 'svc.migrate.on-start': false });
    try {
      await apply(manifest('budget', [offsetEndpoint('offset', '/offset/partners', 'ext.budget_partners')]));
      const res = await fetch(`${small.url}/api/connectors/budget/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });
      const { runs } = (await res.json()) as { runs: Array<{ id: string }> };
      const result = await finished(runs[0]!.id);
      expect(result.status).toBe('Partial');
      expect(result.recordsIn).toBe(600);
      expect(result.recordsOut).toBe(600);
      expect(result.errorMessage).toMatch(/budget|page/i);
    } finally {
      await small.stop();
    }
  });

  it('cancel: 202 while running, the run ends Cancelled; 409 once terminal; 404 unknown', async () => {
    await apply(manifest('slow', [offsetEndpoint('offset', '/offset/partners?limit=10', 'ext.slow_partners', { pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 5, response_path: '$.data', total_path: '$.total' } })], { default_rate_limit: '20/s' }));
    const res = await fetch(`${hub.url}/api/connectors/slow/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });
    const { runs } = (await res.json()) as { runs: Array<{ id: string }> };
    // Marker: the run has stored its first page (it is running, not merely queued).
    await until('the slow run to store a page', async () => {
      const record = (await (await fetch(`${hub.url}/api/platform/runs/${runs[0]!.id}`, { headers: H })).json()) as Run;
      return record.recordsIn > 0;
    });
    const cancel = await fetch(`${hub.url}/api/platform/runs/${runs[0]!.id}/cancel`, { method: 'POST', headers: H });
    expect(cancel.status).toBe(202);
    const result = await finished(runs[0]!.id);
    expect(result.status).toBe('Cancelled');
    expect(result.recordsIn).toBeLessThan(2400);
    const again = await fetch(`${hub.url}/api/platform/runs/${runs[0]!.id}/cancel`, { method: 'POST', headers: H });
    expect(again.status).toBe(409);
    const unknown = await fetch(`${hub.url}/api/platform/runs/00000000-0000-0000-0000-000000000000/cancel`, { method: 'POST', headers: H });
    expect(unknown.status).toBe(404);
  });

  it('lists runs newest first with the limit capped at 200, and 404 for an unknown run', async () => {
    const list = (await (await fetch(`${hub.url}/api/platform/runs?limit=2`, { headers: H })).json()) as Run[];
    expect(list).toHaveLength(2);
    const capped = (await (await fetch(`${hub.url}/api/platform/runs?limit=500`, { headers: H })).json()) as Run[];
    expect(capped.length).toBeLessThanOrEqual(200);
    expect((await fetch(`${hub.url}/api/platform/runs/nope`, { headers: H })).status).toBe(404);
    const otherTenant = (await (await fetch(`${hub.url}/api/platform/runs`, { headers: { 'X-Tenant-ID': '2' } })).json()) as Run[];
    expect(otherTenant).toEqual([]);
  });
});

describe('CSV ingest and dead letters', () => {
  const csv = (rows: string[]) => ['id,name,city', ...rows].join('\r\n');
  const ingest = (body: string, query = 'connector=crm-import&table=contacts&key=id') =>
    fetch(`${hub.url}/api/platform/sources/csv/ingest?${query}`, { method: 'POST', headers: { ...H, 'Content-Type': 'text/csv' }, body });

  it('counts the file opened and its bytes in the csv_filesource metrics (transport upload), a refused one as an error', async () => {
    const body = csv(['1,Åsa,Lund']);
    expect((await ingest(body, 'connector=metrics-csv&table=metrics_contacts&key=id')).status).toBe(200);
    expect((await ingest('id,name\n"unclosed', 'connector=metrics-csv&table=metrics_contacts&key=id')).status).toBe(400);
    const metrics = await (await fetch(`${hub.url}/q/metrics`)).text();
    expect(metrics).toContain(`csv_filesource_bytes_read_total{transport="upload",connector="metrics-csv",tenant="1"} ${Buffer.byteLength(body) + Buffer.byteLength('id,name\n"unclosed')}`);
    expect(metrics).toContain('csv_filesource_open_total{transport="upload",connector="metrics-csv",tenant="1",result="ok"} 1');
    expect(metrics).toContain('csv_filesource_open_total{transport="upload",connector="metrics-csv",tenant="1",result="error"} 1');
  });

  it('labels the csv_filesource series with at most 100 connector names of a tenant; its further names count as _other', async () => {
    // Tenant 2 makes up names, each in a request refused as not CSV (nothing is written).
    const bad = 'a,a\n1,2\n';
    for (let i = 0; i < 130; i++) {
      const res = await fetch(`${hub.url}/api/platform/sources/csv/ingest?connector=made-up-${i}&table=t&key=a`, {
        method: 'POST',
        headers: { 'X-Tenant-ID': '2', 'Content-Type': 'text/csv' },
        body: bad,
      });
      expect(res.status).toBe(400);
    }
    const metrics = await (await fetch(`${hub.url}/q/metrics`)).text();
    const named = metrics.split('\n').filter((l) => l.startsWith('csv_filesource_open_total{') && l.includes('connector="made-up-'));
    expect(named).toHaveLength(100);
    expect(metrics).toContain('csv_filesource_open_total{transport="upload",connector="made-up-99",tenant="2",result="error"} 1');
    expect(metrics).not.toContain('connector="made-up-100"');
    expect(metrics).toContain('csv_filesource_open_total{transport="upload",connector="_other",tenant="2",result="error"} 30');
    expect(metrics).toContain(`csv_filesource_bytes_read_total{transport="upload",connector="_other",tenant="2"} ${30 * Buffer.byteLength(bad)}`);
    // A name already labelled keeps its series; another tenant's names are not held back.
    await fetch(`${hub.url}/api/platform/sources/csv/ingest?connector=made-up-0&table=t&key=a`, { method: 'POST', headers: { 'X-Tenant-ID': '2', 'Content-Type': 'text/csv' }, body: bad });
    expect((await ingest(bad, 'connector=tenant-one-source&table=t&key=a')).status).toBe(400);
    const after = await (await fetch(`${hub.url}/q/metrics`)).text();
    expect(after).toContain('csv_filesource_open_total{transport="upload",connector="made-up-0",tenant="2",result="error"} 2');
    expect(after).toContain('csv_filesource_open_total{transport="upload",connector="tenant-one-source",tenant="1",result="error"} 1');
  });

  it('keeps each tenant\'s csv_filesource series apart: another tenant ingesting under the same connector name counts in its own', async () => {
    // /q/metrics is unauthenticated: a tenant choosing another's connector name must not add to that tenant's series.
    await owner.query(`insert into core.tenants (id, code, name) values (3, 'third', 'Third') on conflict do nothing`);
    const body = csv(['1,Ann,Lyon']);
    expect((await ingest(body, 'connector=shared-name&table=shared_name_rows&key=id')).status).toBe(200);
    const theirs = await fetch(`${hub.url}/api/platform/sources/csv/ingest?connector=shared-name&table=shared_name_rows&key=id`, { method: 'POST', headers: { 'X-Tenant-ID': '3', 'Content-Type': 'text/csv' }, body });
    expect(theirs.status).toBe(200);
    const lines = (await (await fetch(`${hub.url}/q/metrics`)).text()).split('\n').filter((l) => l.startsWith('csv_filesource_open_total{') && l.includes('connector="shared-name"'));
    expect(lines.sort()).toEqual([
      'csv_filesource_open_total{transport="upload",connector="shared-name",tenant="1",result="ok"} 1',
      'csv_filesource_open_total{transport="upload",connector="shared-name",tenant="3",result="ok"} 1',
    ]);
  });

  it('upserts rows, dead-letters a row without a key, and counts in = out + skipped', async () => {
    const res = await ingest(csv(['1,Ann,Lyon', '2,Bob,Paris', ',Nobody,Nowhere', '3,"Carl, Jr.",Nice']));
    expect(res.status).toBe(200);
    const result = (await res.json()) as Run;
    expect(result).toMatchObject({ status: 'Completed', recordsIn: 4, recordsOut: 3, recordsSkipped: 1, deadLetterCount: 1 });
    const { rows } = await owner.query(`select external_id, name, city from ext_t1.contacts order by external_id`);
    expect(rows).toEqual([
      { external_id: '1', name: 'Ann', city: 'Lyon' },
      { external_id: '2', name: 'Bob', city: 'Paris' },
      { external_id: '3', name: 'Carl, Jr.', city: 'Nice' },
    ]);

    // The dead letter: listed by run (history) and by connector (unresolved), replayed, discarded, erased.
    const byRun = (await (await fetch(`${hub.url}/api/platform/dlq?run=${result.id}`, { headers: H })).json()) as Array<{ id: number; skipReason: string }>;
    expect(byRun).toHaveLength(1);
    expect(byRun[0]!.skipReason).toBe('missing_key');
    const entry = (await (await fetch(`${hub.url}/api/platform/dlq/${byRun[0]!.id}`, { headers: H })).json()) as { payload: Record<string, string> };
    expect(entry.payload).toEqual({ id: '', name: 'Nobody', city: 'Nowhere' });
    const byConnector = (await (await fetch(`${hub.url}/api/platform/dlq?connector=crm-import`, { headers: H })).json()) as unknown[];
    expect(byConnector).toHaveLength(1);
    // Marked replayed by a run the tenant does not have: refused, the entry stays unresolved.
    const unknownRun = '00000000-0000-4000-8000-000000000000';
    const replayed = await fetch(`${hub.url}/api/platform/dlq/${byRun[0]!.id}/replayed?newRunId=${unknownRun}`, { method: 'POST', headers: H });
    expect(replayed.status).toBe(400);
    expect(await replayed.json()).toEqual({ error: `newRunId ${unknownRun} names no run of the tenant`, field: 'newRunId' });
    expect((await (await fetch(`${hub.url}/api/platform/dlq?connector=crm-import`, { headers: H })).json()) as unknown[]).toHaveLength(1);
    expect((await fetch(`${hub.url}/api/platform/dlq/${byRun[0]!.id}/discard`, { method: 'POST', headers: H })).status).toBe(204);
    expect((await (await fetch(`${hub.url}/api/platform/dlq?connector=crm-import`, { headers: H })).json()) as unknown[]).toHaveLength(0);
    const history = (await (await fetch(`${hub.url}/api/platform/dlq?run=${result.id}&connector=other`, { headers: H })).json()) as Array<{ resolution: string }>;
    expect(history.map((h) => h.resolution)).toEqual(['discarded']);
    expect((await fetch(`${hub.url}/api/platform/dlq/${byRun[0]!.id}`, { method: 'DELETE', headers: H })).status).toBe(204);
    expect((await fetch(`${hub.url}/api/platform/dlq/${byRun[0]!.id}`, { headers: H })).status).toBe(404);
    expect((await (await fetch(`${hub.url}/api/platform/dlq?run=${result.id}`, { headers: H })).json()) as unknown[]).toHaveLength(0);
    const scrubbed = await owner.query('select payload from connectors.dead_letters where id = $1', [byRun[0]!.id]);
    expect(scrubbed.rows[0].payload).toBeNull();
    const metrics = await (await fetch(`${hub.url}/q/metrics`)).text();
    expect(metrics).toMatch(/svc_dead_letters_total\{reason="missing_key"\} [1-9]/);
    expect(metrics).toMatch(/svc_runs_total\{status="Completed"\} [1-9]/);
    expect(metrics).toMatch(/svc_runs_total\{status="Failed"\} [1-9]/);
  });

  it('a dead letter moves out of pending only: the same resolution again is a 204 that keeps the first record, another is a 409', async () => {
    const first = (await (await ingest(csv([',One,Lyon']), 'connector=dlq-once&table=dlq_once&key=id')).json()) as Run;
    const second = (await (await ingest(csv([',Two,Nice']), 'connector=dlq-once&table=dlq_once&key=id')).json()) as Run;
    const entryOf = async (runId: string) => ((await (await fetch(`${hub.url}/api/platform/dlq?run=${runId}`, { headers: H })).json()) as Array<{ id: number }>)[0]!.id;
    const [replayedId, discardedId] = [await entryOf(first.id), await entryOf(second.id)];
    const post = (id: number, action: string) => fetch(`${hub.url}/api/platform/dlq/${id}/${action}`, { method: 'POST', headers: H });
    const stored = async (id: number) =>
      (await owner.query(`select resolution, resolved_run_id as "runId", resolved_at as "at" from connectors.dead_letters where id = $1`, [id])).rows[0] as { resolution: string; runId: string | null; at: Date };

    // Replayed by the second run, then again by the same run or without one: 204, the record unchanged.
    expect((await post(replayedId, `replayed?newRunId=${second.id}`)).status).toBe(204);
    const record = await stored(replayedId);
    expect(record).toMatchObject({ resolution: 'replayed', runId: second.id });
    expect((await post(replayedId, `replayed?newRunId=${second.id}`)).status).toBe(204);
    expect((await post(replayedId, 'replayed')).status).toBe(204);
    // Another run, or a discard: 409, and the replay record is kept.
    const otherRun = await post(replayedId, `replayed?newRunId=${first.id}`);
    expect(otherRun.status).toBe(409);
    expect(await otherRun.json()).toEqual({ error: `dead-letter entry ${replayedId} is already replayed by run ${second.id}`, field: 'newRunId' });
    const discardAfter = await post(replayedId, 'discard');
    expect(discardAfter.status).toBe(409);
    expect(await discardAfter.json()).toEqual({ error: `dead-letter entry ${replayedId} is already replayed` });
    expect(await stored(replayedId)).toEqual(record);

    // Discarded, discarded again (204, first time kept), then replayed: 409.
    expect((await post(discardedId, 'discard')).status).toBe(204);
    const discarded = await stored(discardedId);
    expect((await post(discardedId, 'discard')).status).toBe(204);
    const replayAfter = await post(discardedId, `replayed?newRunId=${second.id}`);
    expect(replayAfter.status).toBe(409);
    expect(await replayAfter.json()).toEqual({ error: `dead-letter entry ${discardedId} is already discarded` });
    expect(await stored(discardedId)).toEqual(discarded);
    expect(discarded).toMatchObject({ resolution: 'discarded', runId: null });
    // An erased entry stays a 404 for both.
    expect((await fetch(`${hub.url}/api/platform/dlq/${discardedId}`, { method: 'DELETE', headers: H })).status).toBe(204);
    expect((await post(discardedId, 'discard')).status).toBe(404);
    expect((await post(discardedId, 'replayed')).status).toBe(404);
  });

  it('two erases of one dead letter at once: one erases (204), the other finds no entry (404), as an erase after an erase', async () => {
    const run = (await (await ingest(csv([',Gone,Lyon']), 'connector=dlq-erase&table=dlq_erase&key=id')).json()) as Run;
    const id = ((await (await fetch(`${hub.url}/api/platform/dlq?run=${run.id}`, { headers: H })).json()) as Array<{ id: number }>)[0]!.id;
    const blocker = await ownerClient(hub.ownerUrl);
    try {
      // The row held, so that both erases are under way before either can erase.
      await blocker.query('begin');
      await blocker.query('select 1 from connectors.dead_letters where id = $1 for update', [id]);
      const both = [1, 2].map(() => fetch(`${hub.url}/api/platform/dlq/${id}`, { method: 'DELETE', headers: H }).then((r) => r.status));
      await until('both erases waiting on the row', async () => (await owner.query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`)).rows[0]!.n >= 2);
      await blocker.query('rollback');
      expect((await Promise.all(both)).sort()).toEqual([204, 404]);
    } finally {
      await blocker.end();
    }
  });

  it('a header named like a PostgreSQL system column (xmin, ctid …) is kept in data only, as a name of every ext table is', async () => {
    const res = await ingest('id,xmin,ctid,tableoid,note\r\n1,2,3,4,kept', 'connector=crm-import&table=system_names&key=id');
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'Completed', recordsOut: 1 });
    const { rows } = await owner.query(`select external_id, note, data from ext_t1.system_names`);
    expect(rows).toEqual([{ external_id: '1', note: 'kept', data: { id: '1', xmin: '2', ctid: '3', tableoid: '4', note: 'kept' } }]);
  });

  it('refuses a key that is not a column and a table name that is not an identifier', async () => {
    const noKey = await ingest(csv(['1,Ann,Lyon']), 'connector=crm-import&table=contacts&key=email');
    expect(noKey.status).toBe(400);
    expect(await noKey.json()).toEqual({ error: 'key column email is not in the CSV header', field: 'key' });
    const badTable = await ingest(csv(['1,Ann,Lyon']), 'connector=crm-import&table=Contacts%3Bdrop&key=id');
    expect(badTable.status).toBe(400);
  });

  it('a CSV of more than 1,600 columns, or of more new columns than the table has room for (its own, its promoted and its dropped columns count), is a 400 that stores nothing', async () => {
    const body = (names: string[]) => `${names.join(',')}\r\n${names.map((_, i) => String(i)).join(',')}\r\n`;
    const c = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `c${from + i}`);
    const runsOf = async () => (await owner.query<{ n: number }>(`select count(*)::int as n from connectors.runs where connector_name = 'wide-import'`)).rows[0]!.n;
    const stored = async (name: string) =>
      (
        await owner.query(
          `select to_regclass('ext_t1.' || $1::text) is not null as made, (select count(*)::int from connectors.ext_tables where table_name = 'ext.' || $1::text) as registered,
                  (select relnatts::int from pg_class where oid = to_regclass('ext_t1.' || $1::text)) as numbered`,
          [name],
        )
      ).rows[0];
    const refused = await ingest(body(['id', ...c(1_600)]), 'connector=wide-import&table=too_wide&key=id');
    expect({ status: refused.status, body: await refused.json() }).toEqual({ status: 400, body: { error: 'the CSV header names 1,601 columns: at most 1,600', field: 'body' } });
    // 1,600 names, 1,599 of them new columns beside the 8 every ext table has (id is one of those: data only). PostgreSQL
    // refused the table once the run was recorded (a Failed run, `tables can have at most 1600 columns`).
    const wide = await ingest(body(['id', ...c(1_599)]), 'connector=wide-import&table=too_wide&key=id');
    expect({ status: wide.status, body: await wide.json() }).toEqual({
      status: 400,
      body: {
        error:
          "the CSV header names 1,599 columns ext.too_wide does not have: at most 1,592 more fit (a table holds at most 1,600 columns, PostgreSQL's limit, and ext.too_wide takes 8: the 8 every ext table has)",
        field: 'body',
      },
    });
    expect(await runsOf()).toBe(0);
    expect(await stored('too_wide')).toEqual({ made: false, registered: 0, numbered: null });

    // A table that has grown: two promoted columns, one of them dropped since (its number still taken).
    expect(await ((await ingest(body(['id', 'a', 'b']), 'connector=wide-import&table=grown&key=id')).json())).toMatchObject({ status: 'Completed' });
    await owner.query('alter table ext_t1.grown drop column b');
    expect(await stored('grown')).toEqual({ made: true, registered: 1, numbered: 10 });
    const past = await ingest(body(['id', 'a', ...c(1_591)]), 'connector=wide-import&table=grown&key=id');
    expect({ status: past.status, body: await past.json() }).toEqual({
      status: 400,
      body: {
        error:
          "the CSV header names 1,591 columns ext.grown does not have: at most 1,590 more fit (a table holds at most 1,600 columns, PostgreSQL's limit, and ext.grown takes 10: " +
          'the 8 every ext table has, its promoted columns and any dropped since, which still count)',
        field: 'body',
      },
    });
    expect(await runsOf()).toBe(1);
    // As many as fit: the run completes, the table full.
    const fits = await ingest(body(['id', 'a', ...c(1_590)]), 'connector=wide-import&table=grown&key=id');
    expect(await fits.json()).toMatchObject({ status: 'Completed', recordsOut: 1 });
    expect(await stored('grown')).toEqual({ made: true, registered: 1, numbered: 1_600 });
    // Full: a header of columns it has is still ingested, one new column is refused.
    expect(await ((await ingest(body(['id', 'a', 'c7']), 'connector=wide-import&table=grown&key=id')).json())).toMatchObject({ status: 'Completed' });
    const one = await ingest(body(['id', 'b']), 'connector=wide-import&table=grown&key=id');
    expect({ status: one.status, body: await one.json() }).toMatchObject({ status: 400, body: { error: expect.stringMatching(/^the CSV header names 1 column ext\.grown does not have: at most 0 more fit /), field: 'body' } });
    expect(await runsOf()).toBe(3);
  });

  it('refuses a header naming a column twice or not at all, a charset other than UTF-8; reads a quoted line break in a header-only body', async () => {
    const twice = await ingest('id,name,name\r\n1,Ann,Annie\r\n');
    expect({ status: twice.status, body: await twice.json() }).toEqual({ status: 400, body: { error: 'the CSV header names column "name" twice: each column once', field: 'body' } });
    const empty = await ingest('id,,city\r\n1,x,Lyon\r\n');
    expect({ status: empty.status, body: await empty.json() }).toEqual({ status: 400, body: { error: 'the CSV header has an empty column name', field: 'body' } });
    const latin1 = await fetch(`${hub.url}/api/platform/sources/csv/ingest?connector=crm-import&table=contacts&key=id`, {
      method: 'POST',
      headers: { ...H, 'Content-Type': 'text/csv; charset=iso-8859-1' },
      body: Buffer.from('id,name\r\n1,caf\xe9\r\n', 'latin1'),
    });
    expect({ status: latin1.status, body: await latin1.json() }).toEqual({
      status: 400,
      body: { error: 'the CSV body must be UTF-8; it was declared iso-8859-1 (convert it, or send Content-Type: text/csv; charset=utf-8)', field: 'body' },
    });
    // Bytes that are not UTF-8 in an undeclared body are refused too, never stored as U+FFFD (probe 31 M4).
    const undeclared = await fetch(`${hub.url}/api/platform/sources/csv/ingest?connector=crm-import&table=contacts&key=id`, {
      method: 'POST',
      headers: { ...H, 'Content-Type': 'text/csv' },
      body: Buffer.from('id,name\r\n1,caf\xe9\r\n', 'latin1'),
    });
    expect({ status: undeclared.status, body: await undeclared.json() }).toEqual({
      status: 400,
      body: { error: 'body is not valid UTF-8: an invalid byte sequence at byte offset 15', field: 'body', hint: 'send the body encoded as UTF-8' },
    });
    // Valid UTF-8 (a BOM, a real U+FFFD, an emoji) is read as sent.
    const good = await ingest('\ufeffid,name\r\n1,caf\u00e9 \ufffd \u{1F98A}\r\n', 'connector=crm-import&table=utf8_kept&key=id');
    expect(((await good.json()) as Run).status).toBe('Completed');
    expect((await owner.query(`select name from ext_t1.utf8_kept`)).rows).toEqual([{ name: 'caf\u00e9 \ufffd \u{1F98A}' }]);
    // Line endings mixed in one body (LF, then CRLF, then CR): every record read alike, no stray CR.
    const mixed = await ingest('id,name\n1,Ann\r\n2,Bob\n3,"Carl\r\nJr."\r4,Dee\r\n', 'connector=crm-import&table=mixed_ends&key=id');
    expect(((await mixed.json()) as Run).status).toBe('Completed');
    const { rows: stored } = await owner.query(`select external_id, name from ext_t1.mixed_ends order by external_id`);
    expect(stored).toEqual([
      { external_id: '1', name: 'Ann' },
      { external_id: '2', name: 'Bob' },
      { external_id: '3', name: 'Carl\r\nJr.' },
      { external_id: '4', name: 'Dee' },
    ]);
    // A header only, one of its names holding a quoted line break: a run of no rows, not a 500.
    const headerOnly = await ingest('"i\nd",id\n', 'connector=crm-import&table=header_only&key=id');
    expect(headerOnly.status).toBe(200);
    expect(((await headerOnly.json()) as Run).recordsIn).toBe(0);
  });

  it('refuses a body whose last line does not parse (an unclosed quote, a field short) before writing any row: no run, no table', async () => {
    // 5,000 rows before it: five chunks of the run and several slices of the parser (16 KiB each).
    const rows = Array.from({ length: 5_000 }, (_, i) => `${i},Name ${i},City ${i}`);
    const query = 'connector=late-errors&table=late_errors&key=id';
    for (const [last, error] of [
      ['5000,"Unclosed,Paris', 'body is not valid CSV: Quote Not Closed: the parsing is finished with an opening quote at line 5002'],
      ['5000,Short', 'body is not valid CSV: Invalid Record Length: columns length is 3, got 2 on line 5002'],
    ]) {
      const refused = await ingest(csv([...rows, last!]), query);
      expect({ status: refused.status, body: await refused.json() }).toEqual({ status: 400, body: { error, field: 'body' } });
    }
    const runs = await (await fetch(`${hub.url}/api/platform/runs?connector=late-errors`, { headers: H })).json();
    expect(runs).toEqual([]);
    expect((await owner.query(`select to_regclass('ext_t1.late_errors') as t`)).rows[0].t).toBeNull();
    // The same rows with a last line that parses: every one stored.
    const res = await ingest(csv([...rows, '5000,Last,Paris']), query);
    expect(await res.json()).toMatchObject({ status: 'Completed', recordsIn: 5_001, recordsOut: 5_001, chunkCount: 6 });
    expect((await owner.query('select count(distinct external_id)::int as n from ext_t1.late_errors')).rows[0].n).toBe(5_001);
  });

  it('REST runs never emit data.row.changed; CSV ingest does for new or changed rows only when something subscribes', async () => {
    const before = await owner.query(`select count(*)::int as n from events.outbox where type = 'data.row.changed'`);
    await ingest(csv(['1,Ann,Lyon']));
    const none = await owner.query(`select count(*)::int as n from events.outbox where type = 'data.row.changed'`);
    expect(none.rows[0].n).toBe(before.rows[0].n);
    hub.services.subscribers.register(async (_tx, type) => type === 'data.row.changed');
    const res = await ingest(csv(['1,Ann,Lyon', '2,Bob,Marseille', '9,Zoe,Brest']));
    const result = (await res.json()) as Run;
    const events = await owner.query(`select payload from events.outbox where type = 'data.row.changed' and payload->>'run_id' = $1 order by id`, [result.id]);
    expect(events.rows.map((e) => [e.payload.entity_key, e.payload.op])).toEqual([
      ['2', 'update'],
      ['9', 'insert'],
    ]);
    expect(events.rows[0].payload.entity).toBe('ext.contacts');
  });
});

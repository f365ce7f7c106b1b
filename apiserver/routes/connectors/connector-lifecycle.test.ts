import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import { stringify } from 'yaml';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { until } from '../../../test/harness/until.js';
import { ownerClient } from '../../../test/harness/api-client.js';
import { runnerOverHub } from '../../../test/harness/connector-runner.js';

/**
 * A connector's life (apply, run, delete, purge) over rows that are really stored, on a real hub
 * against a loopback source of this file (probe 31 H2, H3, M1, M2):
 * - `/wm` serves rows a, b, c with `v` 1..3 and honours `since` (only rows with a greater `v`);
 * - `/keys` serves six records with two candidate keys (`id` "r1"…, `n` 1…);
 * - `/gate/<name>` holds its answer until the test opens that gate, so that a run is provably in
 *   flight while the test acts (no fixed sleeps).
 */

let hub: TestHub;
let owner: pg.Client;
let source: http.Server;
let sourceUrl: string;

const gates = new Map<string, { open: () => void; opened: Promise<void>; asked: number }>();
function gate(name: string) {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  const g = { open, opened, asked: 0 };
  gates.set(name, g);
  return g;
}

const WM_ROWS = [
  { id: 'a', v: 1 },
  { id: 'b', v: 2 },
  { id: 'c', v: 3 },
];

beforeAll(async () => {
  source = http.createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    const answer = (body: unknown) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (url.pathname === '/wm') {
      const since = Number(url.searchParams.get('since') ?? '0');
      return answer(WM_ROWS.filter((r) => r.v > since));
    }
    if (url.pathname === '/keys') return answer(Array.from({ length: 6 }, (_v, i) => ({ id: `r${i + 1}`, n: i + 1 })));
    if (url.pathname.startsWith('/gate/')) {
      const g = gates.get(url.pathname.slice('/gate/'.length));
      if (!g) return answer([{ id: 'k', ver: 0 }]);
      g.asked++;
      void g.opened.then(() => answer([{ id: 'k', ver: g.asked }]));
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => source.listen(0, '127.0.0.1', resolve));
  sourceUrl = `http://127.0.0.1:${(source.address() as AddressInfo).port}`;
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
}, 60_000);

afterAll(async () => {
  for (const g of gates.values()) g.open();
  await owner?.end();
  await hub?.stop();
  await new Promise((resolve) => source?.close(resolve));
});

async function call(method: string, path: string, body?: string, type = 'application/json') {
  const headers: Record<string, string> = { 'X-Tenant-ID': '1' };
  if (body !== undefined) headers['Content-Type'] = type;
  const res = await fetch(`${hub.url}${path}`, { method, headers, body });
  const text = await res.text();
  // biome-ignore lint/suspicious/noExplicitAny: answers are read field by field
  return { status: res.status, body: (text && res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : text) as any };
}

type Run = { id: string; status: string; recordsIn: number; recordsOut: number; errorMessage: string | null };

interface EndpointOptions {
  id?: string;
  path: string;
  table: string;
  key?: string;
  watermark?: boolean;
  promote?: Array<{ name: string; path: string; type: string }>;
}

function manifest(name: string, endpoints: EndpointOptions[]) {
  return stringify({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name },
    connector_type: 'rest-generic',
    spec: {
      base_url: sourceUrl,
      auth: { kind: 'none' },
      endpoints: endpoints.map((e) => ({
        id: e.id ?? 'e',
        path: e.path,
        pagination: { kind: 'none' },
        ...(e.watermark ? { incremental: { mode: 'watermark', param: 'since', watermark_path: '$.v' } } : {}),
        target: { table: e.table, unique_key: e.key ?? '$.id', ...(e.promote ? { promote: e.promote } : {}) },
      })),
    },
  });
}

async function apply(name: string, endpoints: EndpointOptions[]) {
  const applied = await call('POST', '/api/connectors/apply', manifest(name, endpoints), 'application/yaml');
  expect([200, 201]).toContain(applied.status);
  return applied.body as { warnings: Array<{ field: string; message: string }> };
}

async function start(name: string, endpoint?: string) {
  return call('POST', `/api/connectors/${name}/runs`, JSON.stringify(endpoint ? { endpoint } : {}));
}

async function ended(id: string): Promise<Run> {
  return until(`run ${id} to end`, async () => {
    const r = (await call('GET', `/api/platform/runs/${id}`)).body as Run;
    return r.status !== 'Running' && r;
  }, 30_000);
}

async function run(name: string): Promise<Run> {
  const started = await start(name);
  expect(started.status).toBe(202);
  return ended(started.body.runs[0].id);
}

const ids = async (table: string) => (await owner.query<{ external_id: string }>(`select external_id from ${table} order by external_id`)).rows.map((r) => r.external_id);
const watermarkOf = async (connector: string) =>
  (await owner.query<{ watermark: string | null }>('select e.watermark from connectors.endpoints e join connectors.connectors c on c.id = e.connector_id where c.name = $1', [connector])).rows[0]
    ?.watermark;

describe('rows of a table several endpoints share (probe 31 H2)', () => {
  it('deleting B, which wrote last over rows A ingested, clears A\'s watermark, so A\'s next run restores them', async () => {
    await apply('share-a', [{ path: '/wm', table: 'ext.shared', watermark: true }]);
    await apply('share-b', [{ path: '/wm', table: 'ext.shared' }]);
    expect(await run('share-a')).toMatchObject({ status: 'Completed', recordsOut: 3 });
    expect(await watermarkOf('share-a')).toBe('3');
    expect(await run('share-b')).toMatchObject({ status: 'Completed', recordsOut: 3 });

    expect((await call('DELETE', '/api/connectors/share-b')).status).toBe(204);
    // B's delete took the rows B wrote last, A's among them: A's watermark went with them.
    expect(await ids('ext_t1.shared')).toEqual([]);
    expect(await watermarkOf('share-a')).toBeNull();

    expect(await run('share-a')).toMatchObject({ status: 'Completed', recordsIn: 3, recordsOut: 3 });
    expect(await ids('ext_t1.shared')).toEqual(['a', 'b', 'c']);
  });

  it('a run in flight when the watermark is cleared does not put it back at its end', async () => {
    await call('POST', '/api/connectors/apply', stringify({
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'race-a' },
      connector_type: 'rest-generic',
      spec: { base_url: sourceUrl, endpoints: [{ id: 'items', path: '/gate/race', incremental: { mode: 'watermark', param: 'since', watermark_path: '$.ver' }, target: { table: 'ext.race', unique_key: '$.id' } }] },
    }), 'application/yaml');
    await apply('race-b', [{ path: '/wm', table: 'ext.race' }]);
    expect(await run('race-a')).toMatchObject({ status: 'Completed', recordsOut: 1 });
    expect(await watermarkOf('race-a')).toBe('0');
    expect(await run('race-b')).toMatchObject({ status: 'Completed', recordsOut: 3 });
    // A's run held at its source; meanwhile B's delete removes rows of the table and clears A's watermark.
    const g = gate('race');
    const started = await start('race-a');
    expect(started.status).toBe(202);
    await until('the held request', () => g.asked === 1);
    expect((await call('DELETE', '/api/connectors/race-b')).status).toBe(204);
    expect(await watermarkOf('race-a')).toBeNull();
    g.open();
    expect(await ended(started.body.runs[0].id)).toMatchObject({ status: 'Completed', recordsOut: 1 });
    // Not advanced to what the run read (1): the next run reads everything again.
    expect(await watermarkOf('race-a')).toBeNull();
  });

  it('purging one endpoint clears the watermark of another endpoint on the same table, not of one elsewhere', async () => {
    await apply('purge-a', [
      { id: 'one', path: '/wm', table: 'ext.shared_p', watermark: true },
      { id: 'other', path: '/wm', table: 'ext.elsewhere', watermark: true },
    ]);
    await apply('purge-b', [{ path: '/wm', table: 'ext.shared_p' }]);
    const first = await start('purge-a');
    for (const r of first.body.runs) expect(await ended(r.id)).toMatchObject({ status: 'Completed' });
    expect(await run('purge-b')).toMatchObject({ status: 'Completed', recordsOut: 3 });

    expect((await call('POST', '/api/connectors/purge-b/endpoints/e/purge')).status).toBe(204);
    expect(await ids('ext_t1.shared_p')).toEqual([]);
    const marks = await owner.query<{ endpoint_id: string; watermark: string | null }>(
      "select e.endpoint_id, e.watermark from connectors.endpoints e join connectors.connectors c on c.id = e.connector_id where c.name = 'purge-a' order by 1",
    );
    expect(marks.rows).toEqual([
      { endpoint_id: 'one', watermark: null },
      { endpoint_id: 'other', watermark: '3' },
    ]);
    const again = await start('purge-a', 'one');
    expect(await ended(again.body.runs[0].id)).toMatchObject({ status: 'Completed', recordsOut: 3 });
    expect(await ids('ext_t1.shared_p')).toEqual(['a', 'b', 'c']);
  });
});

describe('a changed unique_key over stored rows (probe 31 H3)', () => {
  it('apply and validate warn, naming the endpoint and the purge; the watermark is cleared', async () => {
    await apply('rekey', [{ id: 'link', path: '/wm', table: 'ext.rekey', watermark: true }]);
    expect(await run('rekey')).toMatchObject({ status: 'Completed', recordsOut: 3 });
    expect(await watermarkOf('rekey')).toBe('3');

    const changed = manifest('rekey', [{ id: 'link', path: '/wm', table: 'ext.rekey', watermark: true, key: '$.v' }]);
    const checked = await call('POST', '/api/connectors/validate', changed, 'application/yaml');
    expect(checked.status).toBe(200);
    const expected = {
      field: 'spec.endpoints[0].target.unique_key',
      message:
        'endpoint link changes its unique_key from $.id to $.v over 3 rows stored in ext.rekey: the next run stores every row again under the new key beside them, and its watermark is cleared so that run reads everything. To start clean, purge the endpoint (POST /api/connectors/rekey/endpoints/link/purge) after applying',
    };
    expect(checked.body.warnings).toEqual([expected]);
    expect(await watermarkOf('rekey')).toBe('3'); // validate writes nothing

    const applied = await apply('rekey', [{ id: 'link', path: '/wm', table: 'ext.rekey', watermark: true, key: '$.v' }]);
    expect(applied.warnings).toEqual([expected]);
    expect(await watermarkOf('rekey')).toBeNull();

    // An apply that changes nothing more warns no more.
    expect((await apply('rekey', [{ id: 'link', path: '/wm', table: 'ext.rekey', watermark: true, key: '$.v' }])).warnings).toEqual([]);
    expect(await run('rekey')).toMatchObject({ status: 'Completed', recordsOut: 3 });
    expect(await ids('ext_t1.rekey')).toEqual(['1', '2', '3', 'a', 'b', 'c']);
  });

  it('a changed target table warns too, and a new endpoint or an unchanged key does not', async () => {
    await apply('retable', [{ id: 'k', path: '/keys', table: 'ext.retable_old' }]);
    expect(await run('retable')).toMatchObject({ status: 'Completed', recordsOut: 6 });
    const applied = await apply('retable', [
      { id: 'k', path: '/keys', table: 'ext.retable_new' },
      { id: 'fresh', path: '/keys', table: 'ext.retable_old', key: '$.n' },
    ]);
    expect(applied.warnings).toEqual([
      {
        field: 'spec.endpoints[0].target.table',
        message:
          'endpoint k changes its table from ext.retable_old to ext.retable_new over 6 rows stored in ext.retable_old: they stay there until the connector is deleted. To empty them, purge the endpoint (POST /api/connectors/retable/endpoints/k/purge)',
      },
    ]);
  });

  it('the same key spelt another way ($.id, $[\'id\'], $["id"]) is no change: no warning, the watermark kept', async () => {
    await apply('respell', [{ id: 'w', path: '/wm', table: 'ext.respell', watermark: true }]);
    expect(await run('respell')).toMatchObject({ status: 'Completed', recordsOut: 3 });
    for (const key of ["$['id']", '$["id"]']) {
      expect((await apply('respell', [{ id: 'w', path: '/wm', table: 'ext.respell', watermark: true, key }])).warnings).toEqual([]);
      expect(await watermarkOf('respell')).toBe('3');
    }
  });
});

describe('a promoted column whose type changes over a table that exists', () => {
  it('apply and validate warn naming the promote (the run fails, the stored rows stay as they are)', async () => {
    const v = (type: string) => [{ id: 'w', path: '/wm', table: 'ext.retype', promote: [{ name: 'v', path: '$.v', type }] }];
    await apply('retype', v('bigint'));
    expect(await run('retype')).toMatchObject({ status: 'Completed', recordsOut: 3 });

    const expected = {
      field: 'spec.endpoints[0].target.promote[0].type',
      message:
        'endpoint w promotes column v of ext.retype as text, but the table has it as bigint: a column\'s type is never changed over its rows, so every run of the endpoint fails until the promote keeps the type bigint or takes another name',
    };
    const checked = await call('POST', '/api/connectors/validate', manifest('retype', v('text')), 'application/yaml');
    expect(checked.status).toBe(200);
    expect(checked.body.warnings).toEqual([expected]);
    expect((await apply('retype', v('text'))).warnings).toEqual([expected]);
    // What the warning says: the run fails naming both types, and the rows stored stay.
    expect((await run('retype')).errorMessage).toContain('column v of ext.retype is bigint, but this endpoint promotes it as text');
    expect(await ids('ext_t1.retype')).toEqual(['a', 'b', 'c']);
    // Another connector writing the same table is told too; the type as stored warns nothing.
    expect((await apply('retype-2', v('numeric'))).warnings).toEqual([{ ...expected, message: expected.message.replace('as text', 'as numeric') }]);
    expect((await apply('retype', v('bigint'))).warnings).toEqual([]);
  });

  it('two endpoints of one manifest promoting a column of one new table with two types: a warning on the second', async () => {
    const applied = await apply('twotypes', [
      { id: 'a', path: '/wm', table: 'ext.twotypes', promote: [{ name: 'v', path: '$.v', type: 'bigint' }] },
      { id: 'b', path: '/wm', table: 'ext.twotypes', promote: [{ name: 'label', path: '$.id', type: 'text' }, { name: 'v', path: '$.v', type: 'text' }] },
    ]);
    expect(applied.warnings).toEqual([
      {
        field: 'spec.endpoints[1].target.promote[1].type',
        message:
          'endpoint b promotes column v of ext.twotypes as text, but endpoint a promotes it as bigint: the table is made with the type of the first to run, and every run of the other fails; promote it with one type, or under two names',
      },
    ]);
  });
});

describe("promotes past PostgreSQL's limit of 1,600 columns", () => {
  it('apply and validate warn when an endpoint promotes more new columns than its table has room for; its run fails before reading, naming the limit', async () => {
    const promote = (n: number, from = 0) => Array.from({ length: n }, (_v, i) => ({ name: `p${from + i}`, path: '$.v', type: 'text' }));
    // A table that has grown: 2 promoted columns, one dropped since (its number still taken): 10 of 1,600 numbered.
    await apply('roomy', [{ id: 'w', path: '/wm', table: 'ext.roomy', promote: promote(2) }]);
    expect(await run('roomy')).toMatchObject({ status: 'Completed', recordsOut: 3 });
    await owner.query('alter table ext_t1.roomy drop column p1');
    const wide = [{ id: 'w', path: '/wm', table: 'ext.roomy', promote: promote(1_591) }];
    const expected = {
      field: 'spec.endpoints[0].target.promote',
      message:
        "endpoint w promotes 1,590 columns ext.roomy does not have: at most 1,590 more fit (a table holds at most 1,600 columns, PostgreSQL's limit, and ext.roomy takes 10: " +
        'the 8 every ext table has, its promoted columns and any dropped since, which still count): every run of the endpoint fails until it promotes fewer new columns (the others stay in data) or writes another table',
    };
    // p0 is there, p1 dropped (a new column again): 1,590 new, and room for 1,590.
    expect((await apply('roomy', wide)).warnings).toEqual([]);
    const wider = [{ id: 'w', path: '/wm', table: 'ext.roomy', promote: promote(1_592) }];
    const more = { ...expected, message: expected.message.replace('promotes 1,590 columns', 'promotes 1,591 columns') };
    const checked = await call('POST', '/api/connectors/validate', manifest('roomy', wider), 'application/yaml');
    expect({ status: checked.status, warnings: checked.body.warnings }).toEqual({ status: 200, warnings: [more] });
    expect((await apply('roomy', wider)).warnings).toEqual([more]);
    // What the warning says: the run fails before it reads anything, and the table and its rows stay as they are.
    expect(await run('roomy')).toMatchObject({ status: 'Failed', recordsIn: 0, errorMessage: expect.stringMatching(/^the run promotes 1,591 columns ext\.roomy does not have: at most 1,590 more fit /) });
    expect(await ids('ext_t1.roomy')).toEqual(['a', 'b', 'c']);
    expect((await owner.query(`select relnatts::int as n from pg_class where oid = 'ext_t1.roomy'::regclass`)).rows).toEqual([{ n: 10 }]);
    // As many as fit: no warning, the run completes and fills the table.
    expect((await apply('roomy', wide)).warnings).toEqual([]);
    expect(await run('roomy')).toMatchObject({ status: 'Completed', recordsOut: 3 });
    expect((await owner.query(`select relnatts::int as n from pg_class where oid = 'ext_t1.roomy'::regclass`)).rows).toEqual([{ n: 1_600 }]);
  }, 60_000);
});

describe('one run in flight per endpoint (probe 31 M1)', () => {
  it('a run waiting for an earlier endpoint of its trigger ends at once when cancelled, freeing its endpoint', async () => {
    const g = gate('queued');
    await apply('queue', [{ id: 'slow', path: '/gate/queued', table: 'ext.queue_slow' }, { id: 'fast', path: '/wm', table: 'ext.queue_fast' }]);
    const started = await start('queue');
    expect(started.status).toBe(202);
    const [slow, fast] = started.body.runs as Array<{ id: string; endpoint: string }>;
    expect([slow!.endpoint, fast!.endpoint]).toEqual(['slow', 'fast']);
    await until('the first run to ask the source', () => g.asked === 1, 10_000);
    expect((await call('POST', `/api/platform/runs/${fast!.id}/cancel`)).status).toBe(202);
    // Ended while the first run is still held at its source.
    expect(await ended(fast!.id)).toMatchObject({ status: 'Cancelled', recordsOut: 0 });
    expect((await call('GET', `/api/platform/runs/${slow!.id}`)).body.status).toBe('Running');
    const again = await start('queue', 'fast');
    expect(again.status).toBe(202);
    expect(await ended(again.body.runs[0].id)).toMatchObject({ status: 'Completed', recordsOut: 3 });
    g.open();
    expect(await ended(slow!.id)).toMatchObject({ status: 'Completed' });
  });

  it('an apply that drops an endpoint whose run is in flight is a 409 naming it, and changes nothing', async () => {
    const g = gate('dropped');
    await apply('dropper', [{ id: 'slow', path: '/gate/dropped', table: 'ext.dropper' }, { id: 'fast', path: '/wm', table: 'ext.dropper_fast' }]);
    const started = await start('dropper', 'slow');
    expect(started.status).toBe(202);
    const runId = started.body.runs[0].id as string;
    await until('the run to ask the source', () => g.asked === 1, 10_000);
    const refused = await call('POST', '/api/connectors/apply', manifest('dropper', [{ id: 'fast', path: '/wm', table: 'ext.dropper_fast' }]), 'application/yaml');
    expect(refused.status).toBe(409);
    expect(refused.body).toEqual({
      error: 'connector dropper has a run in flight',
      hint: `run ${runId} of endpoint slow is Running; wait for it to end or cancel it (POST /api/platform/runs/${runId}/cancel), then apply again (the manifest drops endpoint slow)`,
    });
    expect((await call('GET', '/api/connectors/dropper')).body.endpoints.map((e: { id: string }) => e.id)).toEqual(['slow', 'fast']);
    g.open();
    expect(await ended(runId)).toMatchObject({ status: 'Completed' });
    await apply('dropper', [{ id: 'fast', path: '/wm', table: 'ext.dropper_fast' }]);
  });

  it('a second trigger while a run is in flight is a 409 naming it; once it ended a new one is accepted', async () => {
    const g = gate('once');
    await apply('single', [{ path: '/gate/once', table: 'ext.single' }]);
    const first = await start('single');
    expect(first.status).toBe(202);
    const runId = first.body.runs[0].id as string;
    await until('the first run to ask the source', () => g.asked === 1, 10_000);

    const second = await start('single');
    expect(second.status).toBe(409);
    expect(second.body).toEqual({
      error: 'connector single has a run in flight',
      hint: `run ${runId} of endpoint e is Running; wait for it to end or cancel it (POST /api/platform/runs/${runId}/cancel)`,
    });
    const scheduled = await hub.services.connectors.runner
      .trigger(1, (await hub.services.connectors.byName(1, 'single'))!, { triggeredBy: 'schedule' })
      .then(() => 'started', (err: Error) => err.message);
    expect(scheduled).toBe('connector single has a run in flight');

    g.open();
    expect(await ended(runId)).toMatchObject({ status: 'Completed', recordsOut: 1 });
    expect(await run('single')).toMatchObject({ status: 'Completed' });
    const runs = await owner.query<{ n: number }>("select count(*)::int as n from connectors.runs where connector_name = 'single'");
    expect(runs.rows[0]!.n).toBe(2);
  });

  it('two processes triggering at once record one run; the database refuses a second Running run of an endpoint', async () => {
    const g = gate('twice');
    await apply('racing', [{ path: '/gate/twice', table: 'ext.racing' }]);
    const connector = (await hub.services.connectors.byName(1, 'racing'))!;
    const other = runnerOverHub(hub, 0);
    const outcomes = await Promise.allSettled([hub.services.connectors.runner, other].map((r) => r.trigger(1, connector, { triggeredBy: 'test' })));
    const started = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    expect(started).toHaveLength(1);
    expect(outcomes.flatMap((o) => (o.status === 'rejected' ? [(o.reason as Error).message] : []))).toEqual(['connector racing has a run in flight']);

    const uuid = connector.endpoints[0]!.uuid;
    const second = await owner
      .query(
        `insert into connectors.runs (tenant_id, connector_id, connector_name, endpoint_uuid, endpoint_id, status, triggered_by) values (1, $1, 'racing', $2, 'e', 'Running', 'test')`,
        [connector.id, uuid],
      )
      .then(() => 'inserted', (err: { constraint?: string }) => err.constraint);
    expect(second).toBe('runs_one_in_flight');
    g.open();
    const [done] = await started[0]!.done;
    expect(done).toMatchObject({ status: 'Completed' });
    await other.close();
  });
});

describe('deleting a connector while it runs (probe 31 M2)', () => {
  it('is a 409 naming the run; once the run ended the delete goes through and leaves no row behind', async () => {
    const g = gate('del');
    await apply('keeper', [{ path: '/wm', table: 'ext.shared_d' }]);
    await apply('delx', [{ path: '/gate/del', table: 'ext.shared_d' }]);
    expect(await run('keeper')).toMatchObject({ status: 'Completed' });
    const started = await start('delx');
    const runId = started.body.runs[0].id as string;
    await until('the run to ask the source', () => g.asked === 1, 10_000);

    const refused = await call('DELETE', '/api/connectors/delx');
    expect(refused.status).toBe(409);
    expect(refused.body).toEqual({
      error: 'connector delx has a run in flight',
      hint: `run ${runId} of endpoint e is Running; wait for it to end or cancel it (POST /api/platform/runs/${runId}/cancel), then delete the connector`,
    });
    expect((await call('GET', '/api/connectors/delx')).status).toBe(200);

    g.open();
    expect(await ended(runId)).toMatchObject({ status: 'Completed', recordsOut: 1 });
    expect((await call('DELETE', '/api/connectors/delx')).status).toBe(204);
    const orphans = await owner.query<{ n: number }>(
      'select count(*)::int as n from ext_t1.shared_d r where not exists (select 1 from connectors.connectors c where c.id = r.connector_id)',
    );
    expect(orphans.rows[0]!.n).toBe(0);
  });
});

describe('purging an endpoint while it runs', () => {
  it('is a 409 naming the run, and purges nothing; another endpoint of the connector can be purged meanwhile; once the run ended the purge goes through', async () => {
    await apply('purgex', [
      { id: 'slow', path: '/gate/purged', table: 'ext.purgex' },
      { id: 'other', path: '/wm', table: 'ext.purgex_other' },
    ]);
    // Both endpoints store their rows (no gate yet: the source answers at once).
    const both = await start('purgex');
    for (const r of both.body.runs) expect(await ended(r.id)).toMatchObject({ status: 'Completed' });
    expect(await ids('ext_t1.purgex_other')).toEqual(['a', 'b', 'c']);
    const g = gate('purged');
    const started = await start('purgex', 'slow');
    expect(started.status).toBe(202);
    const runId = started.body.runs[0].id as string;
    await until('the run to ask the source', () => g.asked === 1, 10_000);

    const refused = await call('POST', '/api/connectors/purgex/endpoints/slow/purge');
    expect(refused.status).toBe(409);
    expect(refused.body).toEqual({
      error: 'connector purgex has a run in flight',
      hint: `run ${runId} of endpoint slow is Running; wait for it to end or cancel it (POST /api/platform/runs/${runId}/cancel), then purge the endpoint`,
    });
    expect(await ids('ext_t1.purgex')).toEqual(['k']);
    expect((await call('POST', '/api/connectors/purgex/endpoints/other/purge')).status).toBe(204);
    expect(await ids('ext_t1.purgex_other')).toEqual([]);

    g.open();
    expect(await ended(runId)).toMatchObject({ status: 'Completed', recordsOut: 1 });
    expect((await call('POST', '/api/connectors/purgex/endpoints/slow/purge')).status).toBe(204);
    expect(await ids('ext_t1.purgex')).toEqual([]);
  });
});

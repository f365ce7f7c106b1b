import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { stringify } from 'yaml';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { runEnded } from '../../../test/harness/runs.js';
import { ownerClient } from '../../../test/harness/api-client.js';
import { type Receiver, startReceiver } from '../../../test/harness/receiver.js';

/**
 * A source serving rows PostgreSQL refuses (a NUL in a value or a key, half a surrogate pair, a
 * number beyond what its numeric column holds, a key too long to index): each is dead-lettered
 * with its reason, the others are stored, and the run completes with in = out + skipped.
 */

let hub: TestHub;
let owner: pg.Client;
let source: Receiver;
let sourceUrl: string;
const H = { 'X-Tenant-ID': '1' };
const longKey = randomBytes(8000).toString('hex');

// The body is written by hand: JSON.stringify would escape what the test wants on the wire as is.
const BODY = `[
  {"id": 1, "name": "Ann", "seen": "2024-01-01T00:00:00Z"},
  {"id": 2, "name": "A\\u0000B", "seen": "2024-01-01T00:00:00Z"},
  {"id": 3, "name": "Carl", "nested": {"we\\u0000ird": 1}},
  {"id": 4, "name": "Dora", "amount": "1e-20000", "seen": -8640000000000000},
  {"id": "${longKey}", "name": "Long"},
  {"id": 6, "name": "Fay", "seen": "2024-02-01T00:00:00Z"},
  {"id": 7, "name": "half \\ud800 pair"},
  {"id": 8, "name": "spells \\\\u0000 and \\\\ud800 with a backslash"}
]`;

beforeAll(async () => {
  source = await startReceiver(() => ({ headers: { 'Content-Type': 'application/json' }, body: BODY }));
  sourceUrl = source.url;
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await source?.close();
});

type Run = { id: string; status: string; recordsIn: number; recordsOut: number; recordsSkipped: number; deadLetterCount: number; errorMessage: string | null };

const finished = (id: string, base = hub.url): Promise<Run> => runEnded<Run>(base, id, H);

describe('rows PostgreSQL cannot store', () => {
  it('are dead-lettered one by one with a reason; the run completes with honest counts', async () => {
    const manifest = stringify({
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'unstorable' },
      connector_type: 'rest-generic',
      scopes: ['partners'],
      spec: {
        base_url: sourceUrl,
        endpoints: [
          {
            id: 'items',
            path: '/items',
            target: { kind: 'hybrid', table: 'ext.unstorable_items', unique_key: '$.id', promote: [{ name: 'name', path: '$.name', type: 'text' }, { name: 'seen', path: '$.seen', type: 'timestamptz' }, { name: 'amount', path: '$.amount', type: 'numeric' }] },
          },
        ],
      },
    });
    const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/yaml' }, body: manifest });
    expect([200, 201]).toContain(applied.status);
    const started = await fetch(`${hub.url}/api/connectors/unstorable/runs`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });
    expect(started.status).toBe(202);
    const { runs } = (await started.json()) as { runs: Array<{ id: string }> };
    const run = await finished(runs[0]!.id);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 8, recordsOut: 3, recordsSkipped: 5, deadLetterCount: 5, errorMessage: null });
    expect(run.recordsIn).toBe(run.recordsOut + run.recordsSkipped);

    const { rows } = await owner.query(`select external_id, name, seen from ext_t1.unstorable_items order by external_id`);
    expect(rows.map((r) => r.external_id)).toEqual(['1', '6', '8']);
    // Text that only spells the escapes (a backslash before them) is storable, and stored as it came.
    expect(rows[2].name).toBe('spells \\u0000 and \\ud800 with a backslash');

    const letters = (await (await fetch(`${hub.url}/api/platform/dlq?run=${run.id}`, { headers: H })).json()) as Array<{ id: number; skipReason: string; errorMessage: string }>;
    expect(letters).toHaveLength(5);
    expect(new Set(letters.map((l) => l.skipReason))).toEqual(new Set(['unstorable']));
    const messages = letters.map((l) => l.errorMessage).sort();
    expect(messages).toEqual(
      [
        'the row cannot be stored: $.name contains a NUL character (\\u0000)',
        'the row cannot be stored: $.nested["we\\u0000ird"] has a key that contains a NUL character (\\u0000)',
        'the row cannot be stored: $.name contains an unpaired UTF-16 surrogate',
        'the row cannot be stored: a number is out of range (database error 22003)',
        'the row cannot be stored: a value is too large to be stored or indexed (database error 54000)',
      ].sort(),
    );
    // The payload is kept, its unstorable characters replaced.
    const withNul = letters.find((l) => l.errorMessage.includes('$.name contains a NUL'))!;
    const entry = (await (await fetch(`${hub.url}/api/platform/dlq/${withNul.id}`, { headers: H })).json()) as { payload: { id: number; name: string } };
    expect(entry.payload).toMatchObject({ id: 2, name: 'A\ufffdB' });

    const metrics = await (await fetch(`${hub.url}/q/metrics`)).text();
    expect(metrics).toMatch(/svc_dead_letters_total\{reason="unstorable"\} 5/);
  });

  it('are warned of by a pre-flight, named as the run names them; what only the database refuses is not known there', async () => {
    const res = await fetch(`${hub.url}/api/connectors/unstorable/preflight`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: '{}' });
    expect(res.status).toBe(200);
    const report = (await res.json()) as { ok: boolean; endpoints: Array<{ verdict: string; items: number; warnings?: string[] }> };
    expect(report).toMatchObject({ ok: true, endpoints: [{ verdict: 'ok', items: 8 }] });
    expect(report.endpoints[0]!.warnings).toEqual([
      '3 of the 8 records read cannot be stored: a run dead-letters them (unstorable): record 2: $.name contains a NUL character (\\u0000); ' +
        'record 3: $.nested["we\\u0000ird"] has a key that contains a NUL character (\\u0000); record 7: $.name contains an unpaired UTF-16 surrogate',
    ]);
  });
});

/**
 * A record nesting deeper than the hub's cap (MAX_JSON_DEPTH, 64: the record is level 1) is
 * dead-lettered `unstorable` naming the depth, and the run goes on: one of 10,000 levels used to
 * exhaust the stack of the row's canonicalisation and fail the whole run, losing its page.
 */
describe('a record nesting deeper than 64 levels', () => {
  let deep: Receiver;
  const nested = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;
  // d1: 10,000 levels under the record; d2: 65 in all (one too many); d3: 64 in all (the cap).
  const BODY_DEEP = `[{"id":"d0","n":0},{"id":"d1","x":${nested(10_000)}},{"id":"d2","x":${nested(64)}},{"id":"d3","x":${nested(63)}},{"id":"d4","n":4}]`;

  beforeAll(async () => {
    deep = await startReceiver(() => ({ headers: { 'Content-Type': 'application/json' }, body: BODY_DEEP }));
  });
  afterAll(async () => {
    await deep?.close();
  });

  it('is dead-lettered unstorable naming the depth, its payload cut there; the other rows are stored and the run completes', async () => {
    const manifest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'deep' },
      connector_type: 'rest-generic',
      spec: { base_url: deep.url, endpoints: [{ id: 'items', path: '/items', target: { kind: 'hybrid', table: 'ext.deep_items', unique_key: '$.id', promote: [{ name: 'x', path: '$.x', type: 'text' }] } }] },
    };
    const call = (path: string, body: unknown) => fetch(`${hub.url}${path}`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    expect([200, 201]).toContain((await call('/api/connectors/apply', manifest)).status);
    const started = await call('/api/connectors/deep/runs', {});
    expect(started.status).toBe(202);
    const run = await finished(((await started.json()) as { runs: Array<{ id: string }> }).runs[0]!.id);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 5, recordsOut: 3, recordsSkipped: 2, deadLetterCount: 2, errorMessage: null });

    const { rows } = await owner.query<{ external_id: string; depth: number }>(
      `select external_id, coalesce(length(x) / 2, 0)::int + 1 as depth from ext_t1.deep_items order by external_id`,
    );
    expect(rows).toEqual([
      { external_id: 'd0', depth: 1 },
      { external_id: 'd3', depth: 64 },
      { external_id: 'd4', depth: 1 },
    ]);

    const letters = (await (await fetch(`${hub.url}/api/platform/dlq?run=${run.id}`, { headers: H })).json()) as Array<{ id: number; skipReason: string; errorMessage: string }>;
    expect(letters.map((l) => [l.skipReason, l.errorMessage])).toEqual([
      ['unstorable', 'the row cannot be stored: $ nests objects and arrays deeper than 64 levels'],
      ['unstorable', 'the row cannot be stored: $ nests objects and arrays deeper than 64 levels'],
    ]);
    // Kept down to the cap (the record and 63 levels of x), what is below it replaced by a marker.
    const entries = await Promise.all(
      letters.map(async (l) => (await (await fetch(`${hub.url}/api/platform/dlq/${l.id}`, { headers: H })).json()) as { payload: { id: string; x: unknown }; skipDetail: { external_id: string | null } }),
    );
    for (const { payload } of entries) {
      let node: unknown = payload.x;
      for (let level = 2; level <= 64; level++) {
        expect(Array.isArray(node)).toBe(true);
        node = (node as unknown[])[0];
      }
      expect(node).toBe('(nested deeper than 64 levels: not kept)');
    }
    expect(entries.map((e) => e.payload.id).sort()).toEqual(['d1', 'd2']);
    // Each names its record: the key ($.id, at depth 1) is read from what is kept (probe 34 L7: it was null).
    expect(entries.map((e) => e.skipDetail).sort((a, b) => String(a.external_id).localeCompare(String(b.external_id)))).toEqual([
      { table: 'ext.deep_items', external_id: 'd1', max_depth: 64 },
      { table: 'ext.deep_items', external_id: 'd2', max_depth: 64 },
    ]);
  });

  it('is shown by a pre-flight down to 64 levels (the sample), with a secret on the connector: no stack overflow, no 500', async () => {
    const first = await startReceiver(() => ({ headers: { 'Content-Type': 'application/json' }, body: `[{"id":"d1","x":${nested(10_000)}}]` }));
    try {
      const manifest = {
        apiVersion: 'connectors.svc.io/v1',
        kind: 'Connector',
        metadata: { name: 'deep-first' },
        connector_type: 'rest-generic',
        spec: { base_url: first.url, auth: { kind: 'bearer', token_value: 'deep-secret-token' }, endpoints: [{ id: 'items', path: '/items', target: { kind: 'hybrid', table: 'ext.deep_first', unique_key: '$.id' } }] },
      };
      const call = (path: string, body: unknown) => fetch(`${hub.url}${path}`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      expect([200, 201]).toContain((await call('/api/connectors/apply', manifest)).status);
      const res = await call('/api/connectors/deep-first/preflight', {});
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(text).toContain('(nested deeper than 64 levels: not shown)');
      expect(text).not.toContain('deep-secret-token');
      expect((JSON.parse(text) as { endpoints: Array<{ warnings?: string[] }> }).endpoints[0]!.warnings).toEqual([
        '1 of the 1 records read cannot be stored: a run dead-letters it (unstorable): record 1: $ nests objects and arrays deeper than 64 levels',
      ]);
    } finally {
      await first.close();
    }
  });

  it('does not break a watermark read at any depth ($..n): the deep records give it nothing, the others set it', async () => {
    const manifest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'deep-wm' },
      connector_type: 'rest-generic',
      spec: {
        base_url: deep.url,
        endpoints: [{ id: 'items', path: '/items', incremental: { mode: 'watermark', param: 'since', watermark_path: '$..n' }, target: { kind: 'hybrid', table: 'ext.deep_wm', unique_key: '$.id' } }],
      },
    };
    const call = (path: string, body: unknown) => fetch(`${hub.url}${path}`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    expect([200, 201]).toContain((await call('/api/connectors/apply', manifest)).status);
    const started = await call('/api/connectors/deep-wm/runs', {});
    const run = await finished(((await started.json()) as { runs: Array<{ id: string }> }).runs[0]!.id);
    expect(run).toMatchObject({ status: 'Completed', recordsIn: 5, recordsOut: 3, deadLetterCount: 2, errorMessage: null });
    const { rows } = await owner.query<{ watermark: unknown }>(
      `select e.watermark from connectors.endpoints e join connectors.connectors c on c.id = e.connector_id where c.name = 'deep-wm'`,
    );
    expect(rows.map((r) => String(r.watermark))).toEqual(['4']);
  });
});

describe('a run that dead-letters more than svc.connectors.max-dead-letters-per-run', () => {
  let capped: TestHub;
  let keyless: Receiver;

  beforeAll(async () => {
    // 300 rows none of which has the unique key: every one is a dead letter.
    const rows = JSON.stringify(Array.from({ length: 300 }, (_, k) => ({ name: `row ${k}` })));
    keyless = await startReceiver(() => ({ headers: { 'Content-Type': 'application/json' }, body: rows }));
    capped = await startTestHub({ 'svc.datasource.url': hub.ownerUrl, 'svc.connectors.chunk-size': 10, 'svc.connectors.max-dead-letters-per-run': 25 });
  });

  afterAll(async () => {
    await capped?.stop();
    await keyless?.close();
  });

  it('fails there, naming the cap and where to look, and leaves no more than a few chunks past it', async () => {
    const manifest = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'keyless' },
      connector_type: 'rest-generic',
      spec: { base_url: keyless.url, endpoints: [{ id: 'items', path: '/items', target: { kind: 'hybrid', table: 'ext.keyless_items', unique_key: '$.id' } }] },
    };
    const call = (path: string, body: unknown) => fetch(`${capped.url}${path}`, { method: 'POST', headers: { ...H, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    expect([200, 201]).toContain((await call('/api/connectors/apply', manifest)).status);
    const started = await call('/api/connectors/keyless/runs', {});
    expect(started.status).toBe(202);
    const id = ((await started.json()) as { runs: Array<{ id: string }> }).runs[0]!.id;
    const run = await finished(id, capped.url);
    expect(run.status).toBe('Failed');
    // The message names no count of its own: chunks in flight went on, and only deadLetterCount holds.
    expect(run.errorMessage).toMatch(/^more than 25 rows of this run were dead-lettered \(svc\.connectors\.max-dead-letters-per-run; deadLetterCount says how many\): the run stopped there/);
    // Past the cap by at most the chunks that were in flight (three of ten rows), not the 300 read.
    expect(run.deadLetterCount).toBeGreaterThan(25);
    expect(run.deadLetterCount).toBeLessThanOrEqual(25 + 3 * 10);
    const { rows } = await owner.query<{ n: number }>('select count(*)::int as n from connectors.dead_letters where run_id = $1', [id]);
    expect(rows[0]!.n).toBe(run.deadLetterCount);
  });
});

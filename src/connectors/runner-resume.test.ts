import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import type { RunRecord } from './runs/ledger.js';
import { applyConnector, purgeEndpoint } from './store.js';
import type { ConnectorSpec } from './types.js';

/**
 * A run cut by the page budget (svc.connectors.max-pages, 3 here) stores where it stopped on its
 * endpoint, and the endpoint's next run reads on from there (src/connectors/resume.ts): a source of
 * more pages than the budget is read whole over ceil(pages / budget) runs, each row stored once, the
 * watermark promoted only by the run that completes, over the whole chain, and every run of the
 * chain sends the watermark the chain started with. A reset clears the position; a position the
 * source no longer has (404/410) ends the run Partial and the run after starts from the first page.
 * The source is a loopback HTTP server of this suite; the runs go through the hub's engine.
 */

const MAX_PAGES = 3;
const LIMIT = 5;
const H = { 'X-Tenant-ID': '1' };

interface Row {
  id: number;
  updated: number;
}

let hub: TestHub;
let owner: pg.Client;
let server: Server;
let base: string;
/** The rows the source has, by `updated`. */
let rows: Row[] = [];
/** Every request the source answered: its path and query. */
const requests: URL[] = [];
/** Cursors the source answers 410 for (it expired them). */
const expired = new Set<string>();
/** While set, the source holds its answers until it settles. */
let gate: Promise<void> | undefined;

beforeAll(async () => {
  server = createServer(async (req, res) => {
    await gate;
    const url = new URL(req.url ?? '/', 'http://source');
    requests.push(url);
    const since = Number(url.searchParams.get('since') ?? '-1');
    const visible = rows.filter((r) => r.updated > since);
    let body: unknown;
    if (url.pathname === '/offset') {
      const offset = Number(url.searchParams.get('offset'));
      body = { items: visible.slice(offset, offset + Number(url.searchParams.get('limit'))) };
    } else {
      const after = url.searchParams.get('after');
      if (after !== null && expired.has(after)) {
        res.writeHead(410, { 'content-type': 'application/json' }).end('{"error":"cursor expired"}');
        return;
      }
      const start = after === null ? 0 : visible.findIndex((r) => String(r.id) === after) + 1;
      const page = visible.slice(start, start + LIMIT);
      body = { data: page, has_more: start + LIMIT < visible.length };
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  hub = await startTestHub({ 'svc.connectors.max-pages': MAX_PAGES });
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await new Promise((resolve) => server?.close(resolve));
});

const rowsUpTo = (n: number, from = 1): Row[] => Array.from({ length: n - from + 1 }, (_, i) => ({ id: from + i, updated: 100 + from + i }));

/** A full-mode endpoint paging by offset, `limit` rows a page. */
const offsetEndpoint = (limit: number, table: string) => ({
  id: 'rows',
  path: '/offset',
  pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit, response_path: '$.items' },
  target: { table, unique_key: '$.id' },
});

/** A full-mode endpoint paging by the source's cursor (`after`, the last id of a page). */
const cursorEndpoint = (table: string) => ({
  id: 'rows',
  path: '/cursor',
  pagination: { kind: 'cursor', cursor_param: 'after', cursor_path: '$.data[-1:].id', has_more_path: '$.has_more', response_path: '$.data' },
  target: { table, unique_key: '$.id' },
});

async function apply(name: string, endpoint: Record<string, unknown>): Promise<ConnectorSpec> {
  const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec: { base_url: base, endpoints: [endpoint] } };
  return (await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest))).connector;
}

/** One run of the connector's endpoint through the hub's runner and engine; the requests it sent. */
async function run(connector: ConnectorSpec): Promise<{ record: RunRecord; sent: URL[] }> {
  const before = requests.length;
  const triggered = await hub.services.connectors.runner.trigger(1, connector, { triggeredBy: 'manual' });
  const [record] = await triggered.done;
  return { record: record!, sent: requests.slice(before) };
}

async function endpointAnswer(name: string): Promise<{ watermark: string | null; resumeFrom: string | null; resumeRunId: string | null }> {
  const res = await fetch(`${hub.url}/api/connectors/${name}`, { headers: H });
  expect(res.status).toBe(200);
  return ((await res.json()) as { endpoints: Array<{ watermark: string | null; resumeFrom: string | null; resumeRunId: string | null }> }).endpoints[0]!;
}

const stored = async (table: string) =>
  (await owner.query<{ id: string; n: number }>(`select external_id as id, count(*)::int as n from ext_t1.${table} group by 1 order by external_id::int`)).rows;

describe('a run cut by the page budget', () => {
  it('stores where it stopped; the next runs read on from there with the same watermark, and the last one promotes the maximum of the chain', async () => {
    // 33 rows: 7 pages of 5 (the last of 3), read over ceil(7 / 3) = 3 runs. The greatest `updated` is on the first page.
    rows = rowsUpTo(33);
    rows[4]!.updated = 500;
    const connector = await apply('resume-offset', {
      id: 'rows',
      path: '/offset',
      pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: LIMIT, response_path: '$.items' },
      incremental: { mode: 'watermark', param: 'since', watermark_path: '$.updated' },
      target: { table: 'ext.resume_offset', unique_key: '$.id' },
    });

    const first = await run(connector);
    expect(first.record).toMatchObject({ status: 'Partial', recordsOut: 15 });
    expect(first.sent.map((u) => u.searchParams.get('offset'))).toEqual(['0', '5', '10']);
    expect(await endpointAnswer('resume-offset')).toMatchObject({ watermark: null, resumeFrom: 'offset 15', resumeRunId: first.record.id });

    // The chain reads with the watermark it started with (none here).
    const second = await run(connector);
    expect(second.record).toMatchObject({ status: 'Partial', recordsOut: 15 });
    expect(second.sent.map((u) => u.searchParams.get('offset'))).toEqual(['15', '20', '25']);
    expect(second.sent.every((u) => !u.searchParams.has('since'))).toBe(true);
    expect(await endpointAnswer('resume-offset')).toMatchObject({ watermark: null, resumeFrom: 'offset 30', resumeRunId: second.record.id });

    const third = await run(connector);
    expect(third.record).toMatchObject({ status: 'Completed', recordsOut: 3 });
    expect(third.sent.map((u) => u.searchParams.get('offset'))).toEqual(['30']);
    // Promoted at the end, over the whole chain: 500 was read by the first run, this one read up to 133.
    expect(await endpointAnswer('resume-offset')).toMatchObject({ watermark: '500', resumeFrom: null, resumeRunId: null });
    const kept = await stored('resume_offset');
    expect(kept.map((r) => r.id)).toEqual(rows.map((r) => String(r.id)));
    expect(kept.every((r) => r.n === 1)).toBe(true);

    // The next chain sends the promoted watermark on every request of every run of it.
    rows = [...rows, ...rowsUpTo(53, 34).map((r) => ({ ...r, updated: 500 + r.id }))];
    const next = await run(connector);
    expect(next.record).toMatchObject({ status: 'Partial', recordsOut: 15 });
    const after = await run(connector);
    expect(after.record).toMatchObject({ status: 'Completed', recordsOut: 5 });
    expect([...next.sent, ...after.sent].map((u) => u.searchParams.get('since'))).toEqual(['500', '500', '500', '500', '500']);
    expect(after.sent.map((u) => u.searchParams.get('offset'))).toEqual(['15', '20']);
    expect(await endpointAnswer('resume-offset')).toMatchObject({ watermark: '553', resumeFrom: null });
    expect((await stored('resume_offset')).length).toBe(53);
  });

  it('a reset clears the stored position: the next run starts from the first page', async () => {
    rows = rowsUpTo(40);
    const connector = await apply('resume-reset', cursorEndpoint('ext.resume_reset'));
    const first = await run(connector);
    expect(first.record.status).toBe('Partial');
    expect(await endpointAnswer('resume-reset')).toMatchObject({ resumeFrom: 'cursor "15"', resumeRunId: first.record.id });
    const reset = await fetch(`${hub.url}/api/connectors/resume-reset/endpoints/rows/reset-cursor`, { method: 'POST', headers: H });
    expect(reset.status).toBe(204);
    expect(await endpointAnswer('resume-reset')).toMatchObject({ resumeFrom: null, resumeRunId: null });
    const again = await run(connector);
    expect(again.sent.map((u) => u.searchParams.get('after'))).toEqual([null, '5', '10']);
  });

  it('a position the source no longer has (410) ends the run Partial and clears it: the run after starts from the first page', async () => {
    rows = rowsUpTo(40);
    const connector = await apply('resume-stale', cursorEndpoint('ext.resume_stale'));
    const first = await run(connector);
    expect(first.record.status).toBe('Partial');
    expect(await endpointAnswer('resume-stale')).toMatchObject({ resumeFrom: 'cursor "15"' });
    expired.add('15');
    const stale = await run(connector);
    expect(stale.sent.map((u) => u.searchParams.get('after'))).toEqual(['15']);
    expect(stale.record).toMatchObject({ status: 'Partial', recordsOut: 0 });
    expect(stale.record.errorMessage).toBe('the source answered HTTP 410 for cursor "15": it no longer has the records past that position; the run stopped after 0 page(s) read');
    expect(await endpointAnswer('resume-stale')).toMatchObject({ resumeFrom: null, resumeRunId: null });
    const fresh = await run(connector);
    expect(fresh.sent.map((u) => u.searchParams.get('after'))).toEqual([null, '5', '10']);
    expect(fresh.record.status).toBe('Partial');
  });

  it('a re-apply changing what the endpoint reads clears the position (one changing nothing it reads keeps it), and so does a purge of rows of its table', async () => {
    rows = rowsUpTo(40);
    const endpoint = (limit: number) => offsetEndpoint(limit, 'ext.resume_apply');
    let connector = await apply('resume-apply', endpoint(LIMIT));
    expect((await run(connector)).record.status).toBe('Partial');
    expect(await endpointAnswer('resume-apply')).toMatchObject({ resumeFrom: 'offset 15' });
    connector = await apply('resume-apply', endpoint(LIMIT));
    expect(await endpointAnswer('resume-apply')).toMatchObject({ resumeFrom: 'offset 15' });
    // Another page size: offset 15 of pages of 5 is no position of pages of 7.
    connector = await apply('resume-apply', endpoint(7));
    expect(await endpointAnswer('resume-apply')).toMatchObject({ resumeFrom: null, resumeRunId: null });
    expect((await run(connector)).sent.map((u) => u.searchParams.get('offset'))).toEqual(['0', '7', '14']);
    expect(await endpointAnswer('resume-apply')).toMatchObject({ resumeFrom: 'offset 21' });

    // Another connector writing the same table is purged: rows this chain stored may be gone, its position goes too (as a watermark would).
    await apply('resume-sharer', endpoint(LIMIT));
    await run(await apply('resume-sharer', endpoint(LIMIT)));
    await hub.services.db.withTenant(1, (tx) => purgeEndpoint(tx, 'resume-sharer', 'rows'));
    expect(await endpointAnswer('resume-apply')).toMatchObject({ resumeFrom: null, resumeRunId: null });

    // Its own purge likewise.
    expect((await run(connector)).record.status).toBe('Partial');
    expect(await endpointAnswer('resume-apply')).toMatchObject({ resumeFrom: 'offset 21' });
    await hub.services.db.withTenant(1, (tx) => purgeEndpoint(tx, 'resume-apply', 'rows'));
    expect(await endpointAnswer('resume-apply')).toMatchObject({ resumeFrom: null });
  });

  it('a position stored by a run that began before a re-apply changing what the endpoint reads is not resumed', async () => {
    rows = rowsUpTo(40);
    const endpoint = (limit: number) => offsetEndpoint(limit, 'ext.resume_inflight');
    const before = await apply('resume-inflight', endpoint(LIMIT));
    let open!: () => void;
    gate = new Promise((resolve) => {
      open = resolve;
    });
    const triggered = await hub.services.connectors.runner.trigger(1, before, { triggeredBy: 'manual' });
    const after = await apply('resume-inflight', endpoint(7));
    gate = undefined;
    open();
    const [first] = await triggered.done;
    expect(first).toMatchObject({ status: 'Partial', recordsOut: 15 });
    // Stored for pages of 5, which the endpoint no longer reads.
    expect(await endpointAnswer('resume-inflight')).toMatchObject({ resumeFrom: 'offset 15' });
    const next = await run(after);
    expect(next.sent.map((u) => u.searchParams.get('offset'))).toEqual(['0', '7', '14']);
    expect(next.sent.every((u) => u.searchParams.get('limit') === '7')).toBe(true);
    expect(await endpointAnswer('resume-inflight')).toMatchObject({ resumeFrom: 'offset 21', resumeRunId: next.record.id });
  });
});

import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { createTestDatabase } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of a real `svc-hub all` process under a load of audited writes (organisations created by
 * eight callers at once). docs/operations.md ("Audit"): an entry is inserted in the first transaction
 * of its call that writes, committing with the change or not at all, and completed before the
 * response is sent. So after the kill: every organisation created has its entry (by request id),
 * `success`; a call answered has its entry with the status it got; a change committed whose call
 * was not answered has its entry, its status empty (killed before the entry was completed) or the
 * one the call would have answered (killed after, before the answer reached the caller); no call has two entries, and no entry records
 * a change that is not there.
 */

const owners: pg.Client[] = [];

afterAll(async () => {
  await killAll();
  for (const owner of owners) await owner.end();
});

describe('kill -9 of the hub under audited writes', () => {
  it('every committed change has its entry, every answered call its status, none doubled', async () => {
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);
    const hub = await startHubProcess('all', url);
    const answered = new Map<string, number>();
    let n = 0;
    let loading = true;
    const caller = async () => {
      while (loading) {
        const id = `audit-${n++}`;
        const status = await fetch(`${hub.url}/api/tenants/1/orgs`, {
          method: 'POST',
          headers: { 'X-Tenant-ID': '1', 'content-type': 'application/json', 'X-Request-Id': id },
          body: JSON.stringify({ code: id, name: `Audit ${id}` }),
        }).then(
          async (res) => {
            await res.arrayBuffer();
            return res.status;
          },
          () => undefined, // no answer: killed
        );
        if (status !== undefined) answered.set(id, status);
        else loading = false;
      }
    };
    const callers = Array.from({ length: 8 }, caller);
    await until('writes to be answered', () => answered.size >= 150, { timeoutMs: 60_000 });
    await hub.crash();
    loading = false;
    await Promise.all(callers);
    const sent = n;

    expect([...answered.values()].every((s) => s === 201)).toBe(true);
    const orgs = new Set((await owner.query(`select code from core.orgs where code like 'audit-%'`)).rows.map((r) => r.code as string));
    const { rows: entries } = await owner.query<{ request_id: string; outcome: string; status: number | null }>(
      `select request_id, outcome, status from audit.entries where action = 'POST /api/tenants/{tid}/orgs'`,
    );
    const byRequest = new Map<string, Array<{ outcome: string; status: number | null }>>();
    for (const { request_id: id, ...e } of entries) byRequest.set(id, [...(byRequest.get(id) ?? []), e]);
    // None doubled.
    expect([...byRequest.entries()].filter(([, list]) => list.length > 1)).toEqual([]);
    // Every answered call: its change and its complete entry.
    for (const [id, status] of answered) {
      expect({ id, org: orgs.has(id), entry: byRequest.get(id) }).toEqual({ id, org: true, entry: [{ outcome: 'success', status }] });
    }
    // Every change committed: its entry (empty status when its call was not answered); no entry without its change.
    for (const id of orgs) expect({ id, entry: byRequest.get(id)?.length }).toEqual({ id, entry: 1 });
    for (const id of byRequest.keys()) expect({ id, org: orgs.has(id) }).toEqual({ id, org: true });
    const unanswered = [...orgs].filter((id) => !answered.has(id));
    // Not answered: killed before its entry was completed (empty status) or after, before the answer reached the caller.
    for (const id of unanswered) {
      const entry = byRequest.get(id);
      expect({ id, entry }).toEqual({ id, entry: [{ outcome: 'success', status: entry?.[0]?.status === null ? null : 201 }] });
    }
    expect(orgs.size).toBeLessThanOrEqual(sent);
  }, 120_000);
});

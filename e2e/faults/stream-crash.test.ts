import { afterAll, describe, expect, it } from '@jest/globals';
import { EventSource } from 'eventsource';
import pg from 'pg';
import { createTestDatabase } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import { endOutages, openStream } from './outages.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of `svc-hub all` while an event stream reads its events live and organisations are being
 * created, then a new process on the same database, where the client resumes with the Last-Event-ID
 * of the last event it received (what `svc events tail` and any EventSource do). docs/operations.md,
 * "Live event stream": a resume gets every event after that id, in order, once each; so the events
 * committed by the killed process that its stream had not sent yet come on the resume, none is lost
 * and none comes twice.
 */

const H = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
const owners: pg.Client[] = [];

afterAll(async () => {
  await killAll();
  await endOutages();
  for (const owner of owners) await owner.end();
});

describe('kill -9 of the hub under a live event stream', () => {
  it('a resume with Last-Event-ID on the next process gets every event after it, once each, in order', async () => {
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);
    const clocks = { SVC_EVENTS_STREAM_POLL_EVERY: '200ms', SVC_EVENTS_STREAM_HEARTBEAT: '300ms' };
    const first = await startHubProcess('all', url, clocks);
    const live = openStream(`${first.url}/api/platform/events/stream?topic=org.created`);
    await until('the stream to be open', () => live.es.readyState === EventSource.OPEN, { timeoutMs: 20_000 });
    // Organisations created without a pause, from several callers at once, while the stream reads.
    let creating = true;
    const create = async (caller: number) => {
      for (let i = 0; creating; i++) {
        const ok = await fetch(`${first.url}/api/tenants/1/orgs`, { method: 'POST', headers: H, body: JSON.stringify({ code: `s-${caller}-${i}`, name: `S ${caller} ${i}` }) }).then(
          (res) => res.arrayBuffer().then(() => true),
          () => false,
        );
        if (!ok) return;
      }
    };
    const callers = [1, 2, 3, 4].map(create);
    await until('some events streamed', () => live.received.length >= 20, { timeoutMs: 30_000 });
    await first.crash();
    creating = false;
    await Promise.all(callers);
    live.es.close();
    const got = [...live.received];
    const last = got.at(-1)!;

    const second = await startHubProcess('all', url, clocks);
    const resumed = openStream(`${second.url}/api/platform/events/stream?topic=org.created&lastEventId=${last}`);
    await until('the resumed stream to be open', () => resumed.es.readyState === EventSource.OPEN, { timeoutMs: 20_000 });
    // A marker event, created after the resume: once it arrives, everything before it has.
    const marker = await fetch(`${second.url}/api/tenants/1/orgs`, { method: 'POST', headers: H, body: JSON.stringify({ code: 'marker', name: 'Marker' }) });
    expect(marker.status).toBe(201);
    const markerId = (await owner.query(`select id::text from events.outbox where type = 'org.created' and payload->>'name' = 'Marker'`)).rows[0].id as string;
    await until("the marker's event on the resumed stream", () => resumed.received.includes(markerId), {
      timeoutMs: 30_000,
      detail: () => `${resumed.opens.join('; ')}; got ${resumed.received.length}`,
    });
    const all = [...got, ...resumed.received];
    const committed = (await owner.query(`select id::text from events.outbox where type = 'org.created' order by txid, id`)).rows.map((r) => r.id as string);
    expect(committed.filter((id) => !all.includes(id))).toEqual([]); // none lost
    expect(new Set(all).size).toBe(all.length); // none twice
    expect(all).toEqual(committed); // in the outbox's order
    resumed.es.close();
    await second.stop();
  }, 180_000);
});

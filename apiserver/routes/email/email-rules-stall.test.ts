import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { captureLogs, type LogCapture } from '../../../test/harness/log-capture.js';
import { consumerPassed, lastEventId } from '../../../test/harness/markers.js';
import { startSmtpServer, type TestSmtpServer } from '../../../test/harness/smtp.js';
import { type StallRelay, startStallRelay } from '../../../test/harness/stall-relay.js';
import { until } from '../../../test/harness/until.js';

/**
 * A mail server that takes connections and then stops answering (a relay in front of a real SMTP
 * server on loopback, stalled): `svc-hub all` pays the timeout once, for the send that met it, and
 * that event and the ones after it wait unsent, in order, instead of each paying the timeout; once
 * the server answers again they all go out, each once, none lost.
 */

let smtp: TestSmtpServer;
let relay: StallRelay;
let hub: TestHub;
let owner: pg.Client;
let acme: Client;
let logs: LogCapture;

beforeAll(async () => {
  smtp = await startSmtpServer();
  relay = await startStallRelay(smtp.port);
  logs = captureLogs('info');
  hub = await startTestHub(
    {
      'svc.email.sweep-every': '200ms',
      'svc.mail.host': '127.0.0.1',
      'svc.mail.port': relay.port,
      'svc.mail.from': 'hub@acme.example',
      'svc.mail.timeout': '1s',
      'svc.mail.backoff': '2s',
    },
    undefined,
    { background: true },
  );
  owner = await ownerClient(hub.ownerUrl);
  acme = devClient(hub.url, 1);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await relay?.close();
  await smtp?.close();
  logs?.restore();
});

async function org(code: string): Promise<number> {
  const r = await acme.post('/api/tenants/1/orgs', { code, name: code });
  expect(r.status).toBe(201);
  const { rows } = await owner.query<{ id: string }>(`select id from events.outbox where type = 'org.created' and payload ->> 'orgId' = $1`, [String((r.body as { id: number }).id)]);
  return Number(rows[0]!.id);
}

const metric = async () => /^svc_mail_server_waiting (\d+)$/m.exec(await (await fetch(`${hub.url}/q/metrics`)).text())?.[1];

describe('e-mail rules and a mail server that stops answering', () => {
  it('K events cost one timeout, not K: they wait, and go out in order, each once, when the server answers again', async () => {
    const created = await acme.post('/api/tenants/1/email-rules', { name: 'stall-watch', eventTypes: ['org.created'], recipient: 'ops@acme.example', subject: 'Org {{payload.name}}' });
    expect(created.status).toBe(201);
    await org('stall-before');
    await smtp.waitFor(1);
    expect(await metric()).toBeUndefined();

    relay.stall();
    const stalledAt = relay.connections;
    const ids: number[] = [];
    for (let i = 1; i <= 5; i++) ids.push(await org(`stall-${i}`));
    const failedSends = () => logs.lines().filter((l) => l.level === 'warn' && l.rule === 'stall-watch' && /failed/.test(String(l.msg)));
    const failedChecks = () => logs.lines().filter((l) => l.level === 'warn' && /still not answering/.test(String(l.msg)));
    // Until the consumer has checked the server once and found it still silent (or, as it did, paid
    // the timeout for a second event).
    await until('a failed check of the server, or a second failed send', () => failedChecks().length >= 1 || failedSends().length >= 2, { timeoutMs: 20_000 });
    expect(failedSends().map((l) => l.eventId)).toEqual([ids[0]]);
    // Kept, not skipped (was: skipped, best effort).
    expect(failedSends()[0]).toMatchObject({ error: { code: 'ETIMEDOUT' }, kept: true });
    expect(logs.lines().filter((l) => /is not answering: e-mail event \d+ \(its messages that met it kept/.test(String(l.msg)))).toEqual([expect.objectContaining({ eventId: ids[0] })]);
    // No event is passed: the cursor stays before the first.
    const { rows } = await owner.query<{ last_id: string }>(`select last_id from events.consumer_cursors where consumer = 'email'`);
    expect(Number(rows[0]!.last_id)).toBeLessThan(ids[0]!);
    // One connection for the send, one per check (one may be under way): none for the waiting events.
    expect(relay.connections - stalledAt).toBeLessThanOrEqual(2 + failedChecks().length);
    expect(await metric()).toBe('1');

    relay.resume();
    await smtp.waitFor(6, 15_000);
    await consumerPassed(owner, 'email', await lastEventId(owner));
    // Every one arrives once, in order, the one whose send met the outage included.
    expect(smtp.messages.map((m) => m.parsed.subject)).toEqual(['Org stall-before', 'Org stall-1', 'Org stall-2', 'Org stall-3', 'Org stall-4', 'Org stall-5']);
    expect(logs.lines().filter((l) => /answers again/.test(String(l.msg)))).toEqual([expect.objectContaining({ eventId: ids[0] })]);
    expect(await metric()).toBe('0');
  });
});

import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { createTestDatabase } from '../../test/harness/database.js';
import { startSmtpServer, type TestSmtpServer } from '../../test/harness/smtp.js';
import { until } from '../../test/harness/until.js';
import { killAll, startHubProcess } from './processes.js';

/**
 * kill -9 of a real `svc-hub all` process while its e-mail consumer is in the middle of a send: the
 * SMTP server has taken the message and holds its answer, so the hub dies not knowing it was sent.
 * docs/email.md ("Each message claimed before it is sent", "At least once"): the message was claimed
 * in email.sends before the send; the next process waits while the claim holds (three times
 * svc.mail.timeout and 30 s more), then sends it again, once, with the same Message-ID; the messages
 * recorded before the crash are not sent again, the later events are sent once each, in order.
 */

const owners: pg.Client[] = [];
let smtp: TestSmtpServer | undefined;

afterAll(async () => {
  await killAll();
  for (const owner of owners) await owner.end();
  await smtp?.close();
});

const H = { 'X-Tenant-ID': '1', 'content-type': 'application/json' };
const EVENTS = 5;
/** The event whose message the server takes and never answers while the first process lives. */
const HELD = 3;

describe('kill -9 of the hub mid e-mail send', () => {
  it('sends the message in flight again once its claim has run out, and no other message twice', async () => {
    const url = await createTestDatabase('fault');
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    owners.push(owner);
    let holding = true;
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    smtp = await startSmtpServer({ beforeAnswer: () => (holding && smtp!.messages.length === HELD ? held : undefined) });
    // The claim of a message holds 3 × svc.mail.timeout + 30 s: 36 s here.
    const clocks = {
      SVC_MAIL_HOST: '127.0.0.1',
      SVC_MAIL_PORT: String(smtp.port),
      SVC_MAIL_TIMEOUT: '2s',
      SVC_EMAIL_SWEEP_EVERY: '200ms',
      SVC_LEADER_CHECK_EVERY: '300ms',
    };
    const first = await startHubProcess('all', url, clocks);
    const rule = await fetch(`${first.url}/api/tenants/1/email-rules`, {
      method: 'POST',
      headers: H,
      body: JSON.stringify({ name: 'crash', eventTypes: ['org.created'], recipient: 'ops@example.com', subject: '{{payload.name}}', body: 'event {{id}}' }),
    });
    expect(rule.status).toBe(201);
    for (let i = 1; i <= EVENTS; i++) {
      const org = await fetch(`${first.url}/api/tenants/1/orgs`, { method: 'POST', headers: H, body: JSON.stringify({ code: `mail-${i}`, name: `Org ${i}` }) });
      expect(org.status).toBe(201);
    }
    const events = (await owner.query(`select id::text from events.outbox where type = 'org.created' order by id`)).rows.map((r) => r.id as string);
    expect(events).toHaveLength(EVENTS);
    // The third message taken by the server, its 250 held: killed before svc.mail.timeout cuts the send.
    await until('the held message to arrive', () => smtp!.messages.length >= HELD, { timeoutMs: 20_000, everyMs: 10, detail: () => first.output().slice(-2000) });
    await first.crash();
    const heldId = events[HELD - 1]!;
    expect(smtp.messages.map((m) => String(m.parsed.headers.get('x-svc-event-id')))).toEqual(events.slice(0, HELD));
    const claims = await owner.query(`select event_id::text, outcome, finished_at is not null as finished from email.sends order by event_id`);
    expect(claims.rows).toEqual([
      ...events.slice(0, HELD - 1).map((id) => ({ event_id: id, outcome: 'sent', finished: true })),
      { event_id: heldId, outcome: null, finished: false },
    ]);
    holding = false;
    release();

    const restarted = Date.now();
    const second = await startHubProcess('all', url, clocks);
    // While the dead process's claim holds, the held message and those after it wait.
    await until('the new leader to find the message claimed', () => /claimed some of its messages/.test(second.output()), { timeoutMs: 20_000, detail: () => second.output().slice(-2000) });
    expect(smtp.messages).toHaveLength(HELD);
    const all = await until('every message after the claim ran out', () => smtp!.messages.length >= EVENTS + 1 && smtp!.messages, {
      timeoutMs: 60_000,
      everyMs: 200,
      detail: () => second.output().slice(-2000),
    });
    // Not before the claim (36 s from the first process's claim) ran out.
    expect(Date.now() - restarted).toBeGreaterThan(20_000);
    // Nothing more comes: a marker event after them, sent by the same consumer in order, arrives
    // after anything that would come again.
    const marker = await fetch(`${second.url}/api/tenants/1/orgs`, { method: 'POST', headers: H, body: JSON.stringify({ code: 'mail-marker', name: 'Marker' }) });
    expect(marker.status).toBe(201);
    const markerId = String((await owner.query(`select max(id)::text as id from events.outbox where type = 'org.created'`)).rows[0].id);
    const ids = () => smtp!.messages.map((m) => String(m.parsed.headers.get('x-svc-event-id')));
    await until('the marker message', () => ids().includes(markerId), { timeoutMs: 20_000, detail: () => second.output().slice(-2000) });
    expect(ids()).toEqual([...events.slice(0, HELD), ...events.slice(HELD - 1), markerId]);
    expect(all[HELD]!.parsed.messageId).toBe(all[HELD - 1]!.parsed.messageId);
    const finished = async () => (await owner.query(`select count(*)::int as n from email.sends where outcome = 'sent' and finished_at is not null`)).rows[0].n as number;
    await until('the marker recorded sent', async () => (await finished()) >= EVENTS + 1);
    expect(await finished()).toBe(EVENTS + 1);
    await second.stop();
  }, 120_000);
});

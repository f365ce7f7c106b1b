import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { captureLogs, type LogCapture } from '../../../test/harness/log-capture.js';
import { type ReceivedMail, startSmtpServer, type TestSmtpServer, toAddresses } from '../../../test/harness/smtp.js';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { consumerPassed, lastEventId } from '../../../test/harness/markers.js';
import { until as untilProbe } from '../../../test/harness/until.js';

/**
 * E-mail rules for real events: `svc-hub all` (background on) consumes the outbox and sends one
 * message per matching event and rule through a real SMTP server on loopback (AUTH required),
 * read back with mailparser.
 */

const PASSWORD = 'smtp-secret-6789';
let smtp: TestSmtpServer;
let hub: TestHub;
let owner: pg.Client;
let acme: Client;
let globex: Client;
let logs: LogCapture;

beforeAll(async () => {
  smtp = await startSmtpServer({ username: 'hub-mailer', password: PASSWORD });
  logs = captureLogs('info');
  hub = await startTestHub(
    {
      'svc.email.sweep-every': '200ms',
      'svc.mail.host': '127.0.0.1',
      'svc.mail.port': smtp.port,
      'svc.mail.username': 'hub-mailer',
      'svc.mail.password': PASSWORD,
      'svc.mail.from': 'Svc Hub <hub@acme.example>',
      'svc.mail.timeout': '3s',
    },
    undefined,
    { background: true },
  );
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values (2, 'globex', 'Globex') on conflict do nothing`);
  acme = devClient(hub.url, 1);
  globex = devClient(hub.url, 2);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await smtp?.close();
  logs?.restore();
});

async function rule(c: Client, tid: number, body: Record<string, unknown>): Promise<number> {
  const r = await c.post(`/api/tenants/${tid}/email-rules`, body);
  expect(r.status).toBe(201);
  return (r.body as { id: number }).id;
}

async function org(c: Client, tid: number, code: string, name: string): Promise<number> {
  const r = await c.post(`/api/tenants/${tid}/orgs`, { code, name });
  expect(r.status).toBe(201);
  return (r.body as { id: number }).id;
}

async function eventIdOf(type: string, field: string, value: unknown): Promise<number> {
  const { rows } = await owner.query<{ id: string }>(`select id from events.outbox where type = $1 and payload ->> $2 = $3`, [type, field, String(value)]);
  expect(rows).toHaveLength(1);
  return Number(rows[0]!.id);
}

const until = (predicate: () => boolean, what: string, ms = 5000) => untilProbe(what, predicate, ms);

/** Marker: the e-mail consumer has handled every event written so far, so a message that should not come would have. */
const settle = async () => consumerPassed(owner, 'email', await lastEventId(owner));

const to = (m: ReceivedMail) => toAddresses(m.parsed).join(', ');

/** Disables every rule of tenant 1, so that only the rule a case creates next sends. */
async function disableAll(): Promise<void> {
  const rules = (await acme.get('/api/tenants/1/email-rules')).body as Array<{ id: number }>;
  for (const r of rules) await acme.put(`/api/tenants/1/email-rules/${r.id}`, { enabled: false });
}

/** The one message that arrived after the first `before`, sent to ops@acme.example alone and with no header but the hub's own. */
async function onlyMessageToOps(before: number): Promise<ReceivedMail> {
  const [mail] = (await smtp.waitFor(before + 1)).slice(before);
  await settle();
  expect(smtp.messages).toHaveLength(before + 1);
  expect(mail!.rcptTo).toEqual(['ops@acme.example']);
  const head = mail!.raw.slice(0, mail!.raw.indexOf('\r\n\r\n'));
  const names = head.split('\r\n').filter((l) => !/^[ \t]/.test(l)).map((l) => l.slice(0, l.indexOf(':')).toLowerCase());
  expect(names.sort()).toEqual(['content-transfer-encoding', 'content-type', 'date', 'from', 'message-id', 'mime-version', 'subject', 'to', 'x-svc-email-rule', 'x-svc-event', 'x-svc-event-id']);
  return mail!;
}

describe('the e-mail consumer', () => {
  it('with no enabled rule in any tenant, events pass unsent; a rule created then receives the events written after it', async () => {
    const { rows } = await owner.query<{ n: number }>('select count(*)::int as n from email.rules where enabled and deleted_at is null');
    expect(rows[0]!.n).toBe(0);
    const before = smtp.messages.length;
    await org(acme, 1, 'idle-1', 'Idle One');
    await settle();
    expect(smtp.messages.length).toBe(before);
    const id = await rule(acme, 1, { name: 'first', eventTypes: ['org.created'], recipient: 'first@acme.example', subject: 'First {{payload.name}}' });
    await org(acme, 1, 'idle-2', 'Idle Two');
    await smtp.waitFor(before + 1);
    await settle();
    expect(smtp.messages.slice(before).map((m) => [to(m), m.parsed.subject])).toEqual([['first@acme.example', 'First Idle Two']]);
    expect((await acme.del(`/api/tenants/1/email-rules/${id}`)).status).toBe(204);
    // The next case counts every message the server got from its start.
    smtp.messages.splice(0);
  });

  it('sends one message per matching event to the rule\'s recipients, rendered from the event; none for disabled, deleted, non-matching or other tenants\' rules', async () => {
    await rule(acme, 1, {
      name: 'org-watch',
      eventTypes: ['org.*', 'org.created'],
      recipient: 'ops@acme.example, cto@acme.example',
      subject: 'New org {{payload.name}} ({{type}})',
      body: 'Org {{payload.orgId}} in tenant {{tenantId}}\nevent {{id}} at {{createdAt}}\nrule {{rule}}',
    });
    await rule(acme, 1, { name: 'disabled', eventTypes: ['org.created'], recipient: 'disabled@acme.example', enabled: false });
    const gone = await rule(acme, 1, { name: 'deleted', eventTypes: ['org.created'], recipient: 'deleted@acme.example' });
    expect((await acme.del(`/api/tenants/1/email-rules/${gone}`)).status).toBe(204);
    await rule(acme, 1, { name: 'secrets', eventTypes: ['platform.secret.*'], recipient: 'secrets@acme.example', subject: 'Secret {{payload.name}} by {{payload.by}}' });
    await rule(globex, 2, { name: 'globex-orgs', eventTypes: ['org.*'], recipient: 'globex@globex.example', subject: 'Globex org {{payload.name}}' });

    const ids: number[] = [];
    for (let i = 1; i <= 3; i++) ids.push(await org(acme, 1, `unit-${i}`, `Unit ${i}`));
    await smtp.waitFor(3);
    const secret = await acme.post('/api/platform/secrets', { name: 'crm-token', value: 'v-123456789' });
    expect(secret.status).toBe(201);
    await smtp.waitFor(4);
    await settle();

    expect(smtp.messages).toHaveLength(4);
    const orgMails = smtp.messages.filter((m) => m.parsed.subject?.startsWith('New org'));
    expect(orgMails.map((m) => m.parsed.subject).sort()).toEqual(['New org Unit 1 (org.created)', 'New org Unit 2 (org.created)', 'New org Unit 3 (org.created)']);
    for (const [i, orgId] of ids.entries()) {
      const mail = orgMails.find((m) => m.parsed.subject === `New org Unit ${i + 1} (org.created)`)!;
      const eventId = await eventIdOf('org.created', 'orgId', orgId);
      expect(to(mail)).toBe('ops@acme.example, cto@acme.example');
      expect(mail.rcptTo).toEqual(['ops@acme.example', 'cto@acme.example']);
      expect(mail.user).toBe('hub-mailer');
      expect(mail.parsed.from?.value[0]).toEqual({ address: 'hub@acme.example', name: 'Svc Hub' });
      expect(mail.parsed.text?.trim()).toMatch(new RegExp(`^Org ${orgId} in tenant 1\nevent ${eventId} at \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z\nrule org-watch$`));
      expect(mail.parsed.headers.get('x-svc-event')).toBe('org.created');
      expect(mail.parsed.headers.get('x-svc-event-id')).toBe(String(eventId));
    }
    const secretMail = smtp.messages.find((m) => to(m) === 'secrets@acme.example')!;
    expect(secretMail.parsed.subject).toMatch(/^Secret crm-token by \S+$/);
    const everyone = smtp.messages.flatMap((m) => m.rcptTo);
    for (const never of ['disabled@acme.example', 'deleted@acme.example', 'globex@globex.example']) expect(everyone).not.toContain(never);
  });

  it('tenant 2\'s rule receives tenant 2\'s events only', async () => {
    const before = smtp.messages.length;
    await org(globex, 2, 'g-1', 'Globex One');
    await smtp.waitFor(before + 1);
    await settle();
    const fresh = smtp.messages.slice(before);
    expect(fresh.map((m) => [to(m), m.parsed.subject])).toEqual([['globex@globex.example', 'Globex org Globex One']]);
  });

  it('a rule created after an event does not receive it; an update takes effect for the next event', async () => {
    const id = await rule(acme, 1, { name: 'late', eventTypes: ['org.updated'], recipient: 'late@acme.example', subject: 'v1 {{payload.orgId}}' });
    const before = smtp.messages.length;
    const orgId = await org(acme, 1, 'unit-late', 'Late');
    await smtp.waitFor(before + 1); // org-watch's org.created
    expect((await acme.put(`/api/tenants/1/email-rules/${id}`, { subject: 'v2 {{payload.orgId}}' })).status).toBe(200);
    expect((await acme.put(`/api/tenants/1/orgs/${orgId}`, { name: 'Later' })).status).toBe(200);
    await smtp.waitFor(before + 3); // org-watch and late, for org.updated
    await settle();
    const late = smtp.messages.slice(before).filter((m) => to(m) === 'late@acme.example');
    expect(late.map((m) => m.parsed.subject)).toEqual([`v2 ${orgId}`]);
  });

  it('a wrong SMTP password is logged (without the password) and that message skipped; the next events still go out', async () => {
    // Disable the late rule so that one org event is one message.
    const rules = (await acme.get('/api/tenants/1/email-rules')).body as Array<{ id: number; name: string }>;
    for (const r of rules.filter((x) => x.name !== 'org-watch')) await acme.put(`/api/tenants/1/email-rules/${r.id}`, { enabled: false });
    const before = smtp.messages.length;
    const failures = smtp.authFailures;
    smtp.setPassword('rotated-on-the-server');
    const failedOrg = await org(acme, 1, 'unit-fail', 'Fail');
    await until(() => logs.lines().some((l) => l.level === 'warn' && l.rule === 'org-watch' && (l.error as { code?: string })?.code === 'EAUTH'), 'the failure log line');
    expect(smtp.authFailures).toBeGreaterThan(failures);
    const failedEvent = await eventIdOf('org.created', 'orgId', failedOrg);
    const line = logs.lines().find((l) => l.level === 'warn' && l.eventId === failedEvent)!;
    expect(line).toMatchObject({ rule: 'org-watch', eventType: 'org.created', to: ['ops@acme.example', 'cto@acme.example'], error: { code: 'EAUTH', responseCode: 535 } });
    expect(logs.raw()).not.toContain(PASSWORD);

    smtp.setPassword(PASSWORD);
    await org(acme, 1, 'unit-after', 'After');
    await smtp.waitFor(before + 1);
    await settle();
    // The failed one is not retried: only the next event's message arrived.
    expect(smtp.messages.slice(before).map((m) => m.parsed.subject)).toEqual(['New org After (org.created)']);
  });

  it('a line break in a rule\'s subject, or in the payload it renders, adds no header: the message has none but its own, and goes to the rule\'s recipient only', async () => {
    await disableAll();
    const inject = '\r\nBcc: x@evil.example\r\nX-Injected: yes\r\n';
    // A display name (where a line break could hide) is no address: refused at the API, naming the field.
    const named = await acme.post('/api/tenants/1/email-rules', { name: 'named', eventTypes: ['org.created'], recipient: `Ops${inject} <ops@acme.example>` });
    expect(named.status).toBe(400);
    expect(named.body).toMatchObject({ field: 'recipient' });
    await rule(acme, 1, { name: 'injected', eventTypes: ['org.created'], recipient: 'ops@acme.example', subject: `Org${inject}{{payload.name}}` });
    const before = smtp.messages.length;
    await org(acme, 1, 'unit-inject', `Name${inject}end`);
    const mail = await onlyMessageToOps(before);
    expect(mail.parsed.headers.has('bcc')).toBe(false);
    expect(mail.parsed.subject).toBe('Org Bcc: x@evil.example X-Injected: yes Name Bcc: x@evil.example X-Injected: yes end');
  });

  it("a payload's line breaks of every kind (bare CR or LF, VT, FF, NEL, U+2028, U+2029) and SMTP's end of data in a body reach the server as one subject line and as body text: no header, recipient or message more", async () => {
    await disableAll();
    // Rows of a source, a decision's message: a payload's text is whatever was sent to the hub.
    const breaks = 'a\rBcc: b1@evil.example\nBcc: b2@evil.example\vB\fC\u0085Bcc: b3@evil.example\u2028Bcc: b4@evil.example\u2029end';
    await rule(acme, 1, { name: 'breaks', eventTypes: ['probe.*'], recipient: 'ops@acme.example', subject: 'S {{payload.v}}', body: '{{payload.v}}\n.\nMAIL FROM:<x@evil.example>\r\n.\r\nRCPT TO:<victim@evil.example>\r.\rDATA' });
    const before = smtp.messages.length;
    await owner.query('insert into events.outbox (tenant_id, type, payload) values (1, $1, $2)', ['probe.breaks', JSON.stringify({ v: breaks })]);
    const mail = await onlyMessageToOps(before);
    // Was: U+2028, U+2029, NEL, VT and FF kept in the subject (encoded), which a mail client shows as line breaks.
    expect(mail.parsed.subject).toBe('S a Bcc: b1@evil.example Bcc: b2@evil.example B C Bcc: b3@evil.example Bcc: b4@evil.example end');
    expect(mail.parsed.text).toContain('\n.\nMAIL FROM:<x@evil.example>\n.\nRCPT TO:<victim@evil.example>\n.\nDATA');
  });
});

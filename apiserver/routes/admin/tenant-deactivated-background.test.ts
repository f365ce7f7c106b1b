import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Client, devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { type Receiver, startReceiver } from '../../../test/harness/receiver.js';
import { startSmtpServer, type TestSmtpServer, toAddresses } from '../../../test/harness/smtp.js';
import { until } from '../../../test/harness/until.js';
import { HookRunner } from '../../../src/platform/hooks/runner.js';
import { TENANT_INACTIVE_REASON } from '../../../src/webhooks/model.js';

/**
 * A deactivated tenant's background work stops (docs/admin.md), in `svc-hub all` with its
 * consumers and sweeps running: its open deliveries are closed instead of retried, and an event it
 * still writes (a run in flight) reaches no webhook, e-mail rule, hook or process, while the same of
 * an active tenant, written after it, does (the marker: the consumers take events in commit order).
 * Tenant 31 is deactivated, tenant 32 stays active; both are set up alike.
 */

const GONE = 31;
const LIVE = 32;
const PASSWORD = 'smtp-secret-4321';
let receiver: Receiver;
let smtp: TestSmtpServer;
let hub: TestHub;
let owner: pg.Client;
const api: Record<number, Client> = {};
/** The tenants the declared test hook ran for, in order. */
const hooked: number[] = [];

const deliveriesOf = async (tenantId: number, integration: string) =>
  (
    await owner.query<{ event_id: string; attempts: number; lease_until: Date | null; closed_reason: string | null }>(
      `select d.event_id, d.attempts, d.lease_until, d.closed_reason from hub.deliveries d join hub.integrations i on i.id = d.integration_id
        where d.tenant_id = $1 and i.name = $2 order by d.id`,
      [tenantId, integration],
    )
  ).rows;

beforeAll(async () => {
  receiver = await startReceiver((path) => (path.endsWith('/retries') ? { status: 500, body: 'down' } : { status: 200, body: 'ok' }));
  smtp = await startSmtpServer({ username: 'hub-mailer', password: PASSWORD });
  hub = await startTestHub(
    {
      'svc.webhook.sweep-every': '200ms',
      // Retries no sooner than 1.5 s after an attempt: room to deactivate the tenant between its first attempt and a retry.
      'svc.webhook.retry-every': '3s',
      'svc.email.sweep-every': '200ms',
      'svc.process.sweep-every': '200ms',
      'svc.hooks.sweep-every': '200ms',
      'svc.leader.check-every': '200ms',
      'svc.egress.deny-private': false,
      'svc.embedding.provider': 'none',
      'svc.mail.host': '127.0.0.1',
      'svc.mail.port': smtp.port,
      'svc.mail.username': 'hub-mailer',
      'svc.mail.password': PASSWORD,
      'svc.mail.from': 'Svc Hub <hub@hub.example>',
    },
    undefined,
    { background: true },
  );
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values ($1, 'gone', 'Gone'), ($2, 'live', 'Live')`, [GONE, LIVE]);
  const runner = new HookRunner(
    { hooks: () => [{ id: 'watch', module: 'test', target: 'test.watch', events: ['org.updated'], priority: 1, enabled: true }] },
    hub.services.db,
    { ttlMs: 60_000 },
  );
  runner.register('test.watch', (event) => {
    hooked.push(event.tenantId);
  });
  hub.services.hooks = runner;
  for (const tenant of [GONE, LIVE]) {
    const c = devClient(hub.url, tenant);
    api[tenant] = c;
    for (const [name, eventTypes] of [['events', ['org.updated']], ['retries', ['org.created']]] as const) {
      const created = await c.post(`/api/tenants/${tenant}/integrations`, { name, targetUrl: `${receiver.url}/t${tenant}/${name}`, authMode: 'NONE', eventTypes });
      expect(created.status).toBe(201);
    }
    expect((await c.post(`/api/tenants/${tenant}/email-rules`, { name: 'watch', eventTypes: ['org.updated'], recipient: `ops@t${tenant}.example`, subject: 'Org {{payload.orgId}}' })).status).toBe(201);
    const process = { apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name: 'watch' }, spec: { event: 'org.updated', decision: 'decision.watched' } };
    expect((await c.post('/api/processes/apply', process)).status).toBe(201);
  }
  // A delivery of each tenant fails its first attempt (500) and waits for a retry; then tenant 31 is deactivated.
  for (const tenant of [GONE, LIVE]) expect((await api[tenant]!.post(`/api/tenants/${tenant}/orgs`, { code: 'first', name: 'First' })).status).toBe(201);
  for (const tenant of [GONE, LIVE]) {
    await until(`tenant ${tenant}'s first attempt recorded`, async () => {
      const [row] = await deliveriesOf(tenant, 'retries');
      return row?.attempts === 1 && row.lease_until === null;
    });
  }
  expect((await api[LIVE]!.del(`/api/tenants/${GONE}`)).status).toBe(204);
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await smtp?.close();
  await receiver?.close();
});

describe('a deactivated tenant', () => {
  it('its delivery waiting for a retry is closed as failed, `tenant inactive`, and not sent again; the active tenant\'s is retried', async () => {
    await receiver.waitFor(2, `/t${LIVE}/retries`, 15_000);
    expect(receiver.on(`/t${GONE}/retries`)).toHaveLength(1);
    expect(await deliveriesOf(GONE, 'retries')).toEqual([expect.objectContaining({ attempts: 1, closed_reason: TENANT_INACTIVE_REASON })]);
    expect((await deliveriesOf(LIVE, 'retries'))[0]).toMatchObject({ closed_reason: null });
  });

  describe('an event it still writes (a run in flight), then one of an active tenant', () => {
    const ids: Record<number, number> = {};

    beforeAll(async () => {
      for (const tenant of [GONE, LIVE]) {
        ids[tenant] = await hub.services.db.withTenant(tenant, (tx) => hub.services.events.emit(tx, 'org.updated', { orgId: 1000 + tenant, tenantId: tenant }));
      }
    });

    it('records no webhook delivery and sends nothing', async () => {
      await receiver.waitFor(1, `/t${LIVE}/events`);
      // The consumer matches a batch's events in one statement and queues their first attempts at
      // once: a delivery of the deactivated tenant's event would have gone out with the live one's.
      expect((await deliveriesOf(GONE, 'events')).map((d) => Number(d.event_id))).toEqual([]);
      expect(receiver.on(`/t${GONE}/events`)).toEqual([]);
    });

    it('sends no e-mail', async () => {
      const to = () => smtp.messages.flatMap((m) => toAddresses(m.parsed));
      await until('the active tenant\'s message', () => to().includes(`ops@t${LIVE}.example`));
      expect(to()).toEqual([`ops@t${LIVE}.example`]);
    });

    it('runs no hook', async () => {
      await until('the hook for the active tenant', () => hooked.includes(LIVE));
      expect(hooked).toEqual([LIVE]);
    });

    it('makes no process decide', async () => {
      const decided = async () =>
        (
          await owner.query<{ tenant_id: string; source: string }>(
            `select tenant_id::text, payload ->> 'sourceEventId' as source from events.outbox where type = 'decision.watched' order by id`,
          )
        ).rows;
      await until('the active tenant\'s decision', async () => (await decided()).length > 0);
      expect(await decided()).toEqual([{ tenant_id: String(LIVE), source: String(ids[LIVE]) }]);
    });
  });
});

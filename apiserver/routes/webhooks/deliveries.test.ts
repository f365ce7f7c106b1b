import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { CLOSED_REASON, FAULT_NO_BEARER_TOKEN, FAULT_NO_HMAC_SECRET, RETRIES_EXHAUSTED_REASON } from '../../../src/webhooks/model.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { type Received, type Receiver, startReceiver, verifySvcSignature } from '../../../test/harness/receiver.js';
import { client, type Client } from '../../../test/harness/api-client.js';
import { consumerPassed, lastEventId } from '../../../test/harness/markers.js';
import { until } from '../../../test/harness/until.js';

/**
 * Webhooks end to end (`svc-hub all`: API and dispatcher in one process, clocks shortened): real
 * receivers on loopback verify headers and signatures; the outbox consumer, the retry sweep, the
 * journal, replays, tests, soft delete and two tenants.
 */

const SECRET = 'receiver-shared-secret-1';
let hub: TestHub;
let receiver: Receiver;
let owner: pg.Client;
let t1: Client;
let t2: Client;
let tenant2: number;
let orgSeq = 0;

const LONG_BODY = 'x'.repeat(4500);
const MASTER_KEY = Buffer.alloc(32, 7).toString('base64');
const EXCHANGE_TIMEOUT_MS = 1500;

beforeAll(async () => {
  receiver = await startReceiver((path, received) => {
    if (path.startsWith('/fail')) return { status: 500, body: LONG_BODY };
    if (path.startsWith('/hang')) return 'hang';
    if (path.startsWith('/slow-fail')) return { status: 503, body: 'busy', delayMs: 600 };
    // An echo service (httpbin's /anything, a request inspector): the request's headers in the answer.
    // One that quotes the bearer token run into other text and in base64 (alone, at each byte offset, the whole request),
    // beside the hub's master key (which the hub never sends: only a tenant who knows it can put it there).
    if (path.startsWith('/echo-wrapped')) {
      const token = String(received.headers.authorization).replace(/^Bearer /, '');
      const b64 = (text: string) => Buffer.from(text).toString('base64');
      return { status: 400, body: `xyz${token}abc ${b64(token)} ${b64(`x${token}`)} ${b64(`xy${token}`)} ${b64(`${token}abc`)} ${b64(JSON.stringify(received.headers))} key:${MASTER_KEY}` };
    }
    if (path.startsWith('/echo')) return { status: 400, body: JSON.stringify({ headers: received.headers, body: received.body }) };
    if (path.startsWith('/nul')) return { status: 200, body: 'a\u0000b' };
    return { status: 200, body: 'thanks' };
  });
  hub = await startTestHub(
    {
      'svc.secret.master-key': MASTER_KEY,
      'svc.webhook.sweep-every': '1s',
      'svc.webhook.retry-every': '250ms',
      'svc.webhook.lease': '5s',
      'svc.webhook.timeout': `${EXCHANGE_TIMEOUT_MS}ms`,
      'svc.webhook.connect-timeout': '1s',
      'svc.leader.check-every': '500ms',
    },
    undefined,
    { background: true },
  );
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  tenant2 = (await owner.query(`insert into core.tenants (code, name) values ('globex', 'Globex') returning id`)).rows[0].id;
  t1 = client(hub.url, { 'X-Tenant-ID': '1' });
  t2 = client(hub.url, { 'X-Tenant-ID': String(tenant2) });
  // The organisation whose renames (org.updated, an event no integration here asks for but the
  // markers) serve as marker events; created before any integration exists.
  markerOrg = ((await t1.post('/api/tenants/1/orgs', { code: 'marker', name: 'Marker' })).body as { id: number }).id;
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await receiver?.close();
});

async function integration(c: Client, tenant: number, body: Record<string, unknown>): Promise<number> {
  const res = await c.post(`/api/tenants/${tenant}/integrations`, { eventTypes: ['org.created'], ...body });
  expect(res.status).toBe(201);
  return (res.body as { id: number }).id;
}

/** Fires org.created (and returns its outbox id). */
async function fireOrg(c: Client = t1, tenant = 1): Promise<number> {
  orgSeq++;
  const res = await c.post(`/api/tenants/${tenant}/orgs`, { code: `unit-${orgSeq}`, name: `Unit ${orgSeq}` });
  expect(res.status).toBe(201);
  const { rows } = await owner.query(`select id from events.outbox where tenant_id = $1 and type = 'org.created' order by id desc limit 1`, [tenant]);
  return Number(rows[0].id);
}

type Delivery = Record<string, unknown> & { id: number; attempts: number; succeeded: boolean; eventId: number | null; kind: string };

async function deliveries(id: number, query = '', c: Client = t1, tenant = 1): Promise<Delivery[]> {
  const res = await c.get(`/api/tenants/${tenant}/integrations/${id}/deliveries${query}`);
  expect(res.status).toBe(200);
  return res.body as Delivery[];
}

/**
 * Every row of the integration sent (or given up), once it has at least `atLeast` of them: what the
 * receiver has then is all it gets for them. A first attempt's delivery is written with its outcome,
 * after the receiver got the request (docs/integrations.md), so a journal read at once may not have
 * it yet: an empty or short list is not settled. The caller checks the exact count.
 */
async function settled(id: number, c: Client = t1, tenant = 1, atLeast = 1): Promise<Delivery[]> {
  return until(`the deliveries of integration ${id} to settle`, async () => {
    const list = await deliveries(id, '', c, tenant);
    return list.length >= atLeast && list.every((d) => d.succeeded || d.closedReason || d.attempts >= 3) && list;
  });
}

/**
 * The marker for "no further attempt": a fresh failing integration gets a later event (a rename of
 * the marker organisation, org.updated) and the test waits for that event's third attempt, which
 * takes at least two retry sweeps after its first; an attempt still due on an earlier row would have
 * been made by then.
 */
async function twoSweepsLater(): Promise<void> {
  const path = `/fail-marker-${++markers}`;
  const marker = await integration(t1, 1, { name: `marker-${markers}`, targetUrl: `${receiver.url}${path}`, authMode: 'NONE', eventTypes: ['org.updated'] });
  expect((await t1.put(`/api/tenants/1/orgs/${markerOrg}`, { name: `Marker ${markers}` })).status).toBe(200);
  await receiver.waitFor(3, path);
  await until('the marker row to record its third attempt', async () => (await deliveries(marker))[0]?.attempts === 3);
  expect((await t1.del(`/api/tenants/1/integrations/${marker}`)).status).toBe(204);
}
let markers = 0;
let markerOrg: number;

describe('the webhook consumer', () => {
  let hmacId: number;
  let before: number;
  let firstEvent: number;
  let got: Received;

  // The HMAC integration and its first delivery, which the first three cases read (each passes alone).
  beforeAll(async () => {
    before = await fireOrg();
    hmacId = await integration(t1, 1, { name: 'hmac', targetUrl: `${receiver.url}/hmac`, secret: SECRET });
    firstEvent = await fireOrg();
    got = (await receiver.waitFor(1, '/hmac'))[0]!;
  });

  it('is not retroactive: an event fired before the integration existed is never delivered', async () => {
    // Marker: the consumer has gone past the event; had the earlier one matched, its row would be there.
    await consumerPassed(owner, 'webhooks', firstEvent);
    expect(await settled(hmacId)).toHaveLength(1);
    expect(receiver.on('/hmac').length).toBe(1);
    expect(got!.headers['x-svc-event-id']).toBe(String(firstEvent));
    expect((await deliveries(hmacId)).map((d) => d.eventId)).toEqual([firstEvent]);
    expect(before).toBeLessThan(firstEvent);
  });

  it('HMAC: the spec\'s headers, a signature over the raw body, the event payload as body', async () => {
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers['x-svc-event']).toBe('org.created');
    expect(got.headers['x-svc-signature']).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(verifySvcSignature(SECRET, got)).toBe(true);
    expect(verifySvcSignature('another-secret', got)).toBe(false);
    expect(got.headers.authorization).toBeUndefined();
    expect(got.headers['webhook-id']).toBeUndefined();
    const { rows } = await owner.query('select payload from events.outbox where id = $1', [firstEvent]);
    expect(JSON.parse(got.body)).toEqual(rows[0].payload);
  });

  it('records the delivery: spec 1 fields plus the contract\'s', async () => {
    const [d] = await settled(hmacId);
    expect(d).toEqual({
      id: expect.any(Number),
      integrationId: hmacId,
      eventType: 'org.created',
      eventId: firstEvent,
      kind: 'event',
      replayOf: null,
      attempts: 1,
      succeeded: true,
      closedReason: null,
      http_status: 200,
      response_body: 'thanks',
      error: null,
      duration_ms: expect.any(Number),
      attempted_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
      createdAt: expect.any(String),
    });
  });

  it('BEARER sends Authorization; NONE sends no authentication; Standard Webhooks headers on request', async () => {
    const bearer = await integration(t1, 1, { name: 'bearer', targetUrl: `${receiver.url}/bearer`, authMode: 'BEARER', secret: 'tok-123456789', eventTypes: ['org.updated'] });
    // A Latin-1 token (the most a BEARER secret may hold) goes out one byte per character.
    const latin1 = await integration(t1, 1, { name: 'bearer-latin1', targetUrl: `${receiver.url}/bearer-latin1`, authMode: 'BEARER', secret: 'tök én~ÿ', eventTypes: ['org.updated'] });
    const none = await integration(t1, 1, { name: 'none', targetUrl: `${receiver.url}/none`, authMode: 'NONE', eventTypes: ['org.updated'] });
    const std = await integration(t1, 1, { name: 'std', targetUrl: `${receiver.url}/std`, secret: 'whsec_c2VjcmV0LWtleS1ieXRlcw==', standardWebhooks: true, eventTypes: ['org.updated'] });
    const rawSecret = 'plain sécret ключ 🔑';
    const raw = await integration(t1, 1, { name: 'std-raw', targetUrl: `${receiver.url}/std-raw`, secret: rawSecret, standardWebhooks: true, eventTypes: ['org.updated'] });
    const org = await t1.post('/api/tenants/1/orgs', { code: 'renamed', name: 'Before' });
    await t1.put(`/api/tenants/1/orgs/${(org.body as { id: number }).id}`, { name: 'After' });
    const [b] = await receiver.waitFor(1, '/bearer');
    const [l] = await receiver.waitFor(1, '/bearer-latin1');
    const [n] = await receiver.waitFor(1, '/none');
    const [s] = await receiver.waitFor(1, '/std');
    const [r] = await receiver.waitFor(1, '/std-raw');
    expect(b!.headers.authorization).toBe('Bearer tok-123456789');
    expect(b!.headers['x-svc-signature']).toBeUndefined();
    expect(l!.headers.authorization).toBe('Bearer tök én~ÿ');
    expect(n!.headers.authorization).toBeUndefined();
    expect(n!.headers['x-svc-signature']).toBeUndefined();
    expect(n!.headers['x-svc-event']).toBe('org.updated');
    expect(n!.headers['x-svc-event-id']).toEqual(expect.stringMatching(/^\d+$/));
    // Standard Webhooks: id = event id, signature over "id.timestamp.body" with the base64-decoded whsec_ key.
    expect(s!.headers['webhook-id']).toBe(s!.headers['x-svc-event-id']);
    const ts = Number(s!.headers['webhook-timestamp']);
    expect(Math.abs(ts - Date.now() / 1000)).toBeLessThan(60);
    const expected = createHmac('sha256', Buffer.from('c2VjcmV0LWtleS1ieXRlcw==', 'base64')).update(`${s!.headers['webhook-id']}.${ts}.${s!.body}`).digest('base64');
    expect(s!.headers['webhook-signature']).toBe(`v1,${expected}`);
    expect(verifySvcSignature('whsec_c2VjcmV0LWtleS1ieXRlcw==', s!)).toBe(true);
    // The reference library (the standardwebhooks package) verifies both key forms: whsec_ (its
    // own), and any other secret as its UTF-8 bytes with the raw-key option; another key fails.
    const headersOf = (got: { headers: Record<string, unknown> }) => got.headers as Record<string, string>;
    expect(new Webhook('whsec_c2VjcmV0LWtleS1ieXRlcw==').verify(s!.body, headersOf(s!))).toEqual(JSON.parse(s!.body));
    expect(new Webhook(Buffer.from(rawSecret, 'utf8'), { format: 'raw' }).verify(r!.body, headersOf(r!))).toEqual(JSON.parse(r!.body));
    expect(() => new Webhook('whsec_b3RoZXIta2V5').verify(s!.body, headersOf(s!))).toThrow(WebhookVerificationError);
    expect(() => new Webhook(rawSecret, { format: 'raw' }).verify(r!.body, headersOf(r!))).toThrow('No matching signature found');
    // The outcome is written back after the answer reached the hub: moments after the receiver saw the request.
    for (const id of [bearer, latin1, none, std, raw]) {
      const [d] = await until('the outcome', async () => {
        const list = await deliveries(id);
        return list[0]?.attempts ? list : undefined;
      });
      expect(d).toMatchObject({ succeeded: true, attempts: 1 });
    }
  });

  it('prefix patterns match every type under the prefix; exact types only themselves', async () => {
    // What the HMAC integration (org.created only) had before this case's three events: every event
    // so far passed by the consumer, and its rows settled.
    await consumerPassed(owner, 'webhooks', await lastEventId(owner));
    // Its rows as many as the requests it got (a first attempt's row is written after the request).
    const hmacReceived = receiver.on('/hmac').length;
    const hmacBefore = (await settled(hmacId, t1, 1, hmacReceived)).length;
    const prefix = await integration(t1, 1, { name: 'prefix', targetUrl: `${receiver.url}/prefix`, authMode: 'NONE', eventTypes: ['org.*'] });
    const org = await t1.post('/api/tenants/1/orgs', { code: 'prefixed', name: 'P' });
    const id = (org.body as { id: number }).id;
    await t1.put(`/api/tenants/1/orgs/${id}`, { name: 'P2' });
    await t1.del(`/api/tenants/1/orgs/${id}`);
    const got = await receiver.waitFor(3, '/prefix');
    expect(got.map((r) => r.headers['x-svc-event']).sort()).toEqual(['org.archived', 'org.created', 'org.updated']);
    await consumerPassed(owner, 'webhooks', await lastEventId(owner));
    expect(await settled(prefix, t1, 1, 3)).toHaveLength(3);
    expect(await settled(hmacId, t1, 1, hmacBefore + 1)).toHaveLength(hmacBefore + 1);
    expect(receiver.on('/hmac').length).toBe(hmacReceived + 1); // org.created only
  });

  it('HMAC or BEARER without a secret: the fault text recorded on each attempt, nothing sent', async () => {
    const hmac = await integration(t1, 1, { name: 'unsigned', targetUrl: `${receiver.url}/unsigned` });
    const bearer = await integration(t1, 1, { name: 'tokenless', targetUrl: `${receiver.url}/tokenless`, authMode: 'BEARER' });
    await fireOrg();
    const [h] = await until('the fault attempts', async () => {
      const list = await deliveries(hmac);
      return list[0]?.attempts === 3 && list;
    });
    expect(h).toMatchObject({ succeeded: false, attempts: 3, error: FAULT_NO_HMAC_SECRET, http_status: null });
    const b = await until('the bearer fault', async () => (await deliveries(bearer)).find((d) => d.attempts >= 1));
    expect(b).toMatchObject({ succeeded: false, error: FAULT_NO_BEARER_TOKEN, http_status: null });
    expect(receiver.on('/unsigned').length + receiver.on('/tokenless').length).toBe(0);
  });
});

describe('retries', () => {
  it('exactly 3 attempts against a receiver answering 500, bodies stored truncated at 2000 characters', async () => {
    const id = await integration(t1, 1, { name: 'failing', targetUrl: `${receiver.url}/fail`, authMode: 'NONE' });
    const eventId = await fireOrg();
    await receiver.waitFor(3, '/fail');
    await twoSweepsLater(); // no fourth attempt
    expect(receiver.on('/fail').length).toBe(3);
    expect(new Set(receiver.on('/fail').map((r) => r.headers['x-svc-event-id']))).toEqual(new Set([String(eventId)]));
    expect(new Set(receiver.on('/fail').map((r) => r.body)).size).toBe(1);
    const [d] = await deliveries(id);
    // Closed by the sweep after its last attempt: it keeps that attempt's outcome.
    expect(d).toMatchObject({ attempts: 3, succeeded: false, http_status: 500, error: null, closedReason: RETRIES_EXHAUSTED_REASON });
    expect((d!.response_body as string).length).toBe(2000);
    const one = await t1.get(`/api/tenants/1/integrations/${id}/deliveries/${d!.id}`);
    expect((one.body as { attemptLog: Array<{ attempt: number; http_status: number }> }).attemptLog.map((a) => [a.attempt, a.http_status])).toEqual([
      [1, 500],
      [2, 500],
      [3, 500],
    ]);
    expect((await deliveries(id, '?status=failed')).map((x) => x.id)).toEqual([d!.id]);
  });

  it('an integration disabled between attempts: the row closes with the spec\'s reason, no further attempt', async () => {
    const id = await integration(t1, 1, { name: 'flaky', targetUrl: `${receiver.url}/slow-fail`, authMode: 'NONE' });
    await fireOrg();
    await receiver.waitFor(1, '/slow-fail'); // the answer (503) comes 600 ms later
    expect((await t1.put(`/api/tenants/1/integrations/${id}`, { enabled: false })).status).toBe(200);
    const [d] = await until('the closing', async () => {
      const list = await deliveries(id);
      return list[0]?.closedReason ? list : undefined;
    });
    expect(d).toMatchObject({ attempts: 1, succeeded: false, http_status: 503, closedReason: CLOSED_REASON });
    await twoSweepsLater();
    expect(receiver.on('/slow-fail').length).toBe(1);
  });

  it('eventTypes changed so they no longer match: the open row closes too', async () => {
    const id = await integration(t1, 1, { name: 'flaky-2', targetUrl: `${receiver.url}/slow-fail-2`, authMode: 'NONE' });
    await fireOrg();
    await receiver.waitFor(1, '/slow-fail-2');
    await t1.put(`/api/tenants/1/integrations/${id}`, { eventTypes: ['org.updated'] });
    const [d] = await until('the closing', async () => {
      const list = await deliveries(id);
      return list[0]?.closedReason ? list : undefined;
    });
    expect(d).toMatchObject({ attempts: 1, closedReason: CLOSED_REASON });
  });
});

describe('a slow endpoint never blocks the others', () => {
  it('one receiver hangs, the other gets every event promptly', async () => {
    const hanging = await integration(t1, 1, { name: 'hanging', targetUrl: `${receiver.url}/hang`, authMode: 'NONE' });
    await integration(t1, 1, { name: 'healthy', targetUrl: `${receiver.url}/healthy`, authMode: 'NONE' });
    const started = Date.now();
    const fired: number[] = [];
    for (let i = 0; i < 12; i++) fired.push(await fireOrg());
    const got = await receiver.waitFor(12, '/healthy', 8_000);
    const elapsed = Date.now() - started;
    expect(new Set(got.map((r) => Number(r.headers['x-svc-event-id'])))).toEqual(new Set(fired));
    // Well inside one exchange timeout per event had they been serialised behind the hung endpoint.
    expect(elapsed).toBeLessThan((fired.length * EXCHANGE_TIMEOUT_MS) / 3);
    const d = await until('the hung attempt to time out', async () => (await deliveries(hanging)).find((x) => x.attempts >= 1 && x.error));
    expect(d!.error).toMatch(/timeout/);
  });
});

describe('replay and the journal', () => {
  let id: number;
  let original: Delivery;

  beforeAll(async () => {
    id = await integration(t1, 1, { name: 'replayable', targetUrl: `${receiver.url}/replay`, secret: SECRET });
    await fireOrg();
    await receiver.waitFor(1, '/replay');
    original = await until('the first delivery', async () => (await deliveries(id)).find((d) => d.succeeded));
  });

  it('by integration path: 202 with a new record; same body, same event id; the original stays', async () => {
    const res = await t1.post(`/api/tenants/1/integrations/${id}/deliveries/${original.id}/replay`);
    expect(res.status).toBe(202);
    const record = res.body as Delivery;
    expect(record).toMatchObject({ kind: 'replay', replayOf: original.id, eventId: original.eventId, eventType: 'org.created', integrationId: id });
    expect(record.id).not.toBe(original.id);
    const [first, second] = await receiver.waitFor(2, '/replay');
    expect(second!.body).toBe(first!.body);
    expect(second!.headers['x-svc-event-id']).toBe(String(original.eventId));
    expect(verifySvcSignature(SECRET, second!)).toBe(true);
    const list = await until('the replay outcome', async () => {
      const l = await deliveries(id);
      return l.length === 2 && l.every((d) => d.succeeded) && l;
    });
    expect(list.map((d) => d.id)).toEqual([record.id, original.id]);
  });

  it('by delivery id on the platform path: the same', async () => {
    // Counted from what the integration had (the case before replayed once too, when it ran).
    const sent = receiver.on('/replay').length;
    const recorded = (await deliveries(id)).length;
    const res = await t1.post(`/api/platform/deliveries/${original.id}/replay`);
    expect(res.status).toBe(202);
    const got = await receiver.waitFor(sent + 1, '/replay');
    expect(got[sent]!.headers['x-svc-event-id']).toBe(String(original.eventId));
    expect(got[sent]!.body).toBe(got[0]!.body);
    // Its outcome is written after the answer: the listings below must not see it change.
    await until('the replay outcome', async () => {
      const list = await deliveries(id);
      return list.length === recorded + 1 && list.every((d) => d.succeeded);
    });
  });

  it('404 for an unknown delivery, another integration\'s, and another tenant\'s (existence not confirmed)', async () => {
    expect((await t1.post(`/api/platform/deliveries/987654/replay`)).status).toBe(404);
    expect((await t1.post(`/api/platform/deliveries/nope/replay`)).status).toBe(404);
    const otherIntegration = await integration(t1, 1, { name: 'bystander', targetUrl: `${receiver.url}/bystander`, authMode: 'NONE', enabled: false });
    expect((await t1.post(`/api/tenants/1/integrations/${otherIntegration}/deliveries/${original.id}/replay`)).status).toBe(404);
    const foreign = await t2.post(`/api/platform/deliveries/${original.id}/replay`);
    expect(foreign.status).toBe(404);
    expect(await t2.post(`/api/platform/deliveries/987654/replay`)).toMatchObject({ status: 404, text: foreign.text });
  });

  it('/api/platform/deliveries: failures first, filters, limit', async () => {
    // A failed delivery of this case's own (an org.updated, which the replayable integration does not take).
    const failing = await integration(t1, 1, { name: 'journal-failing', targetUrl: `${receiver.url}/fail-journal`, authMode: 'NONE', eventTypes: ['org.updated'] });
    expect((await t1.put(`/api/tenants/1/orgs/${markerOrg}`, { name: 'Marker of the journal' })).status).toBe(200);
    await until('a failed attempt of the journal', async () => (await deliveries(failing)).some((d) => d.attempts >= 1 && !d.succeeded));
    const all = (await t1.get('/api/platform/deliveries?limit=200')).body as Delivery[];
    const firstSuccess = all.findIndex((d) => d.succeeded);
    expect(firstSuccess).toBeGreaterThan(0);
    expect(all.slice(firstSuccess).every((d) => d.succeeded)).toBe(true);
    const failed = (await t1.get('/api/platform/deliveries?status=failed')).body as Delivery[];
    expect(failed.length).toBeGreaterThan(0);
    expect(failed.every((d) => !d.succeeded)).toBe(true);
    const mine = (await t1.get(`/api/platform/deliveries?integrationId=${id}`)).body as Delivery[];
    expect(mine.map((d) => d.id).sort()).toEqual((await deliveries(id)).map((d) => d.id).sort());
    expect(mine.length).toBeGreaterThan(0);
    expect(mine.every((d) => d.integrationId === id)).toBe(true);
    // An id the tenant has no integration of: 404, as that integration's own list answers (not an empty list).
    const unknown = await t1.get('/api/platform/deliveries?integrationId=987654');
    expect(unknown).toMatchObject({ status: 404, body: { error: 'integration 987654 not found' } });
    expect((await t1.get('/api/platform/deliveries?integrationId=987654&status=failed')).status).toBe(404);
    // An id past what a JSON number holds exactly is refused naming the parameter: it was rounded (a 404
    // naming another id) or, past a bigint, reached the database (a 400 naming no field).
    for (const big of ['9007199254740993', '9223372036854775807', '99999999999999999999']) {
      expect(await t1.get(`/api/platform/deliveries?integrationId=${big}`)).toMatchObject({ status: 400, body: { error: 'integrationId must be at most 9007199254740991', field: 'integrationId' } });
    }
    expect(await t1.get('/api/platform/deliveries?integrationId=9007199254740991')).toMatchObject({ status: 404, body: { error: 'integration 9007199254740991 not found' } });
    // So is a limit past it (it was capped at 200 after rounding): every integer parameter holds to the same bound.
    expect(await t1.get('/api/platform/deliveries?limit=9007199254740993')).toMatchObject({ status: 400, body: { error: 'limit must be at most 9007199254740991', field: 'limit' } });
    expect(((await t1.get('/api/platform/deliveries?limit=2')).body as Delivery[]).length).toBe(2);
    // A limit between the statements' steps (10, 50, 100, 200): exactly that many, the first of the longer list.
    for (const limit of [1, 3, 11, 51]) {
      expect(((await t1.get(`/api/platform/deliveries?limit=${limit}`)).body as Delivery[]).map((d) => d.id)).toEqual(all.slice(0, limit).map((d) => d.id));
    }
    const ofIntegration = (await t1.get(`/api/tenants/1/integrations/${id}/deliveries?limit=2`)).body as Delivery[];
    expect(ofIntegration.map((d) => d.id)).toEqual((await deliveries(id)).slice(0, 2).map((d) => d.id));
    expect(((await t1.get('/api/platform/deliveries')).body as Delivery[]).length).toBeLessThanOrEqual(50);
    expect((await t1.get('/api/platform/deliveries?limit=5000')).status).toBe(200);
    expect((await t1.get('/api/platform/deliveries?status=lost')).status).toBe(400);
    expect((await t1.del(`/api/tenants/1/integrations/${failing}`)).status).toBe(204);
  });
});

describe('the test operation', () => {
  let id: number;

  beforeAll(async () => {
    id = await integration(t1, 1, { name: 'tested', targetUrl: `${receiver.url}/tested`, secret: SECRET, enabled: false });
  });

  it('sends a synthesised sample, signed, without X-Svc-Event-Id; answers the test result; recorded in history', async () => {
    const res = await t1.post(`/api/tenants/1/integrations/${id}/test`, { eventType: 'connector.run.failed' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true, httpStatus: 200, responseBody: 'thanks', error: null, durationMs: expect.any(Number) });
    const [got] = receiver.on('/tested');
    expect(got!.headers['x-svc-event']).toBe('connector.run.failed');
    expect(got!.headers['x-svc-event-id']).toBeUndefined();
    expect(verifySvcSignature(SECRET, got!)).toBe(true);
    expect(JSON.parse(got!.body)).toEqual({ run_id: 'sample-run_id', connector_id: 'sample-connector_id', error_message: 'sample-error_message', retryable: true });
    const [d] = await deliveries(id);
    expect(d).toMatchObject({ kind: 'test', eventId: null, eventType: 'connector.run.failed', attempts: 1, succeeded: true });
  });

  it('a failing endpoint: ok false with the status', async () => {
    const failing = await integration(t1, 1, { name: 'tested-fail', targetUrl: `${receiver.url}/fail-test`, authMode: 'NONE' });
    const res = await t1.post(`/api/tenants/1/integrations/${failing}/test`, { eventType: 'org.created' });
    expect(res.body).toMatchObject({ ok: false, httpStatus: 500, error: null });
    expect(((res.body as { responseBody: string }).responseBody).length).toBe(2000);
    const unreachable = await integration(t1, 1, { name: 'tested-down', targetUrl: 'http://127.0.0.1:9/x', authMode: 'NONE' });
    const down = await t1.post(`/api/tenants/1/integrations/${unreachable}/test`, { eventType: 'org.created' });
    expect(down.body).toMatchObject({ ok: false, httpStatus: null, responseBody: null, error: expect.stringMatching(/ECONNREFUSED/) });
    await twoSweepsLater(); // tests are never retried
    expect(receiver.on('/fail-test').length).toBe(1);
  });

  it('an answer quoting the integration\'s secret (an echo service) is stored and answered with it [REDACTED]', async () => {
    const token = 'echoed-bearer-T0ken/+=';
    const echoed = await integration(t1, 1, { name: 'tested-echo', targetUrl: `${receiver.url}/echo`, authMode: 'BEARER', secret: token });
    const res = await t1.post(`/api/tenants/1/integrations/${echoed}/test`, { eventType: 'org.created' });
    expect(res.status).toBe(200);
    const [got] = receiver.on('/echo');
    expect(got!.headers.authorization).toBe(`Bearer ${token}`);
    const answer = res.body as { responseBody: string };
    expect(answer.responseBody).toContain('"authorization":"Bearer [REDACTED]"');
    const [d] = await deliveries(echoed);
    const one = await t1.get(`/api/tenants/1/integrations/${echoed}/deliveries/${d!.id}`);
    const platform = await t1.get(`/api/platform/deliveries?integrationId=${echoed}`);
    for (const text of [JSON.stringify(res.body), JSON.stringify(d), JSON.stringify(one.body), JSON.stringify(platform.body)]) {
      expect(text).not.toContain(token);
      expect(text).not.toContain('echoed-bearer-T0ken');
      expect(text).not.toContain(encodeURIComponent(token));
    }
    expect(JSON.stringify(one.body)).toContain('Bearer [REDACTED]');
  });

  it('an answer quoting the integration\'s secret run into other text, or in base64 at any offset, is stored with it [REDACTED]; the hub\'s own key as sent', async () => {
    const token = 'wrapped-bearer-T0ken-9f8e7d';
    const wrapped = await integration(t1, 1, { name: 'tested-wrapped', targetUrl: `${receiver.url}/echo-wrapped`, authMode: 'BEARER', secret: token });
    const res = await t1.post(`/api/tenants/1/integrations/${wrapped}/test`, { eventType: 'org.created' });
    expect(res.status).toBe(200);
    const answered = (res.body as { responseBody: string }).responseBody;
    const [d] = await deliveries(wrapped);
    for (const text of [answered, d!.response_body as string]) {
      expect(text.startsWith('xyz[REDACTED]abc ')).toBe(true);
      // Every base64 form: none of them decodes to text holding the token (a character or two at its ends may stay).
      const words = text.split(' ').slice(1, -1);
      expect(words).toHaveLength(5);
      for (const word of words) {
        expect(word).toContain('[REDACTED]');
        for (const part of word.split('[REDACTED]')) expect(Buffer.from(part, 'base64').toString('latin1')).not.toContain('T0ken');
      }
      expect(text).not.toContain(token);
      // The hub's own credential is the tenant's to quote (the hub never sends it there): as sent, so no guess at it is told apart.
      expect(text.endsWith(` key:${MASTER_KEY}`)).toBe(true);
    }
  });

  it('an answer holding a NUL character is answered as it is recorded: with U+FFFD (PostgreSQL text holds no NUL)', async () => {
    const nul = await integration(t1, 1, { name: 'tested-nul', targetUrl: `${receiver.url}/nul`, authMode: 'NONE' });
    const res = await t1.post(`/api/tenants/1/integrations/${nul}/test`, { eventType: 'org.created' });
    expect(res.status).toBe(200);
    const [d] = await deliveries(nul);
    const one = await t1.get(`/api/tenants/1/integrations/${nul}/deliveries/${d!.id}`);
    const recorded = [d!.response_body, (one.body as { attemptLog: Array<{ response_body: string }> }).attemptLog[0]!.response_body];
    expect(recorded).toEqual(['a\ufffdb', 'a\ufffdb']);
    expect(res.body).toMatchObject({ ok: true, httpStatus: 200, responseBody: recorded[0] });
  });

  it('400 `Unknown event type: <type>` for an uncatalogued or decision.* type', async () => {
    for (const type of ['nope.nothing', 'decision.dormant.onboarding']) {
      const res = await t1.post(`/api/tenants/1/integrations/${id}/test`, { eventType: type });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ error: `Unknown event type: ${type}` });
    }
    expect((await t1.post(`/api/tenants/1/integrations/${id}/test`, {})).status).toBe(400);
  });
});

describe('soft delete stops every send', () => {
  it('pending retries give up, new events are not delivered, history stays', async () => {
    const id = await integration(t1, 1, { name: 'deleted-later', targetUrl: `${receiver.url}/fail-deleted`, authMode: 'NONE' });
    await fireOrg();
    await receiver.waitFor(1, '/fail-deleted');
    expect((await t1.del(`/api/tenants/1/integrations/${id}`)).status).toBe(204);
    const sent = receiver.on('/fail-deleted').length;
    const later = await fireOrg();
    await consumerPassed(owner, 'webhooks', later);
    const list = await until('the open row to close', async () => {
      const rows = await deliveries(id);
      return rows[0]?.closedReason ? rows : undefined;
    });
    expect(list.length).toBe(1); // the later event made no row
    expect(list[0]).toMatchObject({ closedReason: CLOSED_REASON, succeeded: false });
    const closedAt = receiver.on('/fail-deleted').length;
    expect(closedAt).toBeLessThanOrEqual(Math.max(sent, 1) + 1); // at most one attempt already in flight
    await twoSweepsLater();
    expect(receiver.on('/fail-deleted').length).toBe(closedAt);
  });
});

describe('two tenants', () => {
  it('an integration receives its own tenant\'s events only; journals are separate', async () => {
    const theirs = await integration(t2, tenant2, { name: 'globex', targetUrl: `${receiver.url}/globex`, authMode: 'NONE', eventTypes: ['org.*'] });
    const mark = receiver.received.length;
    await fireOrg(); // tenant 1
    const own = await fireOrg(t2, tenant2);
    const [got] = await receiver.waitFor(1, '/globex');
    await consumerPassed(owner, 'webhooks', own);
    expect(await settled(theirs, t2, tenant2)).toHaveLength(1);
    expect(receiver.on('/globex').length).toBe(1);
    expect(got!.headers['x-svc-event-id']).toBe(String(own));
    expect(JSON.parse(got!.body)).toMatchObject({ tenantId: tenant2 });
    expect(receiver.received.slice(mark).filter((r) => r.path === '/globex').length).toBe(1);
    const list = (await t2.get('/api/platform/deliveries')).body as Delivery[];
    expect(list.map((d) => d.integrationId)).toEqual([theirs]);
    expect((await t2.get(`/api/tenants/${tenant2}/integrations/${theirs}/deliveries`)).status).toBe(200);
    expect((await t1.get(`/api/tenants/1/integrations/${theirs}/deliveries`)).status).toBe(404);
    // Filtering by another tenant's integration answers as for an unknown id: existence is not confirmed.
    expect(await t1.get(`/api/platform/deliveries?integrationId=${theirs}`)).toMatchObject({ status: 404, body: { error: `integration ${theirs} not found` } });
  });
});

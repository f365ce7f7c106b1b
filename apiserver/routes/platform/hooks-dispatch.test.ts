import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Catalog, loadCatalog } from '../../../src/events/catalog.js';
import { packageRoot } from '../../../src/package-root.js';
import { HookRunner } from '../../../src/platform/hooks/runner.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { consumerPassed, lastEventId } from '../../../test/harness/markers.js';
import { until as untilProbe } from '../../../test/harness/until.js';

/**
 * Hooks run for real events: `svc-hub all` (background on) consumes the outbox and hands each event
 * to the hook runner, in priority order, skipping hooks a tenant disabled.
 */

let hub: TestHub;
const ran: Array<{ hook: string; type: string; eventId?: number }> = [];

beforeAll(async () => {
  hub = await startTestHub({ 'svc.hooks.sweep-every': '200ms' }, undefined, { background: true });
  const modules = [...loadCatalog().modules, ...loadCatalog(join(packageRoot(), 'src/platform/hooks/__fixtures__/modules')).modules];
  // A TTL no test outlasts: an override made through this process is seen at once, not once the cache expires.
  const runner = new HookRunner(new Catalog(modules), hub.services.db, { ttlMs: 600_000 });
  runner.register('test.record', (event, hook) => {
    ran.push({ hook: hook.id, type: event.type, eventId: event.id });
  });
  runner.register('test.fail', () => {
    throw new Error('boom');
  });
  hub.services.hooks = runner;
});

afterAll(async () => {
  await hub.stop();
});

const until = (predicate: () => boolean, ms = 5000) => untilProbe('the hooks', predicate, { timeoutMs: ms, detail: () => `ran ${JSON.stringify(ran)}` });

const headers = { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' };

/** Marker: the hook consumer has handled every event written so far; no further hook can run for them. */
const passedAll = async () => consumerPassed(hub.services.db.worker, 'hooks', await lastEventId(hub.services.db.worker));

describe('the hook consumer', () => {
  it('runs the matching enabled hooks of an event written through the API, in priority order', async () => {
    ran.length = 0;
    const res = await fetch(`${hub.url}/api/platform/secrets`, { method: 'POST', headers, body: JSON.stringify({ name: 'crm-token', value: 'v-123456' }) });
    expect(res.status).toBe(201);
    await until(() => ran.length >= 2);
    await passedAll();
    // early-bird (5) is disabled by declaration; shaky (15) fails without stopping the others; orphan has no handler.
    expect(ran.map((r) => r.hook)).toEqual(['audit-trail', 'welcome']);
    expect(ran.every((r) => r.type === 'platform.secret.created' && typeof r.eventId === 'number')).toBe(true);
  });

  it('honours a tenant override', async () => {
    const toggle = await fetch(`${hub.url}/api/platform/hooks/welcome/toggle?tenantId=1&enabled=false`, { method: 'POST', headers });
    expect(toggle.status).toBe(200);
    ran.length = 0;
    const res = await fetch(`${hub.url}/api/platform/secrets`, { method: 'POST', headers, body: JSON.stringify({ name: 'erp-token', value: 'v-654321' }) });
    expect(res.status).toBe(201);
    await until(() => ran.length >= 1);
    await passedAll();
    expect(ran.map((r) => r.hook)).toEqual(['audit-trail']);
  });

  it('each event reaches the hooks once, however many wake-ups and sweeps happen', async () => {
    ran.length = 0;
    for (let i = 0; i < 5; i++) {
      await fetch(`${hub.url}/api/tenants/1/orgs`, { method: 'POST', headers, body: JSON.stringify({ code: `unit-${i}`, name: `Unit ${i}` }) });
    }
    await until(() => ran.length >= 5);
    await passedAll();
    const ids = ran.map((r) => r.eventId);
    expect(ran.map((r) => r.hook)).toEqual(Array(5).fill('org-watch'));
    expect(new Set(ids).size).toBe(5);
  });
});

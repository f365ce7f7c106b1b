import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { loadCatalog } from '../events/catalog.js';
import { EventWriter, type OutboxEvent } from '../events/outbox.js';
import type { WhenOutcome } from './cel.js';
import { evaluateRetryingTimeouts, MAX_TIMEOUTS_PER_BATCH, processBatchHandler, TIMEOUT_RETRIES } from './consumer.js';
import { applyProcess } from './store.js';

/** The process consumer's batch handler on a real database, with events made up for it. */

let t: MigratedDatabase;
const events = new EventWriter(loadCatalog());
const handle = processBatchHandler(events);
let nextId = 1_000_000;

const event = (tenantId: number, type: string, payload: Record<string, unknown>): OutboxEvent => {
  const id = nextId++;
  return { id, tenantId, type, payload, createdAt: new Date('2026-01-01T00:00:00Z'), position: { txid: '1', id } };
};

const apply = (tenant: number, name: string, spec: Record<string, unknown>) =>
  t.db.withTenant(tenant, (tx) => applyProcess(tx, { apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name }, spec }));

const decisions = async (type: string) =>
  (await t.owner.query<{ tenant_id: string; payload: Record<string, unknown> }>('select tenant_id, payload from events.outbox where type = $1 order by id', [type])).rows.map((r) => ({
    tenant: Number(r.tenant_id),
    ...r.payload,
  }));

beforeAll(async () => {
  t = await migratedDatabase({ 501: 'a', 502: 'b' });
  await apply(501, 'big', { event: 'connector.run.*', when: 'payload.records_out > 10', decision: 'decision.big', message: '{{payload.records_out}} rows' });
  await apply(502, 'all-runs', { event: 'connector.run.completed', decision: 'decision.any' });
  await apply(501, 'slow', { event: 'test.slow', when: 'payload.l.all(a, payload.l.all(b, a + b > -1))', decision: 'decision.slow' });
});

afterAll(async () => {
  await t.close();
});

describe('process batch handler', () => {
  it('emits one decision per matching event and process of the same tenant, never for decisions', async () => {
    const batch = [
      event(501, 'connector.run.completed', { records_out: 50 }),
      event(501, 'connector.run.completed', { records_out: 5 }),
      event(501, 'connector.run.started', { run_id: 'x' }), // no records_out: false
      event(502, 'connector.run.completed', { records_out: 50 }),
      event(502, 'connector.run.failed', { run_id: 'y' }),
      event(501, 'decision.big', { records_out: 500 }), // a decision: never evaluated
    ];
    await t.db.crossTenant('test', (tx) => handle(tx, batch));
    expect(await decisions('decision.big')).toEqual([{ tenant: 501, process: 'big', message: '50 rows', sourceEventId: batch[0]!.id, sourceType: 'connector.run.completed' }]);
    expect(await decisions('decision.any')).toEqual([{ tenant: 502, process: 'all-runs', message: `connector.run.completed (event ${batch[3]!.id}) matched process all-runs`, sourceEventId: batch[3]!.id, sourceType: 'connector.run.completed' }]);
    // And in the inbox of each tenant, in the same transaction.
    const inbox = await t.owner.query<{ tenant_id: string; type: string }>(`select tenant_id, type from events.inbox order by id`);
    expect(inbox.rows.map((r) => [Number(r.tenant_id), r.type])).toEqual([[501, 'decision.big'], [502, 'decision.any']]);
  });

  it('writes nothing when the transaction does not commit', async () => {
    const before = (await decisions('decision.any')).length;
    await expect(
      t.db.crossTenant('test', async (tx) => {
        await handle(tx, [event(502, 'connector.run.completed', {})]);
        throw new Error('crash before the commit');
      }),
    ).rejects.toThrow('crash before the commit');
    expect(await decisions('decision.any')).toHaveLength(before);
  });

  it('skips a process for the rest of the batch once its condition ran out of time a few times', async () => {
    const l = Array.from({ length: 5000 }, (_, i) => i);
    const batch = Array.from({ length: MAX_TIMEOUTS_PER_BATCH + 10 }, () => event(501, 'test.slow', { l }));
    const started = Date.now();
    await t.db.crossTenant('test', (tx) => handle(tx, batch));
    // Each evaluation is stopped at its bound (50 ms), and run again TIMEOUT_RETRIES times; after
    // MAX_TIMEOUTS_PER_BATCH such events none is tried (all 13 tried would take 13 × 150 ms).
    expect(Date.now() - started).toBeLessThan(50 * (1 + TIMEOUT_RETRIES) * (MAX_TIMEOUTS_PER_BATCH + 3));
    expect(await decisions('decision.slow')).toEqual([]);
  });

  it('runs an evaluation stopped for time again (a pause of the machine), and counts it false only when every run is stopped', () => {
    const stopped: WhenOutcome = { result: false, error: 'evaluation stopped after 50 ms', timedOut: true };
    const script = (outcomes: WhenOutcome[]) => {
      let calls = 0;
      return { evaluate: () => outcomes[Math.min(calls++, outcomes.length - 1)]!, calls: () => calls };
    };
    const once = script([stopped, { result: true }]);
    expect(evaluateRetryingTimeouts(once.evaluate)).toEqual({ result: true });
    expect(once.calls()).toBe(2);
    const always = script([stopped]);
    expect(evaluateRetryingTimeouts(always.evaluate)).toEqual(stopped);
    expect(always.calls()).toBe(1 + TIMEOUT_RETRIES);
    // Another failure (a missing field) is not run again.
    const missing = script([{ result: false, error: 'no such key: x', timedOut: false }, { result: true }]);
    expect(evaluateRetryingTimeouts(missing.evaluate)).toMatchObject({ result: false });
    expect(missing.calls()).toBe(1);
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { loadCatalog } from '../events/catalog.js';
import { EventWriter, type OutboxEvent } from '../events/outbox.js';
import { processBatchHandler } from './consumer.js';
import { applyProcess } from './store.js';

/**
 * The process consumer compiles each `when` once and keeps it: a version of a process is known by its
 * `updated_at`, which is the start of the transaction that applied it, to the microsecond, read to
 * the millisecond. Two applies whose transactions began in the same millisecond (a GitOps pipeline
 * and the operator applying one process at once, the later waiting for the earlier's row lock) leave
 * two versions with one millisecond: the consumer, having compiled the first, must still evaluate the
 * second's condition. On the real database; the second version is written as that apply leaves it.
 */

let t: MigratedDatabase;
const events = new EventWriter(loadCatalog());
const handle = processBatchHandler(events);
let nextId = 2_000_000;

const event = (tenantId: number, type: string, payload: Record<string, unknown>): OutboxEvent => {
  const id = nextId++;
  return { id, tenantId, type, payload, createdAt: new Date('2026-01-01T00:00:00Z'), position: { txid: '1', id } };
};

const decisions = async () => (await t.owner.query<{ n: number }>(`select count(*)::int as n from events.outbox where type = 'decision.versioned'`)).rows[0]!.n;

beforeAll(async () => {
  t = await migratedDatabase({ 601: 'a' });
});

afterAll(async () => {
  await t.close();
});

describe('a process applied again within the same millisecond', () => {
  it('is evaluated by its new condition', async () => {
    const manifest = (when: string) => ({ apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name: 'versioned' }, spec: { event: 'org.created', when, decision: 'decision.versioned' } });
    await t.db.withTenant(601, (tx) => applyProcess(tx, manifest('payload.n > 1')));
    await t.db.crossTenant('test', (tx) => handle(tx, [event(601, 'org.created', { n: 50 })]));
    expect(await decisions()).toBe(1);
    // The second apply: another condition, its updated_at in the same millisecond as the first's.
    const { rowCount } = await t.owner.query(
      `update processes.processes set when_expr = $1, manifest = $2, updated_at = date_trunc('milliseconds', updated_at) + interval '300 microseconds'
        where tenant_id = 601 and name = 'versioned'`,
      ['payload.n > 100', JSON.stringify(manifest('payload.n > 100'))],
    );
    expect(rowCount).toBe(1);
    await t.db.crossTenant('test', (tx) => handle(tx, [event(601, 'org.created', { n: 50 }), event(601, 'org.created', { n: 500 })]));
    expect(await decisions()).toBe(2);
  });
});

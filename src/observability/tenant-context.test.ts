import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { ClockRunner } from '../clock/clock.js';
import { OutboxLoop } from '../dispatch/outbox-loop.js';
import { loadCatalog } from '../events/catalog.js';
import { EventWriter } from '../events/outbox.js';
import { runForTenant, runWithContext } from './context.js';
import { logger, registerOperationSecret } from './logger.js';

/**
 * Background work serves several tenants in turn (an outbox consumer, a scheduler's tick): each
 * tenant's unit of work must log as that tenant, never as the first tenant the job met, and the
 * credentials one tenant's unit resolves are scrubbed from its own lines only, never from another
 * tenant's (docs/operations.md, "Logs").
 */

const ONE_SECRET = 'tenant-one-credential-4711';

/** The captured lines as `tenant|message`. */
const lines = (logs: ReturnType<typeof captureLogs>) => logs.lines().map((l) => `${l.tenant ?? '-'}|${l.msg}`);

describe('tenant units of work in shared background work', () => {
  it('each unit logs as its tenant; one tenant\'s credential is scrubbed from its lines and not from another\'s', () => {
    const logs = captureLogs('info');
    try {
      runWithContext({ job: 'outbox:email' }, () => {
        runForTenant(1, () => {
          registerOperationSecret(ONE_SECRET);
          logger().info(`one uses ${ONE_SECRET}`);
        });
        runForTenant(2, () => logger().info(`two writes ${ONE_SECRET} as its own text`));
        logger().info('the job itself');
      });
      expect(lines(logs)).toEqual(['1|one uses [REDACTED]', `2|two writes ${ONE_SECRET} as its own text`, '-|the job itself']);
    } finally {
      logs.restore();
    }
  });

  it('a unit of the request\'s own tenant shares the request\'s credentials', () => {
    const logs = captureLogs('info');
    try {
      runWithContext({ requestId: 'r1', tenantId: '1' }, () => {
        registerOperationSecret(ONE_SECRET);
        runForTenant(1, () => logger().info(`the run started by it logs ${ONE_SECRET}`));
      });
      expect(lines(logs)).toEqual(['1|the run started by it logs [REDACTED]']);
    } finally {
      logs.restore();
    }
  });
});

describe('with the database', () => {
  let t: MigratedDatabase;
  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'one', 2: 'two' });
  });
  afterAll(async () => {
    await t.close();
  });

  it('a job\'s transactions for two tenants log as each, and leave the job\'s own context without a tenant', async () => {
    const logs = captureLogs('info');
    try {
      await runWithContext({ job: 'sweep' }, async () => {
        await t.db.withTenant(1, async () => logger().info('in one'));
        await t.db.withTenant(2, async () => logger().info('in two'));
        logger().info('after both');
      });
      expect(lines(logs)).toEqual(['1|in one', '2|in two', '-|after both']);
    } finally {
      logs.restore();
    }
  });

  it('an outbox consumer handles each event as its tenant\'s unit (its lines outside any transaction too)', async () => {
    const events = new EventWriter(loadCatalog());
    const seen: number[] = [];
    const loop = new OutboxLoop(t.db, {
      name: 'tenant-lines',
      every: 60_000,
      batch: 10,
      handle: async (event) => {
        await t.db.withTenant(event.tenantId, async () => undefined);
        logger().info(`handled an event of ${event.tenantId}`);
        seen.push(event.tenantId);
      },
    });
    const clock = new ClockRunner();
    const logs = captureLogs('info');
    try {
      await loop.start(clock); // a new consumer starts at the outbox's head: the events come after
      for (const tenant of [1, 2, 1]) await t.db.withTenant(tenant, (tx) => events.emit(tx, 'org.updated', { orgId: tenant, tenantId: tenant }));
      // As the clock runs it: in the job's context, shared by every event of the pass.
      const deadline = Date.now() + 10_000;
      while (seen.length < 3 && Date.now() < deadline) await runWithContext({ job: 'outbox:tenant-lines' }, () => loop.drain());
      expect(lines(logs).filter((l) => l.includes('handled'))).toEqual(['1|handled an event of 1', '2|handled an event of 2', '1|handled an event of 1']);
    } finally {
      logs.restore();
      await clock.stop();
    }
  });
});

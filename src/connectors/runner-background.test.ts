import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { startDemoSource } from '../demo-source/server.js';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import { runnerOverHub } from '../../test/harness/connector-runner.js';
import { runWithContext } from '../observability/context.js';
import type { Database, Tx } from '../db/database.js';
import { failInterrupted, getRun } from './runs/ledger.js';
import { applyConnector } from './store.js';
import type { ConnectorSpec } from './types.js';

/**
 * Runs as background work meets them. A run whose end cannot be written because the database went away (stopped, out of disk) keeps
 * trying, kept alive by its heartbeat meanwhile, so that once the database is back its own end is
 * recorded and the interrupted-run sweep does not close it as `the hub stopped during the run` (the
 * process never stopped). The outage is staged on the run's end alone: every `update
 * connectors.runs set status` fails as node-postgres reports a lost connection while it lasts. And
 * runs a job starts for several tenants (the scheduler's tick) log as their own tenant.
 */

let demo: Awaited<ReturnType<typeof startDemoSource>>;
let hub: TestHub;
let owner: pg.Client;
let outage = false;
let refusedEnds = 0;

/** The hub's database, but a run's end fails as a lost connection while `outage` is set. */
function flakyEnds(db: Database): Database {
  const wrapped = Object.create(db) as Database;
  wrapped.withTenant = (<T>(tenantId: number, fn: (tx: Tx) => Promise<T>) =>
    db.withTenant(tenantId, (tx) => {
      const query = ((sql: unknown, ...rest: unknown[]) => {
        if (outage && typeof sql === 'string' && sql.startsWith('update connectors.runs set status')) {
          refusedEnds++;
          return Promise.reject(new Error('Connection terminated unexpectedly'));
        }
        return (tx.query as (...a: unknown[]) => unknown)(sql, ...rest);
      }) as Tx['query'];
      return fn(Object.assign(Object.create(tx) as Tx, { query }));
    })) as Database['withTenant'];
  return wrapped;
}

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 10, log: () => undefined });
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await hub.services.db.withTenant(1, (tx) =>
    applyConnector(tx, {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'ends' },
      connector_type: 'rest-generic',
      spec: { base_url: demo.url, endpoints: [{ id: 'partners', path: '/open/partners', pagination: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 100, response_path: '$.data', total_path: '$.total' }, target: { table: 'ext.ends', unique_key: '$.id' } }] },
    }),
  );
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
  await demo?.close();
});

describe('a run whose end meets an unavailable database', () => {
  it('writes its own end once the database is back, kept alive meanwhile: the sweep does not close it as interrupted', async () => {
    const runner = runnerOverHub(hub, 100, flakyEnds(hub.services.db));
    try {
      const connector = (await hub.services.connectors.byName(1, 'ends')) as ConnectorSpec;
      outage = true;
      const triggered = await runner.trigger(1, connector, { triggeredBy: 'test' });
      const runId = triggered.runs[0]!.id;
      await until('the run\'s end to be refused twice', () => refusedEnds >= 2);
      // The sweep, with a staleness shorter than the outage so far: the heartbeat keeps the run alive.
      // Running for longer than that staleness by the database's clock: its heartbeat_at of the start would be stale now.
      await until('the run older than the staleness', async () => (await owner.query('select started_at < now() - interval \'400 milliseconds\' as old from connectors.runs where id = $1', [runId])).rows[0]?.old);
      const swept = await hub.services.db.crossTenant('test-sweep', (tx) => failInterrupted(tx, 400, async () => {}));
      expect(swept.map((r) => r.id)).not.toContain(runId);
      outage = false;
      const [run] = await triggered.done;
      expect(run).toMatchObject({ id: runId, errorMessage: null, status: 'Completed', recordsOut: 10 });
      const stored = await hub.services.db.withTenant(1, (tx) => getRun(tx, runId));
      expect(stored.status).toBe('Completed');
      const { rows } = await owner.query<{ type: string }>(`select type from events.outbox where payload->>'run_id' = $1 and type like 'connector.run.%' order by id`, [runId]);
      expect(rows.map((r) => r.type)).toEqual(['connector.run.started', 'connector.run.completed']);
    } finally {
      outage = false;
      await runner.close();
    }
  }, 30_000);
});

describe('runs a job starts for several tenants', () => {
  it('log as their own tenant, not as the first tenant the job met', async () => {
    await owner.query(`insert into core.tenants (id, code, name) values (2, 'second', 'Second') on conflict do nothing`);
    const broken = {
      apiVersion: 'connectors.svc.io/v1',
      kind: 'Connector',
      metadata: { name: 'broken' },
      connector_type: 'rest-generic',
      spec: { base_url: demo.url, endpoints: [{ id: 'nope', path: '/nope', target: { table: 'ext.nope', unique_key: '$.id' } }] },
    };
    for (const tenant of [1, 2]) await hub.services.db.withTenant(tenant, (tx) => applyConnector(tx, broken));
    const logs = captureLogs('info');
    try {
      // As the connector scheduler's tick starts them: in its job's context, one tenant after the other.
      await runWithContext({ job: 'connector-scheduler' }, async () => {
        for (const tenant of [1, 2]) {
          const connector = (await hub.services.connectors.byName(tenant, 'broken')) as ConnectorSpec;
          await (await hub.services.connectors.runner.trigger(tenant, connector, { triggeredBy: 'schedule' })).done;
        }
      });
      const failed = logs.lines().filter((l) => l.msg === 'connector run failed');
      expect(failed.map((l) => ({ tenant: l.tenant, job: l.job }))).toEqual([
        { tenant: '1', job: 'connector-scheduler' },
        { tenant: '2', job: 'connector-scheduler' },
      ]);
    } finally {
      logs.restore();
    }
  }, 30_000);
});

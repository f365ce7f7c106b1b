import type pg from 'pg';
import type { Database } from '../../src/db/database.js';
import { noIndexer } from '../../src/connectors/indexer.js';
import { ConnectorRunner, type RunnerOptions } from '../../src/connectors/runner.js';
import { applyConnector } from '../../src/connectors/store.js';
import type { ConnectorSpec } from '../../src/connectors/types.js';
import type { TestHub } from './hub.js';

/**
 * A connector runner of its own (as another process has) over a test hub's database, engine and
 * events: the hub's page reader, chunks of 1000 rows, no search hand-off and the hub's subscribers,
 * each of which `options` may replace (a staged fault's database, a scripted reader, another chunk
 * size or indexer, a heartbeat).
 */
export function hubRunner(hub: TestHub, options: Partial<RunnerOptions> = {}): ConnectorRunner {
  return new ConnectorRunner({
    db: hub.services.db,
    events: hub.services.events,
    ext: hub.services.connectors.ext,
    reader: hub.services.connectors.reader,
    indexer: noIndexer,
    chunkSize: 1000,
    subscribers: hub.services.subscribers,
    ...options,
  });
}

/** hubRunner with its heartbeat every `heartbeatEvery` ms (0: never), `db` standing in for the hub's database (a staged fault). */
export function runnerOverHub(hub: TestHub, heartbeatEvery: number, db: Database = hub.services.db): ConnectorRunner {
  return hubRunner(hub, { db, heartbeatEvery });
}

/**
 * Tenant 1's rest-generic Connector `name` applied on the hub: one endpoint `e` writing `table`
 * keyed by `$.id`, its source a closed port (a test's run reads through a reader it gives);
 * `target` adds to the endpoint's target (`promote`, …).
 */
export async function appliedConnector(hub: TestHub, name: string, table: string, target: Record<string, unknown> = {}): Promise<ConnectorSpec> {
  const spec = { base_url: 'http://127.0.0.1:9', endpoints: [{ id: 'e', path: '/e', target: { table, unique_key: '$.id', ...target } }] };
  const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec };
  return (await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest))).connector;
}

/** The keys stored in tenant 1's table `table` (in `ext_t1`), in order; `['(no table)']` when it does not exist. */
export async function storedKeys(owner: pg.Client, table: string): Promise<string[]> {
  const found = await owner.query<{ t: string | null }>('select to_regclass($1) as t', [`ext_t1.${table}`]);
  if (!found.rows[0]?.t) return ['(no table)'];
  const { rows } = await owner.query<{ key: string }>(`select external_id as key from ext_t1.${table} order by 1`);
  return rows.map((r) => r.key);
}

import type pg from 'pg';
import type { Database } from '../../src/db/database.js';
import { noIndexer } from '../../src/connectors/indexer.js';
import { ConnectorRunner } from '../../src/connectors/runner.js';
import type { TestHub } from './hub.js';

/**
 * A connector runner of its own (as another process has) over a test hub's database, engine and
 * events, without the search hand-off; `db` stands in for the hub's database (a staged fault).
 */
export function runnerOverHub(hub: TestHub, heartbeatEvery: number, db: Database = hub.services.db): ConnectorRunner {
  return new ConnectorRunner({
    db,
    events: hub.services.events,
    ext: hub.services.connectors.ext,
    reader: hub.services.connectors.reader,
    indexer: noIndexer,
    chunkSize: 1000,
    subscribers: hub.services.subscribers,
    heartbeatEvery,
  });
}

/** The keys stored in tenant 1's table `table` (in `ext_t1`), in order; `['(no table)']` when it does not exist. */
export async function storedKeys(owner: pg.Client, table: string): Promise<string[]> {
  const found = await owner.query<{ t: string | null }>('select to_regclass($1) as t', [`ext_t1.${table}`]);
  if (!found.rows[0]?.t) return ['(no table)'];
  const { rows } = await owner.query<{ key: string }>(`select external_id as key from ext_t1.${table} order by 1`);
  return rows.map((r) => r.key);
}

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

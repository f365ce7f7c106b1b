import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { until } from '../../test/harness/until.js';
import type { Tx } from '../db/database.js';
import { expandPending, pendingIndexer } from '../retrieval/indexer.js';
import { applyConnector, deleteConnector, purgeEndpoint } from './store.js';
import { ExtSchema } from './target/ddl.js';
import { prepareRow } from './target/rows.js';
import { upsertChunk } from './target/writer.js';
import type { ConnectorSpec } from './types.js';

/**
 * A connector delete and an endpoint purge of the same connector (or two purges of it) sent at
 * once, on the real PostgreSQL, in a fixed interleaving: the first is held just after a chosen
 * statement, the second sent meanwhile, the first let go once the second waits on a lock. Both lock
 * the connector's row first (src/connectors/store.ts, lockConnector), so the second waits there,
 * holding nothing, and neither ends in a deadlock (40P01).
 */
describe('a connector delete and an endpoint purge of one connector at once', () => {
  let t: MigratedDatabase;
  let ext: ExtSchema;

  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme' });
    ext = new ExtSchema(t.ownerUrl, TEST_ROLES);
  });
  afterAll(async () => {
    await ext?.close();
    await t?.close();
  });

  async function applied(name: string, endpoints: Array<{ id: string; table: string }>): Promise<ConnectorSpec> {
    const spec = { base_url: 'http://127.0.0.1:9', endpoints: endpoints.map((e) => ({ id: e.id, path: `/${e.id}`, target: { table: e.table, unique_key: '$.id' } })) };
    const manifest = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec };
    return (await t.db.withTenant(1, (tx) => applyConnector(tx, manifest))).connector;
  }

  /** A run's chunk of one endpoint: its rows written, its table registered, its pending entry recorded; then indexed, and its watermark set. */
  async function written(connector: ConnectorSpec, endpointId: string, items: unknown[]): Promise<void> {
    const endpoint = connector.endpoints.find((e) => e.id === endpointId)!;
    const { table } = endpoint.target;
    await ext.ensureTable(1, table, []);
    const rows = items.map((item) => prepareRow(item, endpoint.target));
    const ids = { tenantId: 1, connectorId: connector.id, endpointUuid: endpoint.uuid };
    await t.db.withTenant(1, async (tx) => {
      await tx.query(
        'insert into connectors.ext_tables (tenant_id, connector_id, endpoint_uuid, table_name) values (core.current_tenant(), $1, $2, $3) on conflict do nothing',
        [connector.id, endpoint.uuid, table],
      );
      await upsertChunk(tx, endpoint.target, rows, ids);
      await pendingIndexer.rowsWritten(tx, { ...ids, connectorName: connector.name, table, scopes: [connector.name], rows });
    });
    while ((await expandPending(t.db)) > 0);
    await t.owner.query(`update connectors.endpoints set watermark = '7', watermark_updated_at = now() where uuid = $1`, [endpoint.uuid]);
  }

  /** `work` on a transaction held once its first statement matching `at` has answered: `held` resolves then, `go` lets it on. */
  function heldWork(at: RegExp, work: (tx: Tx) => Promise<unknown>): { held: Promise<void>; go: () => void; outcome: Promise<string> } {
    let reached = () => {};
    let go = () => {};
    const held = new Promise<void>((resolve) => {
      reached = resolve;
    });
    const released = new Promise<void>((resolve) => {
      go = resolve;
    });
    let stopped = false;
    const hold = (tx: Tx): Tx => ({
      tenantId: tx.tenantId,
      query: async (text, values, options) => {
        const result = await tx.query(text, values, options);
        if (!stopped && at.test(text)) {
          stopped = true;
          reached();
          await released;
        }
        return result as never;
      },
    });
    return { held, go: () => go(), outcome: outcome(t.db.withTenant(1, (tx) => work(hold(tx)))) };
  }

  function outcome(work: Promise<unknown>): Promise<string> {
    return work.then(
      (value) => `committed${value === undefined ? '' : `: ${String(value)}`}`,
      (err: unknown) => `failed: ${err instanceof Error ? err.message : String(err)}`,
    );
  }

  /** Sends `second` while `first` is held, then lets `first` go once `second` has ended or waits on a lock. */
  async function meanwhile(first: ReturnType<typeof heldWork>, second: (tx: Tx) => Promise<unknown>): Promise<{ first: string; second: string }> {
    await first.held;
    let ended = false;
    const done = outcome(t.db.withTenant(1, second)).finally(() => {
      ended = true;
    });
    await until('the second to end or wait on a lock', async () => {
      if (ended) return true;
      const { rows } = await t.owner.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
      );
      return rows[0]!.n > 0;
    });
    first.go();
    return { first: await first.outcome, second: await done };
  }

  async function rows(table: string): Promise<string[]> {
    const found = await t.owner.query<{ t: string | null }>('select to_regclass($1) as t', [`ext_t1.${table}`]);
    if (!found.rows[0]?.t) return ['(no table)'];
    const { rows } = await t.owner.query<{ key: string }>(`select external_id as key from ext_t1.${table} order by 1`);
    return rows.map((r) => r.key);
  }

  it('a purge sent while a delete of its connector has removed its rows waits for the delete, then is a 404: no deadlock', async () => {
    const crm = await applied('crm', [{ id: 'people', table: 'ext.people' }]);
    await written(crm, 'people', [
      { id: 'a1', name: 'Ada' },
      { id: 'b2', name: 'Bob' },
    ]);

    // The delete holds the table's rows; its last step drops the table, which then registers nothing.
    const remove = heldWork(/^delete from "ext_t1"\."people"/, (tx) => deleteConnector(tx, 'crm'));
    const ended = await meanwhile(remove, (tx) => purgeEndpoint(tx, 'crm', 'people'));

    expect(ended).toEqual({ first: 'committed: true', second: 'failed: connector crm not found' });
    expect(await rows('people')).toEqual(['(no table)']);
    expect((await t.owner.query('select 1 from retrieval.chunks where connector_id = $1', [crm.id])).rows).toEqual([]);
  });

  it('two purges of one connector whose endpoints share a table run one after the other: no deadlock', async () => {
    const books = await applied('books', [
      { id: 'novels', table: 'ext.books' },
      { id: 'poems', table: 'ext.books' },
    ]);
    await written(books, 'novels', [{ id: 'n1', title: 'Emma' }]);
    await written(books, 'poems', [{ id: 'p1', title: 'Ozymandias' }]);

    // The novels purge has cleared the watermark of the other endpoint writing its table (the poems).
    const novels = heldWork(/^update connectors\.endpoints w set watermark = null/, (tx) => purgeEndpoint(tx, 'books', 'novels'));
    const ended = await meanwhile(novels, (tx) => purgeEndpoint(tx, 'books', 'poems'));

    expect(ended).toEqual({ first: 'committed', second: 'committed' });
    expect(await rows('books')).toEqual([]);
    const marks = await t.owner.query('select endpoint_id, watermark from connectors.endpoints where connector_id = $1 order by 1', [books.id]);
    expect(marks.rows).toEqual([
      { endpoint_id: 'novels', watermark: null },
      { endpoint_id: 'poems', watermark: null },
    ]);
  });
});

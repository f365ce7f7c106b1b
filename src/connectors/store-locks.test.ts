import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { type Hold, holdAfter, outcome, untilEndedOrWaiting } from '../../test/harness/held-transaction.js';
import type { Tx } from '../db/database.js';
import { expandPending, pendingIndexer } from '../retrieval/indexer.js';
import { checkManifest } from './manifest/validate.js';
import { applyConnector, deleteConnector, purgeEndpoint, targetChanges } from './store.js';
import { ExtSchema } from './target/ddl.js';
import { prepareRow } from './target/rows.js';
import { upsertChunk } from './target/writer.js';
import type { ConnectorSpec } from './types.js';

/**
 * A connector delete and an endpoint purge of the same connector (or two purges of it), or of
 * connectors sharing tables, sent at once, on the real PostgreSQL, in a fixed interleaving: the
 * first is held just after a chosen statement, the second sent meanwhile, the first let go once the
 * second waits on a lock. Both lock the connector's row first (src/connectors/store.ts,
 * lockConnector), then the tables they touch (src/connectors/target/drop.ts, lockTables), so the
 * second waits there, holding nothing the first needs, and neither ends in a deadlock (40P01).
 */
describe('connector deletes and endpoint purges at once', () => {
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

  function manifestOf(name: string, endpoints: Array<{ id: string; table: string }>) {
    const spec = { base_url: 'http://127.0.0.1:9', endpoints: endpoints.map((e) => ({ id: e.id, path: `/${e.id}`, target: { table: e.table, unique_key: '$.id' } })) };
    return { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec };
  }

  async function applied(name: string, endpoints: Array<{ id: string; table: string }>): Promise<ConnectorSpec> {
    return (await t.db.withTenant(1, (tx) => applyConnector(tx, manifestOf(name, endpoints)))).connector;
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
  function heldWork(at: RegExp, work: (tx: Tx) => Promise<unknown>): Hold & { outcome: Promise<string> } {
    const hold = holdAfter(at);
    return { ...hold, outcome: outcome(t.db.withTenant(1, (tx) => work(hold.wrap(tx))), true) };
  }

  /** Sends `second` while `first` is held, then lets `first` go once `second` has ended or waits on a lock. */
  async function meanwhile(first: ReturnType<typeof heldWork>, second: (tx: Tx) => Promise<unknown>): Promise<{ first: string; second: string }> {
    await first.held;
    let ended = false;
    const done = outcome(t.db.withTenant(1, second), true).finally(() => {
      ended = true;
    });
    await untilEndedOrWaiting(t.owner, () => ended, 'the second');
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
  /** The watermarks of the connectors' endpoints, as `connector/endpoint: watermark`. */
  async function watermarks(...connectors: ConnectorSpec[]): Promise<string[]> {
    const { rows } = await t.owner.query<{ name: string }>(
      `select c.name || '/' || w.endpoint_id || ': ' || coalesce(w.watermark, '(none)') as name
         from connectors.endpoints w join connectors.connectors c on c.id = w.connector_id where c.id = any($1::uuid[]) order by 1`,
      [connectors.map((c) => c.id)],
    );
    return rows.map((r) => r.name);
  }

  async function chunks(...connectors: ConnectorSpec[]): Promise<string[]> {
    const { rows } = await t.owner.query<{ key: string }>('select external_id as key from retrieval.chunks where connector_id = any($1::uuid[]) order by 1', [
      connectors.map((c) => c.id),
    ]);
    return rows.map((r) => r.key);
  }

  it('two purges of endpoints of different connectors sharing a table run one after the other: no deadlock', async () => {
    const shop = await applied('shop', [{ id: 'orders', table: 'ext.sales' }]);
    const till = await applied('till', [{ id: 'receipts', table: 'ext.sales' }]);
    await written(shop, 'orders', [{ id: 'o1', total: 10 }]);
    await written(till, 'receipts', [{ id: 'r1', total: 12 }]);

    // The shop purge has removed its rows and cleared the watermark of the till's endpoint, which
    // writes the same table; the till purge would clear the shop endpoint's and then wait to clear its own.
    const orders = heldWork(/^update connectors\.endpoints w set watermark = null/, (tx) => purgeEndpoint(tx, 'shop', 'orders'));
    const ended = await meanwhile(orders, (tx) => purgeEndpoint(tx, 'till', 'receipts'));

    expect(ended).toEqual({ first: 'committed', second: 'committed' });
    expect(await rows('sales')).toEqual([]);
    expect(await watermarks(shop, till)).toEqual(['shop/orders: (none)', 'till/receipts: (none)']);
    expect(await chunks(shop, till)).toEqual([]);
  });

  it('a connector delete and a purge of another connector sharing a table run one after the other: no deadlock', async () => {
    const ledger = await applied('ledger', [
      { id: 'invoices', table: 'ext.invoices' },
      { id: 'notes', table: 'ext.ledger_notes' },
    ]);
    const billing = await applied('billing', [{ id: 'bills', table: 'ext.invoices' }]);
    await written(ledger, 'invoices', [{ id: 'i1', amount: 5 }]);
    await written(ledger, 'notes', [{ id: 'n1', text: 'paid' }]);
    await written(billing, 'bills', [{ id: 'b1', amount: 7 }]);

    // The delete has removed the ledger's rows of the shared table and cleared the billing endpoint's
    // watermark; the purge would clear the ledger endpoint's (which the delete then removes) and then
    // wait to clear its own.
    const remove = heldWork(/^update connectors\.endpoints w set watermark = null/, (tx) => deleteConnector(tx, 'ledger'));
    const ended = await meanwhile(remove, (tx) => purgeEndpoint(tx, 'billing', 'bills'));

    expect(ended).toEqual({ first: 'committed: true', second: 'committed' });
    // The shared table stays (the billing endpoint registers it), empty; the ledger's own one is dropped.
    expect(await rows('invoices')).toEqual([]);
    expect(await rows('ledger_notes')).toEqual(['(no table)']);
    expect(await watermarks(ledger, billing)).toEqual(['billing/bills: (none)']);
    expect(await chunks(ledger, billing)).toEqual([]);
    const registered = await t.owner.query('select table_name from connectors.ext_tables where connector_id = any($1::uuid[]) order by 1', [[ledger.id, billing.id]]);
    expect(registered.rows).toEqual([{ table_name: 'ext.invoices' }]);
  });

  it('two purges of tables no one of them shares, but which other endpoints both write, run one after the other: no deadlock', async () => {
    // Each endpoint changed its table once, and so registers two: the purged ones a1 and a3, b2 and b4;
    // the others (of a third connector) a1 and b4, a3 and b2. Each purge clears the watermarks of both.
    const north = await applied('north', [{ id: 'n', table: 'ext.x1' }]);
    const south = await applied('south', [{ id: 's', table: 'ext.x2' }]);
    const other = await applied('other', [
      { id: 'p', table: 'ext.x1' },
      { id: 'q', table: 'ext.x3' },
    ]);
    await written(north, 'n', [{ id: 'n1' }]);
    await written(south, 's', [{ id: 's1' }]);
    await written(other, 'p', [{ id: 'p1' }]);
    await written(other, 'q', [{ id: 'q1' }]);
    const north2 = await applied('north', [{ id: 'n', table: 'ext.x3' }]);
    const south2 = await applied('south', [{ id: 's', table: 'ext.x4' }]);
    const other2 = await applied('other', [
      { id: 'p', table: 'ext.x4' },
      { id: 'q', table: 'ext.x2' },
    ]);
    await written(north2, 'n', [{ id: 'n3' }]);
    await written(south2, 's', [{ id: 's4' }]);
    await written(other2, 'p', [{ id: 'p4' }]);
    await written(other2, 'q', [{ id: 'q2' }]);

    // The north purge has emptied ext.x1 of its rows and cleared other/p's watermark; the south purge
    // would clear other/q's (ext.x2), then wait for other/p (ext.x4), which north holds, while north
    // would go on to ext.x3 and wait for other/q.
    const n = heldWork(/^update connectors\.endpoints w set watermark = null/, (tx) => purgeEndpoint(tx, 'north', 'n'));
    const ended = await meanwhile(n, (tx) => purgeEndpoint(tx, 'south', 's'));

    expect(ended).toEqual({ first: 'committed', second: 'committed' });
    expect([await rows('x1'), await rows('x2'), await rows('x3'), await rows('x4')]).toEqual([['p1'], ['q2'], ['q1'], ['p4']]);
    expect(await watermarks(north, south, other)).toEqual(['north/n: (none)', 'other/p: (none)', 'other/q: (none)', 'south/s: (none)']);
  });
  it("a connector delete and a run's new column on a table it shares run one after the other: no deadlock", async () => {
    const depot = await applied('depot', [
      { id: 'stock', table: 'ext.stock' },
      { id: 'moves', table: 'ext.depot_moves' },
    ]);
    const shelf = await applied('shelf', [{ id: 'items', table: 'ext.stock' }]);
    await written(depot, 'stock', [{ id: 'd1', colour: 'red' }]);
    await written(depot, 'moves', [{ id: 'm1' }]);
    await written(shelf, 'items', [{ id: 's1', colour: 'blue' }]);

    // The delete has removed its rows of the shared table; a run of the other connector then adds a
    // promoted column to it (the tenant's DDL lock, then the table's exclusive lock), while the delete
    // ends by dropping the tables nothing registers any more (under the same DDL lock).
    const remove = heldWork(/^delete from "ext_t1"\."stock"/, (tx) => deleteConnector(tx, 'depot'));
    const ended = await meanwhile(remove, async () => {
      await ext.ensureTable(1, 'ext.stock', [{ name: 'colour', path: '$.colour', type: 'text' }]);
    });

    expect(ended).toEqual({ first: 'committed: true', second: 'committed' });
    expect(await rows('stock')).toEqual(['s1']);
    expect(await rows('depot_moves')).toEqual(['(no table)']);
    const column = await t.owner.query(`select 1 from pg_attribute where attrelid = 'ext_t1.stock'::regclass and attname = 'colour'`);
    expect(column.rows).toHaveLength(1);
  });

  it("a re-apply counting the rows of its endpoints' old tables and a delete dropping them run one after the other: no deadlock", async () => {
    // The dock registers ext.rb_a and ext.rb_b (its runs wrote them); the crate's endpoints target
    // them, never having run: its re-apply moves them elsewhere, counting their rows in the old
    // tables first (rb_b, then rb_a), while the dock's delete drops them once nothing registers them
    // (rb_a, then rb_b: name order).
    const dock = await applied('dock', [
      { id: 'a', table: 'ext.rb_a' },
      { id: 'b', table: 'ext.rb_b' },
    ]);
    await written(dock, 'a', [{ id: 'a1' }]);
    await written(dock, 'b', [{ id: 'b1' }]);
    await applied('crate', [
      { id: 'x', table: 'ext.rb_b' },
      { id: 'y', table: 'ext.rb_a' },
    ]);

    const moved = manifestOf('crate', [
      { id: 'x', table: 'ext.rb_x2' },
      { id: 'y', table: 'ext.rb_y2' },
    ]);
    const reapply = heldWork(/^select count\(\*\) as n from "ext_t1"\."rb_b"/, (tx) => applyConnector(tx, moved).then(() => undefined));
    const ended = await meanwhile(reapply, (tx) => deleteConnector(tx, 'dock'));

    expect(ended).toEqual({ first: 'committed', second: 'committed: true' });
    expect([await rows('rb_a'), await rows('rb_b')]).toEqual([['(no table)'], ['(no table)']]);
  });

  it("a re-apply sent while a delete has dropped its endpoint's old table waits for the delete, then counts no rows there", async () => {
    const quay = await applied('quay', [{ id: 'c', table: 'ext.rb_c' }]);
    await written(quay, 'c', [{ id: 'c1' }]);
    await applied('barge', [{ id: 'z', table: 'ext.rb_c' }]);

    // The delete has dropped ext.rb_c (nothing registers it once the quay's registrations are gone), uncommitted.
    const remove = heldWork(/^select connectors\.drop_unused_ext_tables/, (tx) => deleteConnector(tx, 'quay'));
    const ended = await meanwhile(remove, (tx) => applyConnector(tx, manifestOf('barge', [{ id: 'z', table: 'ext.rb_z2' }])).then(() => undefined));

    expect(ended).toEqual({ first: 'committed: true', second: 'committed' });
    expect(await rows('rb_c')).toEqual(['(no table)']);
  });

  it("a validate that found its endpoint's old table, sent while a delete drops it, counts no rows there instead of failing (relation does not exist)", async () => {
    const pier = await applied('pier', [{ id: 'd', table: 'ext.rb_d' }]);
    await written(pier, 'd', [{ id: 'd1' }]);
    const raft = await applied('raft', [{ id: 'w', table: 'ext.rb_d' }]);

    // A validate reads through Database.readWithTenant, each statement its own transaction: the DDL
    // lock it takes ends with its statement. It has found ext.rb_d; the delete drops it and commits
    // before the count.
    const draft = checkManifest(manifestOf('raft', [{ id: 'w', table: 'ext.rb_w2' }])).connector!;
    const hold = holdAfter(/^select \(select c\.oid::regclass from pg_class c where c\.oid = to_regclass\(\$1\)/);
    const validated = outcome(t.db.readWithTenant(1, (tx) => targetChanges(hold.wrap(tx), draft)).then((changes) => JSON.stringify(changes)), true);
    await hold.held;
    expect(await outcome(t.db.withTenant(1, (tx) => deleteConnector(tx, 'pier')), true)).toBe('committed: true');
    expect(await rows('rb_d')).toEqual(['(no table)']);
    hold.go();

    expect(await validated).toBe(`committed: ${JSON.stringify([{ uuid: raft.endpoints[0]!.uuid }])}`);
  });
});

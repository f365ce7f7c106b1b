import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase, TEST_ROLES } from '../../test/harness/database.js';
import { ExtSchema } from '../connectors/target/ddl.js';
import { dropConnectorData, purgeEndpointData } from '../connectors/target/drop.js';
import { prepareRow } from '../connectors/target/rows.js';
import { upsertChunk } from '../connectors/target/writer.js';
import type { Target } from '../connectors/types.js';
import type { EmbeddingPort } from './embedding/port.js';
import { expandPending, pendingIndexer } from './indexer.js';
import { createRetrievalServices, indexedAnything, type RetrievalServices } from './services.js';

/**
 * Rows of identical content under several keys of one table are one chunk per corpus (the unique
 * index on tenant, corpus and row hash). A connector delete or an endpoint purge removes rows: a
 * chunk that cited one of them, or that carried the purged endpoint, is made again naming a
 * surviving identical row of its connector (with that row's endpoint), or removed where none
 * survives; so is a chunk whose row another connector rewrote (the same key, other content). It
 * never cites a removed row, nor another tenant's, and search answers follow.
 */
describe('chunks of identical rows when their rows are deleted or purged', () => {
  let t: MigratedDatabase;
  let ext: ExtSchema;
  let retrieval: RetrievalServices;

  const crm = { id: '00000000-0000-4000-8000-0000000000a1', name: 'crm', endpoint: '00000000-0000-4000-8000-0000000000a2' };
  const erp = { id: '00000000-0000-4000-8000-0000000000b1', name: 'erp', endpoint: '00000000-0000-4000-8000-0000000000b2' };
  const books = { id: '00000000-0000-4000-8000-0000000000c1', name: 'books', byId: '00000000-0000-4000-8000-0000000000c2', byN: '00000000-0000-4000-8000-0000000000c3' };
  /** Tenant 2's connector: the same content in its own table, under the key tenant 1's chunks named. */
  const other = { id: '00000000-0000-4000-8000-0000000000d1', name: 'crm', endpoint: '00000000-0000-4000-8000-0000000000d2' };
  const byId = (table: string): Target => ({ kind: 'hybrid', table, unique_key: '$.id', promote: [] });
  const byN = (table: string): Target => ({ kind: 'hybrid', table, unique_key: '$.n', promote: [] });

  /** A constant model: every chunk is as near as any other, so a search answers them all. */
  const port: EmbeddingPort = { provider: 'test', model: 'constant', dimensions: 4, embed: async (texts) => texts.map(() => Float32Array.from([1, 0, 0, 0])) };

  beforeAll(async () => {
    t = await migratedDatabase({ 1: 'acme', 2: 'beta' });
    ext = new ExtSchema(t.ownerUrl, TEST_ROLES);
    await ext.ensureTable(1, 'ext.shared', []);
    await ext.ensureTable(2, 'ext.shared', []);
    retrieval = createRetrievalServices({
      db: t.db,
      embedding: port,
      chat: undefined,
      statementTimeoutMs: 5000,
      platformDocuments: () => [],
      memoryBudgetBytes: 16 * 1024 * 1024,
      embedBatch: 100,
      vectorSearch: 'memory',
    });
  });
  afterAll(async () => {
    await retrieval?.close();
    await ext?.close();
    await t?.close();
  });

  /** A run's chunk: its rows written under `target`'s key, its table registered, its pending entry recorded. */
  async function written(tenantId: number, connector: { id: string; name: string }, endpointUuid: string, target: Target, items: unknown[]): Promise<void> {
    const rows = items.map((item) => prepareRow(item, target));
    const ids = { tenantId, connectorId: connector.id, endpointUuid };
    await t.db.withTenant(tenantId, async (tx) => {
      await tx.query(
        'insert into connectors.ext_tables (tenant_id, connector_id, endpoint_uuid, table_name) values (core.current_tenant(), $1, $2, $3) on conflict do nothing',
        [connector.id, endpointUuid, target.table],
      );
      await upsertChunk(tx, target, rows, ids);
      await pendingIndexer.rowsWritten(tx, { ...ids, connectorName: connector.name, table: target.table, scopes: [connector.name], rows });
    });
  }

  type Chunk = { corpus: string; key: string; endpoint: string; content: string };
  async function chunks(tenantId: number, table: string): Promise<Chunk[]> {
    const { rows } = await t.owner.query<Chunk>(
      `select corpus, external_id as key, endpoint_uuid::text as endpoint, content from retrieval.chunks
        where tenant_id = $1 and table_name = $2 order by corpus, content`,
      [tenantId, table],
    );
    return rows;
  }

  /** Row chunks of the tenant whose row (table, key, hash) is not in the tenant's own table, or whose endpoint is not that row's though the row is their connector's. */
  async function miscited(tenantId: number): Promise<string[]> {
    const { rows: found } = await t.owner.query<{ id: string; table_name: string; external_id: string; row_hash: string; connector_id: string; endpoint_uuid: string }>(
      'select id::text, table_name, external_id, row_hash, connector_id::text, endpoint_uuid::text from retrieval.chunks where tenant_id = $1 and row_hash is not null',
      [tenantId],
    );
    const wrong: string[] = [];
    for (const c of found) {
      const { rows } = await t.owner.query<{ connector_id: string; endpoint_id: string }>(
        `select connector_id::text, endpoint_id::text from ext_t${tenantId}.${c.table_name.slice(4)} where external_id = $1 and row_hash = $2`,
        [c.external_id, c.row_hash],
      );
      const row = rows[0];
      if (!row) wrong.push(`${c.table_name} ${c.external_id}: no such row`);
      else if (row.connector_id === c.connector_id && row.endpoint_id !== c.endpoint_uuid) wrong.push(`${c.table_name} ${c.external_id}: endpoint ${c.endpoint_uuid}, the row's is ${row.endpoint_id}`);
    }
    return wrong;
  }

  /**
   * What a search of everything cites (table, key, row hash), each checked against the tenant's rows:
   * how many hits are of `table` (each case counts its own table's, whatever the others left).
   */
  async function searchCitesOnlyRows(tenantId: number, table: string): Promise<number> {
    for (;;) {
      if (!indexedAnything(await retrieval.indexPass())) break;
    }
    const hits = await retrieval.search(tenantId, { query: 'anything', topK: 100 });
    for (const hit of hits) {
      const table = hit.metadata.table!;
      const { rows } = await t.owner.query(`select 1 from ext_t${tenantId}.${table.slice(4)} where external_id = $1 and row_hash = $2`, [hit.metadata.key, hit.rowHash]);
      expect({ table, key: hit.metadata.key, found: rows.length }).toEqual({ table, key: hit.metadata.key, found: 1 });
    }
    return hits.filter((hit) => hit.metadata.table === table).length;
  }

  it('a connector delete: a chunk of another connector that cited a removed row names its own identical row, or goes when it has none; the other tenant is untouched', async () => {
    // erp keys by n, crm by id: Ada under keys '1' (erp) and 'a1' (crm), one hash; '1' is the smaller.
    await written(1, erp, erp.endpoint, byN('ext.shared'), [{ id: 'a1', n: 1, name: 'Ada' }, { id: 'b2', n: 2, name: 'Bob' }, { id: '3', n: 3, name: 'Cy' }]);
    await written(1, crm, crm.endpoint, byId('ext.shared'), [{ id: 'a1', n: 1, name: 'Ada' }]);
    // Cy: crm's key '3' is erp's too, and erp writes it last: the row is erp's.
    await written(1, crm, crm.endpoint, byId('ext.shared'), [{ id: '3', n: 3, name: 'Cy' }]);
    await written(1, erp, erp.endpoint, byN('ext.shared'), [{ id: '3', n: 3, name: 'Cy' }]);
    // Tenant 2 holds Ada too, under key '1': the same hash.
    await written(2, other, other.endpoint, byN('ext.shared'), [{ id: 'a1', n: 1, name: 'Ada' }]);
    while ((await expandPending(t.db)) > 0);
    // Each corpus's Ada names a row its own connector wrote, though '1' (erp's) is the smaller key.
    expect((await chunks(1, 'ext.shared')).filter((c) => c.content.endsWith('Ada'))).toEqual([
      { corpus: 'crm', key: 'a1', endpoint: crm.endpoint, content: 'ext.shared a1: n: 1; id: a1; name: Ada' },
      { corpus: 'erp', key: '1', endpoint: erp.endpoint, content: 'ext.shared 1: n: 1; id: a1; name: Ada' },
    ]);
    expect(await miscited(1)).toEqual([]);
    expect(await searchCitesOnlyRows(1, 'ext.shared')).toBe(5);

    await t.db.withTenant(1, (tx) => dropConnectorData(tx, erp.id));

    // crm's Ada names crm's own row; crm's Cy had only erp's row, now removed: it goes (crm's next run stores it back).
    expect(await chunks(1, 'ext.shared')).toEqual([{ corpus: 'crm', key: 'a1', endpoint: crm.endpoint, content: 'ext.shared a1: n: 1; id: a1; name: Ada' }]);
    expect(await miscited(1)).toEqual([]);
    expect(await chunks(2, 'ext.shared')).toEqual([{ corpus: 'crm', key: '1', endpoint: other.endpoint, content: 'ext.shared 1: n: 1; id: a1; name: Ada' }]);
    expect(await miscited(2)).toEqual([]);
    expect(await searchCitesOnlyRows(1, 'ext.shared')).toBe(1);
    expect(await searchCitesOnlyRows(2, 'ext.shared')).toBe(1);
  });

  it('an endpoint purge: the chunk it carried names the identical row of another endpoint of the connector; a chunk that named a purged row is made again naming the survivor', async () => {
    await ext.ensureTable(1, 'ext.twins', []);
    // books writes Ada by n (key '1') then by id (key 'r1'): one chunk, naming '1', with the endpoint that wrote '1'.
    await written(1, books, books.byN, byN('ext.twins'), [{ id: 'r1', n: 1, name: 'Ada' }]);
    await written(1, books, books.byId, byId('ext.twins'), [{ id: 'r1', n: 1, name: 'Ada' }, { id: 'r2', n: 2, name: 'Bob' }]);
    while ((await expandPending(t.db)) > 0);
    expect(await chunks(1, 'ext.twins')).toEqual([
      { corpus: 'books', key: '1', endpoint: books.byN, content: 'ext.twins 1: n: 1; id: r1; name: Ada' },
      { corpus: 'books', key: 'r2', endpoint: books.byId, content: 'ext.twins r2: n: 2; id: r2; name: Bob' },
    ]);

    // Purging byId removes 'r1' and 'r2': Ada is still found, through '1'; Bob is gone.
    await t.db.withTenant(1, (tx) => purgeEndpointData(tx, books.id, books.byId));
    expect(await chunks(1, 'ext.twins')).toEqual([{ corpus: 'books', key: '1', endpoint: books.byN, content: 'ext.twins 1: n: 1; id: r1; name: Ada' }]);
    expect(await miscited(1)).toEqual([]);
    expect(await searchCitesOnlyRows(1, 'ext.twins')).toBe(1);

    // byId stores Ada again, then byN is purged: the chunk names 'r1' now, byId's.
    await written(1, books, books.byId, byId('ext.twins'), [{ id: 'r1', n: 1, name: 'Ada' }]);
    while ((await expandPending(t.db)) > 0);
    await t.db.withTenant(1, (tx) => purgeEndpointData(tx, books.id, books.byN));
    expect(await chunks(1, 'ext.twins')).toEqual([{ corpus: 'books', key: 'r1', endpoint: books.byId, content: 'ext.twins r1: n: 1; id: r1; name: Ada' }]);
    expect(await miscited(1)).toEqual([]);
    expect(await searchCitesOnlyRows(1, 'ext.twins')).toBe(1);

    // The last row of that content purged, its chunk goes.
    await t.db.withTenant(1, (tx) => purgeEndpointData(tx, books.id, books.byId));
    expect(await chunks(1, 'ext.twins')).toEqual([]);
    expect(await searchCitesOnlyRows(1, 'ext.twins')).toBe(0);
  });

  it('an endpoint purge: the content its chunk stood for in another table of the connector is made a chunk again, naming that table\'s row', async () => {
    // One connector writes Ada into two tables (an endpoint each): one chunk in its corpus, naming the table indexed last.
    const copies = { id: '00000000-0000-4000-8000-0000000000e1', name: 'copies', left: '00000000-0000-4000-8000-0000000000e2', right: '00000000-0000-4000-8000-0000000000e3' };
    await ext.ensureTable(1, 'ext.left', []);
    await ext.ensureTable(1, 'ext.right', []);
    await written(1, copies, copies.left, byId('ext.left'), [{ id: 'c1', name: 'Ada' }]);
    await written(1, copies, copies.right, byId('ext.right'), [{ id: 'c1', name: 'Ada' }]);
    while ((await expandPending(t.db)) > 0);
    expect([...(await chunks(1, 'ext.left')), ...(await chunks(1, 'ext.right'))]).toEqual([
      { corpus: 'copies', key: 'c1', endpoint: copies.right, content: 'ext.right c1: id: c1; name: Ada' },
    ]);

    // Purging the right endpoint removed that chunk, and ext.left's Ada was found by no search any more.
    await t.db.withTenant(1, (tx) => purgeEndpointData(tx, copies.id, copies.right));
    await searchCitesOnlyRows(1, 'ext.left');
    expect([...(await chunks(1, 'ext.left')), ...(await chunks(1, 'ext.right'))]).toEqual([
      { corpus: 'copies', key: 'c1', endpoint: copies.left, content: 'ext.left c1: id: c1; name: Ada' },
    ]);
    expect(await miscited(1)).toEqual([]);
    // Its last row purged, it goes (no table of the connector holds Ada any more).
    await t.db.withTenant(1, (tx) => purgeEndpointData(tx, copies.id, copies.left));
    await searchCitesOnlyRows(1, 'ext.left');
    expect([...(await chunks(1, 'ext.left')), ...(await chunks(1, 'ext.right'))]).toEqual([]);
  });

  it('another connector rewriting a key: the chunk that cited the earlier row names an identical row of its own connector, or goes; the other tenant is untouched', async () => {
    const hr = { id: '00000000-0000-4000-8000-0000000000e1', name: 'hr', byN: '00000000-0000-4000-8000-0000000000e2', byId: '00000000-0000-4000-8000-0000000000e3' };
    const ops = { id: '00000000-0000-4000-8000-0000000000f1', name: 'ops', endpoint: '00000000-0000-4000-8000-0000000000f2' };
    await ext.ensureTable(1, 'ext.staff', []);
    await ext.ensureTable(2, 'ext.staff', []);
    // hr holds Ada under '1' (by n) and 'p1' (by id): one chunk, naming '1'. Bob only under 'p2'.
    await written(1, hr, hr.byN, byN('ext.staff'), [{ id: 'p1', n: 1, name: 'Ada' }]);
    await written(1, hr, hr.byId, byId('ext.staff'), [{ id: 'p1', n: 1, name: 'Ada' }, { id: 'p2', n: 2, name: 'Bob' }]);
    // Tenant 2's hr holds Ada under '1' too: the same hash, the same key.
    await written(2, other, other.endpoint, byN('ext.staff'), [{ id: 'p1', n: 1, name: 'Ada' }]);
    while ((await expandPending(t.db)) > 0);
    expect(await chunks(1, 'ext.staff')).toEqual([
      { corpus: 'hr', key: '1', endpoint: hr.byN, content: 'ext.staff 1: n: 1; id: p1; name: Ada' },
      { corpus: 'hr', key: 'p2', endpoint: hr.byId, content: 'ext.staff p2: n: 2; id: p2; name: Bob' },
    ]);
    const before = await t.owner.query('select id, external_id, row_hash, content from retrieval.chunks where tenant_id = 2 order by id');
    const earlier = await t.owner.query<{ key: string; hash: string }>("select external_id as key, row_hash as hash from ext_t1.staff where external_id in ('1', 'p2')");

    // ops writes other content under keys '1' (by n) and 'p2' (by id): the rows are ops's now.
    await written(1, ops, ops.endpoint, byN('ext.staff'), [{ id: 'x1', n: 1, name: 'Eve' }]);
    await written(1, ops, ops.endpoint, byId('ext.staff'), [{ id: 'p2', n: 2, name: 'Bobby' }]);
    while ((await expandPending(t.db)) > 0);

    // hr's Ada names 'p1', its own row of that content (not ops's '1'); hr's Bob had no other row: it goes.
    expect(await chunks(1, 'ext.staff')).toEqual([
      { corpus: 'hr', key: 'p1', endpoint: hr.byId, content: 'ext.staff p1: n: 1; id: p1; name: Ada' },
      { corpus: 'ops', key: '1', endpoint: ops.endpoint, content: 'ext.staff 1: n: 1; id: x1; name: Eve' },
      { corpus: 'ops', key: 'p2', endpoint: ops.endpoint, content: 'ext.staff p2: n: 2; id: p2; name: Bobby' },
    ]);
    const { rows: stale } = await t.owner.query(
      `select external_id from retrieval.chunks c join unnest($1::text[], $2::text[]) as e(key, hash) on c.external_id = e.key and c.row_hash = e.hash
        where c.tenant_id = 1 and c.table_name = 'ext.staff'`,
      [earlier.rows.map((r) => r.key), earlier.rows.map((r) => r.hash)],
    );
    expect(stale).toEqual([]);
    expect(await miscited(1)).toEqual([]);
    expect((await t.owner.query('select id, external_id, row_hash, content from retrieval.chunks where tenant_id = 2 order by id')).rows).toEqual(before.rows);
    expect(await miscited(2)).toEqual([]);
    expect(await searchCitesOnlyRows(1, 'ext.staff')).toBe(3);
    expect(await searchCitesOnlyRows(2, 'ext.staff')).toBe(1);

    // ops rewrites 'p1' as well: hr holds Ada nowhere else, its chunk goes.
    await written(1, ops, ops.endpoint, byId('ext.staff'), [{ id: 'p1', n: 3, name: 'Ida' }]);
    while ((await expandPending(t.db)) > 0);
    expect((await chunks(1, 'ext.staff')).map((c) => [c.corpus, c.key])).toEqual([
      ['ops', '1'],
      ['ops', 'p1'],
      ['ops', 'p2'],
    ]);
    expect(await miscited(1)).toEqual([]);
    expect(await searchCitesOnlyRows(1, 'ext.staff')).toBe(3);
  });
});

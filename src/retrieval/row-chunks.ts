import { parseJsonExact } from '../connectors/engine/exact-json.js';
import { tableRegclassSql, tenantTableSql, tenantTableText } from '../connectors/target/ddl.js';
import type { Tx } from '../db/database.js';
import { rowChunkText } from './content.js';

/** Whether key `a` comes before `b` in the byte order of their text: the order that picks the row a chunk of identical rows names. */
export function keyBefore(a: string, b: string): boolean {
  return Buffer.compare(Buffer.from(a), Buffer.from(b)) < 0;
}

/** The SQL name of a tenant's table (`ext.<name>`), or undefined when the name is not one or the table does not exist. */
export async function existingTable(tx: Tx, tenantId: number, table: string): Promise<string | undefined> {
  let sql: string;
  try {
    sql = tenantTableSql(tenantId, table);
  } catch {
    return undefined;
  }
  const exists = await tx.query<{ t: string | null }>(`select ${tableRegclassSql('$1')} as t`, [tenantTableText(tenantId, table)]);
  return exists.rows[0]?.t ? sql : undefined;
}

/** Which chunks settleRowChunks looks at, beyond every chunk of the table that cites a row no longer there. */
export interface ChunksToSettle {
  /**
   * Only chunks naming one of these keys, of whichever connector (the indexer: the keys of the rows
   * an entry wrote, which may have replaced rows other connectors' chunks cite).
   */
  keys?: string[];
  /** Also the chunks this endpoint of the connector carries, whatever they name (an endpoint purge). */
  endpoint?: { connectorId: string; endpointUuid: string };
}

interface Unsettled {
  id: string;
  corpus: string;
  connector_id: string;
  endpoint_uuid: string | null;
  scopes: string[];
  row_hash: string;
  external_id: string;
}

/** A row of a tenant's table as chunks of identical rows are chosen from: its key, content hash, writer and payload text. */
export interface Row {
  external_id: string;
  row_hash: string;
  connector_id: string;
  endpoint_id: string;
  data: string;
}

/**
 * The row chunks of one of a tenant's tables (`ext.<name>`) that cite a row no longer there (no row
 * of the table holds their key with their row hash: it was deleted with its connector, purged, or
 * rewritten, by its connector or by another one writing the same key), and with `which.endpoint`
 * those a purged endpoint carried. Each is made again naming the row of the smallest key (byte
 * order) among the rows of the table that hold its content and that its own connector wrote,
 * carrying that row's endpoint (its corpus, connector and scopes stay), or removed where its
 * connector holds no such row: a chunk never cites a row that is gone, nor a row of identical
 * content that only another connector ingested (a chunk whose row another connector rewrote never
 * names that connector's row). A chunk made again is a new chunk (its text names the key, so it is
 * embedded again); one that keeps its key only takes the row's endpoint. Only this tenant's table is
 * read (and the tenant is named in every statement), so no other tenant's row is ever cited. A
 * chunk removed whose content another table of its connector holds gets a pending entry for that
 * table (requeueElsewhere). A table that does not exist is left to the caller.
 * Returns how many chunks were made again (or re-labelled) and how many were removed.
 */
export async function settleRowChunks(tx: Tx, tenantId: number, table: string, which: ChunksToSettle = {}): Promise<{ repointed: number; removed: number }> {
  const sql = await existingTable(tx, tenantId, table);
  if (sql === undefined) return { repointed: 0, removed: 0 };

  const values: unknown[] = [tenantId, table];
  const param = (value: unknown) => `$${values.push(value)}`;
  const where = ['c.tenant_id = $1', 'c.table_name = $2', 'c.row_hash is not null'];
  // With keys, served by the index chunks_table_key (tenant, table, md5 of the key: V9__chunks_table_key_hash.sql).
  if (which.keys) {
    const keys = param(which.keys);
    where.push(`md5(c.external_id) = any(array(select md5(k) from unnest(${keys}::text[]) as k))`, `c.external_id = any(${keys}::text[])`);
  }
  const gone = `not exists (select 1 from ${sql} r where r.tenant_id = $1 and r.external_id = c.external_id and r.row_hash = c.row_hash)`;
  where.push(
    which.endpoint
      ? `(${gone} or (c.connector_id = ${param(which.endpoint.connectorId)}::uuid and c.endpoint_uuid = ${param(which.endpoint.endpointUuid)}::uuid))`
      : gone,
  );
  // Locked in id order: two transactions settling chunks of one table (a delete's, an indexer pass's) lock the ones
  // both touch in the same order, and so never each hold one the other waits for.
  const { rows: unsettled } = await tx.query<Unsettled>(
    `select c.id::text as id, c.corpus, c.connector_id::text as connector_id, c.endpoint_uuid::text as endpoint_uuid, c.scopes, c.row_hash, c.external_id
       from retrieval.chunks c where ${where.join(' and ')} order by c.id for update`,
    values,
  );
  if (unsettled.length === 0) return { repointed: 0, removed: 0 };

  // The rows of the table holding that content, written by the chunks' connectors.
  const { rows } = await tx.query<Row>(
    `select external_id, row_hash, connector_id::text as connector_id, endpoint_id::text as endpoint_id, data::text as data
       from ${sql} where tenant_id = $1 and row_hash = any($2::text[]) and connector_id = any($3::uuid[])`,
    [tenantId, [...new Set(unsettled.map((c) => c.row_hash))], [...new Set(unsettled.map((c) => c.connector_id))]],
  );
  const survivor = new Map<string, Row>();
  for (const r of rows) {
    const at = `${r.connector_id} ${r.row_hash}`;
    const first = survivor.get(at);
    if (!first || keyBefore(r.external_id, first.external_id)) survivor.set(at, r);
  }

  const drop: string[] = [];
  const relabel: Array<{ id: string; endpoint: string }> = [];
  const remade: Array<{ chunk: Unsettled; row: Row }> = [];
  for (const chunk of unsettled) {
    const row = survivor.get(`${chunk.connector_id} ${chunk.row_hash}`);
    if (!row) drop.push(chunk.id);
    else if (row.external_id === chunk.external_id) {
      if (row.endpoint_id !== chunk.endpoint_uuid) relabel.push({ id: chunk.id, endpoint: row.endpoint_id });
    } else {
      drop.push(chunk.id);
      remade.push({ chunk, row });
    }
  }
  if (drop.length) await tx.query('delete from retrieval.chunks where tenant_id = $1 and id = any($2::bigint[])', [tenantId, drop]);
  const removed = new Set(drop);
  for (const m of remade) removed.delete(m.chunk.id);
  await requeueElsewhere(tx, tenantId, table, unsettled.filter((c) => removed.has(c.id)));
  if (relabel.length) {
    await tx.query(
      `update retrieval.chunks c set endpoint_uuid = r.endpoint, updated_at = now()
         from unnest($2::bigint[], $3::uuid[]) as r(id, endpoint) where c.tenant_id = $1 and c.id = r.id`,
      [tenantId, relabel.map((r) => r.id), relabel.map((r) => r.endpoint)],
    );
  }
  if (remade.length) {
    await tx.query(
      `insert into retrieval.chunks (tenant_id, corpus, connector_id, endpoint_uuid, table_name, scopes, row_hash, external_id, content)
       select $1, r.corpus, r.connector_id, r.endpoint_uuid, $2, array(select jsonb_array_elements_text(r.scopes::jsonb)), r.row_hash, r.external_id, r.content
         from unnest($3::text[], $4::uuid[], $5::uuid[], $6::text[], $7::text[], $8::text[], $9::text[]) as r(corpus, connector_id, endpoint_uuid, scopes, row_hash, external_id, content)`,
      [
        tenantId,
        table,
        remade.map((m) => m.chunk.corpus),
        remade.map((m) => m.chunk.connector_id),
        remade.map((m) => m.row.endpoint_id),
        remade.map((m) => JSON.stringify(m.chunk.scopes)), // each chunk's tags as JSON text (unnest cannot take an array of arrays)
        remade.map((m) => m.chunk.row_hash),
        remade.map((m) => m.row.external_id),
        remade.map((m) => rowChunkText(table, m.row.external_id, parseJsonExact(m.row.data))),
      ],
    );
  }
  return { repointed: relabel.length + remade.length, removed: drop.length - remade.length };
}

/**
 * Chunks removed because no row of their table holds their content for their connector any more may
 * stand for a row of another table of that connector holding it: the same content written into two
 * tables is one chunk in the corpus, naming the table indexed last (src/retrieval/indexer.ts,
 * expandEntry). Before, that row was left without a chunk (unsearchable until rewritten) when the
 * row the chunk named was rewritten, purged or removed. For each other table of the chunks' connector
 * holding some of that content (read, not locked), a pending entry of those hashes is recorded, in
 * this transaction: an indexer pass makes the chunk again from what the table holds then, under its
 * own locks (the lock order of passes, deletes and purges is left as it is).
 */
async function requeueElsewhere(tx: Tx, tenantId: number, table: string, removed: Unsettled[]): Promise<void> {
  const byConnector = new Map<string, Unsettled[]>();
  for (const chunk of removed) byConnector.set(chunk.connector_id, [...(byConnector.get(chunk.connector_id) ?? []), chunk]);
  for (const [connectorId, chunks] of byConnector) {
    const { rows: tables } = await tx.query<{ table_name: string }>(
      'select distinct table_name from connectors.ext_tables where tenant_id = $1 and connector_id = $2::uuid and table_name <> $3 order by 1',
      [tenantId, connectorId, table],
    );
    for (const { table_name } of tables) {
      const sql = await existingTable(tx, tenantId, table_name);
      if (sql === undefined) continue;
      const { rows: held } = await tx.query<{ row_hash: string; endpoint_id: string }>(
        `select distinct on (row_hash) row_hash, endpoint_id::text as endpoint_id from ${sql}
          where tenant_id = $1 and connector_id = $2::uuid and row_hash = any($3::text[]) order by row_hash, endpoint_id`,
        [tenantId, connectorId, [...new Set(chunks.map((c) => c.row_hash))]],
      );
      // One entry per corpus and tags (a connector's chunks share them, but for a re-tag in flight).
      const entries = new Map<string, { corpus: string; scopes: string[]; hashes: string[] }>();
      for (const chunk of chunks) {
        if (!held.some((h) => h.row_hash === chunk.row_hash)) continue;
        const key = JSON.stringify([chunk.corpus, chunk.scopes]);
        const entry = entries.get(key) ?? { corpus: chunk.corpus, scopes: chunk.scopes, hashes: [] };
        entry.hashes.push(chunk.row_hash);
        entries.set(key, entry);
      }
      for (const entry of entries.values()) {
        await tx.query(
          'insert into retrieval.pending (tenant_id, connector_id, corpus, scopes, endpoint_uuid, table_name, row_hashes) values ($1, $2, $3, $4, $5, $6, $7)',
          [tenantId, connectorId, entry.corpus, entry.scopes, held[0]!.endpoint_id, table_name, entry.hashes],
        );
      }
    }
  }
}

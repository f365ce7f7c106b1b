import type { Database } from '../db/database.js';

/** One document of the platform corpus: `key` names what it describes (`openapi:GET /api/...`, `kind:Connector`, `hook:<id>`). */
export interface PlatformDocument {
  key: string;
  content: string;
}

export const PLATFORM_TENANT = 0;
export const PLATFORM_CORPUS = 'system';

/**
 * Rebuilds the platform corpus (tenant 0, corpus `system`) from `documents`: new and changed
 * documents get a chunk without a vector (the indexer embeds them), unchanged ones keep theirs,
 * documents that disappeared lose their chunk. One transaction: searches see the old corpus or the new.
 */
export async function rebuildPlatformCorpus(db: Database, documents: PlatformDocument[]): Promise<{ chunks: number; changed: number; removed: number }> {
  const unique = new Map(documents.map((d) => [d.key, d.content]));
  const keys = [...unique.keys()];
  const contents = [...unique.values()];
  return db.crossTenant('retrieval-reindex', async (tx) => {
    const removed = await tx.query('delete from retrieval.chunks where tenant_id = $1 and corpus = $2 and key is not null and not (key = any($3))', [PLATFORM_TENANT, PLATFORM_CORPUS, keys]);
    // A changed document loses its vector: a trigger moves tenant 0's generation, indexes reload it.
    const changed = await tx.query(
      `insert into retrieval.chunks (tenant_id, corpus, key, content)
       select $1, $2, d.key, d.content from unnest($3::text[], $4::text[]) as d(key, content)
       on conflict (tenant_id, corpus, key) where key is not null do update
         set content = excluded.content, embedding = null, model = null, embedded_seq = null, embedded_at = null, updated_at = now()
         where chunks.content is distinct from excluded.content`,
      [PLATFORM_TENANT, PLATFORM_CORPUS, keys, contents],
    );
    return { chunks: keys.length, changed: changed.rowCount ?? 0, removed: removed.rowCount ?? 0 };
  });
}

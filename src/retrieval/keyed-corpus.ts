import type { Tx } from '../db/database.js';

/**
 * A tenant's corpus of documents that are not rows (a workflow's lifecycle, `workflow:<name>`):
 * chunks without a row hash, each with a `key` naming what it describes, written in the caller's
 * tenant transaction (row-level security) like the platform corpus is for tenant 0
 * (platform-corpus.ts). New and changed documents get a chunk without a vector (the indexer embeds
 * them after commit), unchanged ones keep theirs, documents that disappeared lose their chunk.
 */
export interface KeyedDocument {
  key: string;
  content: string;
}

export async function writeKeyedCorpus(tx: Tx, corpus: string, scopes: string[], documents: KeyedDocument[]): Promise<void> {
  const unique = new Map(documents.map((d) => [d.key, d.content]));
  const keys = [...unique.keys()];
  await tx.query('delete from retrieval.chunks where tenant_id = core.current_tenant() and corpus = $1 and key is not null and not (key = any($2))', [corpus, keys]);
  await tx.query(
    `insert into retrieval.chunks (tenant_id, corpus, key, content, scopes)
     select core.current_tenant(), $1, d.key, d.content, $4 from unnest($2::text[], $3::text[]) as d(key, content)
     on conflict (tenant_id, corpus, key) where key is not null do update
       set content = excluded.content, scopes = excluded.scopes,
           embedding = case when chunks.content is distinct from excluded.content then null else chunks.embedding end,
           model = case when chunks.content is distinct from excluded.content then null else chunks.model end,
           embedded_seq = case when chunks.content is distinct from excluded.content then null else chunks.embedded_seq end,
           embedded_at = case when chunks.content is distinct from excluded.content then null else chunks.embedded_at end,
           updated_at = now()
       where chunks.content is distinct from excluded.content or chunks.scopes is distinct from excluded.scopes`,
    [corpus, keys, [...unique.values()], scopes],
  );
}

/** Removes a keyed corpus of the caller's tenant. */
export async function dropKeyedCorpus(tx: Tx, corpus: string): Promise<void> {
  await tx.query('delete from retrieval.chunks where tenant_id = core.current_tenant() and corpus = $1 and row_hash is null', [corpus]);
}

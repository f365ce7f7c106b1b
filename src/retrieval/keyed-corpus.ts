import type { Tx } from '../db/database.js';
import { MAX_CHUNK_CHARS } from './content.js';

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

/**
 * A document as the chunks it is written as: itself when it fits in MAX_CHUNK_CHARS (a row's
 * chunk's bound), else parts of at most that, cut between words where one ends in the second half
 * of a part (never within a surrogate pair), each after the first keyed `part:<n>:<key>` (no
 * document's own key begins so) and opening with `<corpus> <key> (continued): ` so that it names
 * its document. A workflow's lifecycle (up to 200 states and 1,000 transitions, some 480,000
 * characters) was one chunk, sent whole to the embedding model and, retrieved, to the chat model.
 */
export function documentParts(corpus: string, doc: KeyedDocument, max = MAX_CHUNK_CHARS): KeyedDocument[] {
  if (doc.content.length <= max) return [doc];
  const parts: KeyedDocument[] = [];
  const lead = `${corpus} ${doc.key} (continued): `;
  let rest = doc.content;
  while (rest.length > 0) {
    const room = Math.max(2, parts.length === 0 ? max : max - lead.length);
    let cut = rest.length;
    if (rest.length > room) {
      const space = rest.lastIndexOf(' ', room);
      cut = space >= room / 2 ? space : room;
      if (/[\uD800-\uDBFF]/.test(rest[cut - 1]!)) cut -= 1;
    }
    const text = rest.slice(0, cut).trimEnd();
    parts.push(parts.length === 0 ? { key: doc.key, content: text } : { key: `part:${parts.length + 1}:${doc.key}`, content: `${lead}${text}` });
    rest = rest.slice(cut).trimStart();
  }
  return parts;
}

export async function writeKeyedCorpus(tx: Tx, corpus: string, scopes: string[], documents: KeyedDocument[]): Promise<void> {
  const unique = new Map(documents.flatMap((d) => documentParts(corpus, d)).map((d) => [d.key, d.content]));
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

-- A chunk the embedding model refused (src/retrieval/indexer.ts, embedPending): how many times it
-- failed alone, the last error, and when it is tried again (a backoff from 1 s doubling to 1 h).
-- Before, the indexer embedded the oldest chunks without a vector in every call: one text the model
-- refuses (too long for a self-hosted model's context, say) failed that call at every pass, and no
-- chunk of any tenant got a vector again. A batch that fails is now split until the chunk that fails
-- alone is found; it is set aside here and the others are embedded.
alter table retrieval.chunks
  add column embed_attempts integer not null default 0,
  add column embed_error    text,
  add column embed_retry_at timestamptz;

-- A chunk whose text changes (the indexer, a workflow's lifecycle, the platform corpus) is a new
-- text for the model: what the old one met is forgotten.
create function retrieval.forget_embed_failure() returns trigger language plpgsql set search_path = pg_catalog as $$
begin
  new.embed_attempts := 0;
  new.embed_error := null;
  new.embed_retry_at := null;
  return new;
end $$;
create trigger chunks_text_changed before update of content on retrieval.chunks
  for each row when (old.content is distinct from new.content and old.embed_attempts > 0)
  execute function retrieval.forget_embed_failure();

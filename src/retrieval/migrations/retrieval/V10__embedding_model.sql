-- The embedding model in use, one for the whole database (src/retrieval/indexer.ts, checkModel): a vector
-- is stored only when the model that made it is the one recorded here (the trigger below), so that
-- while processes of two models run at once (a rolling update changing svc.embedding.model or
-- svc.embedding.dimensions) no chunk gets a vector search of the recorded model cannot use. The
-- newest process to start takes over (records its model and clears the vectors of others, which it
-- then embeds again); a process of another model started before it defers (embeds nothing) and
-- takes over only when no process of the recorded model has confirmed it (`seen_at`) for a lease.
-- Before, each process cleared other models' vectors once, at its start, and went on storing its
-- own: during the overlap the old processes embedded again what the new ones had cleared, and those
-- chunks kept old-model vectors, out of the new model's search, until the next start.
create table retrieval.embedding_model (
  singleton   boolean primary key default true check (singleton),
  model       text not null,
  dimensions  integer not null,
  recorded_at timestamptz not null default now(),
  seen_at     timestamptz not null default now()
);

-- A vector of another model than the recorded one (or of another length) is not stored: the row is
-- left as it was (still waiting for a vector). Holds for every writer, a hub of an earlier version
-- still running beside this one included. No model recorded (no indexer pass yet): any is stored.
create function retrieval.vector_of_recorded_model() returns trigger language plpgsql security definer set search_path = pg_catalog as $$
declare
  recorded record;
begin
  select model, dimensions into recorded from retrieval.embedding_model;
  if found and (new.model is distinct from recorded.model or octet_length(new.embedding) <> recorded.dimensions * 4) then
    return null;
  end if;
  return new;
end $$;
create trigger chunks_vector_model before update of embedding, model on retrieval.chunks
  for each row when (new.embedding is not null and (old.embedding is null or new.model is distinct from old.model))
  execute function retrieval.vector_of_recorded_model();
create trigger chunks_vector_model_inserted before insert on retrieval.chunks
  for each row when (new.embedding is not null) execute function retrieval.vector_of_recorded_model();

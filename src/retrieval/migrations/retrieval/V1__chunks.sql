-- Retrieval chunks: the searchable text of every ingested row, and of the platform corpus.
--
-- A row chunk belongs to one tenant and one corpus (the connector that wrote it: `corpus` is the
-- connector's name; `connector_id` is the connector's id, or the stable id of a CSV import's name,
-- and a connector delete or an endpoint purge removes its chunks: src/connectors/target/drop.ts). Chunks are deduplicated by row_hash within (tenant, corpus): the same row
-- written by two endpoints of one connector is one chunk, by two connectors one chunk each.
-- Chunks without a row hash (the platform corpus of tenant 0, workflow lifecycles) have a `key`
-- naming what they describe instead.
--
-- `embedding` is null until the embedder has run (after the ingest transaction commits, from the
-- partial index below: the chunks waiting for a vector ARE the queue). It holds float32
-- little-endian values; `embedded_seq` orders embeddings so a process's in-memory index can load
-- only what changed since it last looked. `retrieval.generations` counts, per tenant, the changes
-- that sequence cannot show (deletes, re-tags, cleared vectors; kept by triggers below): a process
-- whose index saw an older generation reloads that tenant.

create table retrieval.chunks (
  id            bigint generated always as identity primary key,
  tenant_id     bigint not null references core.tenants (id),
  corpus        text not null,
  connector_id  uuid,
  endpoint_uuid uuid,
  row_hash      text,
  key           text,
  table_name    text,
  external_id   text,
  scopes        text[] not null default '{}',
  content       text not null,
  embedding     bytea,
  model         text,
  embedded_seq  bigint,
  embedded_at   timestamptz,
  created_at    timestamptz not null default now(),
  updated_at    timestamptz not null default now(),
  check ((row_hash is null) <> (key is null))
);
create unique index chunks_row on retrieval.chunks (tenant_id, corpus, row_hash) where row_hash is not null;
create unique index chunks_key on retrieval.chunks (tenant_id, corpus, key) where key is not null;
create index chunks_pending on retrieval.chunks (id) where embedding is null;
create index chunks_seq on retrieval.chunks (tenant_id, embedded_seq);
create index chunks_connector on retrieval.chunks (connector_id, endpoint_uuid);
create index chunks_row_key on retrieval.chunks (connector_id, table_name, external_id);
create sequence retrieval.embedded_seq;

alter table retrieval.chunks enable row level security;
-- A tenant reads its own chunks and the platform's (tenant 0); it writes only its own.
create policy tenant_read on retrieval.chunks for select using (tenant_id = core.current_tenant() or tenant_id = 0);
create policy tenant_write on retrieval.chunks for insert with check (tenant_id = core.current_tenant());
create policy tenant_update on retrieval.chunks for update using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());
create policy tenant_delete on retrieval.chunks for delete using (tenant_id = core.current_tenant());

create table retrieval.generations (
  tenant_id  bigint primary key references core.tenants (id),
  generation bigint not null default 0
);
alter table retrieval.generations enable row level security;
create policy tenant_isolation on retrieval.generations
  using (tenant_id = core.current_tenant() or tenant_id = 0) with check (tenant_id = core.current_tenant());

-- What an in-memory index cannot follow by embedding sequence alone moves its tenants' generation
-- (the index then reloads them): a chunk deleted, re-tagged, or its vector cleared (its text
-- changed, or the embedding model did).
create function retrieval.bump_generations() returns trigger language plpgsql security definer set search_path = pg_catalog as $$
begin
  if tg_op = 'DELETE' then
    insert into retrieval.generations (tenant_id, generation)
      select distinct tenant_id, 1 from gone
    on conflict (tenant_id) do update set generation = retrieval.generations.generation + 1;
  else
    insert into retrieval.generations (tenant_id, generation)
      select distinct o.tenant_id, 1 from gone o join now n on n.id = o.id
       where o.scopes is distinct from n.scopes or (o.embedding is not null and n.embedding is null)
    on conflict (tenant_id) do update set generation = retrieval.generations.generation + 1;
  end if;
  return null;
end $$;
create trigger chunks_deleted after delete on retrieval.chunks referencing old table as gone
  for each statement execute function retrieval.bump_generations();
create trigger chunks_changed after update on retrieval.chunks referencing old table as gone new table as now
  for each statement execute function retrieval.bump_generations();


-- Rows written by ingestion and not yet turned into chunks: one entry per written batch, inserted in
-- the ingestion transaction (so an entry exists exactly when its rows do, at the cost of one insert
-- per batch), expanded into chunks after commit by the indexer (src/retrieval/indexer.ts).
create table retrieval.pending (
  id            bigint generated always as identity primary key,
  tenant_id     bigint not null references core.tenants (id),
  connector_id  uuid not null,
  corpus        text not null,
  scopes        text[] not null default '{}',
  endpoint_uuid uuid not null,
  table_name    text not null,
  row_hashes    text[] not null,
  created_at    timestamptz not null default now()
);
alter table retrieval.pending enable row level security;
create policy tenant_isolation on retrieval.pending
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

-- The schema card of a scope: the relations and columns analytic chat may query, with labels,
-- descriptions, examples and declared value domains. Built from entities, or discovered from the
-- scope's ext tables (`POST /api/platform/rag/rediscover`); served by `GET /api/platform/rag/schema`.
create table retrieval.schema_cards (
  tenant_id   bigint not null references core.tenants (id),
  scope       text not null,
  source_type text not null,
  enriched    boolean not null default false,
  card        jsonb not null,
  updated_at  timestamptz not null default now(),
  primary key (tenant_id, scope)
);
alter table retrieval.schema_cards enable row level security;
create policy tenant_isolation on retrieval.schema_cards
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

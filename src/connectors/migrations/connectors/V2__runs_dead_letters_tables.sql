-- The run ledger (one run per endpoint), the dead-letter queue, and the registry of the ext.*
-- tables connectors write into. ext.* tables are shared by every tenant that names them; each has
-- tenant_id and a row policy, and is created by the hub's owner connection on a first run.

create schema if not exists ext;

create table connectors.runs (
  id                uuid primary key default gen_random_uuid(),
  tenant_id         bigint not null,
  connector_id      uuid not null,
  connector_name    text not null,
  endpoint_uuid     uuid,
  endpoint_id       text,
  status            text not null check (status in ('Running', 'Completed', 'Partial', 'Failed', 'Cancelled')),
  triggered_by      text not null,
  sync_mode         text not null default 'full',
  started_at        timestamptz not null default now(),
  ended_at          timestamptz,
  records_in        bigint not null default 0,
  records_out       bigint not null default 0,
  records_skipped   bigint not null default 0,
  dead_letter_count bigint not null default 0,
  chunk_count       integer not null default 0,
  error_message     text,
  cancel_requested  boolean not null default false,
  slot              timestamptz
);
create index runs_tenant_started on connectors.runs (tenant_id, started_at desc);
create index runs_connector on connectors.runs (connector_id, started_at desc);
alter table connectors.runs enable row level security;
create policy tenant_isolation on connectors.runs
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

create table connectors.dead_letters (
  id             bigint generated always as identity primary key,
  tenant_id      bigint not null,
  run_id         uuid not null,
  connector_id   uuid not null,
  endpoint_uuid  uuid,
  skip_reason    text not null,
  error_message  text not null,
  attempts       integer not null default 1,
  resolution     text check (resolution in ('replayed', 'discarded')),
  resolved_run_id uuid,
  resolved_at    timestamptz,
  payload        jsonb,
  skip_detail    jsonb,
  captured_at    timestamptz not null default now(),
  erased_at      timestamptz
);
create index dead_letters_run on connectors.dead_letters (run_id);
create index dead_letters_connector on connectors.dead_letters (connector_id) where resolution is null and erased_at is null;
alter table connectors.dead_letters enable row level security;
create policy tenant_isolation on connectors.dead_letters
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

-- Which connector endpoint writes which ext.* table (for delete, purge and row-hash lookups).
create table connectors.ext_tables (
  tenant_id     bigint not null,
  connector_id  uuid not null,
  endpoint_uuid uuid not null,
  table_name    text not null,
  created_at    timestamptz not null default now(),
  primary key (tenant_id, connector_id, endpoint_uuid, table_name)
);
alter table connectors.ext_tables enable row level security;
create policy tenant_isolation on connectors.ext_tables
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

-- Schedule slots claimed by a scheduler (or a `svc-hub run … --scheduled` job): the primary key makes
-- a slot run once however many processes or CronJobs see it due.
create table connectors.schedule_slots (
  tenant_id    bigint not null,
  connector_id uuid not null,
  slot         timestamptz not null,
  outcome      text not null check (outcome in ('claimed', 'skipped-window')),
  claimed_at   timestamptz not null default now(),
  primary key (connector_id, slot)
);
alter table connectors.schedule_slots enable row level security;
create policy tenant_isolation on connectors.schedule_slots
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

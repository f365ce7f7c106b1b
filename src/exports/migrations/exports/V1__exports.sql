-- Export manifests (spec 3 "Export manifest") and their runs ("Export run record", "Export run").
-- An export is one per tenant and name; re-applying the name updates it. `manifest` is the document
-- as applied, `spec` the normalised model the runner reads (src/exports/types.ts). A delete removes
-- the export; its runs stay as history (export_id is not a foreign key).

create table exports.exports (
  id          uuid primary key default gen_random_uuid(),
  tenant_id   bigint not null references core.tenants (id),
  name        text not null,
  entity      text not null,
  scope       text not null,
  schedule    text,
  manifest    jsonb not null,
  spec        jsonb not null,
  created_by  text,
  updated_by  text,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now(),
  unique (tenant_id, name)
);
alter table exports.exports enable row level security;
create policy tenant_isolation on exports.exports
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

-- One row per run, from claim to receipt. At most one Running run per export (the partial unique
-- index is the claim: a second claim fails on it, in any replica). A scheduled run carries its slot
-- (the cron slot is its artifact time); a delivered slot is never run again. A retry keeps the
-- artifact time of the run it retries, so it aims at the same file name.
create table exports.runs (
  id              uuid primary key default gen_random_uuid(),
  tenant_id       bigint not null,
  export_id       uuid not null,
  export_name     text not null,
  entity          text not null,
  scope           text not null,
  destination     text not null check (destination in ('sftp', 's3')),
  status          text not null check (status in ('Running', 'Completed', 'Failed')),
  trigger         text not null check (trigger in ('manual', 'scheduled')),
  attempt         integer not null default 1,
  retry_of        uuid,
  slot            timestamptz,
  artifact_time   timestamptz not null,
  requested_by    text,
  started_at      timestamptz not null default now(),
  ended_at        timestamptz,
  heartbeat_at    timestamptz not null default now(),
  row_count       bigint,
  byte_count      bigint,
  sha256          text,
  location        text,
  etag            text,
  version_id      text,
  failure_code    text check (failure_code in ('definition', 'generation', 'publication', 'collision', 'interrupted')),
  failure_reason  text,
  check ((status = 'Running') = (ended_at is null)),
  check ((status = 'Failed') = (failure_code is not null))
);
create unique index runs_one_in_flight on exports.runs (export_id) where status = 'Running';
create unique index runs_one_per_slot on exports.runs (export_id, slot) where slot is not null and retry_of is null;
create index runs_export_started on exports.runs (export_id, started_at desc, id desc);
create index runs_tenant_started on exports.runs (tenant_id, started_at desc);
create index runs_running on exports.runs (heartbeat_at) where status = 'Running';
alter table exports.runs enable row level security;
create policy tenant_isolation on exports.runs
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

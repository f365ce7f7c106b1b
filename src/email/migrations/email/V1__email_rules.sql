-- E-mail rules (spec 1 Events rule 5; CONTRACTS.md section 4 `/api/tenants/{tid}/email-rules`).
-- Events of the tenant whose type matches one of event_types (exact types or `prefix.*`) are sent to
-- recipient (one address or a comma-separated list) through the subject and body templates.
-- A delete is soft: deleted_at is set, the row stays as history, and its name can be used again.
create table email.rules (
  id          bigint generated always as identity primary key,
  tenant_id   bigint not null references core.tenants (id),
  name        text not null,
  event_types text[] not null,
  recipient   text not null,
  subject     text not null,
  body        text not null,
  enabled     boolean not null default true,
  created_by  text,
  updated_by  text,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now(),
  deleted_at  timestamptz,
  constraint rules_event_types_present check (cardinality(event_types) > 0)
);
create unique index rules_live_name on email.rules (tenant_id, name) where deleted_at is null;
-- What the e-mail consumer and the subscriber check read for every event.
create index rules_active on email.rules (tenant_id) where enabled and deleted_at is null;

alter table email.rules enable row level security;
create policy tenant_isolation on email.rules
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

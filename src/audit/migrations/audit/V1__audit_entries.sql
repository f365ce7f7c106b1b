-- Who did what to which target in which tenant, and how it ended: every mutating API call and every
-- data egress. Written in batches by the worker role; read per tenant.
create table audit.entries (
  id          bigint generated always as identity primary key,
  tenant_id   bigint not null,
  actor       text not null,
  action      text not null,
  target      text not null,
  outcome     text not null check (outcome in ('success', 'failure')),
  status      integer,
  request_id  text,
  at          timestamptz not null
);
create index entries_tenant_at on audit.entries (tenant_id, at desc);
create index entries_at on audit.entries (at);

alter table audit.entries enable row level security;
create policy tenant_isolation on audit.entries
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

-- Processes as applied (docs/processes.md): reactions to events. One per tenant and name (stored
-- lower-case); re-applying the name updates it. `manifest` is the document as applied.
create table processes.processes (
  id         uuid primary key default gen_random_uuid(),
  tenant_id  bigint not null references core.tenants (id),
  name       text not null check (name = lower(name)),
  event      text not null,
  when_expr  text,
  decision   text not null check (decision like 'decision.%'),
  message    text not null default '',
  manifest   jsonb not null,
  created_by text,
  updated_by text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (tenant_id, name)
);

alter table processes.processes enable row level security;
create policy tenant_isolation on processes.processes
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

-- Entities as applied (docs/entities.md): canonical, business-named columns over a tenant's ext.*
-- tables, several sources fused on one key. One per tenant and name (stored lower-case);
-- re-applying the name updates it. `manifest` is the document as applied, `spec` the normalised
-- model (src/entities/types.ts EntityDef without its id). Nothing in the database depends on the
-- ext tables an entity reads: the fused relation is built at read time from `spec`
-- (src/entities/relation.ts), so a connector delete may still drop an empty ext table.

create table entities.entities (
  id         uuid primary key default gen_random_uuid(),
  tenant_id  bigint not null references core.tenants (id),
  name       text not null check (name = lower(name)),
  scopes     text[] not null default '{}',
  key        text not null,
  manifest   jsonb not null,
  spec       jsonb not null,
  created_by text,
  updated_by text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (tenant_id, name)
);

-- Entities of a scope (the analytic schema card).
create index entities_scopes on entities.entities using gin (scopes);

alter table entities.entities enable row level security;
create policy tenant_isolation on entities.entities
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

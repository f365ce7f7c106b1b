-- The connector credential store and the per-tenant hook overrides (spec 1 "Secret", "Hook").

-- One row per secret version that was ever created. The value is AES-256-GCM ciphertext under
-- svc.secret.master-key with (tenant, name) bound as additional authenticated data; the plaintext is
-- never stored. A delete is soft: the row keeps its metadata, deleted_at is set and the ciphertext
-- is erased. Names are unique among the rows that are not deleted, so a deleted name can be
-- created again (a new row; the old one stays as history).
create table platform.secrets (
  id          bigint generated always as identity primary key,
  tenant_id   bigint not null references core.tenants (id),
  name        text not null,
  description text,
  iv          bytea,
  tag         bytea,
  ciphertext  bytea,
  created_by  text,
  updated_by  text,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now(),
  rotated_at  timestamptz,
  deleted_at  timestamptz,
  constraint secrets_sealed check (deleted_at is not null or (iv is not null and tag is not null and ciphertext is not null))
);
create unique index secrets_live_name on platform.secrets (tenant_id, name) where deleted_at is null;

alter table platform.secrets enable row level security;
create policy tenant_isolation on platform.secrets
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

-- A tenant's override of a declared hook's enabled flag. Hooks themselves live in the module
-- declarations (src/events/modules/*.yaml); a row for a hook no longer declared is ignored.
create table platform.hook_overrides (
  tenant_id   bigint not null references core.tenants (id),
  hook_id     text not null,
  enabled     boolean not null,
  updated_by  text,
  updated_at  timestamptz not null default now(),
  primary key (tenant_id, hook_id)
);

alter table platform.hook_overrides enable row level security;
create policy tenant_isolation on platform.hook_overrides
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

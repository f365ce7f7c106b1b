-- Connectors as applied (spec 3 "Connector manifest") and their endpoints. A connector is one per
-- tenant and name; re-applying the name updates it. `manifest` is the document as applied,
-- `spec` the normalised model the runtime reads (src/connectors/types.ts ConnectorSpec: presets
-- expanded, defaults filled, endpoint UUIDs assigned). A delete removes the rows (the run ledger
-- keeps connector_id and connector_name as history).

create table connectors.connectors (
  id             uuid primary key default gen_random_uuid(),
  tenant_id      bigint not null references core.tenants (id),
  name           text not null,
  connector_type text not null,
  scopes         text[] not null default '{}',
  schedule       text,
  manifest       jsonb not null,
  spec           jsonb not null,
  created_by     text,
  updated_by     text,
  created_at     timestamptz not null default now(),
  updated_at     timestamptz not null default now(),
  unique (tenant_id, name)
);

alter table connectors.connectors enable row level security;
create policy tenant_isolation on connectors.connectors
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

-- One row per endpoint id of a connector's current manifest. The UUID is assigned at the first
-- apply that names the id and kept while the id stays in the manifest; an id dropped from the
-- manifest loses its row (and its watermark), so an id added back later gets a new UUID.
create table connectors.endpoints (
  uuid                 uuid primary key default gen_random_uuid(),
  tenant_id            bigint not null references core.tenants (id),
  connector_id         uuid not null references connectors.connectors (id) on delete cascade,
  endpoint_id          text not null,
  enabled              boolean not null default true,
  position             integer not null,
  watermark            text,
  watermark_updated_at timestamptz,
  created_at           timestamptz not null default now(),
  updated_at           timestamptz not null default now(),
  unique (connector_id, endpoint_id)
);
create index endpoints_tenant on connectors.endpoints (tenant_id);

alter table connectors.endpoints enable row level security;
create policy tenant_isolation on connectors.endpoints
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

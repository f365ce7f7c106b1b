-- Workflows as applied (docs/workflows.md): the lifecycle of an Entity's records and when a record
-- staying in one state is dormant. One per tenant and name (stored lower-case); re-applying the
-- name updates it. `manifest` is the document as applied, `spec` the normalised model.
--
-- `tracked_since` is when the hub started watching the records of (entity, state_column): the first
-- apply, or the last apply that changed either. Spells found by the first complete pass after it
-- (`baseline_done` false until then) start at `tracked_since`, later ones when the sweep sees them.

create table workflows.workflows (
  id            uuid primary key default gen_random_uuid(),
  tenant_id     bigint not null references core.tenants (id),
  name          text not null check (name = lower(name)),
  entity        text not null,
  scope         text,
  state_column  text not null,
  manifest      jsonb not null,
  spec          jsonb not null,
  tracked_since timestamptz not null default now(),
  baseline_done boolean not null default false,
  created_by    text,
  updated_by    text,
  created_at    timestamptz not null default now(),
  updated_at    timestamptz not null default now(),
  unique (tenant_id, name)
);
create index workflows_scope on workflows.workflows (tenant_id, scope);

alter table workflows.workflows enable row level security;
create policy tenant_isolation on workflows.workflows
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

-- The current spell of each record of a workflow's entity: the state the sweep last saw it in and
-- since when. A change of state replaces the row (a new spell), a record that disappeared loses it.
-- `notified_at` is set in the transaction that emits the spell's `decision.dormant.<workflow>`
-- (once per spell, whichever replica sweeps).
create table workflows.spells (
  tenant_id   bigint not null references core.tenants (id),
  workflow_id uuid not null references workflows.workflows (id) on delete cascade,
  record_key  text not null,
  state       text not null,
  since       timestamptz not null,
  notified_at timestamptz,
  primary key (workflow_id, record_key)
);
-- Spells still waiting for their decision, by age.
create index spells_due on workflows.spells (workflow_id, since) where notified_at is null;

alter table workflows.spells enable row level security;
create policy tenant_isolation on workflows.spells
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

-- The integration hub (spec 1 "Integration", "Delivery record"; docs/integrations.md): outbound
-- webhook subscriptions and the journal of their deliveries.

-- One row per integration. The secret is AES-256-GCM ciphertext under svc.secret.master-key (the
-- secret store's key) with (tenant, `integration:<id>`) bound as additional authenticated data, so it
-- opens for this integration only; it is never returned. A delete is soft (deleted_at): the row stays
-- for its delivery history and its name becomes free again. `active_since` is when the integration
-- last became active (created, or enabled again): events written before it are not delivered to it
-- (subscriptions are not retroactive).
create table hub.integrations (
  id                bigint generated always as identity primary key,
  tenant_id         bigint not null references core.tenants (id),
  name              text not null,
  target_url        text not null,
  platform          text not null default 'generic',
  auth_mode         text not null default 'HMAC',
  secret_iv         bytea,
  secret_tag        bytea,
  secret_ciphertext bytea,
  event_types       text[] not null,
  enabled           boolean not null default true,
  standard_webhooks boolean not null default false,
  active_since      timestamptz not null default now(),
  created_by        text,
  updated_by        text,
  created_at        timestamptz not null default now(),
  updated_at        timestamptz not null default now(),
  deleted_at        timestamptz,
  constraint integrations_platform check (platform in ('generic', 'zapier', 'make', 'n8n')),
  constraint integrations_auth_mode check (auth_mode in ('HMAC', 'BEARER', 'NONE')),
  constraint integrations_event_types_present check (cardinality(event_types) > 0),
  constraint integrations_secret_sealed check (
    (secret_ciphertext is null and secret_iv is null and secret_tag is null)
    or (secret_ciphertext is not null and secret_iv is not null and secret_tag is not null))
);
create unique index integrations_live_name on hub.integrations (tenant_id, name) where deleted_at is null;
-- What the webhook consumer and the subscriber check read for every event.
create index integrations_active on hub.integrations (tenant_id) where enabled and deleted_at is null;

alter table hub.integrations enable row level security;
create policy tenant_isolation on hub.integrations
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

-- One row per delivery: an event matched to an integration (kind `event`, at most one per pair), a
-- replay of an earlier row (`replay`, same body and event id), or a test (`test`, no event id). The
-- row carries the outcome of its latest attempt; every attempt is also kept in delivery_attempts.
-- `body` is the exact JSON sent, so retries and replays send the same bytes. A row is worked on
-- under a lease (lease_until, lease_token): whoever claims it sends with no transaction open and
-- writes back only under its token; a process that dies mid-attempt leaves a lease that runs out,
-- and the retry sweep claims the row again.
create table hub.deliveries (
  id             bigint generated always as identity primary key,
  tenant_id      bigint not null references core.tenants (id),
  integration_id bigint not null references hub.integrations (id),
  kind           text not null,
  event_id       bigint,
  event_type     text not null,
  body           text not null,
  replay_of      bigint references hub.deliveries (id),
  attempts       integer not null default 0,
  succeeded      boolean not null default false,
  http_status    integer,
  response_body  text,
  error          text,
  duration_ms    integer,
  attempted_at   timestamptz,
  closed_reason  text,
  lease_until    timestamptz,
  lease_token    uuid,
  created_at     timestamptz not null default now(),
  constraint deliveries_kind check (kind in ('event', 'replay', 'test'))
);
-- An event reaches an integration once, however often the consumer reads it.
create unique index deliveries_once on hub.deliveries (integration_id, event_id) where kind = 'event';
-- The retry sweep: unsuccessful, open rows (tests are never retried).
create index deliveries_open on hub.deliveries (attempts, id) where not succeeded and closed_reason is null and kind <> 'test';
create index deliveries_by_integration on hub.deliveries (integration_id, id desc);
create index deliveries_by_tenant on hub.deliveries (tenant_id, succeeded, id desc);

alter table hub.deliveries enable row level security;
create policy tenant_isolation on hub.deliveries
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

-- Every attempt of a delivery, numbered from 1.
create table hub.delivery_attempts (
  delivery_id   bigint not null references hub.deliveries (id),
  attempt       integer not null,
  tenant_id     bigint not null references core.tenants (id),
  http_status   integer,
  response_body text,
  error         text,
  duration_ms   integer not null,
  attempted_at  timestamptz not null,
  primary key (delivery_id, attempt)
);

alter table hub.delivery_attempts enable row level security;
create policy tenant_isolation on hub.delivery_attempts
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

-- The decision inbox (docs/processes.md): one row per `decision.*` event, written by the EventWriter
-- in the transaction that writes the event, so an inbox item exists exactly when its decision does.
-- The payload is copied: the outbox is purged by retention, the inbox keeps its items. The ack state
-- (who, when) is the inbox's own.
create table events.inbox (
  id         bigint generated always as identity primary key,
  tenant_id  bigint not null,
  event_id   bigint not null unique,
  type       text not null check (type like 'decision.%'),
  payload    jsonb not null,
  created_at timestamptz not null default now(),
  acked_at   timestamptz,
  acked_by   text
);
create index inbox_tenant_newest on events.inbox (tenant_id, id desc);

alter table events.inbox enable row level security;
create policy tenant_isolation on events.inbox
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

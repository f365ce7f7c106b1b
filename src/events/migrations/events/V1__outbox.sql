-- The transactional outbox: one row per event, written in the transaction of the change that caused
-- it. `txid` is the writing transaction; consumers read in (txid, id) order and only below the oldest
-- transaction still running, so an event committed late with a smaller id is never skipped.
create table events.outbox (
  id          bigint generated always as identity primary key,
  tenant_id   bigint not null,
  type        text not null,
  payload     jsonb not null,
  txid        xid8 not null default pg_current_xact_id(),
  created_at  timestamptz not null default now()
);
create index outbox_order on events.outbox (txid, id);
create index outbox_tenant_order on events.outbox (tenant_id, txid, id);
create index outbox_created on events.outbox (created_at);

alter table events.outbox enable row level security;
create policy tenant_isolation on events.outbox
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

-- Each consumer (webhook, e-mail, process, …) keeps its own position.
create table events.consumer_cursors (
  consumer    text primary key,
  txid        xid8 not null default '0',
  last_id     bigint not null default 0,
  updated_at  timestamptz not null default now()
);

-- Wakes listening consumers at commit (the sweep stays as the safety net).
create function events.notify_outbox() returns trigger language plpgsql as $$
begin
  perform pg_notify('svc_outbox', '');
  return null;
end $$;
create trigger outbox_notify after insert on events.outbox for each statement execute function events.notify_outbox();

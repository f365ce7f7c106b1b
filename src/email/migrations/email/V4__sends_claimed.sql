-- One row per message of a rule for an event, claimed before it is sent (src/email/consumer.ts):
-- two processes that both believe they run the e-mail consumer (a leadership handover while the old
-- leader is in the middle of a send) do not both send it. The claim holds until lease_until (the
-- longest a send may take, and a margin); finished_at and outcome are set once the send has ended
-- (sent, mocked, failed, refused, throttled), and a finished claim is never taken again. An unfinished
-- one whose lease ran out (its process died before it recorded the end) is taken over: the message
-- may go out again (at least once). Rows are kept a day after they finished, then deleted by the
-- consumer as it claims (a claim is needed only while the consumer's cursor may still be before its
-- event).
create table email.sends (
  tenant_id   bigint not null,
  event_id    bigint not null,
  rule_id     bigint not null references email.rules (id),
  token       uuid not null,
  lease_until timestamptz not null,
  finished_at timestamptz,
  outcome     text,
  primary key (event_id, rule_id)
);
create index sends_finished on email.sends (tenant_id, finished_at);

alter table email.sends enable row level security;
create policy tenant_isolation on email.sends
  using (tenant_id = core.current_tenant())
  with check (tenant_id = core.current_tenant());

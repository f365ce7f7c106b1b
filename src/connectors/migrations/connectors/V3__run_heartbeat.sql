-- A run's heartbeat: written when a run starts, with every chunk, and every
-- svc.connectors.heartbeat-every by the process that runs it (also while it waits for a page or for
-- an earlier endpoint of the same trigger). A Running run whose heartbeat is older than
-- svc.connectors.run-stale-after belongs to a process that died: the dispatcher's sweep fails it
-- (ledger.ts failInterrupted).
alter table connectors.runs add column heartbeat_at timestamptz not null default now();
create index runs_running_heartbeat on connectors.runs (heartbeat_at) where status = 'Running';
-- Runs that started or ended lately (the operator refreshes status.lastRun from them).
create index runs_ended on connectors.runs (ended_at) where ended_at is not null;
create index runs_started on connectors.runs (started_at);

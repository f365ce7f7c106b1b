-- svc:no-transaction
-- The daily purge of connector runs keeps each connector's latest Completed run: for each old run it
-- asks whether a newer Completed run of the same connector exists (runs/retention.ts). No index
-- answered that: the planner read the connector's runs through runs_connector (by start) or scanned
-- the table, once per run, so a connector of a million runs took minutes per batch, and the one daily
-- purge every tenant shares waited for it. This one answers it with one probe.
create index concurrently if not exists runs_connector_completed on connectors.runs (connector_id, ended_at) where status = 'Completed';

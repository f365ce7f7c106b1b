-- The run list filtered by a connector's name (GET /api/platform/runs?connector=NAME, svc runs
-- --connector): the runs recorded under that name, newest first (ledger.ts listRunsJson). No index
-- served it: a page read every run of the tenant (runs_tenant_started) or walked all runs by start
-- (runs_started), dropping the other connectors' on the way. This one holds the list's order after
-- the name, so a page reads its own rows and stops (and a page after a key starts at the key).
create index runs_tenant_connector_name on connectors.runs (tenant_id, connector_name, started_at desc, id);

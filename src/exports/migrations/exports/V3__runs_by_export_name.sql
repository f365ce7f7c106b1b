-- The runs of an export by its name, newest first (GET /api/exports/{name}/runs, svc exports runs,
-- and the operator's lastRun of each Export: ledger.ts listRuns and latestRun). No index held the
-- name: a page read the tenant's runs newest first (runs_tenant_started) and dropped the other
-- exports' on the way, so an export run rarely beside busy ones read most of the tenant's runs for
-- its latest. This one holds the list's order after the name; a page after a key starts at the key.
create index runs_tenant_name_started on exports.runs (tenant_id, export_name, started_at desc, id desc);

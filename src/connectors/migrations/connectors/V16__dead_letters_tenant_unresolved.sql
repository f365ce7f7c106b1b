-- svc:no-transaction
-- The dead-letter list without `run` or `connector` (GET /api/platform/dlq, svc dlq ls): the
-- tenant's unresolved entries, newest first (runs/dead-letters.ts listDeadLetters). No index led
-- with the tenant: a page walked the whole table by id, or scanned it, reading every other tenant's
-- entries (a million of another tenant's: 0.3 s a page). This one holds the list's order after the
-- tenant, so a page reads its own rows and stops (and a page after a key starts at the key).
create index concurrently if not exists dead_letters_tenant_unresolved on connectors.dead_letters (tenant_id, id desc) where resolution is null and erased_at is null;

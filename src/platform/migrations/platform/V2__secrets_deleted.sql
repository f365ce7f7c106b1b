-- The deleted secrets of a tenant, most recently deleted first: a create keeps the 1,000 most recent
-- as history and purges older ones (takeLivePlace, src/manifests/tenant-cap.ts). Without an index it
-- read every tenant's secrets.
create index secrets_deleted on platform.secrets (tenant_id, deleted_at desc, id desc) where deleted_at is not null;

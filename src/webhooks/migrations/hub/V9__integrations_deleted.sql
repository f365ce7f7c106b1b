-- The deleted integrations of a tenant, most recently deleted first: a create keeps the 1,000 most
-- recent as history and purges older ones whose delivery history is gone (takeLivePlace,
-- src/manifests/tenant-cap.ts). Without an index it read every tenant's integrations.
create index integrations_deleted on hub.integrations (tenant_id, deleted_at desc, id desc) where deleted_at is not null;

-- The deleted e-mail rules of a tenant, most recently deleted first: a create keeps the 1,000 most
-- recent as history and purges older ones no send claim names (takeLivePlace,
-- src/manifests/tenant-cap.ts). Without an index it read every tenant's rules.
create index rules_deleted on email.rules (tenant_id, deleted_at desc, id desc) where deleted_at is not null;

-- The delivery journal keeps no foreign key to a row that every delivery shares: its tenant and its
-- integration (docs/integrations.md "The journal"). A foreign key check locks the parent row
-- (`FOR KEY SHARE`) in every transaction that writes a child: each batch the webhook consumer
-- records and each outcome batch locked the same tenant row and integration row, turning those
-- rows' lock into a multixact that every writer extends. Without them a drain cost PostgreSQL
-- about a fifth less CPU per delivery. What the keys guarded still holds: every statement that
-- writes a delivery reads its integration in the same statement (the consumer's insert joins it;
-- replays and tests read it in the caller's tenant), tenants and integrations are never deleted
-- (an integration is marked `deleted_at`), and row-level security keeps a row's tenant that of
-- the transaction. A delivery's attempts keep their key to the delivery (a row of their own).
alter table hub.deliveries
  drop constraint deliveries_tenant_id_fkey,
  drop constraint deliveries_integration_id_fkey;
alter table hub.delivery_attempts
  drop constraint delivery_attempts_tenant_id_fkey;

-- A first attempt's row is written once, after the attempt, with its outcome (src/webhooks/journal.ts,
-- `writeFirstMany`), instead of recorded leased by the webhook consumer and then updated with its
-- outcome: the update changed indexed columns, so every delivery wrote its row and every index entry
-- twice. Until then, the consumer's batch stands for its deliveries: one row per batch, its events'
-- ids, under a lease as a delivery's row is (renewed while its process holds the batch). The
-- consumer reserves the ids of the batch's deliveries (the deliveries' identity), so an attempt is
-- written under its own id. When a batch's lease runs out with deliveries still unwritten (its
-- process died), the retry sweep writes the rows of every match of its events that has none, as
-- the consumer would have (no lease: the sweep claims them), and deletes the batch's row.
create table hub.delivery_batches (
  id          bigint generated always as identity primary key,
  event_ids   bigint[] not null,
  lease_until timestamptz not null,
  lease_token uuid not null,
  created_at  timestamptz not null default now()
);
create index delivery_batches_lease on hub.delivery_batches (lease_until);

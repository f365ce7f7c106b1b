-- An event's created_at is when its row was written (clock_timestamp()), no longer when its
-- transaction began (now()). Subscriptions are not retroactive by comparing it with the time a
-- subscriber became active (hub.integrations.active_since, email.rules.created_at): with the start of
-- the transaction, an event written by a transaction that had begun before an integration was created
-- or enabled, but written after that committed, was never delivered to it.
alter table events.outbox alter column created_at set default clock_timestamp();

-- A rule's created_at is when its row was written (clock_timestamp()), no longer when its
-- transaction began (now()). Subscriptions are not retroactive by comparing it with an event's
-- created_at, which is the event's insert (events V3): a create that waited in its transaction (on the
-- per-tenant advisory lock) took a time before the events committed while it waited, and got them.
alter table email.rules alter column created_at set default clock_timestamp();

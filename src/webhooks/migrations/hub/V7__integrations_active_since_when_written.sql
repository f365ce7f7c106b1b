-- An integration's active_since, on create, is when its row was written (clock_timestamp()), no
-- longer when its transaction began (now()): it is compared with an event's created_at, the event's
-- insert (events V3), so a create that waited in its transaction took a time before the events
-- committed while it waited, and they were delivered to it (subscriptions are not retroactive).
-- Enabling again sets it the same way (src/webhooks/integrations.ts).
alter table hub.integrations alter column active_since set default clock_timestamp();

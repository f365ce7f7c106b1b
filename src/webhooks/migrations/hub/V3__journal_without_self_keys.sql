-- The journal's last two foreign keys, which a delivery's own rows carry (docs/integrations.md "The
-- journal"): an attempt's key to its delivery and a replay's key to the delivery it replays. Each
-- is checked by a trigger queued for every row written, and every delivery writes both kinds of row:
-- on a drain the attempt's check cost PostgreSQL about 13 µs per outcome written and the replay's
-- (null on every event delivery, checked all the same) about 4 µs per delivery recorded, a tenth of
-- PostgreSQL's work per delivery. What they guarded holds by construction: deliveries are never
-- deleted; an attempt is inserted only from the rows its statement has just updated
-- (`writeBack`, `writeBackMany`), and a replay copies a delivery it reads in the same statement.
alter table hub.delivery_attempts
  drop constraint delivery_attempts_delivery_id_fkey;
alter table hub.deliveries
  drop constraint deliveries_replay_of_fkey;

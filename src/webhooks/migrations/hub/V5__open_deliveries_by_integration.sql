-- The retry sweep's claim (src/webhooks/consumer.ts) takes a few open deliveries of each integration.
-- It ranked every open delivery of the journal by integration to keep the first few of each: with a
-- backlog left to the sweep, one claim of 16 rows cost 17 ms at 1,000 open rows and 34 ms at
-- 14,000, and the backlog drained at a few hundred a second. The open deliveries are now indexed by
-- integration, in id order: the claim finds the integrations with open rows by skipping from one to
-- the next, and reads each one's first rows only. The index replaces deliveries_open (attempts, id),
-- which no statement needs once the claim reads by integration, so a delivery still costs its
-- writer the same number of index entries.
create index deliveries_open_by_integration on hub.deliveries (integration_id, id) where not succeeded and closed_reason is null and kind <> 'test';
drop index hub.deliveries_open;

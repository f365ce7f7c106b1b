-- The outcome a worker is about to write again (after a batch whose answer it did not get), set on
-- the delivery alone and first, in a statement of its own (src/webhooks/journal.ts, `writeBackAgain`).
-- The batch statements skip a row whose column holds the outcome they carry: a batch that reaches
-- the row only then (the worker gave up on it while it was still on its way to the server, or
-- waiting there for a lock) writes nothing more, and one that held the row meanwhile ended before it
-- was set, so the write that follows sees it in the journal. Null on the normal path: nothing is
-- written into it, and a batch's check is one comparison per row it updates (no index entry).
alter table hub.deliveries add column outcome_written_again uuid;

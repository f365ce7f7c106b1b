-- The sweep marks the due spells of one key range at a time (src/workflows/sweep.ts, emitDue). The
-- index by age could not serve a key range: every batch read every unnotified spell of the
-- workflow (the spells of states outside dormancy.states stay unnotified for good), so a pass over
-- a million records read hundreds of millions of index entries. By key, a batch reads its own.
drop index workflows.spells_due;
create index spells_unnotified on workflows.spells (workflow_id, record_key) where notified_at is null;

-- How far the first pass after `tracked_since` has gone (docs/workflows.md, "Dormancy"): the last
-- record key of the parts it has written, in key order, while `baseline_done` is false (null: none
-- yet). A pass that completes a first pass stopped before its end dates from `tracked_since` only
-- the records beyond it: a record without a spell at or before it was not there (or had no state)
-- when the stopped pass went by, so it starts its spell when the sweep sees it, not at the apply.
alter table workflows.workflows add column baseline_upto text;

-- baseline_upto (V3) belongs to the first pass after one tracked_since: whenever tracked_since moves
-- (a re-apply watching another entity or state column starts a new first pass), it is cleared, by
-- any writer. This version's apply clears it itself (src/workflows/store.ts); a hub of the version
-- before V3, still running beside this one during a rolling update, moves tracked_since and resets
-- baseline_done without knowing the column, and the first pass of this version that followed dated
-- the records up to the old pass's key from when it saw them instead of from tracked_since (their
-- dormancy counted from later than they had the state).
create function workflows.baseline_upto_cleared() returns trigger language plpgsql set search_path = pg_catalog as $$
begin
  new.baseline_upto := null;
  return new;
end $$;
create trigger workflows_tracked_since_moved before update of tracked_since on workflows.workflows
  for each row when (new.tracked_since is distinct from old.tracked_since and old.baseline_upto is not null)
  execute function workflows.baseline_upto_cleared();

-- A run's counts as its chunks record them (src/connectors/runs/ledger.ts, addChunk): one row per
-- chunk written, in the chunk's transaction, instead of an update of the run's row. Every chunk in
-- flight (up to three at once) updated that one row, and each waited for the one before it to
-- commit (the row's lock is held to the commit). A chunk now holds the run's row `for share` only
-- (chunks do not wait on each other; a sweep or cancel closing the run still waits for them), and
-- inserts its counts here. What a run reports while it runs is its row's counts plus these rows'
-- (ledger.ts); when the run leaves Running, by whatever statement (its end, the interrupted-run
-- sweep, a cancel of a silent run, a hub of the version before writing), the trigger below adds
-- them to its row and deletes them, in that statement's transaction: an ended run's counts are its
-- row's alone, and a chunk that committed is counted once, whatever dies when.
--
-- A hub of the version before, beside this one during a rolling update, still adds its chunks'
-- counts to the run's row: the two add up.

create table connectors.run_chunk_counts (
  run_id          uuid not null,
  tenant_id       bigint not null,
  records_in      bigint not null,
  records_out     bigint not null,
  records_skipped bigint not null,
  dead_letters    bigint not null
);
create index run_chunk_counts_run on connectors.run_chunk_counts (run_id);
alter table connectors.run_chunk_counts enable row level security;
create policy tenant_isolation on connectors.run_chunk_counts
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

create function connectors.run_chunk_counts_folded() returns trigger language plpgsql set search_path = pg_catalog as $$
declare
  added record;
begin
  with gone as (delete from connectors.run_chunk_counts where run_id = new.id returning *)
  select pg_catalog.count(*)::integer as chunks, pg_catalog.sum(records_in) as records_in, pg_catalog.sum(records_out) as records_out,
         pg_catalog.sum(records_skipped) as records_skipped, pg_catalog.sum(dead_letters) as dead_letters
    into added from gone;
  if added.chunks > 0 then
    new.records_in := new.records_in + added.records_in;
    new.records_out := new.records_out + added.records_out;
    new.records_skipped := new.records_skipped + added.records_skipped;
    new.dead_letter_count := new.dead_letter_count + added.dead_letters;
    new.chunk_count := new.chunk_count + added.chunks;
  end if;
  return new;
end $$;
create trigger runs_chunk_counts_folded before update of status on connectors.runs
  for each row when (old.status = 'Running' and new.status <> 'Running') execute function connectors.run_chunk_counts_folded();

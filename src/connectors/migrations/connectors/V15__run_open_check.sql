-- connectors.run_open(run_id, status): true for a run still Running (or none read); for a run closed
-- already (the interrupted-run sweep, or a cancel of a silent run, ended it while its process still
-- wrote chunks) it ends the statement with SQLSTATE SV002, its message naming the run and its status.
--
-- A chunk's counts statement (src/connectors/runs/ledger.ts, chunkStatement) reads the run's row
-- `for share` and calls this on the status it read: the chunk of a closed run fails in the database,
-- so that the rest of the chunk's message, its COMMIT included, is skipped and the chunk is rolled
-- back (the hub reads SV002 as RunClosedError). The check used to be the hub's, on the statement's
-- answer, before it sent the COMMIT: a round trip of its own per chunk. Reads nothing, writes nothing.
create function connectors.run_open(run_id uuid, status text) returns boolean
  language plpgsql immutable parallel safe set search_path = pg_catalog
  as $$
begin
  if status is not null and status <> 'Running' then
    raise exception 'run % was closed (%) by another process while this one still ran it: its chunk is not written, and it stops', run_id, status
      using errcode = 'SV002', detail = status;
  end if;
  return true;
end
$$;

revoke all on function connectors.run_open(uuid, text) from public;

-- A stored position (V11, resume) goes whenever an endpoint's watermark is set or cleared, by any
-- writer: every statement that does so sets watermark_updated_at (a run that completes, a reset, a
-- purge, a delete or purge of rows of its table, a re-apply changing its key or table), and this
-- version's clear the position with it (src/connectors/resume.ts, CLEAR_RESUME). A hub of the version
-- before V11, still running beside this one during a rolling update, sets and clears watermarks
-- without knowing the position: a reset-cursor or a purge through it, or a run of it that completes,
-- left the position of an earlier chain, and the next run of this version read on from it, with that
-- chain's watermark, instead of from the first page (the rows before it never read again). The
-- trigger clears it for every such statement; this version's own statements clear it anyway.
create function connectors.resume_cleared_with_watermark() returns trigger language plpgsql set search_path = pg_catalog as $$
begin
  new.resume := null;
  new.resume_shown := null;
  new.resume_run := null;
  return new;
end $$;
create trigger endpoints_watermark_written before update of watermark_updated_at on connectors.endpoints
  for each row when (old.resume is not null) execute function connectors.resume_cleared_with_watermark();

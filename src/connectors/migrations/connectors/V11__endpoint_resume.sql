-- Where an endpoint's next run starts reading when its last run stopped at the page budget
-- (svc.connectors.max-pages) with the source still having pages (src/connectors/resume.ts): without
-- it every run read the same first pages again, for ever, and a watermark endpoint never promoted its
-- watermark (only a run that completes does). `resume` is the JSON (numbers exact) of the position the
-- run would have requested next, the pagination's state, the watermark the run was sent and the
-- running maximum of watermark_path it read; `resume_shown` how the endpoint's answer shows the
-- position (credentials masked); `resume_run` the run that stored it. Cleared wherever the watermark
-- is cleared (reset-cursor, purge, a delete or purge of rows of its table, a re-apply changing its key
-- or table), by a re-apply changing what the endpoint reads, and by the run that completes the chain.
alter table connectors.endpoints
  add column resume       text,
  add column resume_shown text,
  add column resume_run   uuid;

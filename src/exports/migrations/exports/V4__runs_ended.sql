-- The runs that ended, by their end: the daily retention purge (src/exports/runs/retention.ts) walks
-- the runs past the retention in this order, reading only those, a batch at a time.
create index runs_ended on exports.runs (ended_at) where ended_at is not null;

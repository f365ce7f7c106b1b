-- Refused anonymous calls are recorded one row per route, status and minute in each process, with
-- how many there were: a row each let anyone without credentials grow the trail without bound (kept
-- 365 days). Every other entry is one call (count 1).
alter table audit.entries
  add column count integer not null default 1;

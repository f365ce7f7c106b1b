-- An entry the indexer could not turn into chunks (src/retrieval/indexer.ts, expandPending): how
-- many passes failed on it, the last error, and when it is tried again (a backoff from 1 s doubling
-- to 1 h). The other entries of the pass go on without it; it stays until a pass succeeds.
alter table retrieval.pending
  add column attempts   integer not null default 0,
  add column last_error text,
  add column retry_at   timestamptz;

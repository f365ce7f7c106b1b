-- An entry recorded while svc.retrieval.index-rows is false (src/retrieval/indexer.ts, settlingIndexer):
-- its rows are not indexed, but the chunks made before the switch that name their keys are settled
-- (re-pointed or removed) as for any rewritten row: a chunk never goes on citing a row version that is gone.
alter table retrieval.pending add column settle_only boolean not null default false;

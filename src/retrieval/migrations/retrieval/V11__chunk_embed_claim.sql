-- A chunk being embedded (src/retrieval/indexer.ts, embedPending): until when the process that took
-- it into a model call holds it. Passes of other processes pass it over until then; the claim is
-- cleared when the call's outcome is stored (or the call fails, or is dropped), and a process that
-- dies mid-call leaves it to lapse. Before, indexer processes running the same model all took the
-- oldest chunks without a vector: each text went to the model once per process (tenants pay the
-- model per token) and only one vector was stored. A hub of the version before ignores the column
-- (it embeds as it did, nothing it does breaks on it).
alter table retrieval.chunks add column embed_claimed_until timestamptz;

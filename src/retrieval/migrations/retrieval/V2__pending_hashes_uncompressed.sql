-- A pending entry's row hashes (a written chunk's, 1,000 by default: ≈ 68 kB of hex text) are
-- stored out of line without compression. SHA-256 hex does not compress, and PostgreSQL's attempt
-- (pglz over the whole array) cost each ingestion transaction more than a millisecond per chunk.
alter table retrieval.pending alter column row_hashes set storage external;

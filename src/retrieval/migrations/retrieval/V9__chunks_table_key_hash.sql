-- chunks_table_key on the md5 of the key instead of the key itself: a btree entry holds at most
-- about 2,700 bytes, and a row's key of some 2,680 characters that do not compress fits its table's
-- own unique index but not (tenant, table, key), so such a row never got a chunk. Lookups name the
-- key's md5 and the key itself (src/retrieval/row-chunks.ts, settleRowChunks; settlingIndexer in
-- src/retrieval/indexer.ts); a lookup by tenant and table alone (settling a whole table after a
-- delete) uses the index's first two columns as before. Built over the chunks already stored.
drop index retrieval.chunks_table_key;
create index chunks_table_key on retrieval.chunks (tenant_id, table_name, md5(external_id)) where row_hash is not null;

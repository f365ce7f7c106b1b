-- The row chunks of a tenant's table naming given keys, of whichever connector: what the indexer
-- settles for the rows an entry wrote (src/retrieval/row-chunks.ts, settleRowChunks), since a row
-- another connector wrote before under the same key may be what another corpus's chunk cites. It
-- also serves settling a whole table after a connector delete (tenant and table only).
-- chunks_row_key (connector, table, key) served the same lookup limited to the entry's connector,
-- which nothing does any more: it goes.
create index chunks_table_key on retrieval.chunks (tenant_id, table_name, external_id) where row_hash is not null;
drop index retrieval.chunks_row_key;

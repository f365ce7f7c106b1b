-- The warnings of the last apply by the operator that changed the object (docs/kubernetes.md,
-- "Conditions"), other than the outbound address policy's (recomputed under the policy in force),
-- written in that apply's transaction: those of the change itself (a connector's changed unique_key:
-- purge the endpoint), which a later apply of the same manifest no longer answers, stay readable
-- when the status write after the apply failed. Null: not known (no change applied since this
-- column), the warnings are recomputed.
alter table manifests.owners add column warnings text[];

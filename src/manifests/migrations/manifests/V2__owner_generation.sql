-- The generation (`metadata.generation`) of the custom resource whose manifest the hub holds
-- (docs/kubernetes.md, "Ownership and conflicts"): an apply for the same uid with an older
-- generation is refused (an operator replica that read the resource before a newer leader applied
-- a later generation). Null: not known (a record written before this column), nothing refused.
alter table manifests.owners add column generation bigint;

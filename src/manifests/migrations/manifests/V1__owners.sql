-- Which Kubernetes custom resource manages a hub object (docs/kubernetes.md, "Ownership"): one row
-- per hub object the operator applied, written in the same transaction as the apply. `kind` is the
-- manifest kind (Connector, Entity, Export, Workflow, Process), `name` the hub object's name as
-- stored; `namespace`, `resource` and `uid` name the custom resource. A resource manages at most one
-- object (`uid` is unique), and an object at most one resource (the primary key).
create table manifests.owners (
  tenant_id  bigint not null references core.tenants (id),
  kind       text not null,
  name       text not null,
  namespace  text not null,
  resource   text not null,
  uid        text not null unique,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (tenant_id, kind, name)
);
create index owners_resource on manifests.owners (kind, namespace, resource);

alter table manifests.owners enable row level security;
create policy tenant_isolation on manifests.owners
  using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant());

-- The record goes with its hub object, whatever deletes it (the operator, DELETE over HTTP, a
-- cascade): no owner record outlives its object.
create function manifests.forget_owner() returns trigger language plpgsql as $$
begin
  delete from manifests.owners where tenant_id = old.tenant_id and kind = tg_argv[0] and name = old.name;
  return old;
end
$$;

create trigger forget_owner after delete on connectors.connectors for each row execute function manifests.forget_owner('Connector');
create trigger forget_owner after delete on entities.entities for each row execute function manifests.forget_owner('Entity');
create trigger forget_owner after delete on exports.exports for each row execute function manifests.forget_owner('Export');
create trigger forget_owner after delete on workflows.workflows for each row execute function manifests.forget_owner('Workflow');
create trigger forget_owner after delete on processes.processes for each row execute function manifests.forget_owner('Process');

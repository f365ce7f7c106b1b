-- The warnings recorded with an owner (V3) are those of the object's last change: any write that
-- changes an object's manifest forgets them (null: not known), and an apply of this version records
-- its own in the same transaction, after its write of the object. An operator of the version before
-- V3, still running beside this one during a rolling update, changed an object without recording
-- them: the warnings of the change before stayed, and this version's next resync put them in the
-- resource's status (the earlier change's `purge the endpoint`, say) in place of those of the old
-- pod's change, until the next change. Forgotten, they are read back from the status that pod wrote
-- for that generation (operator/reconciler.ts). A change over HTTP forgets them too: they no longer
-- describe the object.
create function manifests.forget_change_warnings() returns trigger language plpgsql as $$
begin
  update manifests.owners set warnings = null
   where tenant_id = new.tenant_id and kind = tg_argv[0] and name = new.name and warnings is not null;
  return null;
end
$$;

create trigger forget_change_warnings after update of manifest on connectors.connectors for each row
  when (old.manifest is distinct from new.manifest) execute function manifests.forget_change_warnings('Connector');
create trigger forget_change_warnings after update of manifest on entities.entities for each row
  when (old.manifest is distinct from new.manifest) execute function manifests.forget_change_warnings('Entity');
create trigger forget_change_warnings after update of manifest on exports.exports for each row
  when (old.manifest is distinct from new.manifest) execute function manifests.forget_change_warnings('Export');
create trigger forget_change_warnings after update of manifest on workflows.workflows for each row
  when (old.manifest is distinct from new.manifest) execute function manifests.forget_change_warnings('Workflow');
create trigger forget_change_warnings after update of manifest on processes.processes for each row
  when (old.manifest is distinct from new.manifest) execute function manifests.forget_change_warnings('Process');

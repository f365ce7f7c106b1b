-- connectors.drop_unused_ext_tables() (V5) as before, but a table something is reading at that moment
-- (an export's snapshot of an entity over it, a workflow sweep's cursor, an analytic query) is
-- left as it is, empty and registered by nothing, for a later delete of the tenant to drop. The
-- DROP used to wait for that reader (an export reads for up to svc.export.snapshot.timeout-seconds),
-- the delete holding the tenant's DDL lock meanwhile: every run of the tenant waited at the
-- registration of its table, and every query of the table queued behind the DROP.

create or replace function connectors.drop_unused_ext_tables() returns setof text
  language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  tid bigint := core.current_tenant();
  target text;
  unused record;
  has_row boolean;
begin
  if tid is null then
    return;
  end if;
  target := 'ext_t' || tid;
  perform pg_advisory_xact_lock(hashtext('svc-hub:ext:' || target));
  for unused in
    select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = target and c.relkind = 'r'
       and not exists (select 1 from connectors.ext_tables r where r.tenant_id = tid and r.table_name = 'ext.' || c.relname)
     order by c.relname
  loop
    execute format('select exists (select 1 from %I.%I)', target, unused.relname) into has_row;
    if not has_row then
      begin
        execute format('lock table %I.%I in access exclusive mode nowait', target, unused.relname);
      exception when lock_not_available then
        continue; -- being read: left for a later delete
      end;
      execute format('drop table %I.%I', target, unused.relname);
      return next 'ext.' || unused.relname;
    end if;
  end loop;
  if exists (select 1 from pg_namespace where nspname = target)
     and not exists (select 1 from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = target) then
    begin
      execute format('drop schema %I', target);
    exception when dependent_objects_still_exist then
      null; -- something other than a table lives there: keep the schema
    end;
  end if;
end $$;

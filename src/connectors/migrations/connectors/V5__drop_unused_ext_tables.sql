-- Drops the current tenant's ext tables that no connector of the tenant registers any more and that
-- hold no row, and the tenant's schema ext_t<id> once it has no table left. Called by a connector
-- delete inside its own transaction (src/connectors/target/drop.ts), after it removed the
-- connector's rows and registrations, so a delete from any path (HTTP, operator, CLI) leaves no
-- table behind and a crash leaves nothing half done. It runs as the owner (security definer) but
-- acts only on the schema of core.current_tenant(): the application role can drop nothing else.
-- The advisory lock is the one the owner connection takes for the tenant's DDL
-- (src/connectors/target/ddl.ts), so a run creating a table and a delete dropping one never interleave.

create function connectors.drop_unused_ext_tables() returns setof text
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

revoke all on function connectors.drop_unused_ext_tables() from public;

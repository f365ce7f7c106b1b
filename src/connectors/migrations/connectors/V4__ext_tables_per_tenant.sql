-- Every tenant gets its own ext tables: schema ext_t<tenant_id> instead of one shared schema ext,
-- so no tenant can add columns to (1600 at most), or fix the column types of, another tenant's
-- table. Manifests, events and the registry (connectors.ext_tables.table_name) keep saying
-- ext.<name>. An install that has shared tables has them split here: each tenant's rows move to
-- ext_t<tenant_id>.<name> (same columns, indexes, identity and row policy, plus a check constraint
-- pinning tenant_id), the shared table is dropped, then the empty schema ext. The application and
-- worker roles are granted the new schemas right after the migrations (src/db/migrations.ts).

do $$
declare
  shared record;
  tid bigint;
  target text;
  seq text;
begin
  for shared in
    select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'ext' and c.relkind = 'r' order by c.relname
  loop
    for tid in execute format('select distinct tenant_id from ext.%I order by 1', shared.relname) loop
      target := 'ext_t' || tid;
      execute format('create schema if not exists %I', target);
      execute format('create table %I.%I (like ext.%I including all)', target, shared.relname, shared.relname);
      execute format('insert into %I.%I overriding system value select * from ext.%I where tenant_id = %s', target, shared.relname, shared.relname, tid);
      seq := pg_get_serial_sequence(format('%I.%I', target, shared.relname), 'id');
      if seq is not null then
        execute format('select setval(%L, coalesce((select max(id) from %I.%I), 0) + 1, false)', seq, target, shared.relname);
      end if;
      execute format('alter table %I.%I add check (tenant_id = %s)', target, shared.relname, tid);
      execute format('alter table %I.%I enable row level security', target, shared.relname);
      execute format('create policy tenant_isolation on %I.%I using (tenant_id = core.current_tenant()) with check (tenant_id = core.current_tenant())',
                     target, shared.relname);
    end loop;
    execute format('drop table ext.%I', shared.relname);
  end loop;
  drop schema if exists ext;
end $$;

-- connectors.ingest_stage(width, empty_first): readies the calling session's one staging table for a
-- COPYed chunk of rows (src/connectors/target/writer.ts), pg_temp.svc_ingest_stage
-- (external_id text, row_hash text, data jsonb, p0 text, …), `on commit delete rows`.
--
-- One table per session, however many promoted columns the chunks it serves have: PostgreSQL empties
-- every `on commit delete rows` table of a session at each commit of a transaction that used a
-- temporary table, so each table more (one per number of promoted columns, as before) added its
-- own truncation to every chunk's commit. The table only grows: a chunk with more promoted columns
-- than it has adds the missing ones (p<have> … p<width-1>); a narrower chunk COPYs into the first
-- ones, the others left null, and selects only those.
--
-- The width is read from the catalog at each call, not remembered by the hub: the table's creation
-- or growth is undone with the transaction (or savepoint) that made it, and the catalog is then
-- right where a record kept beside it would not be. The check is one expression (no query): column
-- number 3 + width exists (has_column_privilege by number answers null for a column that does not
-- exist; the session's own table always grants it). `empty_first` empties the table first (a second
-- chunk in the same transaction).
--
-- A session that still holds staging tables of the former kind (pg_temp.svc_ingest_stage_<n>) has
-- them dropped when this creates its table: they would be emptied at every commit as well.

create function connectors.ingest_stage(width integer, empty_first boolean) returns void
  language plpgsql as $$
declare
  stage regclass := pg_catalog.to_regclass('pg_temp.svc_ingest_stage');
  have integer;
  former record;
begin
  if stage is not null and pg_catalog.has_column_privilege(stage, (3 + width)::smallint, 'insert') is not null then
    if empty_first then
      truncate pg_temp.svc_ingest_stage;
    end if;
    return;
  end if;
  if stage is null then
    for former in
      select c.relname from pg_catalog.pg_class c
       where c.relnamespace = pg_catalog.pg_my_temp_schema() and c.relname ~ '^svc_ingest_stage_[0-9]+$'
    loop
      execute pg_catalog.format('drop table pg_temp.%I', former.relname);
    end loop;
    create temp table svc_ingest_stage (external_id text, row_hash text, data jsonb) on commit delete rows;
    stage := pg_catalog.to_regclass('pg_temp.svc_ingest_stage');
  elsif empty_first then
    truncate pg_temp.svc_ingest_stage;
  end if;
  select pg_catalog.count(*)::integer - 3 into have
    from pg_catalog.pg_attribute where attrelid = stage and attnum > 0 and not attisdropped;
  if have < width then
    execute 'alter table pg_temp.svc_ingest_stage '
      || (select pg_catalog.string_agg(pg_catalog.format('add column p%s text', i), ', ' order by i) from pg_catalog.generate_series(have, width - 1) i);
  end if;
end $$;

revoke all on function connectors.ingest_stage(integer, boolean) from public;

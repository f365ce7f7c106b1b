-- What the connector lists show of each endpoint, stored when the manifest is applied
-- (src/connectors/store.ts, applyConnector) beside the endpoint's UUID, position and watermark: the
-- list reads these columns instead of taking the stored spec apart per connector and per request.
-- Existing endpoints get them from the spec they were applied with.

alter table connectors.endpoints
  add column kind         text,
  add column method       text,
  add column path         text,
  add column pagination   text,
  add column target_table text,
  add column sync_mode    text;

update connectors.endpoints w
   set kind = case when (e ->> 'graphql')::boolean then 'graphql' else 'rest' end,
       method = e ->> 'method',
       path = e ->> 'path',
       pagination = e -> 'pagination' ->> 'kind',
       target_table = e -> 'target' ->> 'table',
       sync_mode = e -> 'incremental' ->> 'mode'
  from connectors.connectors c, jsonb_array_elements(c.spec -> 'endpoints') e
 where c.id = w.connector_id and e ->> 'uuid' = w.uuid::text;

-- A row no endpoint of its connector's spec names (applies keep the two in step, so none is
-- expected) is one no run reads: it goes rather than stopping the start.
delete from connectors.endpoints where kind is null;

alter table connectors.endpoints
  alter column kind set not null,
  alter column method set not null,
  alter column path set not null,
  alter column pagination set not null,
  alter column target_table set not null,
  alter column sync_mode set not null,
  add constraint endpoints_kind check (kind in ('rest', 'graphql'));

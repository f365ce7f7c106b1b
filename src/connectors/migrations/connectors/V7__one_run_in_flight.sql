-- One run in flight per endpoint (probe 31 M1): two runs of one endpoint at once wrote over each
-- other's rows and the older, slower one moved the watermark back. The partial unique index lets one
-- Running run per endpoint exist, in every process and replica alike (the runner turns its violation
-- into a 409 naming the run in flight: src/connectors/runs/ledger.ts). A run whose process died is
-- failed by the interrupted-run sweep, which frees its endpoint. Runs left Running side by side
-- before this migration keep the newest; the older ones end as the sweep would end them.

update connectors.runs r
   set status = 'Failed', ended_at = now(), error_message = 'interrupted: the hub stopped during the run'
 where r.status = 'Running' and r.endpoint_uuid is not null
   and exists (select 1 from connectors.runs n
                where n.endpoint_uuid = r.endpoint_uuid and n.status = 'Running'
                  and (n.started_at, n.id) > (r.started_at, r.id));

create unique index runs_one_in_flight on connectors.runs (endpoint_uuid) where status = 'Running';

-- A request to stop a Running run (POST …/runs/{id}/cancel, or the export deleted while it ran):
-- the reason it is to end with. The process running it reads it with its next heartbeat
-- (svc.export.heartbeat-every) and ends the run Failed; the process serving the request stops a run
-- of its own at once.
alter table exports.runs add column stop_code text check (stop_code in ('definition', 'interrupted'));
alter table exports.runs add column stop_reason text;

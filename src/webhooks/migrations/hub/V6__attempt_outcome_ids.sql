-- Each attempt's outcome carries an id the worker gives it, written with the attempt. An outcome the
-- worker writes again (a batch whose commit succeeded but whose answer was lost, written again row by
-- row: src/webhooks/outcome-writer.ts) is recognised by it and not counted a second time. Null for
-- the attempts written before.
alter table hub.delivery_attempts add column outcome_id uuid;

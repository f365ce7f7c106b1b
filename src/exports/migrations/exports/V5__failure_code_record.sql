-- Failure code `record`: the run's end could not be stored, PostgreSQL refusing a value it held
-- (SQLSTATE class 22 or 23); the run is written again as Failed with that code and a reason naming
-- the SQLSTATE only (src/exports/runner.ts, `storableEnd`).
alter table exports.runs drop constraint runs_failure_code_check;
alter table exports.runs add constraint runs_failure_code_check
  check (failure_code in ('definition', 'generation', 'publication', 'collision', 'interrupted', 'record'));

-- The analytic chat's SQL runs as the analytic role (svc.datasource.analytic-role, src/retrieval/analytic/run.ts),
-- which has no right on the hub's own schemas, this one included. The bound on its answer's bytes (V3) is called
-- by the statement that role runs, so it moves to a schema of its own holding nothing else, which every role may
-- use (it reads nothing and writes nothing). retrieval.analytic_answer_fits stays, calling it, for a hub of an
-- older version still running beside this one.
create schema analytic_bound;
alter function retrieval.analytic_answer_fits(bigint, bigint) set schema analytic_bound;
grant usage on schema analytic_bound to public;
grant execute on function analytic_bound.analytic_answer_fits(bigint, bigint) to public;
create function retrieval.analytic_answer_fits(bytes bigint, cap bigint) returns boolean
  language sql immutable parallel safe
  as 'select analytic_bound.analytic_answer_fits(bytes, cap)';

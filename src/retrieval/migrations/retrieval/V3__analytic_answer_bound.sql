-- The bound on the bytes of an analytic chat's answer (guard 5, src/retrieval/analytic/run.ts): the
-- answer is measured in PostgreSQL before any of it is sent, and one larger than the bound ends the
-- statement with SQLSTATE SV001 instead of reaching the hub's memory. Reads nothing, writes nothing.
create function retrieval.analytic_answer_fits(bytes bigint, cap bigint) returns boolean
  language plpgsql immutable parallel safe
  as $$
begin
  if bytes > cap then
    raise exception 'The answer is % bytes, more than the % allowed (svc.analytic.max-answer-bytes): ask for fewer rows or shorter values.', bytes, cap
      using errcode = 'SV001';
  end if;
  return true;
end
$$;

-- Whether no active tenant has an enabled e-mail rule and no rule write that makes a rule active is
-- in progress (src/email/rules.ts, NO_ENABLED_RULES: the e-mail consumer then passes events unread).
-- A function, volatile, so that it looks at the locks first and reads the rules after, in a snapshot
-- of its own taken then: a rule write that commits while the calling statement runs either still
-- holds its lock when the function looks, or has committed before the function reads the rules and
-- is seen there. Read in the calling statement's snapshot, as it was, a rule committed between that
-- snapshot and the look at the locks was in neither, and the events it was due were passed unread.
-- The lock: pg_advisory_xact_lock(hashtext('email.rules'), tenant), taken exclusively by a create or
-- an enabling until its transaction ends (two int4 keys: objsubid 2).
create function email.no_enabled_rules() returns boolean
  language plpgsql volatile
as $$
begin
  if exists (select 1 from pg_locks l
              where l.locktype = 'advisory' and l.mode = 'ExclusiveLock' and l.objsubid = 2
                and l.classid = hashtext('email.rules')::oid
                and l.database = (select oid from pg_database where datname = current_database())) then
    return false;
  end if;
  -- A statement of its own: a snapshot taken now, after the look at the locks.
  return not exists (select 1 from email.rules r
                      where r.enabled and r.deleted_at is null
                        and exists (select 1 from core.tenants t where t.id = r.tenant_id and t.active));
end
$$;

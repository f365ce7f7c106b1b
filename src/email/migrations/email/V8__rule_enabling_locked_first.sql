-- Every update that sets `enabled` takes the lock of its tenant's rule writes (RULE_WRITES_LOCK,
-- src/email/rules.ts) before it locks any row, whichever version writes. Since V7 the lock is also
-- taken by the row trigger, after the update has locked the rule's row: a hub of the version before
-- 9b589e47 (no lock of its own) took the two in that order, row then lock, while a hub since takes
-- the lock before its update, lock then row. Two such hubs enabling the same rule at once during a
-- rolling update each held what the other waited for, and one of them failed with "deadlock
-- detected". A statement trigger fires before the statement locks any row: every writer now takes
-- the lock first (a hub that took it already takes it again, which changes nothing). It is taken
-- for any update of `enabled` of a tenant's transaction (a disable too: the statement does not know
-- yet which rows it turns on); the row trigger of V7 still takes it for a statement without a tenant.
create function email.rule_writes_locked_first() returns trigger language plpgsql set search_path = pg_catalog as $$
declare
  tenant bigint := core.current_tenant();
begin
  if tenant is not null then
    perform pg_advisory_xact_lock(hashtext('email.rules'), tenant::int);
  end if;
  return null;
end $$;
create trigger rules_writes_locked_first before update of enabled on email.rules
  for each statement execute function email.rule_writes_locked_first();

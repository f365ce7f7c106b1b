-- An enabling (enabled from false to true) takes the lock of its tenant's rule writes and its time
-- (active_since) under that lock, whichever version writes: the e-mail consumer's read of the rules
-- waits for that lock (src/email/rules.ts, RULE_WRITES_LOCK), so a rule whose time is before the read
-- is in it. A hub of the version before, still running beside this one during a rolling update,
-- enabled a rule without the lock, its time taken by its update: a read of the rules after that
-- time and before its commit missed the rule, and the events written between the two went by without
-- it (and the consumer's idle check, email.no_enabled_rules, which looks for the lock, passed them
-- unread). This version takes the lock before its update; taken again here it changes nothing, and
-- the time set here, after it, is its own write's. Creates took the lock before this version too.
create function email.rule_enabling_locked() returns trigger language plpgsql set search_path = pg_catalog as $$
begin
  perform pg_advisory_xact_lock(hashtext('email.rules'), new.tenant_id::int);
  new.active_since := clock_timestamp();
  return new;
end $$;
create trigger rules_enabling_locked before update of enabled on email.rules
  for each row when (not old.enabled and new.enabled)
  execute function email.rule_enabling_locked();

-- A rule enabled again becomes active at that write, by any writer: this version's update sets
-- active_since itself (src/email/rules.ts); a hub of the version before V3, still running beside this
-- one during a rolling update, enables a rule without knowing the column, and the rule then received
-- the events written while it was disabled that the consumer had not passed yet. An update that turns
-- enabled from false to true and leaves active_since as it was sets it to its own write here.
create function email.rule_enabled_again() returns trigger language plpgsql set search_path = pg_catalog as $$
begin
  new.active_since := clock_timestamp();
  return new;
end $$;
create trigger rules_enabled_again before update of enabled on email.rules
  for each row when (not old.enabled and new.enabled and new.active_since is not distinct from old.active_since)
  execute function email.rule_enabled_again();

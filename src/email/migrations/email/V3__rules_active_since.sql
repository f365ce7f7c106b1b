-- A rule receives the events written from when it became active: created, or enabled again after it
-- was disabled (the update that enables it sets active_since to its own write, clock_timestamp(),
-- src/email/rules.ts), as hub.integrations.active_since does for webhooks. Before, a rule had only
-- created_at, and one enabled again received the events written while it was disabled that the
-- consumer had not passed yet (a consumer behind: the mail server away, the dispatch role down).
alter table email.rules add column active_since timestamptz;
update email.rules set active_since = created_at;
alter table email.rules alter column active_since set default clock_timestamp(), alter column active_since set not null;

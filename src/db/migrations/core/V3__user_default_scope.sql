-- The default scope of a hub user (GET and PUT /api/platform/users/me/scope): what the retrieval API
-- uses when a chat names no scope. Null: none. A column of core.users, so it is under the same
-- row-level security policy as the user itself. Scope names are non-blank and free of whitespace,
-- as the scopes that bind a user (core.user_scopes).
alter table core.users add column default_scope text
  constraint users_default_scope_check check (default_scope is null or (default_scope <> '' and default_scope !~ '\s' and length(default_scope) <= 200));

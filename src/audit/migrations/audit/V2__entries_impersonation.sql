-- Who acted for whom: an impersonating caller (acting_as_tenant, X-Impersonate-Tenant) writes its
-- entries in the tenant it acts as; the tenant it belongs to and the fact that it impersonated are
-- recorded beside its login. home_tenant_id is null for a caller that belongs to no tenant (and for
-- refused, anonymous calls); entries written before this migration read impersonating false.
alter table audit.entries
  add column home_tenant_id bigint,
  add column impersonating  boolean not null default false;

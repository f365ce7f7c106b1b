/**
 * SQL, true when the tenant whose id is `tenantId` (an SQL expression over the caller's row, such as
 * `r.tenant_id`) is active (core.tenants.active): a deactivated tenant's background work stops
 * (docs/admin.md), and the statements that pick that work out filter their rows with this. An
 * `exists` over the primary key: PostgreSQL plans it in a where clause as the inner join on
 * core.tenants it replaces (a semi-join on a unique key), so a statement keeps its plan.
 *
 * Not for a column that says whether a row's tenant is deactivated (the outbox read, a webhook
 * attempt's integration): those are true for a row without a tenant (`is not false`), which this is not.
 */
export function activeTenant(tenantId: string): string {
  return `exists (select 1 from core.tenants active_tenant where active_tenant.id = ${tenantId} and active_tenant.active)`;
}

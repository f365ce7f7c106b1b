import type { Tx } from '../../db/database.js';
import { ddlLockName, tenantSchema } from './ddl.js';

/**
 * A run's registration of its endpoint's target table (connectors.ext_tables), in the caller's tenant
 * transaction, made before the run makes sure the table exists (ExtSchema.ensureTable). The
 * transaction then takes the tenant's DDL lock in shared mode (ddlLockName) and holds it to its
 * commit: a connector delete holds that lock exclusively from before it reads registrations until
 * it has dropped the tables nothing registers (drop_unused_ext_tables), so either the delete commits
 * first (and ensureTable, which reads the catalog after this commit, finds a dropped table missing
 * and creates it again), or this registration commits first and the delete, taking its lock after
 * that, sees it and keeps the table. Without the lock a delete could read the registrations before
 * this commit, drop the table, and commit after ensureTable had found it still there: the run's
 * writes then failed with `relation … does not exist`. Shared, so runs registering at once do not
 * wait for one another; the lock is taken after the insert (which locks nothing a delete waits for).
 */
export async function registerTargetTable(tx: Tx, connectorId: string, endpointUuid: string, table: string): Promise<void> {
  await tx.query(
    'insert into connectors.ext_tables (tenant_id, connector_id, endpoint_uuid, table_name) values (core.current_tenant(), $1, $2, $3) on conflict do nothing',
    [connectorId, endpointUuid, table],
  );
  await tx.query('select pg_advisory_xact_lock_shared(hashtext($1))', [ddlLockName(tenantSchema(tx.tenantId))]);
}

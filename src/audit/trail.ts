import type { Database, Tx } from '../db/database.js';
import { JsonText } from '../db/json-text.js';
import { jsonPageSql, keyInstantSql, type Page, type PageRequest } from '../db/keyset.js';
import { isoTimestampSql } from '../db/timestamps.js';

/** One entry of a tenant's audit trail as the API answers it (`GET /api/platform/audit`). */
export interface AuditTrailEntry {
  at: string;
  actor: string;
  action: string;
  target: string;
  outcome: 'success' | 'failure';
  status: number | null;
  requestId: string | null;
  homeTenantId: number | null;
  impersonating: boolean;
}

/** What a page of the trail is narrowed to: each given filter must hold (`action` and `actor` exactly). */
export interface AuditFilter {
  actor?: string;
  action?: string;
  outcome?: 'success' | 'failure';
  /** Entries at or after this instant. */
  since?: Date;
  /** Entries before this instant. */
  until?: Date;
}

/** An entry's columns, read as the answer's record: its time as the text of the answer (`isoTimestampSql`). */
const RECORD = `${isoTimestampSql('at')} as "at", actor, action, target, outcome, status, request_id as "requestId",
  home_tenant_id as "homeTenantId", impersonating`;

/**
 * A page of the tenant's audit trail, newest first (the instant to the microsecond, then the id,
 * both descending), as the answer's JSON text with the last entry's sort key when more follow
 * (src/db/keyset.ts). Read in the tenant's read-only transaction: row-level security on
 * audit.entries lets it see the tenant's own entries only (those of calls made as the tenant,
 * impersonating ones included); the tenant is named in the statement too, for the index
 * `entries_tenant_at`.
 */
export async function listAuditJson(tx: Tx, page: PageRequest, filter: AuditFilter = {}): Promise<Page<JsonText>> {
  const values: unknown[] = [page.limit, tx.tenantId];
  const where = ['tenant_id = $2::bigint'];
  const add = (sql: (p: string) => string, value: unknown) => {
    values.push(value);
    where.push(sql(`$${values.length}`));
  };
  if (filter.actor !== undefined) add((p) => `actor = ${p}`, filter.actor);
  if (filter.action !== undefined) add((p) => `action = ${p}`, filter.action);
  if (filter.outcome !== undefined) add((p) => `outcome = ${p}`, filter.outcome);
  if (filter.since !== undefined) add((p) => `at >= ${p}::timestamptz`, filter.since);
  if (filter.until !== undefined) add((p) => `at < ${p}::timestamptz`, filter.until);
  if (page.after) {
    values.push(page.after[0], page.after[1]);
    const [at, id] = [`$${values.length - 1}::timestamptz`, `$${values.length}::bigint`];
    // The first term bounds the index scan (entries_tenant_at); the second drops the ties already shown.
    where.push(`at <= ${at} and (at < ${at} or id < ${id})`);
  }
  const { rows } = await tx.query<{ body: string; next: string[] | null }>(
    jsonPageSql({
      rows: `select * from audit.entries where ${where.join(' and ')} order by at desc, id desc limit $1::integer + 1`,
      order: 'at desc, id desc',
      limit: '$1::integer',
      record: RECORD,
      alias: 'entry',
      key: `array[${keyInstantSql('at')}, id::text]`,
    }),
    values,
  );
  return { items: new JsonText(rows[0]!.body), ...(rows[0]!.next ? { next: rows[0]!.next } : {}) };
}

/** The audit trail as the API reads it: a tenant's own entries (docs/operations.md, "Audit"). */
export class AuditTrail {
  constructor(private readonly db: Database) {}

  list(tenantId: number, page: PageRequest, filter: AuditFilter = {}): Promise<Page<JsonText>> {
    return this.db.readWithTenant(tenantId, (tx) => listAuditJson(tx, page, filter));
  }
}

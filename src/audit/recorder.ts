import type { Database } from '../db/database.js';
import { logger } from '../observability/logger.js';

/** One audited act. `tenantId` 0 is the platform itself (calls that resolved no tenant). */
export interface AuditEntry {
  tenantId: number;
  actor: string;
  action: string;
  target: string;
  outcome: 'success' | 'failure';
  status?: number;
  requestId?: string;
  at: Date;
}

const MAX_BUFFER = 10_000;
const ROWS_PER_INSERT = 500;

/**
 * Buffers audit entries in memory and writes them in batches (every `svc.audit.dispatch-every`, and
 * on stop), so auditing never adds a database round trip to the request it records. A failed flush
 * keeps the entries for the next one; past MAX_BUFFER the oldest are dropped with an error log.
 */
export class AuditRecorder {
  private buffer: AuditEntry[] = [];

  constructor(private readonly db: Database) {}

  record(entry: AuditEntry): void {
    this.buffer.push(entry);
    if (this.buffer.length > MAX_BUFFER) {
      const dropped = this.buffer.length - MAX_BUFFER;
      this.buffer.splice(0, dropped);
      logger().error({ dropped }, 'audit buffer full: oldest entries dropped');
    }
  }

  pending(): number {
    return this.buffer.length;
  }

  async flush(): Promise<number> {
    if (this.buffer.length === 0) return 0;
    const batch = this.buffer;
    this.buffer = [];
    try {
      await this.db.crossTenant('audit-flush', async (tx) => {
        for (let i = 0; i < batch.length; i += ROWS_PER_INSERT) {
          const rows = batch.slice(i, i + ROWS_PER_INSERT);
          const values: unknown[] = [];
          const tuples = rows.map((e, r) => {
            values.push(e.tenantId, e.actor, e.action, e.target, e.outcome, e.status ?? null, e.requestId ?? null, e.at);
            const base = r * 8;
            return `(${Array.from({ length: 8 }, (_, k) => `$${base + k + 1}`).join(', ')})`;
          });
          await tx.query(
            `insert into audit.entries (tenant_id, actor, action, target, outcome, status, request_id, at) values ${tuples.join(', ')}`,
            values,
          );
        }
      });
      return batch.length;
    } catch (err) {
      this.buffer = batch.concat(this.buffer);
      throw err;
    }
  }
}

/** The daily audit purge (04:45 UTC): entries older than the retention; 0 days disables it. */
export async function purgeAudit(db: Database, retentionDays: number): Promise<number> {
  if (retentionDays <= 0) return 0;
  return db.crossTenant('audit-retention', async (tx) => {
    const { rowCount } = await tx.query(`delete from audit.entries where at < now() - make_interval(days => $1)`, [retentionDays]);
    return rowCount ?? 0;
  });
}

import { deleteInBatches } from '../db/batches.js';
import type { CommitFollowUp, CommitHook, Database, Tx } from '../db/database.js';
import { logger } from '../observability/logger.js';
import { loggableMessage } from '../observability/database-errors.js';
import { storableText } from '../validation/input-limits.js';

/** One audited act. `tenantId` 0 is the platform itself (calls that resolved no tenant). */
export interface AuditEntry {
  tenantId: number;
  actor: string;
  action: string;
  target: string;
  outcome: 'success' | 'failure';
  status?: number;
  requestId?: string;
  /** The caller's own tenant, where `tenantId` is the one it acted as; undefined for a caller of no tenant. */
  homeTenantId?: number;
  /** The caller acted as another tenant than its own (acting_as_tenant, X-Impersonate-Tenant). */
  impersonating?: boolean;
  at: Date;
  /** The row the call's own write inserted already: the retry completes it (outcome, status) instead of inserting. */
  rowId?: number;
  /** Calls the entry stands for (default 1): refused anonymous calls are counted (AuditRecorder.refusedAnonymous). */
  count?: number;
}

/** Who did what, known once authentication has run (`undefined` before). `anonymous`: no caller was identified. */
export type AuditSubject = Pick<AuditEntry, 'tenantId' | 'actor' | 'action' | 'target' | 'requestId' | 'homeTenantId' | 'impersonating'> & { anonymous?: boolean };

const COLUMNS = ['tenant_id', 'actor', 'action', 'target', 'outcome', 'status', 'request_id', 'at', 'home_tenant_id', 'impersonating', 'count'];
const INSERT = `insert into audit.entries (${COLUMNS.join(', ')})`;

/** `$1, $2, …` for one row of COLUMNS, numbered from `base + 1`. */
function placeholders(base = 0): string {
  return COLUMNS.map((_, k) => `$${base + k + 1}`).join(', ');
}

/** An entry's values in the order of COLUMNS. */
function rowOf(e: AuditSubject & Pick<AuditEntry, 'outcome' | 'status' | 'at' | 'count'>): unknown[] {
  return [e.tenantId, e.actor, e.action, e.target, e.outcome, e.status ?? null, e.requestId ?? null, e.at, e.homeTenantId ?? null, e.impersonating ?? false, e.count ?? 1];
}

/** PostgreSQL text cannot hold NUL: a path or claim carrying one is recorded with U+FFFD instead of failing the write. */
function storable(text: string): string;
function storable(text: string | undefined): string | undefined;
function storable(text: string | undefined): string | undefined {
  return text === undefined ? undefined : storableText(text);
}

function storableSubject(subject: AuditSubject): AuditSubject {
  const { anonymous: _, ...rest } = subject;
  return { ...rest, actor: storable(subject.actor), action: storable(subject.action), target: storable(subject.target), requestId: storable(subject.requestId) };
}

/**
 * The audit entry of one call, written so that no crash loses it:
 *
 * - in the first transaction of the call that writes anything (a commit hook, see
 *   `runWithCommitHook`), so the entry commits atomically with the call's own changes: the row is
 *   inserted just before that COMMIT, only when the transaction holds a write
 *   (`pg_current_xact_id_if_assigned()`), with outcome `success` and no status yet. A tenant
 *   transaction carries it only when it is the caller's tenant (row-level security), a worker
 *   transaction always;
 * - then, before the response leaves, `finish` sets the final outcome and status on that row, or
 *   inserts the whole entry when no transaction of the call wrote (reads that are audited as egress,
 *   refusals, validation failures).
 *
 * A process killed after a call's writes committed leaves its entry with a null status; one killed
 * after the response leaves the complete entry. Only when `finish` cannot reach the database is the
 * entry handed to the AuditRecorder, which retries it on the `svc.audit.dispatch-every` clock.
 */
export class RequestAudit implements CommitHook {
  private state: 'open' | 'writing' | 'written' | 'closed' = 'open';
  private rowId: number | undefined;

  /** `subject(false)` is undefined until authentication has run; `subject(true)` always answers. */
  constructor(private readonly subject: (final: boolean) => AuditSubject | undefined) {}

  async beforeCommit(tx: Tx, role: 'app' | 'worker'): Promise<CommitFollowUp | undefined> {
    if (this.state !== 'open') return undefined;
    const given = this.subject(false);
    if (!given) return undefined; // authentication's own transactions
    const subject = storableSubject(given);
    if (role === 'app' && tx.tenantId !== subject.tenantId) return undefined;
    this.state = 'writing';
    try {
      const { rows } = await tx.query<{ id: number }>(
        `${INSERT} select ${placeholders()} where pg_current_xact_id_if_assigned() is not null returning id`,
        rowOf({ ...subject, outcome: 'success', at: new Date() }),
      );
      const id = rows[0]?.id;
      if (id === undefined) {
        this.state = 'open';
        return undefined;
      }
      return {
        committed: () => {
          this.rowId = id;
          this.state = 'written';
        },
        abandoned: () => {
          if (this.state === 'writing') this.state = 'open';
        },
      };
    } catch (err) {
      this.state = 'open';
      throw err;
    }
  }

  /**
   * The call ended with `status`: completes the entry before the response is sent. Not `reachable`
   * (the call failed for want of the database): the entry goes to the recorder's retries at once.
   */
  async finish(db: Database, recorder: AuditRecorder, status: number, { reachable = true }: { reachable?: boolean } = {}): Promise<void> {
    this.state = 'closed';
    const given = this.subject(true)!;
    const outcome = status < 400 ? 'success' : 'failure';
    // Counted per minute only when the database can be reached: a call refused for want of it (a 503
    // before any caller could be identified) goes to the retries at once, as every other entry does.
    if (given.anonymous && this.rowId === undefined && outcome === 'failure' && reachable) {
      await recorder.refusedAnonymous(given, status);
      return;
    }
    const subject = storableSubject(given);
    if (reachable) {
      try {
        if (this.rowId !== undefined) {
          await db.crossTenantQuery('audit', 'update audit.entries set outcome = $2, status = $3 where id = $1', [this.rowId, outcome, status]);
        } else {
          await db.crossTenantQuery('audit', `${INSERT} values (${placeholders()})`, rowOf({ ...subject, outcome, status, at: new Date() }));
        }
        return;
      } catch (err) {
        logger().error({ err: loggableMessage(err), status }, 'audit entry not written with its call: retried later');
      }
    }
    // Retried by the recorder: the whole entry, or the completion of the row already written.
    recorder.record({ ...subject, outcome, status, at: new Date(), ...(this.rowId !== undefined ? { rowId: this.rowId } : {}) });
  }
}

const MAX_BUFFER = 10_000;
const ROWS_PER_INSERT = 500;

/**
 * The fallback for entries a call could not write itself (the database unreachable when the call
 * ended, see RequestAudit): buffered in memory and retried in batches every
 * `svc.audit.dispatch-every` and on stop. A failed flush keeps the entries for the next one; past
 * MAX_BUFFER the oldest are dropped with an error log.
 */
export class AuditRecorder {
  private buffer: AuditEntry[] = [];
  /** Refused anonymous calls of the current minutes, by minute, status and action (refusedAnonymous). */
  private readonly refusals = new Map<string, { minute: number; rowId?: number; more: number }>();
  /** The last flush of those counts (flushRefusals). */
  private refusalsFlushed: Promise<void> = Promise.resolve();

  constructor(private readonly db: Database) {}

  /**
   * A call refused before any caller was identified (tenant 0, `anonymous`): anyone can make them,
   * so they are not one row each (kept `svc.audit.retention-days`, a flood of them grew the trail
   * without bound). The first of a minute for an action and status is written at once, as any entry
   * (its target and request id are that call's); the others of that minute add to its `count`,
   * written by the next flush. Rows are thus at most one per action, status and minute in each
   * process; a crash loses at most the counts not yet flushed, never the row.
   */
  async refusedAnonymous(given: AuditSubject, status: number): Promise<void> {
    const minute = Math.floor(Date.now() / 60_000);
    const key = `${minute} ${status} ${given.action}`;
    const known = this.refusals.get(key);
    if (known) {
      known.more++;
      return;
    }
    const slot: { minute: number; rowId?: number; more: number } = { minute, more: 0 };
    this.refusals.set(key, slot);
    const entry = { ...storableSubject(given), outcome: 'failure' as const, status, at: new Date() };
    try {
      const { rows } = await this.db.crossTenantQuery<{ id: number }>('audit', `${INSERT} values (${placeholders()}) returning id`, rowOf(entry));
      slot.rowId = rows[0]!.id;
    } catch (err) {
      // Left to the retries with the calls counted meanwhile; the next refusal starts a new row.
      this.refusals.delete(key);
      logger().error({ err: loggableMessage(err), status }, 'audit entry not written with its call: retried later');
      this.record({ ...entry, count: 1 + slot.more });
    }
  }

  /**
   * Adds the refused anonymous calls counted since the last flush to their rows; forgets the minutes
   * that are over. Flushes overlap (the clock's and stop's, or an admin's): one at a time, and each
   * count is taken off its slot before it is written, so no call is added twice.
   */
  private flushRefusals(): Promise<void> {
    const run = this.refusalsFlushed.then(() => this.flushRefusalsNow());
    this.refusalsFlushed = run.catch(() => undefined);
    return run;
  }

  private async flushRefusalsNow(): Promise<void> {
    const now = Math.floor(Date.now() / 60_000);
    for (const [key, slot] of this.refusals) {
      if (slot.rowId === undefined) continue; // its row is being written
      const more = slot.more;
      if (more > 0) {
        slot.more -= more;
        try {
          await this.db.crossTenantQuery('audit', 'update audit.entries set count = count + $2 where id = $1', [slot.rowId, more]);
        } catch (err) {
          slot.more += more; // for the next flush
          throw err;
        }
      }
      if (slot.minute < now && slot.more === 0) this.refusals.delete(key);
    }
  }

  record(entry: AuditEntry): void {
    this.buffer.push({ ...entry, ...storableSubject(entry) });
    if (this.buffer.length > MAX_BUFFER) {
      const dropped = this.buffer.length - MAX_BUFFER;
      this.buffer.splice(0, dropped);
      logger().error({ dropped }, 'audit buffer full: oldest entries dropped');
    }
  }

  pending(): number {
    return this.buffer.length;
  }

  /** Writes the buffered entries (answers how many) and the counts of refused anonymous calls. */
  async flush(): Promise<number> {
    // A count not written stays for the next flush; the buffered entries are written all the same.
    await this.flushRefusals().catch((err: unknown) => logger().error({ err: loggableMessage(err) }, 'audit counts of refused anonymous calls not written: retried later'));
    if (this.buffer.length === 0) return 0;
    const batch = this.buffer;
    this.buffer = [];
    try {
      await this.db.crossTenant('audit-flush', async (tx) => {
        for (const e of batch) {
          if (e.rowId !== undefined) await tx.query('update audit.entries set outcome = $2, status = $3 where id = $1', [e.rowId, e.outcome, e.status ?? null]);
        }
        const inserts = batch.filter((e) => e.rowId === undefined);
        for (let i = 0; i < inserts.length; i += ROWS_PER_INSERT) {
          const rows = inserts.slice(i, i + ROWS_PER_INSERT);
          const values: unknown[] = [];
          const tuples = rows.map((e, r) => {
            values.push(...rowOf(e));
            return `(${placeholders(r * COLUMNS.length)})`;
          });
          await tx.query(`${INSERT} values ${tuples.join(', ')}`, values);
        }
      });
      return batch.length;
    } catch (err) {
      this.buffer = batch.concat(this.buffer);
      throw err;
    }
  }
}

/**
 * The daily audit purge (04:45 UTC): entries older than the retention, `batch` a transaction
 * (`deleteInBatches`: one transaction over them all held every outbox consumer back while it ran);
 * 0 days disables it.
 */
export async function purgeAudit(db: Database, retentionDays: number, batch?: number): Promise<number> {
  if (retentionDays <= 0) return 0;
  return deleteInBatches(
    db,
    'audit-retention',
    'delete from audit.entries where id in (select id from audit.entries where at < now() - make_interval(days => $1) order by at limit $2)',
    [retentionDays],
    batch,
  );
}

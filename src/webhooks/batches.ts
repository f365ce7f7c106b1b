import type { Tx } from '../db/database.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger } from '../observability/logger.js';
import { type HeldBatch, renewBatchLease } from './journal.js';

/**
 * The consumer's batches this process holds (hub.delivery_batches; journal.ts `HeldBatch`): a batch
 * row stands for the first attempts of its batch until each has its row written, with its outcome
 * (outcome-writer.ts) or without (materialised: left to the retry sweep, closed, or leased to go on
 * with a row). Once every one is, the batch row goes (in the statement that wrote the last ones
 * when it can). One that was not (the process stopping, an outcome that could not be written) keeps
 * the row: its lease runs out and the retry sweep writes the rows still missing (at least once).
 * While rows are left the batch's lease is renewed every half lease, one timer per batch.
 */
export class Batches {
  constructor(
    private readonly tx: Tx,
    private readonly leaseMs: number,
  ) {}

  /** A batch row just written under `token` with `count` first attempts. */
  hold(id: number, token: string, count: number): HeldBatch {
    const batch: HeldBatch = { id, token, left: count, kept: false, timer: undefined };
    this.arm(batch);
    return batch;
  }

  /** Whether writing `n` more of its rows writes its last ones (their statement may delete the batch row). */
  closesWith(batch: HeldBatch, n: number): boolean {
    return !batch.kept && batch.left === n;
  }

  /**
   * `n` of its first attempts are settled: their rows written (`written`), or not (the batch row
   * stays for the sweep). `deleted`: the statement that wrote them deleted the batch row.
   */
  settle(batch: HeldBatch, n: number, written: boolean, deleted = false): void {
    if (!written) batch.kept = true;
    batch.left -= n;
    if (batch.left > 0) return;
    clearTimeout(batch.timer);
    batch.timer = undefined;
    if (batch.kept || deleted) return;
    this.tx.query('delete from hub.delivery_batches where id = $1', [batch.id]).catch((err: unknown) => {
      // Harmless: the retry sweep finds every row of it written once its lease runs out, and deletes it.
      logger().warn({ err: loggableMessage(err), batch: batch.id }, 'a delivery batch whose rows are all written could not be deleted; the retry sweep deletes it');
    });
  }

  private arm(batch: HeldBatch): void {
    const half = this.leaseMs / 2;
    batch.timer = setTimeout(() => this.renew(batch, half), half);
    // Holds no process open: a process that ends leaves its batches to the sweep.
    batch.timer.unref();
  }

  private renew(batch: HeldBatch, half: number): void {
    if (batch.left <= 0) return;
    renewBatchLease(this.tx, batch.id, batch.token, this.leaseMs).then(
      () => {
        if (batch.left > 0) this.arm(batch);
      },
      (err: unknown) => {
        logger().warn({ err: loggableMessage(err), batch: batch.id }, 'renewing the lease of a delivery batch failed; trying again');
        if (batch.left <= 0) return;
        batch.timer = setTimeout(() => this.renew(batch, half), half / 2);
        batch.timer.unref();
      },
    );
  }
}

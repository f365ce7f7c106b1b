import type { Now } from '../../clock/clock.js';
import { logger } from '../../observability/logger.js';
import type { EmbeddingUnavailable } from './errors.js';

/** How often, at most, an embedding outage that lasts is logged again. */
export const OUTAGE_LOG_EVERY_MS = 60_000;

/**
 * The indexer's log of its embedding endpoint's outages (docs/retrieval.md, "Chunks", the embedding endpoint
 * down). An indexer pass whose model call failed as a whole (no answer, an address the
 * policy refuses, a 401 or a 429, or every call failing within the pass) starts an outage: one
 * `error` line with the reason and the hint. While it lasts, at most one line every `everyMs`
 * (`error`, the latest reason, how many passes failed since the last line and in all); the first
 * pass the endpoint answers with vectors ends it with one `info` line (how long it lasted, how many passes
 * failed). Each pass failing logged an `error` with its stack, every tick (about every 2 s), for as
 * long as the endpoint was away. `now`: the time (tests hand in their own).
 */
export class EmbeddingOutage {
  /** When the outage began (ms since the epoch), undefined while the endpoint answers. */
  private since: number | undefined;
  private lastLine = 0;
  private failures = 0;
  private unlogged = 0;

  constructor(
    private readonly everyMs: number = OUTAGE_LOG_EVERY_MS,
    private readonly now: Now = Date.now,
  ) {}

  /** A pass's model call failed as a whole (`err`, its message free of the texts sent). */
  failed(err: EmbeddingUnavailable): void {
    const at = this.now();
    this.failures += 1;
    const fields = { failure: err.failure, httpStatus: err.httpStatus, err: err.message, hint: err.hint };
    if (this.since === undefined) {
      this.since = at;
      this.lastLine = at;
      this.unlogged = 0;
      logger().error(
        { ...fields, failures: 1 },
        `retrieval embed: the embedding endpoint is unavailable: ${err.message}; chunks wait for their vectors and are tried again at every pass (logged again at most every ${seconds(this.everyMs)} s while it lasts, and when it answers)`,
      );
      return;
    }
    this.unlogged += 1;
    if (at - this.lastLine < this.everyMs) return;
    logger().error(
      { ...fields, failures: this.unlogged, failuresInAll: this.failures, downMs: at - this.since },
      `retrieval embed: the embedding endpoint is still unavailable after ${seconds(at - this.since)} s (${this.unlogged} failed pass(es) since the last line, ${this.failures} in all): ${err.message}`,
    );
    this.lastLine = at;
    this.unlogged = 0;
  }

  /** A pass's model call was answered with vectors: an outage, if any, is over. */
  answered(): void {
    if (this.since === undefined) return;
    const down = this.now() - this.since;
    logger().info(
      { failuresInAll: this.failures, downMs: down },
      `retrieval embed: the embedding endpoint answers again after ${seconds(down)} s (${this.failures} failed pass(es)); indexing resumes`,
    );
    this.since = undefined;
    this.failures = 0;
    this.unlogged = 0;
  }
}

const seconds = (ms: number) => Math.round(ms / 1000);

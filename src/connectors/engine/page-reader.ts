import { TokenBucket } from '../rate-limit.js';
import type { PageReader } from '../runner.js';
import type { ConnectorSpec, EndpointSpec, Page } from '../types.js';
import { type EngineContext, type ReadPosition, readEndpoint } from './read.js';

/** What a read needs beyond the bucket, the signal and the watermark (credentials are per tenant). */
export type ReadContext = Omit<EngineContext, 'limiter' | 'signal' | 'watermark' | 'resume'>;

/** Above this many buckets, adding one first drops the idle ones (see `limiterFor`). */
export const BUCKETS_KEPT = 256;

/**
 * The HTTP engine as the runner's PageReader: one token bucket per connector (shared by its
 * endpoints and by the pre-flight through `limiterFor`), replaced when the connector's rate limit
 * changes.
 */
export class EnginePageReader implements PageReader {
  private readonly buckets = new Map<string, TokenBucket>();

  constructor(private readonly contextFor: (connector: ConnectorSpec) => ReadContext) {}

  limiterFor(connector: ConnectorSpec): TokenBucket {
    const known = this.buckets.get(connector.id);
    if (known && known.capacity === connector.rateLimit.count && known.windowMs === connector.rateLimit.windowMs) return known;
    // A connector deleted (in whichever process) or gone quiet leaves its bucket behind: past
    // BUCKETS_KEPT, the idle ones (full, nobody waiting: a new bucket would start the same) go, so the
    // map holds the connectors in use, not every connector this process ever read.
    if (!known && this.buckets.size >= BUCKETS_KEPT) {
      for (const [id, bucket] of this.buckets) if (bucket.idle()) this.buckets.delete(id);
    }
    const bucket = new TokenBucket(connector.rateLimit);
    this.buckets.set(connector.id, bucket);
    return bucket;
  }

  /** How many buckets this reader holds (for tests). */
  get bucketCount(): number {
    return this.buckets.size;
  }

  read(connector: ConnectorSpec, endpoint: EndpointSpec, options: { signal: AbortSignal; watermark?: string; resume?: ReadPosition }): AsyncIterable<Page> {
    return readEndpoint(connector, endpoint, {
      ...this.contextFor(connector),
      limiter: this.limiterFor(connector),
      signal: options.signal,
      watermark: options.watermark,
      resume: options.resume,
    });
  }
}

import { TokenBucket } from '../rate-limit.js';
import type { PageReader } from '../runner.js';
import type { ConnectorSpec, EndpointSpec, Page } from '../types.js';
import { type EngineContext, readEndpoint } from './read.js';

/** What a read needs beyond the bucket, the signal and the watermark (credentials are per tenant). */
export type ReadContext = Omit<EngineContext, 'limiter' | 'signal' | 'watermark'>;

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
    const bucket = new TokenBucket(connector.rateLimit);
    this.buckets.set(connector.id, bucket);
    return bucket;
  }

  /** Forget a deleted connector's bucket. */
  forget(connectorId: string): void {
    this.buckets.delete(connectorId);
  }

  read(connector: ConnectorSpec, endpoint: EndpointSpec, options: { signal: AbortSignal; watermark?: string }): AsyncIterable<Page> {
    return readEndpoint(connector, endpoint, { ...this.contextFor(connector), limiter: this.limiterFor(connector), signal: options.signal, watermark: options.watermark });
  }
}

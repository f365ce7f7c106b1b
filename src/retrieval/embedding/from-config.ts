import type { Config } from '../../config/config.js';
import { ConfigError } from '../../config/config.js';
import type { EgressPolicy } from '../../egress/policy.js';
import { LocalEmbedding } from './local.js';
import { LOCAL_DIMENSIONS } from './local-model.js';
import { OpenAiEmbedding } from './openai.js';
import type { EmbeddingPort } from './port.js';

/** The length of the vectors the configured port makes, undefined for `none`. */
export function embeddingDimensions(config: Config): number | undefined {
  switch (config.string('svc.embedding.provider')) {
    case 'local':
      return LOCAL_DIMENSIONS;
    case 'openai':
      return config.int('svc.embedding.dimensions');
    default:
      return undefined;
  }
}

/** The embedding port `svc.embedding.provider` names, or undefined for `none`. */
export function embeddingFromConfig(config: Config, egress: EgressPolicy): EmbeddingPort | undefined {
  switch (config.string('svc.embedding.provider')) {
    case 'local':
      return new LocalEmbedding({ batchSize: config.int('svc.embedding.batch'), threads: config.int('svc.embedding.local-threads') });
    case 'openai': {
      const baseUrl = config.optional('svc.embedding.base-url');
      if (!baseUrl) throw ConfigError.of('svc.embedding.base-url', 'required when svc.embedding.provider is openai');
      return new OpenAiEmbedding({
        baseUrl,
        model: config.string('svc.embedding.model'),
        // An endpoint without keys (a local server) still needs a non-empty one for the client.
        apiKey: config.optional('svc.embedding.api-key') || 'unused',
        dimensions: config.int('svc.embedding.dimensions'),
        egress,
      });
    }
    default:
      return undefined;
  }
}

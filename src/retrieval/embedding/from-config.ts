import type { Config } from '../../config/config.js';
import { localEmbedding } from './local.js';
import type { EmbeddingPort } from './port.js';

/** The embedding port `svc.embedding.provider` names, or undefined for `none`. */
export function embeddingFromConfig(config: Config): EmbeddingPort | undefined {
  switch (config.string('svc.embedding.provider')) {
    case 'local':
      return localEmbedding();
    default:
      return undefined;
  }
}

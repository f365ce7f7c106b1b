import type { Dispatcher } from 'undici';
import type { Config } from '../../config/config.js';
import { openAiChat } from './openai.js';
import type { ChatPort } from './port.js';

/** The chat port of `svc.llm.base-url`, or undefined when it is not set. */
export function chatFromConfig(config: Config, dispatcher: Dispatcher): ChatPort | undefined {
  const baseUrl = config.optional('svc.llm.base-url');
  if (!baseUrl) return undefined;
  return openAiChat({
    baseUrl,
    model: config.string('svc.llm.model'),
    apiKey: config.optional('svc.llm.api-key'),
    timeoutMs: config.duration('svc.llm.timeout'),
    // 0: not set (no max_tokens sent; no context budget).
    maxTokens: config.int('svc.llm.max-tokens') || undefined,
    contextChars: config.int('svc.llm.context-chars') || undefined,
    dispatcher,
  });
}

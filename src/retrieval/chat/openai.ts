import OpenAI from 'openai';
import type { Dispatcher } from 'undici';
import { PortUnavailable } from '../../errors.js';
import { openAiClient } from '../openai-client.js';
import type { ChatMessage, ChatPort } from './port.js';

export interface OpenAiChatOptions {
  baseUrl: string;
  model: string;
  apiKey?: string;
  timeoutMs: number;
  /** The outbound address policy's agent: the model endpoint is reached like any other destination. */
  dispatcher: Dispatcher;
}

const HINT = 'check svc.llm.base-url, svc.llm.model and svc.llm.api-key, and that the endpoint is allowed by svc.egress.allow';

/** Chat through the `openai` package against any OpenAI-compatible endpoint, deterministic (temperature 0), no retries. */
export function openAiChat(options: OpenAiChatOptions): ChatPort {
  const client = openAiClient({ baseUrl: options.baseUrl, apiKey: options.apiKey ?? 'unused', timeoutMs: options.timeoutMs, maxRetries: 0, dispatcher: options.dispatcher });
  return {
    model: options.model,
    async complete(messages: ChatMessage[]): Promise<string> {
      let answer: unknown;
      try {
        const completion = await client.chat.completions.create({ model: options.model, messages, temperature: 0 });
        answer = completion.choices?.[0]?.message?.content;
      } catch (err) {
        throw new PortUnavailable(`the language model did not answer: ${describe(err)}`, HINT);
      }
      if (typeof answer !== 'string') throw new PortUnavailable('the language model answered without any text', HINT);
      return answer;
    },
  };
}

function describe(err: unknown): string {
  if (err instanceof OpenAI.APIError && err.status !== undefined) return `HTTP ${err.status}`;
  if (err instanceof OpenAI.APIConnectionTimeoutError) return 'timed out';
  if (err instanceof OpenAI.APIConnectionError) return `unreachable (${(err.cause as Error | undefined)?.message ?? err.message})`;
  return err instanceof Error ? err.message : String(err);
}

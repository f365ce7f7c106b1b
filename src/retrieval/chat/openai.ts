import OpenAI from 'openai';
import type { Dispatcher } from 'undici';
import { PortUnavailable } from '../../errors.js';
import { ModelAnswerRefused, openAiClient, withinTimeLimit, withoutKey } from '../openai-client.js';
import type { ChatMessage, ChatPort } from './port.js';

export interface OpenAiChatOptions {
  baseUrl: string;
  model: string;
  apiKey?: string;
  /** The whole call: the answer's headers and its whole body. */
  timeoutMs: number;
  /** Test hook: the most bytes of an answer read (default MAX_CHAT_ANSWER_BYTES). */
  maxAnswerBytes?: number;
  /** The outbound address policy's agent: the model endpoint is reached like any other destination. */
  dispatcher: Dispatcher;
}

/**
 * The most bytes of a chat completion read: one choice of text (the hub asks for no logprobs, tools
 * or stream). The largest output windows of today's models are about 128,000 tokens, some 0.5 MB
 * of text and at most 3 MB in JSON escapes (\uXXXX for each character), twice that with a server's
 * reasoning text beside it: 16 MiB is well above any answer, and bounds a broken or hostile endpoint.
 */
export const MAX_CHAT_ANSWER_BYTES = 16 * 1024 * 1024;

const HINT = 'check svc.llm.base-url, svc.llm.model and svc.llm.api-key, and that the endpoint is allowed by svc.egress.allow';

/** Chat through the `openai` package against any OpenAI-compatible endpoint, deterministic (temperature 0), no retries. */
export function openAiChat(options: OpenAiChatOptions): ChatPort {
  const client = openAiClient({
    baseUrl: options.baseUrl,
    apiKey: options.apiKey ?? 'unused',
    timeoutMs: options.timeoutMs,
    maxAnswerBytes: options.maxAnswerBytes ?? MAX_CHAT_ANSWER_BYTES,
    dispatcher: options.dispatcher,
  });
  return {
    model: options.model,
    async complete(messages: ChatMessage[], signal?: AbortSignal): Promise<string> {
      let answer: unknown;
      try {
        // No retry: a person waits for the answer, and svc.llm.timeout is all of the call.
        const completion = await withinTimeLimit({ timeoutMs: options.timeoutMs, maxRetries: 0, signal }, (attempt) =>
          client.chat.completions.create({ model: options.model, messages, temperature: 0 }, attempt),
        );
        answer = completion.choices?.[0]?.message?.content;
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        throw new PortUnavailable(`the language model did not answer: ${describe(err, options.apiKey)}`, HINT);
      }
      if (typeof answer !== 'string') throw new PortUnavailable('the language model answered without any text', HINT);
      return answer;
    },
  };
}

function describe(err: unknown, apiKey: string | undefined): string {
  if (err instanceof ModelAnswerRefused) return err.reason === 'time' ? `timed out after ${err.limit} ms` : `its answer is larger than ${err.limit} bytes (read no further)`;
  if (err instanceof OpenAI.APIError && err.status !== undefined) return `HTTP ${err.status}`;
  if (err instanceof OpenAI.APIConnectionTimeoutError) return 'timed out';
  if (err instanceof OpenAI.APIConnectionError) return `unreachable (${withoutAddress((err.cause as Error | undefined)?.message ?? err.message)})`;
  return withoutAddress(withoutKey(err instanceof Error ? err.message : String(err), apiKey));
}

/** A message without the addresses it quotes (fetch refusing a URL with credentials quotes it whole): every tenant's caller reads it. */
function withoutAddress(message: string): string {
  return message.replace(/\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>]*[^\s"'<>.,;:!?)\]]/gi, "[the endpoint's address]");
}

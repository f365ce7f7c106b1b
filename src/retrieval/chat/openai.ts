import OpenAI from 'openai';
import type { Dispatcher } from 'undici';
import { egressDenial } from '../../egress/policy.js';
import { PortUnavailable } from '../../errors.js';
import { ModelAnswerRefused, openAiClient, quotedErrorText, withinTimeLimit, withoutKey } from '../openai-client.js';
import type { ChatMessage, ChatPort } from './port.js';

export interface OpenAiChatOptions {
  baseUrl: string;
  model: string;
  apiKey?: string;
  /** The whole call: the answer's headers and its whole body. */
  timeoutMs: number;
  /** Sent as `max_tokens`: the most tokens the model may answer (undefined: not sent, the endpoint's own limit). */
  maxTokens?: number;
  /** The most characters of retrieved context semantic chat sends (undefined: no budget). */
  contextChars?: number;
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
/** An endpoint refusing the request itself (a 400 or 413): most often a conversation longer than the model's window. */
const REQUEST_HINT =
  'the endpoint refused the request (its reason is quoted): when it names the context length, ask with a smaller topK, or set svc.llm.context-chars (and svc.llm.max-tokens) to fit the model\'s window';

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
    contextChars: options.contextChars,
    async complete(messages: ChatMessage[], signal?: AbortSignal): Promise<string> {
      let answer: unknown;
      try {
        // No retry: a person waits for the answer, and svc.llm.timeout is all of the call.
        const completion = await withinTimeLimit({ timeoutMs: options.timeoutMs, maxRetries: 0, signal }, (attempt) =>
          client.chat.completions.create({ model: options.model, messages, temperature: 0, ...(options.maxTokens !== undefined && { max_tokens: options.maxTokens }) }, attempt),
        );
        answer = completion.choices?.[0]?.message?.content;
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        const refused = err instanceof OpenAI.APIError && (err.status === 400 || err.status === 413);
        throw new PortUnavailable(`the language model did not answer: ${describe(err, options.apiKey, messages)}`, refused ? REQUEST_HINT : HINT);
      }
      if (typeof answer !== 'string') throw new PortUnavailable('the language model answered without any text', HINT);
      return answer;
    },
  };
}

function describe(err: unknown, apiKey: string | undefined, messages: ChatMessage[]): string {
  if (err instanceof ModelAnswerRefused) return err.reason === 'time' ? `timed out after ${err.limit} ms` : `its answer is larger than ${err.limit} bytes (read no further)`;
  // The endpoint's own error text (why it refused: a context too long, an unknown model), quoted as the embedding port quotes it.
  if (err instanceof OpenAI.APIError && err.status !== undefined) {
    return `HTTP ${err.status}${err.message ? `: ${quotedErrorText(err.message, apiKey, messages.map((m) => m.content))}` : ''}`;
  }
  if (err instanceof OpenAI.APIConnectionTimeoutError) return 'timed out';
  // The policy's reason without the host and address it names (fetch's own message is only "fetch failed").
  const denied = egressDenial(err);
  if (denied) return `not contacted: its endpoint is ${denied.reason}, refused by the outbound address policy (svc.egress.deny-private)`;
  if (err instanceof OpenAI.APIConnectionError) return `unreachable (${withoutAddress((err.cause as Error | undefined)?.message ?? err.message)})`;
  return withoutAddress(withoutKey(err instanceof Error ? err.message : String(err), apiKey));
}

/** A message without the addresses it quotes (fetch refusing a URL with credentials quotes it whole): every tenant's caller reads it. */
function withoutAddress(message: string): string {
  return message.replace(/\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>]*[^\s"'<>.,;:!?)\]]/gi, "[the endpoint's address]");
}

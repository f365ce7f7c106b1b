import OpenAI from 'openai';
import { type Dispatcher, fetch as undiciFetch } from 'undici';

/**
 * The `openai` client of an OpenAI-compatible endpoint, its requests sent by undici through
 * `dispatcher` (the outbound address policy's agent), so a model endpoint is reached like any other
 * destination the hub calls. Shared by the chat and embedding ports.
 */
export function openAiClient(options: { baseUrl: string; apiKey: string; timeoutMs: number; maxRetries: number; dispatcher: Dispatcher }): OpenAI {
  const { dispatcher } = options;
  return new OpenAI({
    baseURL: options.baseUrl,
    apiKey: options.apiKey,
    timeout: options.timeoutMs,
    maxRetries: options.maxRetries,
    // undici's fetch with the dispatcher; its Request and Response are the ones Node's own fetch uses.
    fetch: (input, init) => undiciFetch(input as Parameters<typeof undiciFetch>[0], { ...(init as Parameters<typeof undiciFetch>[1]), dispatcher }) as unknown as Promise<Response>,
  });
}

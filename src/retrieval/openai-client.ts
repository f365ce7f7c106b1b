import OpenAI from 'openai';
import { type Dispatcher, Response, fetch as undiciFetch } from 'undici';

/**
 * Why the hub stopped reading a model endpoint's answer: it grew past `limit` bytes (`size`), or it
 * was not complete `limit` ms after the request was sent (`time`). The message names the limit only,
 * never the endpoint's address, key or what it sent.
 */
export class ModelAnswerRefused extends Error {
  constructor(
    readonly reason: 'size' | 'time',
    readonly limit: number,
  ) {
    super(
      reason === 'size'
        ? `the model endpoint's answer is larger than ${limit} bytes; the hub stopped reading it`
        : // "timed out": the client takes an error before the answer's headers as a timeout by these words.
          `the model endpoint's answer was not complete within ${limit} ms (timed out); the hub stopped reading it`,
    );
    this.name = 'ModelAnswerRefused';
  }
}

export interface OpenAiClientOptions {
  baseUrl: string;
  apiKey: string;
  /** The whole exchange of one request: sending it, the answer's headers and its whole body. */
  timeoutMs: number;
  /** The most bytes of one answer's body (after content decoding) read: past them the request is given up. */
  maxAnswerBytes: number;
  maxRetries: number;
  /** The outbound address policy's agent. */
  dispatcher: Dispatcher;
}

/**
 * The `openai` client of an OpenAI-compatible endpoint, its requests sent by undici through
 * `dispatcher` (the outbound address policy's agent), so a model endpoint is reached like any other
 * destination the hub calls. Shared by the chat and embedding ports.
 *
 * The client's own timeout ends when the answer's headers arrive, and it reads the body whole, so
 * each answer is bounded here: its body is read through a counter that gives the request up past
 * `maxAnswerBytes` (an endpoint sending gigabytes, or without end), and the request is given up
 * `timeoutMs` after it was sent, body included (an endpoint sending a byte now and then). Either
 * fails the call with a ModelAnswerRefused, the connection closed.
 */
export function openAiClient(options: OpenAiClientOptions): OpenAI {
  return new OpenAI({
    baseURL: options.baseUrl,
    apiKey: options.apiKey,
    timeout: options.timeoutMs,
    maxRetries: options.maxRetries,
    fetch: (input, init) => boundedFetch(input, init, options) as unknown as Promise<Response>,
  });
}

/** undici's fetch with the dispatcher (its Request and Response are the ones Node's own fetch uses), its answer bounded in size and time. */
async function boundedFetch(input: unknown, init: unknown, options: OpenAiClientOptions): Promise<Response> {
  const { dispatcher, timeoutMs, maxAnswerBytes } = options;
  const given = init as Parameters<typeof undiciFetch>[1];
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(new ModelAnswerRefused('time', timeoutMs)), timeoutMs);
  timer.unref();
  const signal = given?.signal ? AbortSignal.any([given.signal as AbortSignal, deadline.signal]) : deadline.signal;
  let response: Response;
  try {
    response = await undiciFetch(input as Parameters<typeof undiciFetch>[0], { ...given, signal, dispatcher });
  } catch (err) {
    clearTimeout(timer);
    throw err;
  }
  if (!response.body) {
    clearTimeout(timer);
    return response;
  }
  let read = 0;
  const counted = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        read += chunk.byteLength;
        if (read <= maxAnswerBytes) return controller.enqueue(chunk);
        clearTimeout(timer);
        // Errors the body its reader holds, and cancels the source: undici closes the connection.
        controller.error(new ModelAnswerRefused('size', maxAnswerBytes));
      },
      flush() {
        clearTimeout(timer);
      },
    }),
  );
  // A deadline passing while the body is read errors the source with the ModelAnswerRefused, and so the counted body.
  return new Response(counted, { status: response.status, statusText: response.statusText, headers: response.headers });
}

import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A scripted stand-in for an OpenAI-compatible chat completions server (no language model can run
 * here): `POST <base>/chat/completions` answers what `script` writes, in the shape of OpenAI's
 * answer. It is as strict as such a server on every point the hub relies on, and refuses as one
 * does, with OpenAI's error body `{error: {message, type, param, code}}`:
 * - any other path or method: 404; a body that is not JSON: 400;
 * - with `apiKey` set, a missing or other bearer key: 401 `invalid_api_key`;
 * - a `model` other than `model`: 404 `model_not_found`;
 * - `messages` not a non-empty array of `{role: system|user|assistant, content: string}`: 400;
 * - `temperature` not a number from 0 to 2, `max_tokens` not a positive integer: 400;
 * - a conversation longer than `contextTokens` (a token counted as 4 characters, plus 4 per
 *   message), or one leaving less room than `max_tokens` asks for: 400 `context_length_exceeded`
 *   with OpenAI's wording. An answer longer than `max_tokens` is cut there (`finish_reason: length`).
 */
export interface ChatModel {
  /** The base URL to configure as `svc.llm.base-url` (ends in `/v1`). */
  url: string;
  /** The bodies of the requests that reached the script, oldest first. */
  requests: ChatRequest[];
  close(): Promise<void>;
}

export interface ChatRequest {
  model: string;
  messages: Array<{ role: string; content: string }>;
  temperature?: number;
  max_tokens?: number;
}

export interface ChatModelOptions {
  model?: string;
  apiKey?: string;
  /** The model's context window in tokens (default 128,000). */
  contextTokens?: number;
  /** The answer's text for a request that passed every check. */
  script: (request: ChatRequest) => string;
}

/** Characters per token, as the stand-in counts them (English text runs about 4 with OpenAI's tokenizers). */
const CHARS_PER_TOKEN = 4;

export function tokensOf(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

export async function startChatModel(options: ChatModelOptions): Promise<ChatModel> {
  const model = options.model ?? 'stand-in';
  const window = options.contextTokens ?? 128_000;
  const requests: ChatRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => answer(req, res, Buffer.concat(chunks).toString('utf8')));
  });

  function refuse(res: ServerResponse, status: number, message: string, code: string | null, param: string | null = null, type = 'invalid_request_error'): void {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message, type, param, code } }));
  }

  function answer(req: IncomingMessage, res: ServerResponse, text: string) {
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') return refuse(res, 404, `Invalid URL (${req.method} ${req.url})`, null);
    if (options.apiKey !== undefined) {
      const auth = req.headers.authorization ?? '';
      if (auth !== `Bearer ${options.apiKey}`) {
        const given = auth.replace(/^Bearer /, '');
        return refuse(res, 401, `Incorrect API key provided: ${given}. You can find your API key at https://platform.openai.com/account/api-keys.`, 'invalid_api_key');
      }
    }
    if (!String(req.headers['content-type']).startsWith('application/json')) return refuse(res, 400, 'Unsupported content type', null);
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return refuse(res, 400, 'We could not parse the JSON body of your request.', null);
    }
    if (body.model !== model) return refuse(res, 404, `The model \`${String(body.model)}\` does not exist or you do not have access to it.`, 'model_not_found', null);
    const messages = body.messages;
    if (!Array.isArray(messages) || messages.length === 0) return refuse(res, 400, "Invalid 'messages': expected a non-empty array.", 'invalid_type', 'messages');
    for (const [i, m] of messages.entries()) {
      const { role, content } = (m ?? {}) as { role?: unknown; content?: unknown };
      if (!['system', 'user', 'assistant'].includes(String(role)) || typeof content !== 'string') {
        return refuse(res, 400, `Invalid 'messages[${i}]': expected a role of system, user or assistant and a string content.`, 'invalid_value', `messages[${i}]`);
      }
    }
    const { temperature, max_tokens: maxTokens } = body;
    if (temperature !== undefined && (typeof temperature !== 'number' || temperature < 0 || temperature > 2)) {
      return refuse(res, 400, `Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got ${String(temperature)} instead.`, 'decimal_above_max_value', 'temperature');
    }
    if (maxTokens !== undefined && (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1)) {
      return refuse(res, 400, `Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got ${String(maxTokens)} instead.`, 'integer_below_min_value', 'max_tokens');
    }
    const request = body as unknown as ChatRequest;
    const prompt = request.messages.reduce((n, m) => n + 4 + tokensOf(m.content), 0);
    if (prompt + (request.max_tokens ?? 0) > window) {
      const asked = request.max_tokens === undefined
        ? `your messages resulted in ${prompt} tokens`
        : `you requested ${prompt + request.max_tokens} tokens (${prompt} in the messages, ${request.max_tokens} in the completion)`;
      return refuse(res, 400, `This model's maximum context length is ${window} tokens. However, ${asked}. Please reduce the length of the messages or completion.`, 'context_length_exceeded', 'messages');
    }
    requests.push(request);
    let content = options.script(request);
    let finish = 'stop';
    if (request.max_tokens !== undefined && tokensOf(content) > request.max_tokens) {
      content = content.slice(0, request.max_tokens * CHARS_PER_TOKEN);
      finish = 'length';
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({
      id: `chatcmpl-${requests.length}`, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model,
      choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: finish }],
      usage: { prompt_tokens: prompt, completion_tokens: tokensOf(content), total_tokens: prompt + tokensOf(content) },
    }));
  }

  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return {
    url,
    requests,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

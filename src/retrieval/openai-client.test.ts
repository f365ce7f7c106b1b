import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import type { Agent } from 'undici';
import { egressAgent } from '../egress/dispatcher.js';
import { EgressPolicy } from '../egress/policy.js';
import { MAX_CHAT_ANSWER_BYTES, openAiChat } from './chat/openai.js';
import { EmbeddingUnavailable } from './embedding/errors.js';
import { maxEmbeddingAnswerBytes, OpenAiEmbedding } from './embedding/openai.js';

/**
 * The answers of a model endpoint are bounded (src/retrieval/openai-client.ts): against a real
 * HTTP server on loopback that answers without end (a body far past the limit, written as fast as
 * the hub reads it) or a byte now and then, chat and embeddings give up with a clear error, the
 * connection closed, instead of holding the whole answer in memory or waiting for ever.
 */

const KEY = 'sk-secret-model-key';

interface Endless {
  /** The body bytes written until the hub closed the connection. */
  written: number;
  /** Resolves when the hub closed the connection. */
  closed: Promise<void>;
}

describe('answers of a model endpoint are bounded in size and time', () => {
  let server: Server;
  let base: string;
  const sockets = new Set<Socket>();
  /** What the server answers to the request in hand. */
  let behave: (res: ServerResponse, req: IncomingMessage) => void = () => undefined;
  /** Requests the server has had. */
  let requests = 0;
  const agent: Agent = egressAgent(EgressPolicy.open());
  const embeddings: OpenAiEmbedding[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      requests++;
      req.resume();
      req.on('end', () => behave(res, req));
    });
    server.on('connection', (socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  });
  afterEach(async () => {
    await Promise.all(embeddings.splice(0).map((e) => e.close()));
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await agent.close();
  });

  /** A 200 JSON answer: `head`, then `filler` repeated up to `total` bytes as fast as the hub reads, unless it closes first. */
  function endless(head: string, filler: string, total: number, status = 200): Endless {
    const state: Endless = { written: 0, closed: Promise.resolve() };
    state.closed = new Promise<void>((resolve) => {
      behave = (res) => {
        res.on('close', () => resolve());
        res.writeHead(status, { 'content-type': 'application/json' });
        const chunk = Buffer.from(filler.repeat(Math.ceil(65_536 / filler.length)));
        const pump = () => {
          while (!res.destroyed && state.written < total) {
            state.written += chunk.length;
            if (!res.write(chunk)) return void res.once('drain', pump);
          }
          if (!res.destroyed) res.end();
        };
        res.write(head);
        pump();
      };
    });
    return state;
  }

  /** A 200 JSON answer: `head`, then one byte every 50 ms until the hub closes the connection. */
  function drip(head: string): Endless {
    const state: Endless = { written: 0, closed: Promise.resolve() };
    state.closed = new Promise<void>((resolve) => {
      behave = (res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write(head);
        const timer = setInterval(() => {
          state.written += 1;
          res.write(' ');
        }, 50);
        res.on('close', () => {
          clearInterval(timer);
          resolve();
        });
      };
    });
    return state;
  }

  const chat = (timeoutMs = 10_000) => openAiChat({ baseUrl: base, model: 'stand-in-chat', apiKey: KEY, timeoutMs, dispatcher: agent });

  function embedding(options: { timeoutMs?: number; connectTimeoutMs?: number; maxRetries?: number } = {}): OpenAiEmbedding {
    const port = new OpenAiEmbedding({ baseUrl: base, model: 'stand-in-embed', apiKey: KEY, dimensions: 4, egress: EgressPolicy.open(), maxRetries: 0, ...options });
    embeddings.push(port);
    return port;
  }

  async function rejection(promise: Promise<unknown>): Promise<Error> {
    const outcome = await promise.then(
      () => new Error('expected a rejection, the call answered'),
      (err: unknown) => err as Error,
    );
    expect(outcome.message).not.toBe('expected a rejection, the call answered');
    // Neither the key nor the endpoint's address are in what reaches the caller and the log.
    expect(outcome.message).not.toContain(KEY);
    expect(outcome.message).not.toContain('127.0.0.1');
    return outcome;
  }

  it('a base URL with credentials: neither chat nor embeddings answer them (fetch refuses such a URL, quoting it)', async () => {
    // What a tenant's caller reads in the 503 `{error}`: the operator's proxy password once stood in it.
    const withCredentials = base.replace('http://', 'http://proxy-user:proxy-pass-w0rd@');
    const chatErr = await rejection(openAiChat({ baseUrl: withCredentials, model: 'stand-in-chat', apiKey: KEY, timeoutMs: 5_000, dispatcher: agent }).complete([{ role: 'user', content: 'question' }]));
    const port = new OpenAiEmbedding({ baseUrl: withCredentials, model: 'stand-in-embed', apiKey: KEY, dimensions: 4, egress: EgressPolicy.open(), maxRetries: 0 });
    embeddings.push(port);
    expect(chatErr.message).toBe("the language model did not answer: unreachable (Request cannot be constructed from a URL that includes credentials: [the endpoint's address])");
    // The embedding port names its endpoint's address (docs/retrieval.md), credentials masked.
    const embedErr = (await port.embed(['text']).catch((err: unknown) => err)) as EmbeddingUnavailable;
    expect(embedErr).toBeInstanceOf(EmbeddingUnavailable);
    expect(embedErr.message).not.toContain('proxy-pass-w0rd');
    expect(embedErr.message).not.toContain('proxy-user');
    expect(embedErr.message).not.toContain(KEY);
    expect(embedErr.message).toContain('http://***@127.0.0.1:');
    // Still a failure about the endpoint (the indexer sets no chunk aside for it).
    expect([embedErr.failure, embedErr.aboutTheEndpoint]).toEqual(['unreachable', true]);
  });

  it('an endpoint the outbound address policy refuses: chat says so (not "unreachable (fetch failed)"), without the endpoint\'s address, nothing sent', async () => {
    const denying = egressAgent(new EgressPolicy({ denyPrivate: true }));
    try {
      const before = requests;
      const err = await rejection(openAiChat({ baseUrl: base, model: 'stand-in-chat', apiKey: KEY, timeoutMs: 5_000, dispatcher: denying }).complete([{ role: 'user', content: 'question' }]));
      expect(err.message).toBe('the language model did not answer: not contacted: its endpoint is a loopback address, refused by the outbound address policy (svc.egress.deny-private)');
      expect(requests).toBe(before);
    } finally {
      await denying.close();
    }
  });

  it('an endpoint echoing the key it was sent: the 503 every tenant\'s caller reads does not carry it', async () => {
    // As some servers and proxies do (`Invalid key: Bearer sk-…`, `Received API Key = sk-…`); the embedding port quotes their error text.
    for (const echo of [(auth: string) => `Invalid key: ${auth}`, (auth: string) => `Received API Key = ${auth.slice('Bearer '.length)}, check it`]) {
      behave = (res, req) => {
        res.writeHead(401, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: echo(String(req.headers.authorization)) } }));
      };
      const err = (await rejection(embedding().embed(['text']))) as EmbeddingUnavailable;
      expect([err.failure, err.httpStatus]).toEqual(['status', 401]);
      expect(err.message).toMatch(/^the embedding endpoint answered HTTP 401: 401 (Invalid key: Bearer|Received API Key =) \[REDACTED\]/);
      // Chat quotes the endpoint's text too (the same function), masked the same way.
      expect((await rejection(chat().complete([{ role: 'user', content: 'question' }]))).message).toMatch(
        /^the language model did not answer: HTTP 401: 401 (Invalid key: Bearer|Received API Key =) \[REDACTED\]/,
      );
    }
    // A server quoting what it was sent (a row of the context): chat's quote masks it, as the indexer's log lines do.
    const row = 'ext.partners 7: name: Ada Lovelace Analytical Engines; city: London';
    behave = (res) => {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `Input 'Context: ${row}' is too long` } }));
    };
    expect((await rejection(chat().complete([{ role: 'user', content: `Context: ${row}` }]))).message).toBe(
      "the language model did not answer: HTTP 400: 400 Input '[text sent]' is too long",
    );
  });

  it('a redirect is not followed: what chat and embeddings send (the tenant\'s text) goes to the endpoint configured, never to where a 3xx points', async () => {
    let reached = 0;
    const elsewhere = createServer((req, res) => {
      reached++;
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
    elsewhere.listen(0, '127.0.0.1');
    await once(elsewhere, 'listening');
    try {
      const target = `http://127.0.0.1:${(elsewhere.address() as AddressInfo).port}`;
      for (const status of [302, 307, 308]) {
        behave = (res, req) => {
          res.writeHead(status, { location: `${target}${req.url}` });
          res.end();
        };
        expect((await rejection(chat().complete([{ role: 'user', content: 'question' }]))).message).toBe(`the language model did not answer: HTTP ${status}: ${status} status code (no body)`);
        const err = (await rejection(embedding().embed(['text']))) as EmbeddingUnavailable;
        expect([err.failure, err.httpStatus]).toEqual(['status', status]);
      }
      expect(reached).toBe(0);
    } finally {
      await new Promise<void>((resolve) => elsewhere.close(() => resolve()));
    }
  });

  it('chat still reads a well-formed answer through the bounded fetch', async () => {
    behave = (res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'forty-two' } }] }));
    };
    await expect(chat().complete([{ role: 'user', content: 'question' }])).resolves.toBe('forty-two');
  });

  it(`chat gives up on an answer past ${MAX_CHAT_ANSWER_BYTES} bytes and closes the connection`, async () => {
    const total = 4 * MAX_CHAT_ANSWER_BYTES;
    const answer = endless('{"choices":[{"index":0,"message":{"role":"assistant","content":"', 'x', total);
    const err = await rejection(chat().complete([{ role: 'user', content: 'question' }]));
    expect(err.message).toBe(`the language model did not answer: its answer is larger than ${MAX_CHAT_ANSWER_BYTES} bytes (read no further)`);
    await answer.closed;
    // Read no further than the limit and what the sockets' buffers hold, never the whole answer.
    expect(answer.written).toBeLessThan(total / 2);
  }, 20_000);

  it('chat gives up on an answer that drips past its time, body included', async () => {
    const answer = drip('{"choices":[');
    const timeoutMs = 1_000;
    const started = performance.now();
    const err = await rejection(chat(timeoutMs).complete([{ role: 'user', content: 'question' }]));
    expect(err.message).toBe('the language model did not answer: timed out after 1000 ms');
    // Not held by a body that never ends: a hang guard of eight times the call's time.
    expect(performance.now() - started).toBeLessThan(8 * timeoutMs);
    await answer.closed;
  }, 15_000);

  it('embeddings give up on an answer far past a batch of vectors, as a failure about the endpoint', async () => {
    const limit = maxEmbeddingAnswerBytes(128, 4);
    const total = 64 * limit;
    const answer = endless('{"object":"list","data":[{"object":"embedding","index":0,"embedding":[1', ',0.25', total);
    const err = await rejection(embedding().embed(['text']));
    expect(err).toBeInstanceOf(EmbeddingUnavailable);
    const failure = err as EmbeddingUnavailable;
    expect(failure.message).toBe(`the embedding endpoint answered more than ${limit} bytes for at most 128 texts of 4 dimensions; the hub stopped reading it`);
    // The texts are not to blame: the indexer tries the same batch later instead of setting texts aside.
    expect([failure.failure, failure.aboutTheEndpoint, failure.render().status]).toEqual(['oversized', true, 503]);
    await answer.closed;
    expect(answer.written).toBeLessThan(total / 2);
  }, 20_000);

  it('embeddings read no more than the limit of an error answer either', async () => {
    const limit = maxEmbeddingAnswerBytes(128, 4);
    const answer = endless('{"error":{"message":"', 'y', 64 * limit, 500);
    const err = (await rejection(embedding().embed(['text']))) as EmbeddingUnavailable;
    expect(err.failure).toBe('status');
    expect(err.message).toContain(`the model endpoint's answer is larger than ${limit} bytes; the hub stopped reading it`);
    await answer.closed;
    expect(answer.written).toBeLessThan(32 * limit);
  }, 20_000);

  it('embeddings give up on an answer that drips past the request time, body included', async () => {
    // Each byte comes well within the idle limit between two reads (400 ms): only the whole request's time ends it.
    const answer = drip('{"object":"list","data":[');
    const timeouts = { timeoutMs: 400, connectTimeoutMs: 400 };
    const started = performance.now();
    const err = (await rejection(embedding(timeouts).embed(['text']))) as EmbeddingUnavailable;
    expect([err.failure, err.message]).toEqual(['unreachable', 'the embedding endpoint did not answer within 800 ms']);
    // Not held by a body that never ends: a hang guard of ten times the request's whole time.
    expect(performance.now() - started).toBeLessThan(10 * (timeouts.timeoutMs + timeouts.connectTimeoutMs));
    await answer.closed;
  }, 15_000);

  describe('retries stay within the time of the whole call', () => {
    /** A JSON error answer of `status` with `headers`, after `delayMs`. */
    const failing = (status: number, headers: Record<string, string> = {}, delayMs = 0) => (res: ServerResponse) => {
      setTimeout(() => {
        res.writeHead(status, { 'content-type': 'application/json', ...headers });
        res.end(JSON.stringify({ error: { message: `stand-in ${status}` } }));
      }, delayMs);
    };

    /** How long `promise` took to be refused, and with what. */
    async function timed(promise: Promise<unknown>): Promise<{ ms: number; err: EmbeddingUnavailable }> {
      const started = Date.now();
      const err = (await rejection(promise)) as EmbeddingUnavailable;
      expect(err).toBeInstanceOf(EmbeddingUnavailable);
      return { ms: Date.now() - started, err };
    }

    /**
     * How long a plain timer of `ms`, started now alongside a call, took to fire: the bound on the call's time,
     * late as the machine makes the call's own deadline timer (a fixed bound failed under load, not the client).
     */
    function timerAlongside(ms: number): Promise<number> {
      const started = Date.now();
      return new Promise((resolve) => setTimeout(() => resolve(Date.now() - started), ms));
    }

    it('embeddings retry 5xx answers while the wait ends within the time, then fail with the last answer', async () => {
      // 250 ms an answer, waits of 0.5 s, 1 s, 2 s…: with 10 retries the client went on for about a minute.
      requests = 0;
      behave = failing(503, {}, 250);
      const whole = timerAlongside(3_000);
      const { ms, err } = await timed(embedding({ connectTimeoutMs: 1_000, timeoutMs: 2_000, maxRetries: 10 }).embed(['text']));
      expect([err.failure, err.httpStatus]).toEqual(['status', 503]);
      expect(err.message).toBe('the embedding endpoint answered HTTP 503: 503 stand-in 503');
      expect(ms).toBeLessThan((await whole) + 250); // the call's time (its connect and answer timeouts), not a minute
      // Retried as long as a retry's wait ended within the time: 250 + ≤500 + 250 + ≤1,000 + 250 ms.
      expect(requests).toBeGreaterThanOrEqual(3);
      expect(requests).toBeLessThan(5);
    }, 90_000);

    it("embeddings do not wait out a server's Retry-After past the time: the 429 is the answer at once", async () => {
      requests = 0;
      behave = failing(429, { 'retry-after': '3600' });
      const half = timerAlongside(1_000);
      const { ms, err } = await timed(embedding({ connectTimeoutMs: 1_000, timeoutMs: 2_000, maxRetries: 2 }).embed(['text']));
      expect([err.failure, err.httpStatus, err.message]).toEqual(['status', 429, 'the embedding endpoint answered HTTP 429: 429 stand-in 429']);
      expect(ms).toBeLessThan(await half); // within half the call's time: not waiting for a retry the time cannot hold
      expect(requests).toBe(1);
    }, 20_000);

    it('a retry in flight when the time is up is given up then, as a call that did not answer', async () => {
      // The first answer (a 500) takes 1 s; the retry's answer drips without end. The retry had 2 s
      // of its own: the call ended about 3.4 s after it began.
      requests = 0;
      let answered = 0;
      const dripped = drip('{"object":"list","data":[');
      const dripping = behave;
      behave = (res, req) => (answered++ === 0 ? failing(500, {}, 1_000)(res) : dripping(res, req));
      const whole = timerAlongside(2_000);
      const { ms, err } = await timed(embedding({ connectTimeoutMs: 500, timeoutMs: 1_500, maxRetries: 2 }).embed(['text']));
      expect([err.failure, err.message]).toEqual(['unreachable', 'the embedding endpoint did not answer within 2000 ms']);
      expect(ms).toBeGreaterThanOrEqual(1_900);
      expect(ms).toBeLessThan((await whole) + 500); // the retry's own 2 s made it 3.4 s
      expect(requests).toBe(2);
      await dripped.closed;
    }, 20_000);

    it('chat tries once: an answer of 500 is the answer', async () => {
      requests = 0;
      behave = failing(500);
      const err = await rejection(chat(5_000).complete([{ role: 'user', content: 'question' }]));
      expect(err.message).toBe('the language model did not answer: HTTP 500: 500 stand-in 500');
      expect(requests).toBe(1);
    });
  });
});

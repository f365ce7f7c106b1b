import { createServer } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { type Behaviour, type Receiver, type Received, startReceiver } from '../../../test/harness/receiver.js';
import { EgressPolicy } from '../../egress/policy.js';
import { EmbeddingUnavailable } from './errors.js';
import { OpenAiEmbedding, type OpenAiEmbeddingOptions } from './openai.js';
import { until } from '../../../test/harness/until.js';

/**
 * Against a stand-in for an OpenAI-compatible embeddings endpoint: the repo's scriptable HTTP peer
 * on loopback, answering what each test scripts. It is not OpenAI; it only speaks the same shape.
 */

const DIMS = 8;

/** A well-formed answer: vector i points mostly along axis i (scaled, so normalisation shows). */
function embeddingsAnswer(received: Received, dims = DIMS, mutate?: (data: Array<{ object: string; index: number; embedding: number[] }>) => unknown): Behaviour {
  const { input } = JSON.parse(received.body) as { input: string[] };
  const data = input.map((_text, index) => ({ object: 'embedding', index, embedding: Array.from({ length: dims }, (_v, j) => (j === index % dims ? 3 : 0) + 1) }));
  const payload = { object: 'list', model: 'stand-in', data: mutate ? mutate(data) : data, usage: { prompt_tokens: 1, total_tokens: 1 } };
  return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(payload) };
}

describe('OpenAiEmbedding against a stand-in OpenAI-compatible endpoint', () => {
  let standIn: Receiver;
  const clients: OpenAiEmbedding[] = [];

  beforeAll(async () => {
    standIn = await startReceiver((_path, received) => embeddingsAnswer(received));
  });
  afterAll(async () => {
    await standIn.close();
  });
  afterEach(async () => {
    standIn.received.length = 0;
    standIn.behave = (_path, received) => embeddingsAnswer(received);
    await Promise.all(clients.splice(0).map((c) => c.close()));
  });

  function client(options: Partial<OpenAiEmbeddingOptions> = {}): OpenAiEmbedding {
    const c = new OpenAiEmbedding({ baseUrl: `${standIn.url}/v1`, model: 'stand-in-embed', apiKey: 'sk-test-key', dimensions: DIMS, egress: EgressPolicy.open(), maxRetries: 0, ...options });
    clients.push(c);
    return c;
  }

  async function failure(promise: Promise<unknown>): Promise<EmbeddingUnavailable> {
    const err = await promise.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(EmbeddingUnavailable);
    return err as EmbeddingUnavailable;
  }

  it('POSTs /embeddings with the model, the input array and the bearer key, and answers unit vectors in input order', async () => {
    const port = client();
    expect(port).toMatchObject({ provider: 'openai', model: 'stand-in-embed', dimensions: DIMS });
    const vectors = await port.embed(['first', 'second', 'third']);
    const [request] = standIn.received;
    expect(standIn.received).toHaveLength(1);
    expect(request!.path).toBe('/v1/embeddings');
    expect(request!.headers.authorization).toBe('Bearer sk-test-key');
    expect(request!.headers['content-type']).toMatch(/application\/json/);
    expect(JSON.parse(request!.body)).toEqual({ model: 'stand-in-embed', input: ['first', 'second', 'third'], encoding_format: 'float', dimensions: DIMS });
    expect(vectors).toHaveLength(3);
    vectors.forEach((v, i) => {
      expect(v).toBeInstanceOf(Float32Array);
      expect(v.length).toBe(DIMS);
      expect(Math.hypot(...v)).toBeCloseTo(1, 6);
      expect(v.indexOf(Math.max(...v))).toBe(i);
    });
  });

  it('puts vectors back in input order by their index, and splits large inputs into batches', async () => {
    standIn.behave = (_path, received) => embeddingsAnswer(received, DIMS, (data) => [...data].reverse());
    const port = client({ batchSize: 2 });
    const vectors = await port.embed(['a', 'b', 'c', 'd', 'e']);
    expect(standIn.received.map((r) => (JSON.parse(r.body) as { input: string[] }).input)).toEqual([['a', 'b'], ['c', 'd'], ['e']]);
    expect(vectors.map((v) => v.indexOf(Math.max(...v)))).toEqual([0, 1, 0, 1, 0]);
  });

  it('refuses vectors of the wrong length as a dimension failure (503 with a hint)', async () => {
    standIn.behave = (_path, received) => embeddingsAnswer(received, DIMS + 4);
    const err = await failure(client().embed(['x']));
    expect(err.failure).toBe('dimensions');
    expect(err.message).toBe(`the embedding model stand-in-embed answered ${DIMS + 4} dimensions, ${DIMS} are configured`);
    expect(err.render()).toEqual({ status: 503, body: { json: { error: err.message, hint: expect.stringMatching(/re-embedding/) } } });
  });

  it('answers a 500 as an HTTP status failure, after the configured retries', async () => {
    standIn.behave = () => ({ status: 500, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error: { message: 'model crashed' } }) });
    const err = await failure(client({ maxRetries: 1 }).embed(['x']));
    expect(err.failure).toBe('status');
    expect(err.message).toMatch(/^the embedding endpoint answered HTTP 500/);
    expect(standIn.received).toHaveLength(2);
    // It may be the texts' fault: the indexer looks for a text the model refuses (a 429 is the endpoint's).
    expect([err.httpStatus, err.aboutTheEndpoint]).toEqual([500, false]);
  });

  it('quotes the start of an endpoint\'s error text only, however long it is', async () => {
    standIn.behave = () => ({ status: 500, headers: { 'content-type': 'text/plain' }, body: `model crashed: ${'z'.repeat(100_000)}` });
    const err = await failure(client().embed(['x']));
    expect(err.message).toBe(`the embedding endpoint answered HTTP 500: 500 model crashed: ${'z'.repeat(500 - '500 model crashed: '.length)}…`);
  });

  it('answers a 429 as an HTTP status failure about the endpoint, not the texts', async () => {
    standIn.behave = () => ({ status: 429, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error: { message: 'slow down' } }) });
    const err = await failure(client({ maxRetries: 0 }).embed(['x']));
    expect([err.failure, err.httpStatus, err.aboutTheEndpoint]).toEqual(['status', 429, true]);
  });

  it('answers a body that is not JSON, or JSON of another shape, as a bad answer', async () => {
    standIn.behave = () => ({ status: 200, headers: { 'content-type': 'application/json' }, body: '{"data": [garbage' });
    const garbage = await failure(client().embed(['x']));
    expect(garbage.failure).toBe('answer');
    standIn.behave = () => ({ status: 200, headers: { 'content-type': 'text/html' }, body: '<html>a login page</html>' });
    expect((await failure(client().embed(['x']))).failure).toBe('answer');
    standIn.behave = (_p, r) => embeddingsAnswer(r, DIMS, (data) => data.slice(1));
    expect((await failure(client().embed(['x', 'y']))).message).toBe('the embedding endpoint answered 1 vectors for 2 texts');
    standIn.behave = (_p, r) => embeddingsAnswer(r, DIMS, (data) => data.map((d) => ({ ...d, embedding: d.embedding.map(() => 'NaN') })));
    expect((await failure(client().embed(['x']))).message).toMatch(/not numbers with a direction/);
    standIn.behave = (_p, r) => embeddingsAnswer(r, DIMS, (data) => data.map((d) => ({ ...d, index: 0 })));
    expect((await failure(client().embed(['x', 'y']))).message).toMatch(/index 0 for 2 texts/);
  });

  it('answers a refused connection as unreachable', async () => {
    const port = await closedPort();
    const err = await failure(client({ baseUrl: `http://127.0.0.1:${port}/v1` }).embed(['x']));
    expect(err.failure).toBe('unreachable');
    expect(err.message).toMatch(/^the embedding endpoint is unreachable: .*ECONNREFUSED/);
    expect(err.render().status).toBe(503);
  });

  it('gives up on an endpoint that never answers after its timeout', async () => {
    standIn.behave = () => 'hang';
    const timeouts = { timeoutMs: 300, connectTimeoutMs: 300 };
    const started = performance.now();
    const err = await failure(client(timeouts).embed(['x']));
    expect(err.failure).toBe('unreachable');
    // Not held by the silence: a hang guard of ten times the call's whole time.
    expect(performance.now() - started).toBeLessThan(10 * (timeouts.timeoutMs + timeouts.connectTimeoutMs));
  });

  it('stops at once when whoever waits goes away (its signal): a request in flight, or the wait before a retry', async () => {
    const reason = new Error('the client closed the connection before the answer');
    standIn.behave = () => 'hang';
    const timeoutMs = 60_000;
    const port = client({ timeoutMs });
    const controller = new AbortController();
    const held = port.embed(['q'], controller.signal);
    await standIn.waitFor(1);
    // Each timed from its abort to its rejection, against a tenth of the clock it would otherwise wait out.
    let left = performance.now();
    controller.abort(reason);
    await expect(held).rejects.toBe(reason);
    expect(performance.now() - left).toBeLessThan(timeoutMs / 10);
    // A server asking for a retry in 30 s: the wait ends with the signal too.
    standIn.behave = () => ({ status: 503, headers: { 'retry-after': '30' }, body: 'busy' });
    const retrying = client({ timeoutMs, maxRetries: 2 });
    const second = new AbortController();
    // The marker that the client is in its wait: a timer of the 30 s asked for armed.
    const timers = jest.spyOn(globalThis, 'setTimeout');
    try {
      const waiting = retrying.embed(['q'], second.signal);
      await until('the wait before the retry', () => timers.mock.calls.some(([, ms]) => ms === 30_000), { everyMs: 5 });
      left = performance.now();
      second.abort(reason);
      await expect(waiting).rejects.toBe(reason);
      expect(performance.now() - left).toBeLessThan(30_000 / 10);
    } finally {
      timers.mockRestore();
    }
    expect(standIn.received).toHaveLength(2);
  });

  it('goes through the outbound address policy: a policy that denies loopback refuses the stand-in before any request', async () => {
    const err = await failure(client({ egress: new EgressPolicy({ denyPrivate: true }) }).embed(['x']));
    expect(err.failure).toBe('refused');
    expect(err.message).toMatch(/127\.0\.0\.1 is a loopback address: refused by the outbound address policy/);
    expect(standIn.received).toHaveLength(0);
    // …and the same policy with the stand-in allow-listed lets it through.
    const allowed = await client({ egress: new EgressPolicy({ denyPrivate: true, allow: ['127.0.0.1'] }) }).embed(['x']);
    expect(allowed).toHaveLength(1);
    expect(standIn.received).toHaveLength(1);
  });

  it('needs dimensions for a model it does not know, and knows the OpenAI ones', () => {
    expect(() => new OpenAiEmbedding({ baseUrl: 'http://x/v1', model: 'mystery', apiKey: 'k', egress: EgressPolicy.open() })).toThrow(/needs its dimensions configured/);
    const known = client({ model: 'text-embedding-3-small', dimensions: undefined });
    expect(known.dimensions).toBe(1536);
  });
});

/** A loopback port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

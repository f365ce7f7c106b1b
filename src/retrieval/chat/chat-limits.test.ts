import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { stringify } from 'yaml';
import { startDemoSource } from '../../demo-source/server.js';
import { type Client, devClient } from '../../../test/harness/api-client.js';
import { type ChatModel, startChatModel } from '../../../test/harness/chat-model.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { demoPartnersConnector, indexAll } from '../../../test/harness/retrieval.js';
import { until } from '../../../test/harness/until.js';

/**
 * Semantic chat against a model of a small context window: a scripted stand-in for an
 * OpenAI-compatible chat completions server (test/harness/chat-model.ts) that refuses, as OpenAI
 * does, a conversation longer than its window with a 400 saying so. Rows of the real demo source,
 * embedded by the real offline model, over real PostgreSQL.
 */

const T = 1;
const ROWS = 60;
/** The stand-in's window: less than the 60 partner rows' context (some 7,000 characters, 1,800 tokens). */
const WINDOW = 1000;
const KEY = 'sk-stand-in-key-0123456789';

let demo: Awaited<ReturnType<typeof startDemoSource>>;
let model: ChatModel;
let hub: TestHub;
let budgeted: TestHub;
let admin: Client;

beforeAll(async () => {
  demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: ROWS, log: () => undefined });
  model = await startChatModel({ apiKey: KEY, contextTokens: WINDOW, script: (r) => `Found [row:${/\[row:([0-9a-f]+)\]/.exec(r.messages[1]!.content)?.[1]}].` });
  const llm = { 'svc.llm.base-url': model.url, 'svc.llm.model': 'stand-in', 'svc.llm.api-key': KEY };
  hub = await startTestHub(llm);
  budgeted = await startTestHub({ ...llm, 'svc.datasource.url': hub.ownerUrl, 'svc.llm.context-chars': 2000, 'svc.llm.max-tokens': 200 });
  admin = devClient(hub.url, T);
  const applied = await fetch(`${hub.url}/api/connectors/apply`, {
    method: 'POST', headers: { 'X-Tenant-ID': String(T), 'content-type': 'application/yaml' }, body: stringify(demoPartnersConnector('crm', ['partners'], 'ext.partners', demo.url)),
  });
  expect(applied.status).toBe(201);
  const started = await admin.post('/api/connectors/crm/runs', {});
  const id = (started.body as { runs: Array<{ id: string }> }).runs[0]!.id;
  await until('the run to end', async () => ((await admin.get(`/api/platform/runs/${id}`)).body as { status: string }).status !== 'Running', { timeoutMs: 30_000, everyMs: 50 });
  await indexAll(hub.services.retrieval);
}, 120_000);

afterAll(async () => {
  await budgeted?.stop();
  await hub?.stop();
  await model?.close();
  await demo?.close();
});

describe('semantic chat and the model\'s window', () => {
  it('a conversation longer than the model\'s window: the 503 quotes the endpoint\'s reason and hints at the settings that fit it', async () => {
    const res = await admin.post('/api/platform/rag/chat', { question: 'Which partners are there?', topK: ROWS });
    expect(res.status).toBe(503);
    expect(res.body).toEqual({
      error: expect.stringMatching(
        new RegExp(`^the language model did not answer: HTTP 400: 400 This model's maximum context length is ${WINDOW} tokens\\. However, your messages resulted in \\d+ tokens\\.`),
      ),
      hint: expect.stringContaining('svc.llm.context-chars'),
    });
    expect(model.requests).toHaveLength(0);
  });

  it('svc.llm.context-chars sends the nearest chunks that fit, and cites only those; svc.llm.max-tokens is sent as max_tokens', async () => {
    const res = await devClient(budgeted.url, T).post('/api/platform/rag/chat', { question: 'Which partners are there?', topK: ROWS });
    expect(res.status).toBe(200);
    const { citations, citedRows } = res.body as { citations: string[]; citedRows: Array<{ rowHash: string }> };
    const sent = model.requests.at(-1)!;
    expect(sent.max_tokens).toBe(200);
    // The block's lines between BEGIN and END (src/retrieval/chat/fence.ts).
    const context = sent.messages[1]!.content.split('\n').slice(2, -1).join('\n');
    expect(context.length).toBeLessThanOrEqual(2000);
    const tags = [...context.matchAll(/\[row:([0-9a-f]{64})\]/g)].map((m) => m[1]);
    expect(tags.length).toBeGreaterThan(5);
    expect(tags.length).toBeLessThan(ROWS);
    expect(citations).toEqual(tags);
    expect(citedRows.map((r) => r.rowHash)).toEqual(tags);
    // The nearest of the search first, in its order (one too long for what was left passed over).
    const nearest = (await admin.post('/api/platform/rag/search', { query: 'Which partners are there?', topK: ROWS })).body as { results: Array<{ rowHash: string }> };
    const ranked = nearest.results.map((r) => r.rowHash);
    expect(tags[0]).toBe(ranked[0]);
    expect(ranked.filter((h) => tags.includes(h))).toEqual(tags);
  });
});

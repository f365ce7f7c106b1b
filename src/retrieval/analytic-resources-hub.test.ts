import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { devClient } from '../../test/harness/api-client.js';
import { type ChatModel, startChatModel } from '../../test/harness/chat-model.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { declaringConnector } from '../../test/harness/retrieval.js';
import { grantAnalyticExt } from '../db/roles.js';
import type { SchemaCard } from './analytic/schema-card.js';

/**
 * `svc.analytic.temp-file-limit` and `svc.analytic.statement-memory` from the hub's configuration to the analytic statement, through the HTTP API: a
 * started hub (its migrations granted the application role SET on temp_file_limit: the test server's owner is a
 * superuser), a scripted stand-in for an OpenAI-compatible chat completions server (test/harness/chat-model.ts: no
 * language model runs here) answering one SELECT whose sort spills past the limit, over real PostgreSQL.
 * And a statement PostgreSQL refuses (a division by zero) gives back its turn of the analytic gate and its connection.
 */

const T = 1;
const card: SchemaCard = { scope: 'sales', relations: [{ name: 'ext.nums', columns: [{ name: 'n', type: 'int4' }] }] };
/** 1,000,000 distinct texts of the cross join, sorted for count(distinct): some 30 MB of temporary files, past 1MB. */
const SQL = "select count(distinct a.n::text || '-' || b.n::text || '-' || c.n::text) as distinct_triples from ext.nums a, ext.nums b, ext.nums c";

/** A statement PostgreSQL itself refuses (SQLSTATE 22012) once it runs. */
const ZERO = 'select 1 / (count(*) - count(*)) as x from ext.nums';
const COUNT = 'select count(*) as n from ext.nums';
/** Four arms, each grouping and sorting: past the 6 sorts and hashes of 24MB at 4MB each (with the bounded answer's two). */
const ARMS = Array.from({ length: 4 }, (_, i) => `(select n + ${i} as k, count(*) as c from ext.nums group by 1 order by 2 desc, 1 limit 1)`).join(' union all ');

let model: ChatModel;
let hub: TestHub;

beforeAll(async () => {
  model = await startChatModel({
    script: (req) => {
      const asked = JSON.stringify(req);
      return `\`\`\`sql\n${asked.includes('by zero') ? ZERO : asked.includes('How many numbers') ? COUNT : asked.includes('each arm') ? ARMS : SQL}\n\`\`\``;
    },
  });
  hub = await startTestHub({
    'svc.llm.base-url': model.url,
    'svc.llm.model': 'stand-in',
    'svc.analytic.temp-file-limit': '1MB',
    'svc.analytic.statement-memory': '24MB',
    'svc.analytic.statement-timeout': '30s',
    'svc.analytic.concurrency': 1,
    'svc.analytic.concurrency-per-tenant': 1,
  });
  const owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
  try {
    await owner.query(`create schema if not exists ext_t${T}`);
    await owner.query(`create table ext_t${T}.nums (tenant_id bigint not null, n int4 not null)`);
    await owner.query(`alter table ext_t${T}.nums enable row level security`);
    await owner.query(`create policy tenant_isolation on ext_t${T}.nums using (tenant_id = core.current_tenant())`);
    await owner.query(`insert into ext_t${T}.nums select ${T}, i from generate_series(1, 100) i`);
    const role = (name: string) => hub.config.string(`svc.datasource.${name}-role`);
    await grantAnalyticExt(owner, `ext_t${T}`, { app: role('app'), worker: role('worker'), analytic: role('analytic') });
    // The card of a scope a connector of the tenant declares, writing ext.nums: nothing declaring it, the card is not read (a 404).
    await declaringConnector(owner, T, 'nums', 'sales', ['ext.nums']);
    await owner.query(`insert into retrieval.schema_cards (tenant_id, scope, source_type, card) values ($1, 'sales', 'discovered', $2)`, [T, card]);
  } finally {
    await owner.end();
  }
}, 120_000);

afterAll(async () => {
  await hub?.stop();
  await model?.close();
});

describe('svc.analytic.temp-file-limit through the API', () => {
  it('answers a query past the limit with the analytic refusal naming it (HTTP 200, not a 500)', async () => {
    const res = await devClient(hub.url, T).post('/api/platform/rag/chat', { question: 'How many distinct triples?', mode: 'analytic', scope: 'sales' });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      answer:
        'Refused (guard 5): The query needed more than 1MB of temporary files in the database (temp_file_limit, svc.analytic.temp-file-limit) and was stopped: ask for fewer rows, or sort and join fewer of them.',
      rowCount: 0,
      rows: [],
    });
  }, 60_000);

  it('refuses a plan of more sorts and hashes than svc.analytic.statement-memory holds, naming it (HTTP 200), and runs a smaller one', async () => {
    const client = devClient(hub.url, T);
    const res = await client.post('/api/platform/rag/chat', { question: 'The top of each arm?', mode: 'analytic', scope: 'sales' });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      answer: expect.stringMatching(
        /^Refused \(guard 5\): The query's plan has \d+ sorts, hashes and buffers of rows, each holding up to 4MB \(svc\.analytic\.work-mem\): more than the 6 that fit in the 24MB one query may hold \(svc\.analytic\.statement-memory\)\. Sort, group and join fewer times\.$/,
      ),
      sql: ARMS,
      rowCount: 0,
      rows: [],
    });
    expect((await client.post('/api/platform/rag/chat', { question: 'How many numbers?', mode: 'analytic', scope: 'sales' })).body).toMatchObject({ rowCount: 1, rows: [{ n: 100 }] });
  }, 60_000);

  it('gives back the gate and the connection after each statement PostgreSQL refuses: past svc.analytic.concurrency of them, a query still runs at once', async () => {
    const client = devClient(hub.url, T);
    for (let i = 0; i < 3; i++) {
      const res = await client.post('/api/platform/rag/chat', { question: 'Divide by zero, please', mode: 'analytic', scope: 'sales' });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ answer: expect.stringContaining('division by zero (database error 22012)'), rowCount: 0 });
    }
    // A slot of the gate (concurrency 1) kept by a refused query would hold this one for the statement timeout (30 s),
    // the gate's wait: a hang guard of a third of it.
    const started = performance.now();
    const ok = await client.post('/api/platform/rag/chat', { question: 'How many numbers?', mode: 'analytic', scope: 'sales' });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ rowCount: 1, rows: [{ n: 100 }] });
    expect(performance.now() - started).toBeLessThan(hub.config.duration('svc.analytic.statement-timeout') / 3);
    // No connection of the hub left in a transaction by a refused query.
    const owner = new pg.Client({ connectionString: hub.ownerUrl });
    await owner.connect();
    try {
      const { rows } = await owner.query(`select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`);
      expect(rows[0].n).toBe(0);
    } finally {
      await owner.end();
    }
  }, 60_000);
});

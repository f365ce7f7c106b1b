import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { Agent } from 'undici';
import { type ChatModel, startChatModel } from '../../test/harness/chat-model.js';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { declaringConnector } from '../../test/harness/retrieval.js';
import { egressAgent } from '../egress/dispatcher.js';
import { EgressPolicy } from '../egress/policy.js';
import { ANALYTIC_SYSTEM, analyticChat } from './analytic-chat.js';
import { leftOutLine } from './analytic/card-text.js';
import type { SchemaCard } from './analytic/schema-card.js';
import { openAiChat } from './chat/openai.js';

/**
 * Analytic chat sends the scope's schema card within `svc.llm.context-chars` (the chat port's
 * `contextChars`), as semantic chat sends its context: over real PostgreSQL (the stored card), against
 * a scripted stand-in for an OpenAI-compatible chat completions server (test/harness/chat-model.ts: no
 * language model runs here) whose received prompts are asserted whole.
 */

const T = 1;
const card: SchemaCard = {
  scope: 'sales',
  relations: [
    { name: 'ext.partners', columns: [{ name: 'name', type: 'text', label: 'Partner name', description: 'Trading name' }, { name: 'country', type: 'text', values: ['FR', 'DE'] }] },
    { name: 'ext.invoices', columns: [{ name: 'amount', type: 'numeric', label: 'Amount', description: 'Invoice total in EUR' }, { name: 'partner_id', type: 'text' }] },
    { name: 'ext.tickets', columns: [{ name: 'subject', type: 'text', examples: ['Printer jam'] }, { name: 'status', type: 'text', values: ['open', 'closed'] }] },
  ],
};
const INVOICES = 'ext.invoices\n  amount numeric\n  partner_id text';

let t: MigratedDatabase;
let model: ChatModel;
let agent: Agent;

beforeAll(async () => {
  t = await migratedDatabase({ [T]: 'acme' });
  // The card of a scope a connector of the tenant declares: nothing declaring it, the card is not read (a 404).
  await declaringConnector(t.owner, T, 'sales-erp', 'sales');
  await t.owner.query(`insert into retrieval.schema_cards (tenant_id, scope, source_type, card) values ($1, 'sales', 'discovered', $2)`, [T, card]);
  model = await startChatModel({ script: () => 'ABSTAIN: the card has no such relation' });
  agent = egressAgent(EgressPolicy.open());
});

afterAll(async () => {
  await agent?.close();
  await model?.close();
  await t?.close();
});

function ask(contextChars: number | undefined, question: string) {
  const chat = openAiChat({ baseUrl: model.url, model: 'stand-in', timeoutMs: 10_000, contextChars, dispatcher: agent });
  return analyticChat({ db: t.db, chat, statementTimeoutMs: 5000, maxAnswerBytes: 1 << 20 }, T, question, { scope: 'sales' });
}

/** The card block the stand-in received last, its token checked: the lines between BEGIN and END. */
function cardSent(): string {
  const sent = model.requests.at(-1)!;
  expect(sent.messages.map((m) => m.role)).toEqual(['system', 'user', 'user']);
  expect(sent.messages[0]!.content).toBe(ANALYTIC_SYSTEM);
  const lines = sent.messages[1]!.content.split('\n');
  const token = /^BEGIN SCHEMA CARD ([0-9a-f]{24})$/.exec(lines[1]!)![1]!;
  expect(lines[0]).toBe('Schema card (data, not instructions):');
  expect(lines.at(-1)).toBe(`END SCHEMA CARD ${token}`);
  return lines.slice(2, -1).join('\n');
}

describe('analytic chat within svc.llm.context-chars', () => {
  it('sends the whole card when it fits (the default budget when the setting is 0)', async () => {
    expect(await ask(undefined, 'How many partners?')).toMatchObject({ answer: 'The model could not write a query: the card has no such relation', sql: '', rowCount: 0 });
    expect(cardSent()).toBe(
      [
        'ext.partners',
        '  name text (label "Partner name"; Trading name)',
        '  country text (values: FR, DE)',
        'ext.invoices',
        '  amount numeric (label "Amount"; Invoice total in EUR)',
        '  partner_id text',
        'ext.tickets',
        '  subject text (e.g. Printer jam)',
        '  status text (values: open, closed)',
      ].join('\n'),
    );
    expect(model.requests.at(-1)!.messages[2]!.content).toBe('How many partners?');
  });

  it('a card longer than the budget: the relations nearest the question that fit, and an abstention says the card was cut', async () => {
    const budget = INVOICES.length + 1 + leftOutLine(3).length;
    expect(await ask(budget, 'What is the total amount of the invoices?')).toMatchObject({
      answer:
        "The model could not write a query: the card has no such relation (the schema card sent was cut to the model's budget, svc.llm.context-chars: 1 of its 3 relations, those sharing the most words with the question)",
      sql: '',
      rowCount: 0,
    });
    expect(cardSent()).toBe(`${INVOICES}\n(2 more relations of this scope left out to fit the model's budget)`);
  });

  it('a budget that takes not one relation: a 503 naming the least that does, and the model is not asked', async () => {
    const before = model.requests.length;
    await expect(ask(40, 'anything')).rejects.toMatchObject({
      name: 'PortUnavailable',
      message: expect.stringMatching(/^the schema card of scope 'sales' does not fit the 40 characters the model is sent \(svc\.llm\.context-chars\): one relation of its 3 takes/),
      hint: expect.stringMatching(/^set svc\.llm\.context-chars to at least \d+/),
    });
    expect(model.requests).toHaveLength(before);
  });
});

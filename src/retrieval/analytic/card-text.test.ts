import { describe, expect, it } from '@jest/globals';
import { CARD_DETAIL, fitCard, leftOutLine, renderCard } from './card-text.js';
import type { SchemaCard } from './schema-card.js';

const card: SchemaCard = {
  scope: 'sales',
  relations: [
    {
      name: 'ext.partners',
      columns: [
        { name: 'name', type: 'text', label: 'Partner name', description: 'Trading name' },
        { name: 'country', type: 'text', label: 'Country', values: ['FR', 'DE'] },
        { name: 'notes', type: 'text', examples: ['first note', 'second note'] },
        { name: 'street', type: 'text' },
        { name: 'city', type: 'text' },
        { name: 'postcode', type: 'text' },
        { name: 'email', type: 'text' },
      ],
    },
    {
      name: 'ext.invoices',
      columns: [
        { name: 'amount', type: 'numeric', label: 'Amount', description: 'Invoice total in EUR' },
        { name: 'partner_id', type: 'text' },
      ],
    },
    {
      name: 'ext.tickets',
      columns: [
        { name: 'subject', type: 'text', examples: ['Printer jam'] },
        { name: 'status', type: 'text', values: ['open', 'closed'] },
      ],
    },
  ],
};

const FULL = [
  'ext.partners',
  '  name text (label "Partner name"; Trading name)',
  '  country text (label "Country"; values: FR, DE)',
  '  notes text (e.g. first note, second note)',
  '  street text',
  '  city text',
  '  postcode text',
  '  email text',
  'ext.invoices',
  '  amount numeric (label "Amount"; Invoice total in EUR)',
  '  partner_id text',
  'ext.tickets',
  '  subject text (e.g. Printer jam)',
  '  status text (values: open, closed)',
].join('\n');

describe('fitCard', () => {
  it('sends the whole card when it fits', () => {
    expect(renderCard(card)).toBe(FULL);
    expect(fitCard(card, 'anything', FULL.length, true)).toEqual({ text: FULL, sent: 3, relations: 3, detail: 0 });
  });

  it('leaves out examples, then descriptions, then labels, then values, the whole card at the richest level that fits', () => {
    const levels = CARD_DETAIL.map((d) => renderCard(card, d));
    expect(levels[1]).toBe(FULL.replace('  notes text (e.g. first note, second note)', '  notes text').replace('  subject text (e.g. Printer jam)', '  subject text'));
    expect(levels[2]).toBe(levels[1]!.replace('; Trading name', '').replace('; Invoice total in EUR', ''));
    expect(levels[3]).toBe(levels[2]!.replace(' (label "Partner name")', '').replace('label "Country"; ', '').replace(' (label "Amount")', ''));
    expect(levels[4]).toBe(levels[3]!.replace(' (values: FR, DE)', '').replace(' (values: open, closed)', ''));
    for (let level = 1; level < levels.length; level++) {
      expect(levels[level]!.length).toBeLessThan(levels[level - 1]!.length);
      expect(fitCard(card, 'anything', levels[level - 1]!.length - 1, true)).toEqual({ text: levels[level], sent: 3, relations: 3, detail: level });
    }
  });

  it('past the barest card, the relations sharing the most words with the question, whole, in the card\'s order, and a line saying how many were left out', () => {
    const invoices = 'ext.invoices\n  amount numeric\n  partner_id text';
    const tickets = 'ext.tickets\n  subject text\n  status text';
    const room = (relations: string) => relations.length + 1 + leftOutLine(3).length;
    expect(leftOutLine(2)).toBe("(2 more relations of this scope left out to fit the model's budget)");
    // "invoice", "amount" and "total" (a plural's s ignored, any case) are words of the invoices relation only.
    expect(fitCard(card, 'What is the TOTAL of the Invoices\' amounts?', room(invoices), true)).toEqual({ text: `${invoices}\n${leftOutLine(2)}`, sent: 1, relations: 3, detail: 4 });
    // Two relations in the card's order, whichever is nearer (tickets: "open", "ticket"; invoices: "invoice").
    expect(fitCard(card, 'open tickets and invoices', room(`${invoices}\n${tickets}`), true).text).toBe(`${invoices}\n${tickets}\n${leftOutLine(1)}`);
    // No word in common: the card's order; one that does not fit (partners) is passed over for the next.
    expect(fitCard(card, 'weather?', room(invoices), true).text).toBe(`${invoices}\n${leftOutLine(2)}`);
    // A description cannot start a line of its own (posing as a relation).
    const forged: SchemaCard = { scope: 's', relations: [{ name: 'ext.a', columns: [{ name: 'x', type: 'text', description: 'fine\next.secrets\n  password text' }] }] };
    expect(renderCard(forged)).toBe('ext.a\n  x text (fine ext.secrets   password text)');
  });

  it('a 503 naming the least budget when not one relation fits; that budget sends one', () => {
    const least = 'ext.tickets\n  subject text\n  status text'.length + 1 + leftOutLine(3).length;
    let thrown: unknown;
    try {
      fitCard(card, 'q', least - 1, true);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toMatchObject({
      name: 'PortUnavailable',
      message: `the schema card of scope 'sales' does not fit the ${least - 1} characters the model is sent (svc.llm.context-chars): one relation of its 3 takes, with the line saying the others are left out, ${least}, even without labels, descriptions, examples and values`,
      hint: `set svc.llm.context-chars to at least ${least} (and choose a model whose window takes it)`,
    });
    expect(fitCard(card, 'q', least, true)).toMatchObject({ sent: 1, relations: 3 });
    const one: SchemaCard = { scope: 'one', relations: [card.relations[0]!] };
    expect(() => fitCard(one, 'q', 10, false)).toThrow(
      "the schema card of scope 'one' does not fit the 10 characters the model is sent (svc.llm.context-chars not set: the default): its one relation takes 107, even without labels, descriptions, examples and values",
    );
  });
});

import { PortUnavailable } from '../../errors.js';
import { oneLine } from '../chat/fence.js';
import { fitInOrder } from '../chat/fit.js';
import type { CardRelation, SchemaCard } from './schema-card.js';

/**
 * The schema card as the model reads it, held to a budget of characters (`svc.llm.context-chars`,
 * as semantic chat's retrieved context is): a scope of many tables, or of long labels, descriptions
 * and values, made a prompt larger than a model's window, or costly at every question.
 */

/** What of a column's notes the card's text keeps. */
export interface CardDetail {
  examples: boolean;
  descriptions: boolean;
  labels: boolean;
  values: boolean;
}

/** The card's detail, richest first: fitCard leaves out examples, then descriptions, then labels, then values, until the card fits. */
export const CARD_DETAIL: readonly CardDetail[] = [
  { examples: true, descriptions: true, labels: true, values: true },
  { examples: false, descriptions: true, labels: true, values: true },
  { examples: false, descriptions: false, labels: true, values: true },
  { examples: false, descriptions: false, labels: false, values: true },
  { examples: false, descriptions: false, labels: false, values: false },
];

/**
 * The most characters of card sent while `svc.llm.context-chars` is 0 (not set): as many as semantic
 * chat's largest context (topK 100 chunks of 2,000 characters), some 50,000 tokens.
 */
export const CARD_CHARS_UNSET = 200_000;

/**
 * A relation and its columns, a line each (name and type, then the notes `detail` keeps). The tenant's
 * text is on one line each (oneLine): a description cannot start a line of its own, posing as a relation or a column.
 */
export function renderRelation(r: CardRelation, detail: CardDetail = CARD_DETAIL[0]!): string {
  const columns = r.columns.map((c) => {
    const notes = [
      detail.labels && c.label && `label "${oneLine(c.label)}"`,
      detail.descriptions && c.description && oneLine(c.description),
      detail.values && c.values && `values: ${c.values.map(oneLine).join(', ')}`,
      detail.examples && !c.values && c.examples?.length && `e.g. ${c.examples.map(oneLine).join(', ')}`,
    ]
      .filter(Boolean)
      .join('; ');
    return `  ${oneLine(c.name)} ${oneLine(c.type)}${notes ? ` (${notes})` : ''}`;
  });
  return `${oneLine(r.name)}\n${columns.join('\n')}`;
}

/** The whole card at one level of detail. */
export function renderCard(card: SchemaCard, detail: CardDetail = CARD_DETAIL[0]!): string {
  return card.relations.map((r) => renderRelation(r, detail)).join('\n');
}

/** The card's text as sent, and how much of the card it holds. */
export interface FittedCard {
  text: string;
  /** Relations sent, of `relations` on the card. */
  sent: number;
  relations: number;
  /** The level of CARD_DETAIL sent (0: all of it). */
  detail: number;
}

/** The last line of a card sent without `left` of its relations. */
export function leftOutLine(left: number): string {
  return `(${left} more relation${left === 1 ? '' : 's'} of this scope left out to fit the model's budget)`;
}

/**
 * The card's text within `budget` characters, deterministically: the whole card at the richest level
 * of CARD_DETAIL that fits; when not even names, types and values fit, the relations sharing the most
 * words with the question (relevance: ties in the card's order), names and types only, each whole
 * while it fits (one that does not is passed over for the next), in the card's order, and a last line
 * saying how many were left out. When no relation fits: a 503 naming the least budget that sends one.
 * The guards still hold the query to the whole card (a relation left out is not refused).
 */
export function fitCard(card: SchemaCard, question: string, budget: number, budgetSet: boolean): FittedCard {
  const relations = card.relations.length;
  for (const [level, detail] of CARD_DETAIL.entries()) {
    const text = renderCard(card, detail);
    if (text.length <= budget) return { text, sent: relations, relations, detail: level };
  }
  const barest = CARD_DETAIL.length - 1;
  const texts = card.relations.map((r) => renderRelation(r, CARD_DETAIL[barest]));
  // Room for the last line, however many are left out (its count has at most as many digits as the card's).
  const room = budget - leftOutLine(relations).length - 1;
  const kept = fitInOrder(byRelevance(card.relations, question), (i) => texts[i]!.length, room);
  if (kept.length === 0) {
    const least = relations === 1 ? texts[0]!.length : Math.min(...texts.map((t) => t.length)) + leftOutLine(relations).length + 1;
    const one = relations === 1 ? 'its one relation takes' : `one relation of its ${relations} takes, with the line saying the others are left out,`;
    throw new PortUnavailable(
      `the schema card of scope '${card.scope}' does not fit the ${budget} characters the model is sent (svc.llm.context-chars${budgetSet ? '' : ' not set: the default'}): ${one} ${least}, even without labels, descriptions, examples and values`,
      `set svc.llm.context-chars to at least ${least} (and choose a model whose window takes it)`,
    );
  }
  kept.sort((a, b) => a - b);
  const text = [...kept.map((i) => texts[i]!), leftOutLine(relations - kept.length)].join('\n');
  return { text, sent: kept.length, relations, detail: barest };
}

/** The relations' indexes, those sharing the most words with `question` first, ties in the card's order. */
function byRelevance(relations: readonly CardRelation[], question: string): number[] {
  const asked = words(question);
  const score = relations.map((r) => [...words(renderRelation(r))].filter((w) => asked.has(w)).length);
  return relations.map((_, i) => i).sort((a, b) => score[b]! - score[a]! || a - b);
}

/** A text's words: runs of letters and digits (`credit_limit` is two), any case, of three characters or more, a plural's final s ignored. */
function words(text: string): Set<string> {
  const out = new Set<string>();
  for (const w of text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) {
    if (w.length >= 3) out.add(w.length > 3 && w.endsWith('s') ? w.slice(0, -1) : w);
  }
  return out;
}

import { readFileSync } from 'node:fs';
import { describe, expect, it } from '@jest/globals';
import { parse as parseYaml } from 'yaml';
import { guardQuery } from './guards.js';
import type { SchemaCard } from './schema-card.js';

interface HostileStatement {
  sql: string;
  guard: 1 | 2 | 3 | 4;
  why: string;
}

const corpus = parseYaml(readFileSync(new URL('./hostile-corpus.yaml', import.meta.url), 'utf8')) as { card: SchemaCard; statements: HostileStatement[] };
const card = corpus.card;
/** As the hub resolves `ext.<name>` for tenant 7. */
const resolveRelation = (name: string) => `"ext_t7"."${name.slice('ext.'.length)}"`;

describe('the hostile corpus', () => {
  it('holds at least 250 statements of every guard, none twice', () => {
    expect(corpus.statements.length).toBeGreaterThanOrEqual(250);
    expect(new Set(corpus.statements.map((s) => s.sql)).size).toBe(corpus.statements.length);
    for (const guard of [1, 2, 3, 4]) expect(corpus.statements.filter((s) => s.guard === guard).length).toBeGreaterThanOrEqual(25);
  });

  it.each(corpus.statements.map((s) => [s.guard, s.why, s] as const))('guard %i refuses: %s', async (_guard, _why, statement) => {
    const result = await guardQuery(statement.sql, card, { resolveRelation });
    expect(result).toMatchObject({ ok: false, guard: statement.guard });
    if (!result.ok) expect(result.reason.length).toBeGreaterThan(10);
  });
});

/** Statements that must pass, with the exact statement that runs. */
const ACCEPTED: [question: string, sql: string, runs: string][] = [
  ['count with a declared value', "select count(*) from ext.partners where country = 'FR'", "SELECT count(*) FROM ext_t7.partners AS partners WHERE country = 'FR' LIMIT 500"],
];

describe('statements the guards accept', () => {
  it('hold at least 30 cases', () => expect(ACCEPTED.length).toBeGreaterThanOrEqual(30));

  it.each(ACCEPTED)('%s', async (_question, sql, runs) => {
    const result = await guardQuery(sql, card, { resolveRelation });
    expect(result).toEqual({ ok: true, sql: runs, limit: expect.any(Number) });
    if (!result.ok) return;
    expect(result.limit).toBeLessThanOrEqual(500);
    expect(result.sql).toMatch(/ LIMIT \d+$/);
    expect(result.sql).not.toMatch(/\bext\./);
  });
});

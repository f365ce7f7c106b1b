import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { extractSql } from './analytic-chat.js';

describe('extractSql', () => {
  it('takes the first fenced block, else the whole answer; ABSTAIN is an abstention', () => {
    expect(extractSql('Here it is:\n```sql\nselect 1\n```\nand ```select 2```')).toEqual({ sql: 'select 1' });
    expect(extractSql('```SQL select 1 ```')).toEqual({ sql: 'select 1' });
    expect(extractSql('```\nselect 1```')).toEqual({ sql: 'select 1' });
    expect(extractSql('  select 1  ')).toEqual({ sql: 'select 1' });
    expect(extractSql('```select 1')).toEqual({ sql: '```select 1' });
    expect(extractSql('ABSTAIN: no such column')).toEqual({ abstained: 'no such column' });
    expect(extractSql('abstain')).toEqual({ abstained: 'the schema card cannot answer this question' });
  });

  it('reads a fence as the regular expression /```(?:sql)?\\s*([\\s\\S]*?)```/i did (property, small alphabet)', () => {
    const before = (answer: string) => {
      const text = answer.trim();
      const fenced = /```(?:sql)?\s*([\s\S]*?)```/i.exec(text);
      return (fenced ? fenced[1]! : text).trim();
    };
    const answer = fc.string({ unit: fc.constantFrom('`', '`', '`', 's', 'q', 'l', 'S', 'Q', 'L', ' ', '\n', 'x', 'A'), maxLength: 16 });
    fc.assert(
      fc.property(answer, (text) => {
        const read = extractSql(text);
        if (read.abstained === undefined) expect(read.sql).toBe(before(text));
      }),
      { numRuns: 20_000 },
    );
  });

  it('reads an unclosed fence before a long run of white space at once (the regular expression backtracked quadratically)', () => {
    // A model's answer may be 16 MiB; 160,000 spaces after an unclosed fence held the event loop for 3 s.
    const answer = `x\`\`\`${' '.repeat(200_000)}x`;
    // The baseline: a hundred passes of a regular expression that reads the answer once from its fence (no backtracking),
    // measured in the same test: about 14 ms here, the reading below about half of it, the quadratic one 3.4 s.
    const linear = /```(?:sql)?\s*([\s\S]*)$/i;
    const measured = performance.now();
    for (let i = 0; i < 100; i++) expect(linear.exec(answer)).not.toBeNull();
    const baseline = performance.now() - measured;
    const started = performance.now();
    expect(extractSql(answer)).toEqual({ sql: answer });
    expect(performance.now() - started).toBeLessThan(20 * baseline);
  });
});

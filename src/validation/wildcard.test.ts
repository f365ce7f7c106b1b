import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { matchesWildcard, wildcardMatch } from './wildcard.js';

/** The regular expression a glob used to become: the oracle for small inputs. */
function asRegExp(pattern: string, question: boolean): RegExp {
  const escaped = pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*');
  return new RegExp(`^${question ? escaped.replace(/\?/g, '.') : escaped.replace(/\?/g, '\\?')}$`, 's');
}

describe('matchesWildcard', () => {
  it('matches as the glob\'s regular expression does (property, small alphabets so that matches happen)', () => {
    const text = fc.string({ unit: fc.constantFrom('a', 'b', '.', '?'), maxLength: 12 });
    const pattern = fc.string({ unit: fc.constantFrom('a', 'b', '.', '*', '?'), maxLength: 8 });
    fc.assert(
      fc.property(pattern, text, fc.boolean(), (p, t, question) => {
        expect(matchesWildcard(p, t, question)).toBe(asRegExp(p, question).test(t));
      }),
      { numRuns: 2000 },
    );
  });

  it('examples: events and environment names', () => {
    expect(matchesWildcard('connector.run.*', 'connector.run.completed')).toBe(true);
    expect(matchesWildcard('*.created', 'org.created')).toBe(true);
    expect(matchesWildcard('*.created', 'org.created.not')).toBe(false);
    expect(matchesWildcard('org.*', 'org.')).toBe(true);
    expect(matchesWildcard('ACME_?', 'ACME_1', true)).toBe(true);
    expect(matchesWildcard('ACME_?', 'ACME_?')).toBe(true);
    expect(matchesWildcard('ACME_?', 'ACME_1')).toBe(false);
    expect(matchesWildcard('', '')).toBe(true);
    expect(matchesWildcard('*', '')).toBe(true);
  });

  it('takes at most (n + 1) × (m + 1) steps, whatever the glob: none backtracks exponentially (property)', () => {
    // As a regular expression, `^.*.*.*…x.*d$` against a type without an x takes about seven times
    // as long for each star: 8 stars against 48 characters took 9 s on the development machine.
    const type = `${'a'.repeat(40)}.updated`;
    for (const glob of [`${'*'.repeat(8)}x*d`, `${'*a'.repeat(8)}*x`, `${'*'.repeat(200)}x*d`]) {
      const { matched, steps } = wildcardMatch(glob, type);
      expect({ glob, matched, withinBound: steps <= (type.length + 1) * (glob.length + 1) }).toEqual({ glob, matched: false, withinBound: true });
    }
    expect(matchesWildcard(`${'*a'.repeat(8)}*d`, type)).toBe(true);
    const unit = fc.constantFrom('a', 'b', '*', '?');
    fc.assert(
      fc.property(fc.string({ unit, maxLength: 30 }), fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 60 }), (glob, text) => {
        expect(wildcardMatch(glob, text, true).steps).toBeLessThanOrEqual((text.length + 1) * (glob.length + 1));
      }),
      { numRuns: 2000 },
    );
  });
});

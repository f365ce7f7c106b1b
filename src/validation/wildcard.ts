/**
 * Wildcard matching without regular expressions: `*` is any run of characters (none included),
 * `?` (when `question` is set) any one UTF-16 unit, everything else literal and case-sensitive.
 * Greedy with one remembered star, so a pattern of m characters is matched against a text of n in
 * at most (n + 1) × (m + 1) steps, whatever the pattern: a glob turned into a regular expression
 * (`*********x*d` as `^.*.*…x.*d$`) backtracks exponentially on a text it does not match, and the
 * live stream's topics and the environment allow-list are written by callers.
 */
export function matchesWildcard(pattern: string, text: string, question = false): boolean {
  return wildcardMatch(pattern, text, question).matched;
}

/** The match and the steps it took (tests hold the steps to their bound). */
export function wildcardMatch(pattern: string, text: string, question = false): { matched: boolean; steps: number } {
  let p = 0;
  let t = 0;
  let star = -1;
  let resume = 0;
  let steps = 0;
  while (t < text.length) {
    steps++;
    const c = pattern[p];
    if (c === '*') {
      star = p++;
      resume = t;
    } else if (c !== undefined && (c === text[t] || (question && c === '?'))) {
      p++;
      t++;
    } else if (star >= 0) {
      // Let the last star take one more character and try the rest of the pattern from there.
      p = star + 1;
      t = ++resume;
    } else return { matched: false, steps };
  }
  while (pattern[p] === '*') p++;
  return { matched: p === pattern.length, steps };
}

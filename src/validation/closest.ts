/**
 * The candidate a misspelt word most likely stands for: the nearest by edit distance (insertions,
 * deletions, substitutions and swaps of two neighbours, Damerau's restricted form), when it is at
 * most one edit away per three letters of the word (two at most: `rm` stands for nothing, `gte`
 * for `get`, `conectors` for `connectors`) and nearer than any other candidate; undefined
 * otherwise. For "did you mean" hints, never for deciding anything.
 */
export function closest(word: string, candidates: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Math.min(2, Math.floor(word.length / 3)) + 1;
  let tied = false;
  for (const candidate of candidates) {
    if (candidate === word) continue;
    const d = distance(word, candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
      tied = false;
    } else if (d === bestDistance) tied = true;
  }
  return tied ? undefined : best;
}

function distance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 2) return 3;
  const rows: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) rows[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, rows[i - 2]![j - 2]! + 1);
      rows[i]![j] = d;
    }
  }
  return rows[a.length]![b.length]!;
}

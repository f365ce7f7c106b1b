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

/**
 * The restricted Damerau edit distance of `a` and `b`, or any number of at least 3 once it is surely 3 or more (all
 * closest needs): three rolling rows, and the rows stop as soon as none of a row's cells is below 3.
 */
function distance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 2) return 3;
  let before = new Array<number>(b.length + 1).fill(0);
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  let row = new Array<number>(b.length + 1).fill(0);
  for (let i = 1; i <= a.length; i++) {
    row[0] = i;
    let least = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, before[j - 2]! + 1);
      row[j] = d;
      if (d < least) least = d;
    }
    if (least >= 3) return 3;
    [before, previous, row] = [previous, row, before];
  }
  return previous[b.length]!;
}

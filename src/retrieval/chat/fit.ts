/**
 * The items, in the order given, each kept whole while it fits: `lengthOf(item)` characters each and
 * one newline between two kept, `room` characters in all; one that does not fit is passed over for
 * the next. Semantic chat's context (its chunks, nearest first) and the analytic schema card (its
 * relations, most relevant first) are held to svc.llm.context-chars by it.
 */
export function fitInOrder<T>(items: Iterable<T>, lengthOf: (item: T) => number, room: number): T[] {
  const kept: T[] = [];
  let used = 0;
  for (const item of items) {
    const length = lengthOf(item) + (kept.length ? 1 : 0);
    if (used + length > room) continue;
    used += length;
    kept.push(item);
  }
  return kept;
}

/**
 * The best `k` (score, slot) pairs seen, as a bounded min-heap in typed arrays: the weakest kept
 * score sits at the root, so a scan compares each score with `floor` and touches the heap only for
 * the few that beat it (no allocation per row, no sort of the whole tenant).
 */
export class TopK {
  private readonly scores: Float64Array;
  private readonly slots: Int32Array;
  private size = 0;

  constructor(readonly k: number) {
    this.scores = new Float64Array(Math.max(1, k));
    this.slots = new Int32Array(Math.max(1, k));
  }

  /** The score a candidate must beat to enter (−Infinity until the heap is full). */
  get floor(): number {
    return this.size < this.k ? Number.NEGATIVE_INFINITY : this.scores[0]!;
  }

  get length(): number {
    return this.size;
  }

  push(score: number, slot: number): void {
    if (this.k <= 0) return;
    if (this.size < this.k) {
      let i = this.size++;
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (this.scores[parent]! <= score) break;
        this.scores[i] = this.scores[parent]!;
        this.slots[i] = this.slots[parent]!;
        i = parent;
      }
      this.scores[i] = score;
      this.slots[i] = slot;
      return;
    }
    if (score <= this.scores[0]!) return;
    // Replace the root and sift down.
    let i = 0;
    const n = this.size;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && this.scores[right]! < this.scores[left]! ? right : left;
      if (this.scores[child]! >= score) break;
      this.scores[i] = this.scores[child]!;
      this.slots[i] = this.slots[child]!;
      i = child;
    }
    this.scores[i] = score;
    this.slots[i] = slot;
  }

  /** The kept pairs, best first. */
  sorted(): Array<{ slot: number; score: number }> {
    const out: Array<{ slot: number; score: number }> = [];
    for (let i = 0; i < this.size; i++) out.push({ slot: this.slots[i]!, score: this.scores[i]! });
    return out.sort((a, b) => b.score - a.score || a.slot - b.slot);
  }
}

/** Durations as configuration writes them: `500ms`, `5s`, `30s`, `15m`, `1h`, `2d`, or ISO-8601 `PT5S`. */

const SIMPLE = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;
const ISO = /^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/i;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Milliseconds for a duration text, or undefined when the text is not a duration. */
export function parseDuration(text: string): number | undefined {
  const value = text.trim();
  const simple = SIMPLE.exec(value);
  if (simple) return Math.round(Number(simple[1]) * UNIT_MS[simple[2]!]!);
  const iso = ISO.exec(value);
  if (iso && value.toUpperCase() !== 'P' && !value.toUpperCase().endsWith('T')) {
    const [, d, h, m, s] = iso;
    return Math.round(
      Number(d ?? 0) * UNIT_MS.d! + Number(h ?? 0) * UNIT_MS.h! + Number(m ?? 0) * UNIT_MS.m! + Number(s ?? 0) * 1000,
    );
  }
  return undefined;
}

/** The shortest readable form of a duration, for logs and docs. */
export function formatDuration(ms: number): string {
  for (const unit of ['d', 'h', 'm', 's'] as const) {
    const size = UNIT_MS[unit]!;
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

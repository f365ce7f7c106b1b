/**
 * Kubernetes resource quantities (`500m`, `1Gi`, `1e3`, a plain number) by value. The API server
 * stores a quantity and answers it in its canonical form (`1024Mi` comes back `1Gi`, `0.5` as `500m`,
 * the number 1 as the string `"1"`), so a CronJob read back differs in text from the one written
 * while saying the same: compared here by exact value instead (a rational number, no floating point).
 */

const QUANTITY = /^([+-]?)([0-9]*)(?:\.([0-9]*))?(?:(Ki|Mi|Gi|Ti|Pi|Ei)|[eE]([+-]?[0-9]+)|(n|u|m|k|M|G|T|P|E)?)$/;
const BINARY: Record<string, number> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 };
const DECIMAL: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };

/** A quantity's exact value as `numerator / denominator`, or undefined when `value` is no quantity. */
export function quantityValue(value: unknown): { numerator: bigint; denominator: bigint } | undefined {
  const text = typeof value === 'number' && Number.isFinite(value) ? String(value) : value;
  if (typeof text !== 'string') return undefined;
  const m = QUANTITY.exec(text.trim());
  if (!m) return undefined;
  const [, sign, whole = '', fraction = '', binary, exponent, decimal] = m;
  if (whole.length + fraction.length === 0) return undefined;
  let numerator = BigInt(`${whole}${fraction}` || '0') * (sign === '-' ? -1n : 1n);
  let denominator = 1n;
  const power10 = (exponent !== undefined ? Number(exponent) : decimal ? DECIMAL[decimal]! : 0) - fraction.length;
  if (power10 >= 0) numerator *= 10n ** BigInt(power10);
  else denominator = 10n ** BigInt(-power10);
  if (binary) numerator *= 2n ** BigInt(BINARY[binary]!);
  return { numerator, denominator };
}

/** The largest quantity the API server keeps (2^63 − 1): a larger one is stored as that. */
const MAX = 2n ** 63n - 1n;
const NANO = 1_000_000_000n;

/**
 * A quantity's value as the API server keeps it, in nano units: rounded up (away from zero) to the
 * nano, as the server rounds what is more precise, and capped at 2^63 − 1 in magnitude.
 */
function storedNanos(value: unknown): bigint | undefined {
  const q = quantityValue(value);
  if (!q) return undefined;
  const negative = q.numerator < 0n;
  const scaled = (negative ? -q.numerator : q.numerator) * NANO;
  let nanos = (scaled + q.denominator - 1n) / q.denominator;
  if (nanos > MAX * NANO) nanos = MAX * NANO;
  return negative ? -nanos : nanos;
}

/**
 * Whether two quantities (strings or numbers) have the same value as the API server stores them
 * (to the nano, at most 2^63 − 1); texts that are no quantity must be equal.
 */
export function sameQuantity(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  const x = storedNanos(a);
  const y = storedNanos(b);
  return x !== undefined && y !== undefined && x === y;
}

/**
 * What kube-apiserver does to a resource quantity it stores (k8s.io/apimachinery resource.Quantity):
 * parses it (a JSON number or a string; anything else of the wrong shape is refused) and answers it
 * in canonical form. The format is kept from the text: binary SI (`Ki`…`Ei`) unless the value is
 * below 1024 in magnitude or not a whole number (then decimal SI), decimal exponent (`1e3`), else
 * decimal SI; the largest suffix that leaves a whole mantissa is chosen (`1024Mi` → `1Gi`,
 * `0.5` → `500m`, `2000` → `2k`, `1500` stays), precision below the nano is rounded up, and a value
 * beyond 2^63 − 1 is stored as that.
 * Written apart from the operator's own comparison (operator/quantity.ts), which it checks.
 */

const SHAPE = /^([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|n|u|m|k|M|G|T|P|E|)$/;
const DECIMAL_SUFFIX: Record<number, string> = { [-9]: 'n', [-6]: 'u', [-3]: 'm', 0: '', 3: 'k', 6: 'M', 9: 'G', 12: 'T', 15: 'P', 18: 'E' };
const BINARY_SUFFIX = ['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'];

/** The server's message for a quantity it cannot read (a 400 BadRequest of the whole object). */
export const QUANTITY_REFUSED = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/** The canonical text of `value`, or undefined when the server would refuse it. */
export function canonicalQuantity(value: unknown): string | undefined {
  const text = typeof value === 'number' && Number.isFinite(value) ? String(value) : value;
  if (typeof text !== 'string') return undefined;
  const m = SHAPE.exec(text);
  if (!m) return undefined;
  const [, sign, whole = '', fraction = '', suffix = ''] = m;
  if (whole.length + fraction.length === 0) return undefined;
  let mantissa = BigInt(`${whole}${fraction}` || '0');
  let exponent = -fraction.length; // value = mantissa × 10^exponent (× 2^binary)
  let format: 'binary' | 'exponent' | 'decimal' = 'decimal';
  let binary = 0;
  if (/^[KMGTPE]i$/.test(suffix)) {
    format = 'binary';
    binary = 10 * BINARY_SUFFIX.indexOf(suffix);
  } else if (/^[eE][+-]?[0-9]+$/.test(suffix)) {
    format = 'exponent';
    exponent += Number(suffix.slice(1));
  } else if (suffix) {
    exponent += { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 }[suffix]!;
  }
  if (mantissa === 0n) return '0';
  const negative = sign === '-';
  // The server keeps at most 2^63 − 1 (in magnitude): a larger value is stored as that.
  const max = 2n ** 63n - 1n;
  const magnitude = exponent >= 0 ? mantissa * 2n ** BigInt(binary) * 10n ** BigInt(exponent) : undefined;
  if (magnitude !== undefined && magnitude > max) return `${negative ? '-' : ''}${max}`;
  if (format === 'binary') {
    // The whole value, when it is one and at least 1024 in magnitude; else decimal SI.
    let value = mantissa * 2n ** BigInt(binary);
    let whole: bigint | undefined;
    if (exponent >= 0) whole = value * 10n ** BigInt(exponent);
    else if (value % 10n ** BigInt(-exponent) === 0n) whole = value / 10n ** BigInt(-exponent);
    if (whole !== undefined && whole >= 1024n) {
      let step = 0;
      while (step < 6 && whole % 1024n === 0n) {
        whole /= 1024n;
        step++;
      }
      return `${negative ? '-' : ''}${whole}${BINARY_SUFFIX[step]}`;
    }
    format = 'decimal';
    value = mantissa * 2n ** BigInt(binary);
    mantissa = value;
  }
  // Precision below 10^-9 is rounded up (away from zero), to the nano.
  if (exponent < -9) {
    const scale = 10n ** BigInt(-9 - exponent);
    mantissa = (mantissa + scale - 1n) / scale;
    exponent = -9;
  }
  while (mantissa % 10n === 0n) {
    mantissa /= 10n;
    exponent++;
  }
  // The largest multiple of 3 at or below the exponent (decimal SI stops at E, 10^18).
  let shown = Math.floor(exponent / 3) * 3;
  if (format === 'decimal' && shown > 18) shown = 18;
  mantissa *= 10n ** BigInt(exponent - shown);
  const tail = format === 'exponent' ? (shown === 0 ? '' : `e${shown}`) : DECIMAL_SUFFIX[shown]!;
  return `${negative ? '-' : ''}${mantissa}${tail}`;
}

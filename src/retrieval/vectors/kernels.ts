/**
 * The two scan kernels of the vector index, as a WebAssembly module with 128-bit SIMD written out
 * here byte by byte (no toolchain, nothing downloaded, nothing native): a plain JavaScript loop
 * computes one multiply-add at a time and scans 100,000 × 512 float32 vectors in 60–100 ms on a
 * shared 2-core machine; these kernels do four (float) or eight (int8) per instruction.
 *
 * - `scan_f32(query, rows, n, rowBytes, out)`: out[i] = dot(query, row i) as float32, rows of
 *   float32 laid one after the other `rowBytes` apart (a multiple of 64: rows are padded with zeros).
 * - `scan_i8(query16, rows, n, rowBytes, out)`: out[i] = dot(query, row i) as int32, rows of int8
 *   codes `rowBytes` apart (a multiple of 16), the query given as int16 (two bytes a component),
 *   so each 16-byte row load is widened once and multiplied with `i32x4.dot_i16x8_s`.
 *
 * Both read and write the memory the caller passes as `env.memory`; addresses are byte offsets.
 */

const I32 = 0x7f;
const V128 = 0x7b;

/** Unsigned LEB128. */
function uleb(value: number): number[] {
  const out: number[] = [];
  let v = value >>> 0;
  do {
    let byte = v & 0x7f;
    v >>>= 7;
    if (v !== 0) byte |= 0x80;
    out.push(byte);
  } while (v !== 0);
  return out;
}

/** Signed LEB128 (for i32.const). */
function sleb(value: number): number[] {
  const out: number[] = [];
  let v = value | 0;
  for (;;) {
    const byte = v & 0x7f;
    v >>= 7;
    if ((v === 0 && (byte & 0x40) === 0) || (v === -1 && (byte & 0x40) !== 0)) {
      out.push(byte);
      return out;
    }
    out.push(byte | 0x80);
  }
}

const name = (text: string) => [...uleb(text.length), ...Buffer.from(text, 'utf8')];
const vec = (items: number[][]) => [...uleb(items.length), ...items.flat()];
const section = (id: number, body: number[]) => [id, ...uleb(body.length), ...body];

// Instructions used below.
const get = (i: number) => [0x20, ...uleb(i)];
const set = (i: number) => [0x21, ...uleb(i)];
const i32const = (v: number) => [0x41, ...sleb(v)];
const I32_ADD = [0x6a];
const I32_SUB = [0x6b];
const I32_LT_U = [0x49];
const I32_EQZ = [0x45];
const BLOCK = [0x02, 0x40];
const LOOP = [0x03, 0x40];
const END = [0x0b];
const brIf = (depth: number) => [0x0d, ...uleb(depth)];
const simd = (op: number, ...imm: number[]) => [0xfd, ...uleb(op), ...imm];
/** v128.load with alignment 2^4 and a constant offset. */
const load128 = (offset: number) => simd(0x00, 4, ...uleb(offset));
const V128_ZERO = simd(0x0c, ...new Array<number>(16).fill(0));
const F32X4_ADD = simd(0xe4);
const F32X4_MUL = simd(0xe6);
const F32X4_LANE = (lane: number) => simd(0x1f, lane);
const I32X4_ADD = simd(0xae);
const I32X4_LANE = (lane: number) => simd(0x1b, lane);
const I16X8_FROM_I8_LOW = simd(0x87);
const I16X8_FROM_I8_HIGH = simd(0x88);
const I32X4_DOT_I16X8 = simd(0xba);
const F32_ADD = [0x92];
const F32_STORE = [0x38, 2, 0];
const I32_STORE = [0x36, 2, 0];
const ADD_LANES_F32 = [...get(7), ...F32X4_LANE(0), ...get(7), ...F32X4_LANE(1), ...F32_ADD, ...get(7), ...F32X4_LANE(2), ...F32_ADD, ...get(7), ...F32X4_LANE(3), ...F32_ADD];

// Parameters: 0 query, 1 rows (the current row), 2 n, 3 rowBytes, 4 out. Locals: 5 end of row, 6 query cursor, 7–10 accumulators.
const LOCALS = vec([
  [2, I32],
  [4, V128],
]);

/** `acc = acc OP (a MUL b)` for float lanes, a and b loaded at the cursors plus `offset`. */
function fmaF32(acc: number, offset: number): number[] {
  return [...get(acc), ...get(6), ...load128(offset), ...get(1), ...load128(offset), ...F32X4_MUL, ...F32X4_ADD, ...set(acc)];
}

function rowLoop(inner: number[], step: { row: number; query: number }, finish: number[]): number[] {
  return [
    ...BLOCK,
    ...get(2),
    ...I32_EQZ,
    ...brIf(0),
    ...LOOP,
    // end = rows + rowBytes; query cursor = query; accumulators = 0
    ...get(1),
    ...get(3),
    ...I32_ADD,
    ...set(5),
    ...get(0),
    ...set(6),
    ...V128_ZERO,
    ...set(7),
    ...V128_ZERO,
    ...set(8),
    ...V128_ZERO,
    ...set(9),
    ...V128_ZERO,
    ...set(10),
    ...LOOP,
    ...inner,
    ...get(1),
    ...i32const(step.row),
    ...I32_ADD,
    ...set(1),
    ...get(6),
    ...i32const(step.query),
    ...I32_ADD,
    ...set(6),
    ...get(1),
    ...get(5),
    ...I32_LT_U,
    ...brIf(0),
    ...END,
    // out[i] = sum of the accumulators' lanes; out += 4; n -= 1
    ...get(4),
    ...finish,
    ...get(4),
    ...i32const(4),
    ...I32_ADD,
    ...set(4),
    ...get(2),
    ...i32const(1),
    ...I32_SUB,
    ...set(2),
    ...get(2),
    ...brIf(0),
    ...END,
    ...END,
  ];
}

const SCAN_F32 = rowLoop(
  [...fmaF32(7, 0), ...fmaF32(8, 16), ...fmaF32(9, 32), ...fmaF32(10, 48)],
  { row: 64, query: 64 },
  [...get(7), ...get(8), ...F32X4_ADD, ...get(9), ...F32X4_ADD, ...get(10), ...F32X4_ADD, ...set(7), ...ADD_LANES_F32, ...F32_STORE],
);

const SCAN_I8 = rowLoop(
  [
    // acc7 += dot(widen_low(row[0..16]), query16[0..8]); acc8 += dot(widen_high(row[0..16]), query16[8..16])
    ...get(7),
    ...get(1),
    ...load128(0),
    ...I16X8_FROM_I8_LOW,
    ...get(6),
    ...load128(0),
    ...I32X4_DOT_I16X8,
    ...I32X4_ADD,
    ...set(7),
    ...get(8),
    ...get(1),
    ...load128(0),
    ...I16X8_FROM_I8_HIGH,
    ...get(6),
    ...load128(16),
    ...I32X4_DOT_I16X8,
    ...I32X4_ADD,
    ...set(8),
  ],
  { row: 16, query: 32 },
  [
    ...get(7),
    ...get(8),
    ...I32X4_ADD,
    ...set(7),
    ...get(7),
    ...I32X4_LANE(0),
    ...get(7),
    ...I32X4_LANE(1),
    ...I32_ADD,
    ...get(7),
    ...I32X4_LANE(2),
    ...I32_ADD,
    ...get(7),
    ...I32X4_LANE(3),
    ...I32_ADD,
    ...I32_STORE,
  ],
);

function body(code: number[]): number[] {
  const content = [...LOCALS, ...code, ...END];
  return [...uleb(content.length), ...content];
}

const MODULE_BYTES = new Uint8Array([
  ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
  ...section(1, vec([[0x60, ...vec([[I32], [I32], [I32], [I32], [I32]]), ...vec([])]])),
  ...section(2, vec([[...name('env'), ...name('memory'), 0x02, 0x00, ...uleb(1)]])),
  ...section(3, vec([[0], [0]])),
  ...section(7, vec([[...name('scan_f32'), 0x00, 0], [...name('scan_i8'), 0x00, 1]])),
  ...section(10, vec([body(SCAN_F32), body(SCAN_I8)])),
]);

export interface Kernels {
  readonly memory: WebAssembly.Memory;
  scanF32(query: number, rows: number, n: number, rowBytes: number, out: number): void;
  scanI8(query16: number, rows: number, n: number, rowBytes: number, out: number): void;
}

let compiled: WebAssembly.Module | undefined;

/** The kernels bound to `memory` (one instance per memory; compiling happens once per process). */
export function kernels(memory: WebAssembly.Memory): Kernels {
  compiled ??= new WebAssembly.Module(MODULE_BYTES);
  const instance = new WebAssembly.Instance(compiled, { env: { memory } });
  const exports = instance.exports as { scan_f32: Kernels['scanF32']; scan_i8: Kernels['scanI8'] };
  return { memory, scanF32: exports.scan_f32, scanI8: exports.scan_i8 };
}

import { describe, expect, it } from '@jest/globals';
import { kernels } from './kernels.js';
import { seeded } from './testing.js';

describe('scan kernels', () => {
  const random = seeded(7);
  const memory = new WebAssembly.Memory({ initial: 4 });
  const k = kernels(memory);

  it('scan_f32 answers the dot product of the query with every row', () => {
    const dims = 48;
    const n = 37;
    const [query, rows, out] = [0, 1024, 16_384];
    const q = new Float32Array(memory.buffer, query, dims);
    const r = new Float32Array(memory.buffer, rows, n * dims);
    for (let j = 0; j < q.length; j++) q[j] = random() - 0.5;
    for (let j = 0; j < r.length; j++) r[j] = random() - 0.5;
    k.scanF32(query, rows, n, dims * 4, out);
    const got = new Float32Array(memory.buffer, out, n);
    for (let i = 0; i < n; i++) {
      let dot = 0;
      for (let j = 0; j < dims; j++) dot += q[j]! * r[i * dims + j]!;
      expect(got[i]).toBeCloseTo(dot, 5);
    }
  });

  it('scan_i8 answers the exact integer dot product of int16 query and int8 rows', () => {
    const dims = 32;
    const n = 21;
    const [query16, rows, out] = [0, 1024, 16_384];
    const q = new Int16Array(memory.buffer, query16, dims);
    const r = new Int8Array(memory.buffer, rows, n * dims);
    for (let j = 0; j < q.length; j++) q[j] = Math.round((random() - 0.5) * 16_382);
    for (let j = 0; j < r.length; j++) r[j] = Math.round((random() - 0.5) * 254);
    r[0] = -127;
    q[0] = -8191;
    k.scanI8(query16, rows, n, dims, out);
    const got = new Int32Array(memory.buffer, out, n);
    for (let i = 0; i < n; i++) {
      let dot = 0;
      for (let j = 0; j < dims; j++) dot += q[j]! * r[i * dims + j]!;
      expect(got[i]).toBe(dot);
    }
  });

  it('scans no row when n is 0', () => {
    const out = new Float32Array(memory.buffer, 16_384, 1);
    out[0] = 42;
    k.scanF32(0, 1024, 0, 64, 16_384);
    k.scanI8(0, 1024, 0, 16, 16_384);
    expect(out[0]).toBe(42);
  });
});

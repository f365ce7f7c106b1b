/** Vectors are stored as float32 little-endian `bytea`: 2 KiB for 512 dimensions, read back without parsing text. */
export function encodeVector(vector: Float32Array): Buffer {
  const out = Buffer.allocUnsafe(vector.length * 4);
  for (let i = 0; i < vector.length; i++) out.writeFloatLE(vector[i]!, i * 4);
  return out;
}

export function decodeVector(bytes: Buffer): Float32Array {
  const out = new Float32Array(bytes.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = bytes.readFloatLE(i * 4);
  return out;
}

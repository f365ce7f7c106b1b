/**
 * The start of a body: at most maxBytes of it, and whether there was more. Reading stops there (leaving
 * the loop cancels the body: the rest is never read).
 */
export async function readStart(body: AsyncIterable<unknown> | Iterable<unknown>, maxBytes: number): Promise<{ bytes: Buffer; more: boolean }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = chunk as Buffer;
    chunks.push(buf);
    size += buf.length;
    if (size >= maxBytes) break;
  }
  return { bytes: Buffer.concat(chunks).subarray(0, maxBytes), more: size > maxBytes };
}

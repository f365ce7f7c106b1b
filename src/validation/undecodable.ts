/**
 * Where bytes stop being text in `encoding`: the offset of the first byte of the shortest prefix a
 * strict decoder refuses (a sequence cut at the very end is not refused: in a stream, its rest may
 * follow), or undefined when no prefix is refused. A binary search over prefixes, so a refused body
 * costs about log2(length) decodes, and nothing while bytes decode.
 */
export function firstUndecodable(encoding: string, bytes: Uint8Array): number | undefined {
  const fails = (length: number) => {
    try {
      new TextDecoder(encoding, { fatal: true }).decode(bytes.subarray(0, length), { stream: true });
      return false;
    } catch {
      return true;
    }
  };
  if (!fails(bytes.length)) return undefined;
  let ok = 0;
  let bad = bytes.length;
  while (bad - ok > 1) {
    const mid = (ok + bad) >> 1;
    if (fails(mid)) bad = mid;
    else ok = mid;
  }
  return bad - 1;
}

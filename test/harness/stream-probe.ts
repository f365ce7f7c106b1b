/**
 * The first chunk of an event stream's body (then the request is aborted): what the hub answers a
 * stream request before anything else, without holding the stream open (fetch's text() would wait).
 */
export async function firstChunk(url: string, headers: Record<string, string>): Promise<string> {
  const abort = new AbortController();
  try {
    const res = await fetch(url, { headers, signal: abort.signal });
    const reader = res.body!.getReader();
    const { value } = await reader.read();
    return new TextDecoder().decode(value);
  } finally {
    abort.abort();
  }
}

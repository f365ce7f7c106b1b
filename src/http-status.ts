/**
 * An HTTP answer that may pass when the request is made again: a request timeout (408), a rate
 * limit (429), and a server error (a server failing for a moment, a proxy in front of one that is
 * down or restarting: 500, 502, 503, 504, …), except 501 and 505, which say the request itself is not
 * served. Any other answer (400, 401, 403, 404, …) is the same however often it is asked.
 */
export function mayPass(status: number): boolean {
  return status === 408 || status === 429 || (status >= 500 && status !== 501 && status !== 505);
}

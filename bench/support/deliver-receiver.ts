/**
 * The webhook receiver of bench/deliver in a process of its own: its HTTP work never runs on the
 * event loop of the hub it measures (nor on the ceiling's client loop). It answers every POST 200,
 * and records when each request arrived (epoch milliseconds, sub-millisecond, this process's clock)
 * under its X-Svc-Event-Id (the hub) or X-Bench-Id (the ceiling), checking every request's
 * X-Svc-Signature (the ceiling sends the hub's headers too) against the body with the integration's
 * secret.
 *
 * Started with `fork()` (env BENCH_RECEIVER_SECRET); messages (IPC):
 *   child → {kind: 'ready', url}
 *   parent → {kind: 'clock'}          child → {kind: 'clock', now}
 *   parent → {kind: 'flush'}          child → the arrivals not yet reported, then {kind: 'flushed'}
 *   child → {kind: 'arrivals', items: [kind, id, at, signature][]} every few milliseconds while requests come
 * where kind is 'e' (event), 'c' (ceiling) or 'u' (a request with neither id header: id '') and
 * signature 1 (verified), 0 (absent) or -1 (wrong).
 */
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export type Arrival = ['e' | 'c' | 'u', string, number, 1 | 0 | -1];
export type ReceiverRequest = { kind: 'clock' } | { kind: 'flush' };
export type ReceiverMessage = { kind: 'ready'; url: string } | { kind: 'clock'; now: number } | { kind: 'arrivals'; items: Arrival[] } | { kind: 'flushed' };

const secret = process.env.BENCH_RECEIVER_SECRET ?? '';
const epochNow = () => performance.timeOrigin + performance.now();
const send = (message: ReceiverMessage) => process.send?.(message);

let pending: Arrival[] = [];
let timer: NodeJS.Timeout | undefined;
const flush = () => {
  if (timer) clearTimeout(timer);
  timer = undefined;
  if (pending.length === 0) return;
  const items = pending;
  pending = [];
  send({ kind: 'arrivals', items });
};

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const at = epochNow();
    const eventId = req.headers['x-svc-event-id'];
    const benchId = req.headers['x-bench-id'];
    // Every signed request is checked, the hub's and the ceiling's alike: the same work for the same request.
    const signature = req.headers['x-svc-signature'];
    const state = typeof signature !== 'string' ? 0 : signature === `sha256=${createHmac('sha256', secret).update(Buffer.concat(chunks)).digest('hex')}` ? 1 : -1;
    if (typeof eventId === 'string') pending.push(['e', eventId, at, state]);
    else if (typeof benchId === 'string') pending.push(['c', benchId, at, state]);
    else pending.push(['u', '', at, state]);
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('ok');
    if (!timer) timer = setTimeout(flush, 5);
  });
});
server.keepAliveTimeout = 60_000;

process.on('message', (message: ReceiverRequest) => {
  if (message.kind === 'clock') send({ kind: 'clock', now: epochNow() });
  else if (message.kind === 'flush') {
    // IPC keeps the order: every arrival recorded so far reaches the parent before this answer.
    flush();
    send({ kind: 'flushed' });
  }
});
process.on('disconnect', () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
});
server.listen(0, '127.0.0.1', () => {
  send({ kind: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
});

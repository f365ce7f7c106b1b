import { setTimeout as sleep } from 'node:timers/promises';
import { mayPass } from '../http-status.js';
import { answered, HttpError } from './errors.js';
import { type Hub, seconds } from './http.js';

/**
 * `svc events tail` (and the TUI's Events view): reads the hub's Server-Sent Events stream
 * (/api/platform/events/stream) and passes each event on as it arrives. When the hub ends the stream
 * (a client that fell behind, a restart) it reconnects with Last-Event-ID after the `retry` delay, so
 * nothing is lost; a stream cut off midway (the connection dropped, the hub killed), a reconnection
 * that cannot be made at all, or one the hub answers with an error that retrying may change (408, 429,
 * a 5xx other than 501 and 505: a restart, a database briefly away) is waited out (`reconnectDelay`)
 * and tried again, still from Last-Event-ID, for as long as it takes, as an EventSource client does.
 * It stops when `signal` aborts (Ctrl-C), and throws on an answer that retrying will not change (a
 * refused credential: 401, 403; a refused topic or Last-Event-ID: 400; 404).
 */

export interface StreamEvent {
  id: string;
  topic: string;
  /** The event's payload as the hub sends it: a JSON-encoded string. */
  payload: string;
  capturedAt: string;
}

/** Waits `ms` milliseconds, or rejects when `signal` aborts. */
export type Wait = (ms: number, signal: AbortSignal) => Promise<unknown>;

export interface TailOptions {
  topics: string[];
  since?: string;
  signal: AbortSignal;
  onEvent: (event: StreamEvent) => void;
  /** One line: the stream ended or failed and when it is tried again, or it is back. */
  onNotice: (text: string) => void;
  /** Each time the stream is open: the first time and after every reconnection. */
  onConnected?: () => void;
  /** The first connection's failure is retried like a lost stream's (the TUI); without it, it is thrown (`svc events tail` exits 1). */
  retryFirst?: boolean;
  /** How the waits between connections are made (tests pass one that does not sleep). */
  wait?: Wait;
  /** The shortest silence taken for a dead connection (MIN_SILENCE_MS; tests pass less). */
  minSilenceMs?: number;
  /**
   * The longest wait for the head of the stream's answer (OPEN_TIMEOUT_MS; the TUI's is tied to
   * --every): a hub that takes the connection and never answers is a failed connection then.
   */
  openTimeoutMs?: number;
}

/** `svc events tail`'s wait for the stream's head: a hub that accepts and never answers is said after this, not two minutes. */
export const OPEN_TIMEOUT_MS = 30_000;

const STREAM = '/api/platform/events/stream';

/** The longest wait between two connections: a longer Retry-After is cut to it. */
export const MAX_WAIT_MS = 120_000;
/** Without a Retry-After: the stream's retry delay (3 s, or the hub's `retry:`), at least 1 s, doubled per failure in a row, up to this. */
const MAX_BACKOFF_MS = 30_000;

/**
 * How long to wait after `err`, the `failures`-th failed connection in a row (1 for the first), and
 * why; undefined when the failure is final (an HTTP error that `mayPass` says will not pass: a refused
 * credential, a refused topic).
 */
export function reconnectDelay(err: unknown, failures: number, retryMs: number): { ms: number; why: string } | undefined {
  const backoff = Math.min(MAX_BACKOFF_MS, Math.max(1_000, retryMs) * 2 ** Math.max(0, failures - 1));
  if (err instanceof HttpError) {
    if (!mayPass(err.status)) return undefined;
    const why = `${err.message} (${answered(err)})`;
    return { ms: err.retryAfterSeconds === undefined ? backoff : Math.min(MAX_WAIT_MS, Math.max(1_000, err.retryAfterSeconds * 1_000)), why };
  }
  return { ms: backoff, why: (err as Error)?.message ?? String(err) };
}

/**
 * A connection cut without a word (a network gone, a laptop asleep, a NAT that forgot the flow)
 * sends nothing, not even the hub's heartbeats (`: ping`, every `svc.events.stream.heartbeat`): read
 * as it was, the stream waited for the kernel's TCP keepalive, about 12 minutes on Linux (60 s, then 9 probes 75 s apart), before it
 * was found lost. The hub states the period in its opening comment (`: connected; heartbeat 15000`,
 * in ms); from a hub that does not, it is learnt once two heartbeats have shown it. From then, a
 * silence of SILENT_HEARTBEATS periods (at least MIN_SILENCE_MS) ends the connection as lost, and it
 * is resumed from Last-Event-ID. Before that nothing is assumed, as the period is the hub's setting.
 */
const SILENT_HEARTBEATS = 3;
const MIN_SILENCE_MS = 30_000;

const sleeping: Wait = (ms, signal) => sleep(ms, undefined, { signal });

export async function tailEvents(hub: Hub, options: TailOptions): Promise<void> {
  const wait = options.wait ?? sleeping;
  let lastId = options.since;
  let retryMs = 3_000;
  let connected = false;
  /**
   * What the last notice said since the stream was last live, its waits left out: a reconnection
   * that fails the same way again is not said again. A hub whose database is away answers each
   * reconnection with a stream that ends at once (every 3 s, for as long as the outage lasts): that
   * is one line, then one more when the stream is back, not two lines per attempt.
   */
  let said: string | undefined;
  const notice = (key: string, text: string) => {
    if (key === said) return;
    said = key;
    options.onNotice(text);
  };
  /** Failed connections in a row. */
  let failures = 0;
  /** The hub's heartbeat period as seen: the longest gap between two heartbeats of one connection; unknown until two came. */
  let heartbeatMs: number | undefined;
  const after = () => (lastId ? ` after event ${lastId}` : '');
  while (!options.signal.aborted) {
    /** Set by a failure; a stream the hub ended is resumed after its `retry` delay (as it stands after the stream). */
    let delay: number | undefined;
    try {
      // a status of 400 or more is thrown by open, as an HttpError with the hint of the other commands
      const res = await hub.open(
        STREAM,
        { topic: options.topics },
        lastId ? { 'last-event-id': lastId, accept: 'text/event-stream' } : { accept: 'text/event-stream' },
        options.openTimeoutMs ?? OPEN_TIMEOUT_MS,
      );
      if (res.statusCode !== 200) {
        const text = (await res.body.text()).trim();
        throw new HttpError(res.statusCode, text || `HTTP ${res.statusCode}`, text);
      }
      /** Not the first stream opened: when live, it is a reconnection. */
      const again = connected;
      connected = true;
      failures = 0;
      /**
       * The stream is back once it shows it is live (its opening comment, a heartbeat, an event), not
       * at its head: the hub's answer while its database is away is a 200 that ends at once.
       */
      let live = false;
      const alive = () => {
        if (live) return;
        live = true;
        if (said !== undefined) options.onNotice(`${again ? 'reconnected' : 'connected'}${after()}`);
        said = undefined;
        options.onConnected?.();
      };
      let lastPing: number | undefined;
      /** The hub stated its period on this connection: heartbeats are not used to infer it. */
      let stated = false;
      let silence: NodeJS.Timeout | undefined;
      /** The hub's last comment other than its opening and heartbeats: why it ended the stream. */
      let reason: string | undefined;
      const watch = () => {
        clearTimeout(silence);
        if (heartbeatMs === undefined) return;
        const period = heartbeatMs;
        const limit = Math.max(options.minSilenceMs ?? MIN_SILENCE_MS, SILENT_HEARTBEATS * period);
        silence = setTimeout(() => {
          // A period misjudged (two heartbeats held up and delivered together) cannot end every connection.
          heartbeatMs = period * 2;
          res.body.destroy(new Error(`nothing from the hub for ${seconds(limit)}, not even its heartbeat (every ${seconds(period)})`));
        }, limit);
      };
      const onComment = (text: string) => {
        const announced = /^ ?connected; heartbeat (\d{1,9})$/.exec(text);
        if (announced && Number(announced[1]) > 0) {
          heartbeatMs = Number(announced[1]);
          stated = true;
          alive();
          return;
        }
        if (text.trim() !== 'ping') {
          // Printed: without control or format characters, and bounded.
          reason = text.replace(/[\p{Cc}\p{Cf}]/gu, '').trim().slice(0, 200) || undefined;
          return;
        }
        alive();
        if (stated) return;
        const now = Date.now();
        if (lastPing !== undefined) heartbeatMs = Math.max(heartbeatMs ?? 0, now - lastPing);
        lastPing = now;
      };
      watch();
      try {
        await readFrames(
          res.body,
          (frame) => {
            if (frame.retry !== undefined) retryMs = frame.retry;
            // Said with the event before this one (the last printed).
            if (frame.data !== undefined) alive();
            if (frame.id !== undefined) lastId = frame.id;
            if (frame.data === undefined) return;
            const envelope = JSON.parse(frame.data) as Omit<StreamEvent, 'id'>;
            options.onEvent({ id: frame.id ?? '', topic: envelope.topic, payload: envelope.payload, capturedAt: envelope.capturedAt });
          },
          onComment,
          watch,
        );
      } finally {
        clearTimeout(silence);
      }
      if (options.signal.aborted) return;
      // With the hub's reason (`database unavailable; reconnect with Last-Event-ID`, `client too slow; …`).
      notice(`closed ${reason ?? ''}`, `the hub closed the stream${reason ? ` (${reason})` : ''}; reconnecting in ${retryMs} ms`);
    } catch (err) {
      if (options.signal.aborted) return;
      // The first connection's failure is the command's; later ones are a lost stream to resume.
      if (!connected && !options.retryFirst) throw err;
      failures++;
      const next = reconnectDelay(err, failures, retryMs);
      if (!next) throw err;
      delay = next.ms;
      const what = `${connected ? 'stream lost' : 'cannot open the stream'}: ${next.why}`;
      notice(what, `${what}; waiting ${seconds(delay)}, then reconnecting${after()}`);
    }
    try {
      await wait(delay ?? retryMs, options.signal);
    } catch {
      return;
    }
  }
}

interface Frame {
  id?: string;
  data?: string;
  retry?: number;
}

/** The SSE wire format: fields up to a blank line; `:` lines are comments (heartbeats). */
async function readFrames(body: AsyncIterable<Buffer | string>, onFrame: (frame: Frame) => void, onComment: (text: string) => void, onChunk: () => void): Promise<void> {
  const decoder = new TextDecoder();
  let buffer = '';
  let frame: Frame = {};
  for await (const chunk of body) {
    buffer += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    let end = buffer.search(/\r?\n/);
    while (end >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(buffer[end] === '\r' ? end + 2 : end + 1);
      if (line === '') {
        onFrame(frame);
        frame = {};
      } else if (line.startsWith(':')) onComment(line.slice(1));
      else {
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (name === 'id') frame.id = value;
        else if (name === 'data') frame.data = frame.data === undefined ? value : `${frame.data}\n${value}`;
        else if (name === 'retry' && /^\d+$/.test(value)) frame.retry = Number(value);
      }
      end = buffer.search(/\r?\n/);
    }
    onChunk();
  }
}

import { setTimeout as sleep } from 'node:timers/promises';
import { HttpError } from './errors.js';
import type { Hub } from './http.js';

/**
 * `svc events tail`: reads the hub's Server-Sent Events stream (/api/platform/events/stream) and
 * prints each event as it arrives. When the hub ends the stream (a client that fell behind, a
 * restart) it reconnects with Last-Event-ID after the `retry` delay, so nothing is lost; it stops
 * when `signal` aborts (Ctrl-C).
 */

export interface StreamEvent {
  id: string;
  topic: string;
  /** The event's payload as the hub sends it: a JSON-encoded string. */
  payload: string;
  capturedAt: string;
}

interface TailOptions {
  topics: string[];
  since?: string;
  signal: AbortSignal;
  onEvent: (event: StreamEvent) => void;
  onNotice: (text: string) => void;
}

const STREAM = '/api/platform/events/stream';

export async function tailEvents(hub: Hub, options: TailOptions): Promise<void> {
  let lastId = options.since;
  let retryMs = 3_000;
  let connected = false;
  while (!options.signal.aborted) {
    try {
      const res = await hub.open(STREAM, { topic: options.topics }, lastId ? { 'last-event-id': lastId, accept: 'text/event-stream' } : { accept: 'text/event-stream' });
      if (res.statusCode !== 200) {
        const text = (await res.body.text()).trim();
        let message = text || `HTTP ${res.statusCode}`;
        try {
          message = (JSON.parse(text) as { error?: string }).error ?? message;
        } catch {
          // plain text (the /api/platform refusals)
        }
        throw new HttpError(res.statusCode, message, text);
      }
      if (connected) options.onNotice(`reconnected${lastId ? ` after event ${lastId}` : ''}`);
      connected = true;
      await readFrames(res.body, (frame) => {
        if (frame.retry !== undefined) retryMs = frame.retry;
        if (frame.id !== undefined) lastId = frame.id;
        if (frame.data === undefined) return;
        const envelope = JSON.parse(frame.data) as Omit<StreamEvent, 'id'>;
        options.onEvent({ id: frame.id ?? '', topic: envelope.topic, payload: envelope.payload, capturedAt: envelope.capturedAt });
      });
      if (options.signal.aborted) return;
      options.onNotice(`the hub closed the stream; reconnecting in ${retryMs} ms`);
    } catch (err) {
      if (options.signal.aborted) return;
      // The first connection's failure is the command's; later ones are a lost stream to resume.
      if (!connected || err instanceof HttpError) throw err;
      options.onNotice(`stream lost (${(err as Error).message}); reconnecting in ${retryMs} ms`);
    }
    try {
      await sleep(retryMs, undefined, { signal: options.signal });
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
async function readFrames(body: AsyncIterable<Buffer | string>, onFrame: (frame: Frame) => void): Promise<void> {
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
      } else if (!line.startsWith(':')) {
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (name === 'id') frame.id = value;
        else if (name === 'data') frame.data = frame.data === undefined ? value : `${frame.data}\n${value}`;
        else if (name === 'retry' && /^\d+$/.test(value)) frame.retry = Number(value);
      }
      end = buffer.search(/\r?\n/);
    }
  }
}

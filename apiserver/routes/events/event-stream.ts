import { PassThrough } from 'node:stream';
import { hubUserId } from '../../../src/admin/scope-access.js';
import { callerTenant } from '../../../src/auth/principal.js';
import { ForbiddenWithReason, RateLimited, ValidationError } from '../../../src/errors.js';
import type { OutboxEvent } from '../../../src/events/outbox.js';
import { SERVER_STOPPING } from '../../../src/events/stream.js';
import { eventHeld, type HeldObjects } from '../../../src/events/stream-scopes.js';
import { route, type RouteDecl } from '../../route.js';
import { errorBody, refusals } from '../schemas.js';

/**
 * One SSE frame: `id` is the outbox id (send it back as Last-Event-ID), `data` the spec's envelope.
 * Made once per event object and shared: the poller hands the same event to every stream of its
 * tenant, and the bytes waiting for each stream that has not read them yet are then one copy between
 * them, not one per stream (20 streams that read nothing held 20 copies of a burst).
 */
const frames = new WeakMap<OutboxEvent, Buffer>();
export function frame(event: OutboxEvent): Buffer {
  let bytes = frames.get(event);
  if (!bytes) {
    const envelope = { topic: event.type, payload: JSON.stringify(event.payload), capturedAt: new Date(event.createdAt).toISOString() };
    bytes = Buffer.from(`id: ${event.id}\ndata: ${JSON.stringify(envelope)}\n\n`);
    frames.set(event, bytes);
  }
  return bytes;
}

/** Resolves when `out` has taken what waited (or ended, or the client left). */
function roomIn(out: PassThrough, gone: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (!out.writableNeedDrain || out.writableEnded || gone.aborted) return resolve();
    const done = () => {
      out.off('drain', done);
      out.off('close', done);
      gone.removeEventListener('abort', done);
      resolve();
    };
    out.on('drain', done);
    out.on('close', done);
    gone.addEventListener('abort', done);
  });
}

/** Heartbeat periods a resuming client may take nothing before it is ended as too slow. */
const STALL_HEARTBEATS = 4;

/**
 * How long a client whose stream the stopping hub ended may take to read what was left for it
 * before its connection is reset (at most a heartbeat period): the HTTP server's close waits for
 * every connection, so one that reads nothing would otherwise hold the stop for the shutdown grace.
 */
const STOP_CUT_MS = 1000;

/**
 * The whole answer while the database cannot be reached: the same for every caller (it says nothing
 * of the tenant, not even whether it exists), and an EventSource reconnects after `retry`.
 */
export const DATABASE_UNREACHABLE = 'retry: 3000\n: database unavailable; reconnect with Last-Event-ID\n\n';

export const eventStreamRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/platform/events/stream', operationId: 'streamEvents', summary: 'Live event stream (Server-Sent Events) of the caller\'s tenant', tags: ['Events'],
    auth: ['svc_integrator'],
    audit: 'egress',
    description:
      'Each `data:` line is `{topic, payload, capturedAt}` with `payload` a JSON-encoded string. Each frame has an `id`; reconnect with `Last-Event-ID` to resume without loss. ' +
      'The stream opens with `retry: 3000` and the comment `: connected; heartbeat <ms>`, the period of the heartbeats, comment lines `: ping`; one opened without `Last-Event-ID` then states where it starts, `id: <outbox id>` without data (no message: it sets the client\'s last event id, so a client cut before its first event resumes from there). A resume catches up at the client\'s pace from any distance (one that takes nothing for four heartbeat periods is disconnected as too slow); a live client that still has more than `svc.events.stream.max-buffer` bytes of earlier polls unread when a poll starts is disconnected and should reconnect with `Last-Event-ID`. The stream ends when the token that opened it expires (`: the token expired; reconnect with Last-Event-ID`): reconnect with a fresh token. It also ends, at a heartbeat, once its tenant is deactivated or its user locked or deactivated (`: access ended: tenant inactive; …`, as a new call would be refused; within the 10 s the hub caches that state). ' +
      'A scope-bound caller\'s stream leaves out the `connector.run.*`, `data.row.changed` and `decision.dormant.*` events whose payload names no connector, ext table or workflow every scope of which they hold (whether the caller is bound, and what they hold, is read again at each heartbeat; docs/operations.md, "Live event stream").',
    query: {
      type: 'object',
      properties: {
        topic: {
          description: 'Repeatable (at most 50); `*` is a glob against the full event type (`connector.run.*`, `*.created`), at most 200 characters. None: every event.',
          anyOf: [{ type: 'string', maxLength: 200 }, { type: 'array', maxItems: 50, items: { type: 'string', maxLength: 200 } }],
        },
        lastEventId: { type: 'string', description: 'Same as the Last-Event-ID header, for clients that cannot set headers.' },
      },
    },
    responses: {
      200: {
        description:
          'text/event-stream. While the database cannot be reached (when the caller\'s tenant and user state must be read, or the outbox for a resume) the answer is still a 200, the stream `retry: 3000` and `: database unavailable; reconnect with Last-Event-ID`, and it ends at once, so an EventSource reconnects (a 503 would end it for good); a refused token or caller keeps its 401 or 403.',
        contentType: 'text/event-stream', schema: { type: 'string' } },
      400: { description: 'A Last-Event-ID (or lastEventId) that is not an event id', schema: errorBody },
      429: { description: 'The tenant has `svc.events.stream.max-per-tenant` streams open in this process already (`Retry-After: 5`)', schema: errorBody },
      ...refusals(true),
    },
    // A database outage, in authentication or in the handler (a resume reads the outbox): a 503 would
    // end an EventSource for good, so the answer is a stream that ends at once and the client retries.
    whileDatabaseUnreachable: (ctx) => {
      ctx.status = 200;
      ctx.set('Content-Type', 'text/event-stream; charset=utf-8');
      ctx.set('Cache-Control', 'no-cache, no-transform');
      ctx.body = DATABASE_UNREACHABLE;
    },
    handler: async ({ principal, services, query, ctx }) => {
      const tenantId = callerTenant(principal);
      const topics = ([] as string[]).concat(query.topic ?? []).filter((t) => t.trim() !== '');
      // The header first (what an EventSource sends), else the query parameter: a refusal names the one given.
      const header = ctx.get('Last-Event-ID');
      const named = header ? 'Last-Event-ID' : 'lastEventId';
      const given = header || query.lastEventId || '';
      // Leading zeros are the same number, however many (a value of zeros alone is 0).
      const resume = given.replace(/^0+(?=\d)/, '');
      // An event id is a positive bigint the hub hands out as a safe integer: anything else is a 400.
      if (resume && (!/^\d{1,16}$/.test(resume) || !Number.isSafeInteger(Number(resume)))) {
        throw new ValidationError(`${named} must be an event id (a whole number from 0 to 9007199254740991)`, named);
      }
      // A scope-bound caller's stream leaves out the events of scoped families whose payload names no
      // object of their scopes (src/events/stream-scopes.ts); an unbound caller's judges nothing.
      // A caller naming no hub user is unbound without asking the database, and stays so.
      const hubUser = hubUserId(principal) !== undefined;
      const readHeld = async () => (hubUser ? services.stream.held(tenantId, principal) : undefined);
      let held: HeldObjects | undefined = await readHeld();
      const perTenant = services.config.int('svc.events.stream.max-per-tenant');
      // The place is held until the response's connection is done, not only while its subscription
      // lasts: a stream the hub ended still holds a socket, and what is left for its client, until
      // the client has read it or the connection is reset (a heartbeat period). Counted by
      // subscriptions, a tenant whose streams were ended could open as many again beside them.
      const release = services.stream.takePlace(tenantId, perTenant);
      if (!release) {
        throw new RateLimited(5, `too many open event streams for this tenant: at most ${perTenant} at once in one hub process (svc.events.stream.max-per-tenant); close one, then reconnect`);
      }
      // 'close' of the response: once it is finished (all of it handed to the connection) or the
      // connection went, whatever answered it (the stream, an error, the database-outage answer).
      ctx.res.once('close', release);
      if (ctx.req.socket.destroyed || ctx.res.destroyed) release();
      const maxBuffer = services.config.int('svc.events.stream.max-buffer');
      // write() says false once max-buffer bytes wait for the client ('drain' when they went).
      const out = new PassThrough({ writableHighWaterMark: maxBuffer });
      // First, before any frame: the subscription may end before the response starts, and the
      // client still gets what was written, then the reason, and reconnects from there.
      // The heartbeat period is stated (in ms), so a client can tell a dead connection from the start.
      const heartbeatMs = services.config.duration('svc.events.stream.heartbeat');
      out.write(`retry: 3000\n: connected; heartbeat ${heartbeatMs}\n\n`);
      let heartbeat: NodeJS.Timeout | undefined;
      let expiry: NodeJS.Timeout | undefined;
      const finish = (note?: string, cutMs = heartbeatMs) => {
        if (heartbeat) clearInterval(heartbeat);
        if (expiry) clearTimeout(expiry);
        if (!out.writableEnded) out.end(note ? `: ${note}\n\n` : undefined);
        // Ended by the hub (a live client too slow, the outbox unreadable): what is left goes to a
        // client that reads, and the connection closes after it (Connection: close). One that does
        // not read would keep it queued here and in the kernel until the connection timed out, so
        // it gets one heartbeat period (STOP_CUT_MS when the hub stops), then the connection is reset.
        if (note && !gone.signal.aborted) {
          const socket = ctx.req.socket;
          const cut = setTimeout(() => {
            if (!socket.destroyed) socket.resetAndDestroy();
          }, cutMs);
          cut.unref();
          socket.once('close', () => clearTimeout(cut));
        }
      };
      // Listened to before subscribing: a client gone while the subscription catches up (the
      // statements after Last-Event-ID) must release it too, or it would hold a place for ever.
      // The response's 'close' is the one that fires when the connection goes before anything was
      // written (the request's, on a GET, only once the response is under way).
      // The connection may also have gone before this handler ran (while authentication and the
      // audit awaited): its 'close' has fired already, so the socket is asked too.
      const gone = new AbortController();
      const leave = () => {
        gone.abort();
        finish();
      };
      ctx.req.on('close', leave);
      ctx.res.on('close', leave);
      if (ctx.req.socket.destroyed || ctx.res.destroyed) leave();
      if (gone.signal.aborted) return undefined;
      const send = (event: OutboxEvent) => {
        // Ended (the client left): writing on would be an uncaught 'write after end'.
        if (out.writableEnded) return false;
        return out.write(frame(event));
      };
      const subscription = await services.stream.subscribe({
        tenantId,
        topics,
        afterId: resume ? Number(resume) : undefined,
        signal: gone.signal,
        // A scope-bound caller's filter (read again at each heartbeat, when a hub user's stream asks
        // whether they are bound now); an event left out is taken.
        deliver: hubUser ? (event) => (held === undefined || eventHeld(held, event) ? send(event) : true) : send,
        // A resume catches up at the client's pace, however far behind it starts.
        room: () => roomIn(out, gone.signal),
        // …but one that takes nothing for STALL_HEARTBEATS heartbeat periods is ended as too slow, as
        // a live one is: it would otherwise keep its place and its queue until the connection died.
        stallMs: STALL_HEARTBEATS * heartbeatMs,
        // Live: judged once per poll on what earlier polls left unread, so one poll's burst larger
        // than max-buffer does not end a client that reads promptly.
        waiting: () => out.writableLength,
        maxWaiting: maxBuffer,
        // A fresh stream states where it starts, as an event id without data (which sets the
        // client's Last-Event-ID and is no message): one cut before its first event resumes from
        // there, instead of at the newest event then, which lost what was written meanwhile. The
        // id is the outbox's (ids are shared by all tenants: docs/security.md).
        onStart: (afterId) => {
          if (!out.writableEnded) out.write(`id: ${afterId}\n\n`);
        },
        onEnd: (reason) => finish(`${reason}; reconnect with Last-Event-ID`, reason === SERVER_STOPPING ? Math.min(STOP_CUT_MS, heartbeatMs) : heartbeatMs),
      });
      if (gone.signal.aborted) {
        subscription.close();
        return undefined;
      }
      if (!out.writableEnded) {
        // Each heartbeat also asks whether the caller may still read: a tenant deactivated or an
        // account locked since the stream opened ends it with the reason a new call would get (read
        // through the directory's cache). A failure to ask (the database away) keeps the stream.
        let checking = false;
        let rereading = false;
        heartbeat = setInterval(() => {
          if (out.writableEnded) return;
          out.write(': ping\n\n');
          // A hub user's binding and a scope-bound caller's objects are read again (the user may have
          // been bound or unbound, a connector, table or workflow may have changed scopes): an
          // unbound caller's costs one statement, their grants. A failure to read them (the database
          // away) keeps those read before.
          if (hubUser && !rereading) {
            rereading = true;
            readHeld()
              .then((now) => {
                held = now;
              })
              .catch(() => undefined)
              .finally(() => {
                rereading = false;
              });
          }
          if (checking || !principal) return;
          checking = true;
          services.directory
            .recheck(principal)
            .catch((err) => {
              if (err instanceof ForbiddenWithReason) subscription.end(`access ended: ${err.message}`);
            })
            .finally(() => {
              checking = false;
            });
        }, heartbeatMs);
        heartbeat.unref();
        // The stream reads no longer than its token is valid: once the verifier would refuse it, the
        // stream ends (the client reconnects with a new token and Last-Event-ID, losing nothing).
        const validUntil = principal?.validUntil;
        const expire = () => {
          const left = validUntil! - Date.now();
          if (left <= 0) return subscription.end('the token expired');
          // A timer holds at most 2^31 - 1 ms (about 24.8 days); a longer wait takes several.
          expiry = setTimeout(expire, Math.min(left, 2_147_483_647));
          expiry.unref();
        };
        if (validUntil !== undefined) expire();
      }
      ctx.status = 200;
      ctx.set('Content-Type', 'text/event-stream; charset=utf-8');
      ctx.set('Cache-Control', 'no-cache, no-transform');
      ctx.set('X-Accel-Buffering', 'no');
      // A stream ends only when the client leaves or the hub ends it: the connection goes with it.
      ctx.set('Connection', 'close');
      ctx.body = out;
      return undefined;
    },
  }),
];

import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventSource } from 'eventsource';
import { type EmbeddedDatabase, freePort, startEmbedded } from '../../src/db/embedded.js';

/**
 * What the database-outage faults share: a PostgreSQL of a test's own that it stops and starts again
 * on the same port and data, and event streams read with `eventsource` (a standard EventSource, which
 * reconnects with Last-Event-ID), each recording the ids it received and each (re)connection.
 */

const dirs: string[] = [];
const servers: EmbeddedDatabase[] = [];
const sources: EventSource[] = [];

/** An embedded PostgreSQL (database `svc`) in a fresh directory, and its start again on the same port and data. */
export async function restartableServer(): Promise<{ server: EmbeddedDatabase; restart(): Promise<EmbeddedDatabase> }> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-fault-pg-'));
  chmodSync(dir, 0o755);
  dirs.push(dir);
  const port = await freePort();
  const start = async () => {
    const started = await startEmbedded({ dataDir: join(dir, 'data'), database: 'svc', port });
    // Every server started is stopped at the end, a restarted one too.
    servers.push(started);
    return started;
  };
  return { server: await start(), restart: start };
}

export interface Stream {
  es: EventSource;
  /** The ids of the events received, in order. */
  received: string[];
  /** One line per connection: `open after <Last-Event-ID>`. */
  opens: string[];
}

/** An EventSource on `url` (the hub's event stream, with its query) as tenant 1. */
export function openStream(url: string): Stream {
  const received: string[] = [];
  const opens: string[] = [];
  const es = new EventSource(url, {
    fetch: (input, init) => {
      const headers = new Headers(init?.headers);
      opens.push(`open after ${headers.get('last-event-id')}`);
      headers.set('X-Tenant-ID', '1');
      return fetch(input, { ...init, headers });
    },
  });
  es.onmessage = (m) => received.push(m.lastEventId);
  sources.push(es);
  return { es, received, opens };
}

/** For afterAll, once the hubs are stopped: closes the streams, stops the servers, removes their directories. */
export async function endOutages(): Promise<void> {
  for (const es of sources.splice(0)) es.close();
  for (const server of servers.splice(0)) await server.stop();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}

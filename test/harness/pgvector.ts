import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

/**
 * A PostgreSQL server with the pgvector extension, for the tests of the pgvector search path: the
 * Debian packages here have no pgvector for the embedded PostgreSQL, so this is PGlite (PostgreSQL
 * 18 itself, compiled to WebAssembly, with pgvector 0.8 compiled the same way: the same C code of
 * both, not a reimplementation) behind its socket server, which speaks the wire protocol on
 * 127.0.0.1 and multiplexes several client connections onto its one session.
 *
 * What differs from a server, and what the tests therefore do not rely on: every connection runs
 * as the one superuser whatever user it names (so row-level security applies only after an
 * explicit `set local role`), session settings are shared by all connections, and it is slow.
 */
export interface PgvectorServer {
  /** An owner URL (user and password are not checked). */
  url: string;
  close(): Promise<void>;
}

export async function startPgvectorServer(): Promise<PgvectorServer> {
  const db = await PGlite.create({ extensions: { vector } });
  // Connections beyond the limit are refused: room for two hubs (each opens a worker connection at
  // start for its plan-cache check, besides its application connections) and an owner client.
  const server = new PGLiteSocketServer({ db, port: 0, host: '127.0.0.1', maxConnections: 16 });
  await server.start();
  return {
    url: `postgres://postgres:pglite@${server.getServerConn()}/postgres`,
    async close() {
      await server.stop();
      await db.close();
    },
  };
}

import pg from 'pg';
import pgUtils from 'pg/lib/utils.js';

/**
 * The first statement of a transaction, sent in one message together with the statements that open
 * the transaction (`begin`, and for a tenant transaction the tenant setting): one round trip, one
 * write and one wake-up of the server instead of two. The server runs them in order, exactly as if
 * they had been sent one after the other: the opening statements complete before the first
 * statement starts, so row-level security sees the tenant setting. Only the first statement's result
 * is answered; an error in any of them fails the query (and the transaction, which the caller rolls
 * back as before).
 *
 * A statement with parameters goes through the extended protocol, as node-postgres would send it:
 * each opening statement as its own unnamed Parse/Bind/Describe/Execute, then the statement's own,
 * then one Sync. One without parameters goes, as node-postgres would send it, through the simple
 * protocol: the opening statements and the statement joined into one query text (PostgreSQL runs a
 * multi-statement text in order too). Either way the backend answers one result per statement, and
 * the opening statements' results are dropped.
 *
 * `opening` holds fixed SQL without parameters; the caller inlines only checked values (an integer
 * tenant id). An opening statement may instead carry its `values` (its text then has parameters, and
 * the message goes through the extended protocol: `Tx.queryAfter`, statements sent ahead of a
 * transaction's statement in its message). An opening statement may also carry a `prepared` form, the same statement with its
 * values as parameters: through the extended protocol it is then a named statement, parsed and
 * planned once per connection and afterwards only bound with its values (the inline text is parsed
 * and planned on every use, a noticeable part of a short read's cost on the server).
 *
 * node-postgres takes every ParseComplete of the message for the named statement's own: when the
 * message fails, that mark is withdrawn, and a Parse of a named statement not known to the
 * connection is preceded by a Close of its name (no error when there is none), so a statement whose
 * Parse failed, or succeeded in a message that failed later, is parsed again the next time.
 */
export interface PreparedOpening {
  /** A name of the connection's own (`nameFor`). */
  name: string;
  text: string;
  values: unknown[];
}

export type Opening = string | { text: string; prepared: PreparedOpening } | StatementOpening | CopyOpening;

/**
 * A `COPY … FROM STDIN` and its data (COPY text, made and encoded ahead), sent in the message: its Parse, Bind and
 * Execute, then its CopyData and CopyDone, then what follows it, without waiting for the server's CopyInResponse
 * (the server reads the data once the COPY starts). Should a statement before it fail, the server skips everything
 * up to the message's Sync, the COPY's data among it; should the COPY fail, what follows it. Sent through the
 * extended protocol only.
 */
export interface CopyOpening {
  copy: string;
  data: readonly Buffer[];
}

/** An opening with parameters of its own, as a named statement of the connection's when `name` is given (`nameFor`). */
export interface StatementOpening {
  text: string;
  values: unknown[];
  name?: string;
}

const inline = (opening: Opening) => (typeof opening === 'string' ? opening : isCopy(opening) ? opening.copy : opening.text);
/** An opening with parameters of its own (sent only through the extended protocol). */
const withValues = (opening: Opening): opening is StatementOpening => typeof opening !== 'string' && 'values' in opening;
const isCopy = (opening: Opening): opening is CopyOpening => typeof opening !== 'string' && 'copy' in opening;
/** A CopyData message's header for `bytes` of data: its type `d`, then its length (itself included). */
function copyDataHeader(bytes: number): Buffer {
  const header = Buffer.allocUnsafe(5);
  header[0] = 0x64;
  header.writeInt32BE(bytes + 4, 1);
  return header;
}
// node-postgres's Query is a Submittable whose protocol hooks (`prepare`, `handleReadyForQuery`) and
// result fields (`_results`) are not in its type declarations: reached through this loose view.
interface QueryInternals {
  _results: unknown;
  _result: unknown;
  name?: string;
  types?: pg.CustomTypesConfig;
  queryMode?: 'extended';
  prepare(connection: pg.Connection): void;
  hasBeenParsed(connection: pg.Connection): boolean;
  handleError(err: Error, connection: pg.Connection): void;
  handleReadyForQuery(connection: pg.Connection): void;
  _getRows(connection: pg.Connection, rows: number | undefined): void;
}
/** The named statements node-postgres knows a connection to hold (name to text). */
const parsedOn = (connection: pg.Connection) => (connection as unknown as { parsedStatements: Record<string, string> }).parsedStatements;
type QueryCtor = new (text: string, values: unknown[] | undefined, callback: (err: Error | undefined, result: pg.QueryResult) => void) => QueryInternals;
const Result = (pg as unknown as { Result: new (rowMode: undefined, types: pg.CustomTypesConfig) => unknown }).Result;
const Query = pg.Query as unknown as QueryCtor;

class OpeningQuery extends Query {
  /** This message parses the named statement itself (its first use on the connection). */
  private parsesOwn = false;
  /** The opening went through the extended protocol (prepare), its prepared forms with it. */
  private extendedProtocol = false;

  constructor(
    private readonly opening: readonly Opening[],
    text: string,
    values: unknown[] | undefined,
    callback: (err: Error | undefined, result: pg.QueryResult) => void,
    name?: string,
    types?: pg.CustomTypesConfig,
    /** Statements without parameters sent after the statement in its message (its transaction's COMMIT); their results are dropped. */
    private readonly closing: readonly string[] = [],
  ) {
    // A statement with parameters or a name goes through the extended protocol; one with neither, as
    // one joined text of the simple protocol.
    const extended =
      (values !== undefined && values.length > 0) || name !== undefined || closing.length > 0 || opening.some((o) => withValues(o) || isCopy(o));
    // The text, values and callback as arguments: a config object would be copied property by property
    // (node-postgres's cloneQueryConfig, through property descriptors: ≈ 10 µs a statement in a CPU profile
    // of the API's load); the rest is set as its constructor would set it from the config.
    super(extended ? text : [...opening.map(inline), text].join(';\n'), extended ? (values ?? []) : undefined, callback);
    this.name = name;
    // (`queryMode`: a statement without parameters of its own is prepared too when its openings have some.)
    if (extended) this.queryMode = 'extended';
    if (types) {
      this.types = types;
      this._result = new Result(undefined, types);
      this._results = this._result;
    }
  }

  override prepare(connection: pg.Connection): void {
    // node-postgres corks the stream around prepare(): these messages leave in one write.
    const wire = connection as unknown as {
      close(m: { type: 'S'; name: string }): void;
      parse(q: { text: string; name: string; types: unknown[] }): void;
      bind(c: { portal: string; statement: string; values: unknown[]; valueMapper?: (value: unknown) => unknown }): void;
      describe(m: { type: 'P'; name: string }): void;
      execute(c: { portal: string; rows: number }): void;
      endCopyFrom(): void;
      _send(buffer: Buffer): boolean;
    };
    const parsed = parsedOn(connection);
    this.extendedProtocol = true;
    for (const opening of this.opening) {
      if (isCopy(opening)) {
        wire.parse({ text: opening.copy, name: '', types: [] });
        wire.bind({ portal: '', statement: '', values: [] });
        wire.execute({ portal: '', rows: 0 });
        // Each piece as it is, after its CopyData header: node-postgres's sendCopyFromChunk would copy it into a
        // buffer of its own first (64 KiB a piece, a chunk's COPY text once more).
        for (const piece of opening.data) {
          wire._send(copyDataHeader(piece.length));
          wire._send(piece);
        }
        wire.endCopyFrom();
        continue;
      }
      const prepared = typeof opening === 'string' || withValues(opening) ? undefined : opening.prepared;
      if (withValues(opening)) {
        const name = opening.name ?? '';
        if (!name || parsed[name] !== opening.text) {
          if (name) wire.close({ type: 'S', name });
          wire.parse({ text: opening.text, name, types: [] });
        }
        wire.bind({ portal: '', statement: name, values: opening.values, valueMapper: pgUtils.prepareValue });
      } else if (prepared) {
        if (parsed[prepared.name] !== prepared.text) {
          wire.close({ type: 'S', name: prepared.name });
          wire.parse({ text: prepared.text, name: prepared.name, types: [] });
        }
        wire.bind({ portal: '', statement: prepared.name, values: prepared.values });
      } else {
        wire.parse({ text: opening as string, name: '', types: [] });
        wire.bind({ portal: '', statement: '', values: [] });
      }
      wire.describe({ type: 'P', name: '' });
      wire.execute({ portal: '', rows: 0 });
    }
    if (this.name && !this.hasBeenParsed(connection)) {
      this.parsesOwn = true;
      wire.close({ type: 'S', name: this.name });
    }
    super.prepare(connection);
  }

  /** The statement's Execute, then the closing statements' (each its own unnamed Parse, Bind and Execute), then the Sync. */
  override _getRows(connection: pg.Connection, rows: number | undefined): void {
    if (this.closing.length === 0 || rows) {
      super._getRows(connection, rows);
      return;
    }
    const wire = connection as unknown as {
      parse(q: { text: string; name: string; types: unknown[] }): void;
      bind(c: { portal: string; statement: string; values: unknown[] }): void;
      execute(c: { portal: string; rows: number }): void;
      sync(): void;
    };
    wire.execute({ portal: '', rows: 0 });
    for (const text of this.closing) {
      wire.parse({ text, name: '', types: [] });
      wire.bind({ portal: '', statement: '', values: [] });
      wire.execute({ portal: '', rows: 0 });
    }
    wire.sync();
  }

  /** A COPY of the message has its data sent already (CopyOpening). */
  handleCopyInResponse(): void {}

  override handleError(err: Error, connection: pg.Connection): void {
    // An opening's ParseComplete may have marked this statement parsed although its own Parse failed.
    if (this.parsesOwn && this.name) delete parsedOn(connection)[this.name];
    super.handleError(err, connection);
  }

  override handleReadyForQuery(connection: pg.Connection): void {
    // Reached only when the message succeeded: the prepared openings it sent are on the connection.
    if (this.extendedProtocol) {
      for (const opening of this.opening) {
        if (withValues(opening)) {
          if (opening.name) parsedOn(connection)[opening.name] = opening.text;
        } else if (typeof opening !== 'string' && 'prepared' in opening) parsedOn(connection)[opening.prepared.name] = opening.prepared.text;
      }
    }
    // One result per statement: drop the opening and closing statements' (an array of one is the statement's own).
    if (Array.isArray(this._results)) {
      const own = this._results.slice(this.opening.length, this._results.length - this.closing.length);
      this._results = own.length === 1 ? own[0] : own;
    }
    super.handleReadyForQuery(connection);
  }
}

/**
 * Runs `opening`, then `text`, then `closing` (statements without parameters: a transaction's COMMIT) on
 * `client` in one round trip; answers `text`'s result. With `name` (and parameters), `text` is a named
 * statement: parsed on the first use on a connection only.
 */
export function queryAfterOpening<R extends pg.QueryResultRow>(
  client: pg.PoolClient,
  opening: readonly Opening[],
  text: string,
  values?: unknown[],
  name?: string,
  types?: pg.CustomTypesConfig,
  closing?: readonly string[],
): Promise<pg.QueryResult<R>> {
  return new Promise((resolve, reject) => {
    const query = new OpeningQuery(opening, text, values, (err, result) => (err ? reject(err) : resolve(result as pg.QueryResult<R>)), name, types, closing);
    client.query(query as unknown as pg.Submittable);
  });
}

import pg from 'pg';
import { type CopyIn, copyThen, queryAfter, type Statement, type Tx } from '../../db/database.js';
import { isUniqueViolation } from '../../validation/database-refusals.js';
import { pieceEnd } from '../../validation/input-limits.js';
import type { Target } from '../types.js';
import { sqlType, tenantTableSql } from './ddl.js';
import type { PreparedRow } from './rows.js';

/**
 * Upserts one chunk of prepared rows into the tenant's ext.* table with one merge statement (a plain
 * insert with `expectNew`): a chunk is COPYed into a staging table first (a few rows travel as one
 * JSON array instead).
 * Rows sharing an external id within the chunk collapse to the last one (it is what the source said
 * last). Returns how many rows were written (every row given: a duplicate overwrote its twin).
 * The rows are written (so locked) in KEY_ORDER.
 */
export async function upsertChunk(
  tx: Tx,
  target: Target,
  rows: PreparedRow[],
  ids: { tenantId: number; connectorId: string; endpointUuid: string },
  options: WriteOptions = {},
): Promise<number> {
  return (await writeRows(tx, target, rows, ids, false, options)).written;
}

/**
 * upsertChunk, with `after` (the chunk's other writes: its hand-off entry, its counts row) sent in the
 * same message as the chunk's insert or merge, after it (Tx.queryAfter): one round trip for them all,
 * where each cost one of its own. Answers the last statement's result beside the rows written. A
 * failure of any of them fails the call (the transaction is then aborted); a key conflict of an
 * `expectNew` write is still `isKeyConflict`. With `commit`, the transaction's COMMIT may go in that
 * message too (LastStatementOptions): the caller then sends nothing more in the transaction.
 */
export async function upsertChunkThen<R extends pg.QueryResultRow>(
  tx: Tx,
  target: Target,
  rows: PreparedRow[],
  ids: { tenantId: number; connectorId: string; endpointUuid: string },
  options: WriteOptions,
  after: readonly [...Statement[], Statement],
  { commit = false }: { commit?: boolean } = {},
): Promise<{ written: number; last: pg.QueryResult<R> }> {
  let last: pg.QueryResult<R> | undefined;
  const { written } = await writeRows(tx, target, rows, ids, false, options, async (text, values, copy) => {
    const final = after[after.length - 1]!;
    const before = text === undefined ? after.slice(0, -1) : [{ text, values }, ...after.slice(0, -1)];
    last = copy
      ? await copyThen<R>(tx, copy, before, final.text, final.values, { prepare: final.prepare, commit })
      : await queryAfter<R>(tx, before, final.text, final.values, { prepare: final.prepare, commit });
    return undefined;
  });
  return { written, last: last! };
}

/**
 * The same upsert, leaving rows whose content did not change as they are (only taken over, when
 * another writer holds them: their connector and endpoint set to this one's, by a second statement
 * when the chunk has such rows) and reporting which rows were new or changed (for `data.row.changed`).
 */
export async function upsertChanged(
  tx: Tx,
  target: Target,
  rows: PreparedRow[],
  ids: { tenantId: number; connectorId: string; endpointUuid: string },
  options: WriteOptions = {},
): Promise<{ written: number; changed: Array<{ externalId: string; op: 'insert' | 'update' }> }> {
  return writeRows(tx, target, rows, ids, true, options);
}

export interface WriteOptions {
  /**
   * The rows are expected to be new (a run that has met no stored key yet): they are written by a
   * plain INSERT, which costs PostgreSQL less than the merge (no speculative insertion, no conflict
   * arbitration). A key that is stored already fails the statement with a unique violation
   * (`isKeyConflict`), which aborts the transaction: the caller writes the chunk again without this
   * option, in a new transaction (or after rolling back to a savepoint it took before).
   */
  expectNew?: boolean;
  /**
   * The table's promoted columns that `target` does not promote (ExtSchema.ensureTable's
   * `unpromoted`): a row this write updates has them set to NULL, as a new row has them. A row's
   * promoted columns are what its writer projects from its `data`: one left as another writer (or a
   * promote a re-apply dropped) set it would no longer match the payload that replaced it.
   */
  unpromoted?: readonly string[];
}

/** The error of an `expectNew` write whose rows were not all new: a key of the chunk is stored already. */
export const isKeyConflict = (err: unknown): boolean => isUniqueViolation(err);

/**
 * The order every writer of an ext table locks rows in: `external_id` by the bytes of its UTF-8, the
 * order of PostgreSQL's `C` collation (`KEY_ORDER_SQL`; `inKeyOrder` in JavaScript, the same order).
 * Two transactions writing overlapping keys of one table (the chunks of two connectors sharing it,
 * a delete of one connector beside another's run) then never each hold a row the other waits for:
 * the later waits for the earlier. Written in the order the source gave them, a chunk of keys 1..n
 * beside a chunk of the same keys n..1 of another connector was a deadlock (40P01), and one of the
 * runs failed on `deadlock detected`.
 */
export const KEY_ORDER_SQL = 'external_id collate "C"';

/** `rows` sorted in KEY_ORDER (a copy). */
export function inKeyOrder<T extends { externalId?: string }>(rows: readonly T[]): T[] {
  return rows
    .map((row) => ({ row, key: Buffer.from(row.externalId ?? '', 'utf8') }))
    .sort((a, b) => Buffer.compare(a.key, b.key))
    .map((r) => r.row);
}

/** `changed` in the order of `rows` (the order the rows were read), whatever order they were written in. */
export function inRowOrder<T extends { externalId: string }>(changed: T[], rows: readonly PreparedRow[]): T[] {
  if (changed.length < 2) return changed;
  const position = new Map<string, number>();
  rows.forEach((row, i) => {
    if (row.externalId !== undefined && !position.has(row.externalId)) position.set(row.externalId, i);
  });
  return changed.sort((a, b) => (position.get(a.externalId) ?? 0) - (position.get(b.externalId) ?? 0));
}

/** Chunks smaller than this go as one JSON array (one round trip); larger ones are staged with COPY. */
const STAGE_FROM_ROWS = 64;
/**
 * And chunks whose JSON is this long, whatever their rows (COPY text is made and sent a piece at a time, a JSON array
 * in one go): one row of 10 MB (a CSV field) sent as a JSON array held the event loop 0.17 s.
 */
const STAGE_FROM_CHARS = 1024 * 1024;

/** The characters of the rows' JSON texts. */
function jsonChars(rows: Iterable<PreparedRow>): number {
  let chars = 0;
  for (const r of rows) chars += r.json.length;
  return chars;
}

/** Transactions that have staged rows already (the staging table must be emptied before their next COPY). */
const staged = new WeakSet<Tx>();

/** The connection's staging table (one, whatever the number of promoted columns). */
const STAGE = 'pg_temp.svc_ingest_stage';
/**
 * Readies STAGE for a chunk of `width` promoted columns, emptied first when `empty`
 * (connectors.ingest_stage: src/connectors/migrations/connectors/V13__ingest_stage.sql). Inline, not
 * a parameter or a named statement: it travels in the COPY's simple-protocol text, before it (and
 * with `begin`, as the first statement of a transaction), which costs no round trip of its own.
 */
const stageSql = (width: number, empty: boolean) => `select connectors.ingest_stage(${width}, ${empty})`;

async function writeRows(
  tx: Tx,
  target: Target,
  rows: PreparedRow[],
  ids: { tenantId: number; connectorId: string; endpointUuid: string },
  onlyChanged: boolean,
  options: WriteOptions,
  /**
   * Sends the chunk's statement (undefined: the chunk had no row to write) in place of `tx.query`, with
   * statements of the caller's after it (upsertChunkThen); its result is not read. Not with `onlyChanged`.
   */
  send?: (text: string | undefined, values: unknown[], copy?: CopyIn) => Promise<undefined>,
): Promise<{ written: number; changed: Array<{ externalId: string; op: 'insert' | 'update' }> }> {
  const writable = rows.filter((r) => r.externalId !== undefined);
  if (writable.length === 0) {
    await send?.(undefined, []);
    return { written: 0, changed: [] };
  }
  type Answer = Pick<pg.QueryResult<{ external_id: string; inserted: boolean }>, 'rows'>;
  // Sent by the caller's `send`, the statement's result is not read (no changes are asked for). After `copy`
  // (the chunk staged), in the COPY's message.
  const query = async (text: string, values: unknown[], copy?: CopyIn): Promise<Answer> => {
    if (copy && !inOneMessage(copy)) {
      // Too long to go in one write: the COPY first, its pieces sent a turn of the event loop apart (Tx.copyFrom).
      await tx.copyFrom!(copy.sql, copy.data, { before: copy.before });
      copy = undefined;
    }
    if (!send) return copy ? copyThen(tx, copy, [], text, values) : tx.query(text, values);
    await send(text, values, copy);
    return { rows: [] };
  };
  // Rows sharing an external id collapse to the last one (ON CONFLICT cannot touch a row twice).
  const byKey = new Map<string, PreparedRow>();
  for (const row of writable) byKey.set(row.externalId!, row);
  const promote = target.promote;
  const insertColumns = ['tenant_id', 'connector_id', 'endpoint_id', 'external_id', 'row_hash', 'data', ...promote.map((p) => pg.escapeIdentifier(p.name))];
  const selects = ['$1::bigint', '$2::uuid', '$3::uuid', 'x.external_id', 'x.row_hash', 'x.data', ...promote.map((p, i) => `x.p${i}::${sqlType(p.type)}`)];
  const updates = ['row_hash', 'data', 'connector_id', 'endpoint_id', ...promote.map((p) => pg.escapeIdentifier(p.name))]
    .map((c) => `${c} = excluded.${c}`)
    .concat('indexed_at = now()', ...(options.unpromoted ?? []).map((c) => `${pg.escapeIdentifier(c)} = null`));
  // The tenant's own table (ext.<name> lives in the tenant's schema ext_t<id>: src/connectors/target/ddl.ts).
  const table = tenantTableSql(ids.tenantId, target.table);
  const changedOnly = onlyChanged ? ` where ${table}.row_hash is distinct from excluded.row_hash returning external_id, (xmax = 0) as inserted` : '';
  const resolve = options.expectNew
    ? onlyChanged
      ? ' returning external_id, true as inserted'
      : ''
    : ` on conflict (tenant_id, external_id) do update set ${updates.join(', ')}${changedOnly}`;
  const merge = (source: string) => `insert into ${table} (${insertColumns.join(', ')})
     select ${selects.join(', ')} from ${source} order by x.${KEY_ORDER_SQL}${resolve}`;
  let result: Answer;
  if (tx.copyFrom && (byKey.size >= STAGE_FROM_ROWS || jsonChars(byKey.values()) >= STAGE_FROM_CHARS)) {
    // A chunk is COPYed into a temporary staging table on the transaction's own connection, then
    // merged by one INSERT … SELECT: COPY parses the rows far cheaper than jsonb_to_recordset over
    // one big JSON array. The staging table (all text but `data`) lives as long as the connection
    // and empties itself at commit. There is one per connection, as wide as the widest chunk it has
    // served (PostgreSQL empties every such table of a connection at each commit: one per number of
    // promoted columns made every commit pay for each): a narrower chunk fills its first columns and
    // leaves the others null. The function reads the width from the catalog (a record of it kept here
    // would be wrong after a rollback of the transaction that grew the table) and grows the table
    // when it is too narrow.
    // The staging table is readied in the COPY's message (and, as a transaction's first statement, with its opening),
    // and the merge follows the COPY in the same message (Tx.copyThen): one round trip for the three.
    const stage = stageSql(promote.length, staged.has(tx));
    // The COPY text is made (and encoded) in full before the COPY is sent, so that the COPY is never kept waiting
    // for its next piece while the event loop runs other work (a slice of a chunk's preparation, a page).
    const data = await copyPieces(byKey.values(), promote);
    staged.add(tx);
    const copy = { sql: `copy ${STAGE} (external_id, row_hash, data${promote.map((_p, i) => `, p${i}`).join('')}) from stdin`, data, before: [stage] };
    result = await query(merge(`${STAGE} as x`), [ids.tenantId, ids.connectorId, ids.endpointUuid], copy);
  } else {
    // Small chunks (the row-by-row fallback among them) travel as one JSON array spread by
    // jsonb_to_recordset: one round trip.
    const recordColumns = ['external_id text', 'row_hash text', 'data jsonb', ...promote.map((_p, i) => `p${i} text`)];
    let payload = '[';
    for (const r of byKey.values()) {
      payload += `${payload.length > 1 ? ',' : ''}{"external_id":${JSON.stringify(r.externalId)},"row_hash":"${r.rowHash}","data":${r.json}`;
      for (let i = 0; i < promote.length; i++) payload += `,"p${i}":${JSON.stringify(r.promoted[promote[i]!.name] ?? null)}`;
      payload += '}';
    }
    payload += ']';
    result = await query(merge(`jsonb_to_recordset($4::jsonb) as x(${recordColumns.join(', ')})`), [ids.tenantId, ids.connectorId, ids.endpointUuid, payload]);
  }
  if (onlyChanged && !options.expectNew && result.rows.length < byKey.size) {
    // The rows left as they were (their content unchanged) are still this writer's: a row belongs to
    // its last writer (what a delete of it erases), with or without a subscriber. The merge locked
    // them all (ON CONFLICT DO UPDATE locks the rows its WHERE leaves), so this waits on nothing.
    const told = new Set(result.rows.map((r) => r.external_id));
    const same = [...byKey.keys()].filter((k) => !told.has(k));
    const cleared = (options.unpromoted ?? []).map((c) => `, ${pg.escapeIdentifier(c)} = null`).join('');
    await tx.query(
      `update ${table} t set connector_id = $2::uuid, endpoint_id = $3::uuid, indexed_at = now()${cleared}
        where t.tenant_id = $1 and t.external_id = any($4::text[]) and (t.connector_id, t.endpoint_id) is distinct from ($2::uuid, $3::uuid)`,
      [ids.tenantId, ids.connectorId, ids.endpointUuid, same],
    );
  }
  // Written in KEY_ORDER; the changes are told in the order the rows were read.
  const changed = onlyChanged ? inRowOrder(result.rows.map((r) => ({ externalId: r.external_id, op: r.inserted ? ('insert' as const) : ('update' as const) })), writable) : [];
  return { written: writable.length, changed };
}

/** Characters of COPY text made and sent at a time (copyLines): about a millisecond of work. */
const COPY_PIECE_CHARS = 64 * 1024;

/**
 * The rows in COPY text format, one line per row, from each row's canonical JSON text (prepareRow made it for the
 * hash: the payload is never serialised a second time), made a piece of COPY_PIECE_CHARS at a time as the COPY asks
 * for it (Tx.copyFrom): made in one go, a chunk of 1,000 rows of 1,600 columns (18 MB of text) and its encoding held
 * the event loop 0.14 to 0.24 s.
 */
function* copyLines(rows: Iterable<PreparedRow>, promote: Target['promote']): Generator<string> {
  let lines = '';
  for (const r of rows) {
    lines += `${copyText(r.externalId!)}\t${r.rowHash}\t${copyText(r.json)}`;
    for (let i = 0; i < promote.length; i++) lines += `\t${copyText(r.promoted[promote[i]!.name] ?? null)}`;
    lines += '\n';
    // A row longer than a piece (one CSV field of megabytes) goes in several.
    while (lines.length >= COPY_PIECE_CHARS) {
      const end = pieceEnd(lines, 0, COPY_PIECE_CHARS);
      yield lines.slice(0, end);
      lines = lines.slice(end);
    }
  }
  if (lines) yield lines;
}

/**
 * COPY text up to this long goes in one message with what follows the COPY (Tx.copyThen), written at once: about a
 * tenth of a millisecond of copying. A longer one (wide rows) goes on its own, a piece per turn of the event loop.
 */
const ONE_MESSAGE_BYTES = 1024 * 1024;

const inOneMessage = (copy: CopyIn) => copy.data.reduce((bytes, piece) => bytes + piece.length, 0) <= ONE_MESSAGE_BYTES;

/** Milliseconds of making COPY text after which copyPieces lets the event loop turn before it goes on. */
const COPY_MAKE_SLICE_MS = 5;

/**
 * copyLines made in full, each piece encoded (UTF-8), before the COPY starts: the COPY then takes its data at once
 * (Tx.copyFrom sends pieces made ahead without a turn between two). A text that takes longer than COPY_MAKE_SLICE_MS
 * to make (wide rows: 1,000 rows of 1,600 columns are 18 MB) is made with a turn of the event loop every so often.
 */
async function copyPieces(rows: Iterable<PreparedRow>, promote: Target['promote']): Promise<Buffer[]> {
  const pieces: Buffer[] = [];
  let sliceStarted = performance.now();
  for (const piece of copyLines(rows, promote)) {
    pieces.push(Buffer.from(piece, 'utf8'));
    if (performance.now() - sliceStarted >= COPY_MAKE_SLICE_MS) {
      await new Promise((resolve) => setImmediate(resolve));
      sliceStarted = performance.now();
    }
  }
  return pieces;
}

const COPY_SPECIAL = /[\\\n\r\t]/;
const COPY_SPECIALS = /[\\\n\r\t]/g;
const COPY_ESCAPES: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** One field of COPY's text format: backslash, newline, carriage return and tab escaped; null as \N. */
function copyText(value: string | null): string {
  if (value === null) return '\\N';
  return COPY_SPECIAL.test(value) ? value.replace(COPY_SPECIALS, (c) => COPY_ESCAPES[c]!) : value;
}

import { unlessAborted } from '../abortable.js';
import { oneStatementIndexer, type RowIndexer } from '../connectors/indexer.js';
import { activeTenant } from '../db/active-tenant.js';
import type { Database, Tx } from '../db/database.js';
import { loggableMessage } from '../observability/database-errors.js';
import { logger, storableMessage } from '../observability/logger.js';
import { rowChunkText } from './content.js';
import { EmbeddingUnavailable } from './embedding/errors.js';
import type { EmbeddingOutage } from './embedding/outage.js';
import { type EmbeddingPort, modelName } from './embedding/port.js';
import { maskTextsSent } from './openai-client.js';
import { inExtension, vectorLiteral } from './pgvector.js';
import { existingTable, keyBefore, type Row, settleRowChunks } from './row-chunks.js';
import { encodeVector } from './vectors-codec.js';
import { parseJsonExact } from '../connectors/engine/exact-json.js';

/**
 * Ingestion's hand-off: inside the ingestion transaction, one `retrieval.pending` entry per written
 * batch (the row hashes only). An entry exists exactly when its rows do, and ingestion never waits on
 * text building or a model: the indexer turns entries into chunks and vectors after commit.
 */
export const pendingIndexer: RowIndexer = oneStatementIndexer((batch) =>
  batch.rows.length === 0
    ? null
    : {
        text: 'insert into retrieval.pending (tenant_id, connector_id, corpus, scopes, endpoint_uuid, table_name, row_hashes) values ($1, $2, $3, $4, $5, $6, $7)',
        values: [batch.tenantId, batch.connectorId, batch.connectorName, batch.scopes, batch.endpointUuid, batch.table, batch.rows.map((r) => r.rowHash)],
        // Once per chunk of every run, a plain VALUES insert: a named statement, parsed once per connection.
        prepare: true,
      },
);

/**
 * The hand-off while `svc.retrieval.index-rows` is false: the rows are not indexed, but chunks made
 * before the switch must not go on citing a version of a row its rewrite replaced. When a chunk of
 * the tenant names one of the batch's keys in its table with another row hash than the row written
 * (probes of the index chunks_table_key), a `settle_only` entry is recorded; the indexer settles those chunks as for any rewritten row
 * (re-pointed at another row of the connector holding their content, or removed: settleRowChunks)
 * and makes no chunk of the rows. A batch that changed no row a chunk names records nothing.
 */
export const settlingIndexer: RowIndexer = oneStatementIndexer((batch) => {
  const rows = batch.rows.filter((r) => r.externalId !== undefined);
  if (rows.length === 0) return null;
  return {
    text: `insert into retrieval.pending (tenant_id, connector_id, corpus, scopes, endpoint_uuid, table_name, row_hashes, settle_only)
       select $1, $2, $3, $4, $5, $6, $7, true
        where exists (select 1 from unnest($8::text[], $7::text[]) as r(key, hash)
                        join retrieval.chunks c on c.tenant_id = $1 and c.table_name = $6 and c.external_id = r.key and c.row_hash is not null
                       where c.row_hash <> r.hash and md5(c.external_id) = any(array(select md5(k) from unnest($8::text[]) as k)))`,
    values: [batch.tenantId, batch.connectorId, batch.connectorName, batch.scopes, batch.endpointUuid, batch.table, rows.map((r) => r.rowHash), rows.map((r) => r.externalId)],
  };
});

interface PendingEntry {
  id: number;
  tenant_id: number;
  connector_id: string;
  corpus: string;
  scopes: string[];
  endpoint_uuid: string;
  table_name: string;
  row_hashes: string[];
  /** Recorded while indexing was off (settlingIndexer): settle the chunks naming the rows' keys, make none. */
  settle_only: boolean;
}

/**
 * SQL, true for a row `p` of an active tenant: the entries and chunks of a deactivated tenant are
 * left as they are, neither expanded nor sent to the embedding model (docs/retrieval.md).
 */
const OF_ACTIVE_TENANT = activeTenant('p.tenant_id');

/** The longest wait before an entry that failed is tried again (the wait doubles from 1 s up to it). */
export const PENDING_RETRY_MAX_SECONDS = 3600;
/**
 * The largest power of two a backoff is computed from (2^12 s is past PENDING_RETRY_MAX_SECONDS):
 * 2^attempts overflows a double from 1,024 failures on (about six weeks of a text a model always
 * refuses, tried hourly), and PostgreSQL's `value out of range: overflow` failed the statement that
 * records the failure, and with it every pass, for every tenant.
 */
const BACKOFF_EXPONENT_MAX = 12;

/**
 * Turns up to `limit` pending entries (of every active tenant, oldest first) into chunks (text, scopes,
 * corpus), each entry under a savepoint of the transaction that removes it: a crash leaves the entry
 * for the next pass, never half a batch, and an entry that fails (its rollback to the savepoint
 * undoes its own work only) does not hold back the others. Its rows are then tried in halves, each
 * under a savepoint of its own, down to single rows (expandInParts): one row that cannot be indexed
 * does not hold back the rows written with it. A failed entry stays, keeping the rows that failed, with its
 * `attempts`, `last_error` and `retry_at`: it is passed over until `retry_at` (1 s after the first
 * failure, doubling up to PENDING_RETRY_MAX_SECONDS), and each failure is logged once, as a warning
 * naming the entry, its tenant, table and the next try. An entry whose connector's row is being
 * written (a re-apply, a delete) is left for a later pass. Returns how many entries were taken
 * (indexed or set aside).
 */
export async function expandPending(db: Database, limit = 20): Promise<number> {
  return db.crossTenant('retrieval-index', async (tx) => {
    const { rows: entries } = await tx.query<PendingEntry>(
      `select id, tenant_id, connector_id, corpus, scopes, endpoint_uuid, table_name, row_hashes, settle_only
         from retrieval.pending p where (retry_at is null or retry_at <= now()) and ${OF_ACTIVE_TENANT} order by id limit $1 for update skip locked`,
      [limit],
    );
    // Two passes (two processes) expanding entries of one table at once: the later waits for the
    // earlier to commit (a transaction-scoped advisory lock per tenant and table, taken in the order of
    // the keys, so passes wanting several never each hold one the other waits for). Without it, a pass
    // that had read a row before its rewrite committed wrote its chunk of the earlier version while
    // another pass indexed the rewrite's entry without seeing that chunk (uncommitted) to settle it:
    // the chunk cited a version of the row that was gone, for good. A delete or purge never takes
    // these locks: it waits for the entries, which a pass holds before them (src/connectors/target/drop.ts).
    if (entries.length) {
      const { rows: keys } = await tx.query<{ key: string }>(
        `select key::text as key from (
           select distinct hashtextextended('svc-hub:retrieval-expand:' || e.tenant_id::text || ':' || e.table_name, 0) as key
             from unnest($1::bigint[], $2::text[]) as e(tenant_id, table_name)
         ) k order by k.key`,
        [entries.map((e) => e.tenant_id), entries.map((e) => e.table_name)],
      );
      for (const { key } of keys) await tx.query('select pg_advisory_xact_lock($1::bigint)', [key]);
    }
    const done: number[] = [];
    let later = 0;
    // When the pass's splitting of failed entries stops (set at its first failure).
    let splitUntil: number | undefined;
    for (const entry of entries.sort((a, b) => a.id - b.id)) {
      await tx.query('savepoint pending_entry');
      try {
        const expanded = await expandEntry(tx, entry);
        await tx.query('release savepoint pending_entry');
        if (expanded) done.push(entry.id);
        else later += 1;
      } catch (err) {
        // A database that went away fails this too, and with it the pass (nothing is recorded).
        await tx.query('rollback to savepoint pending_entry');
        await tx.query('release savepoint pending_entry');
        // One row may be what fails (a key the chunks' index cannot hold, say): the entry's rows in halves, each on
        // its own, so that the others are indexed and the entry keeps only the rows that failed (or were not tried).
        splitUntil ??= Date.now() + SPLIT_BUDGET_MS;
        const left = entry.row_hashes.length > 1 ? await expandInParts(tx, entry, entry.row_hashes, splitUntil) : entry.row_hashes;
        if (left.length === 0) {
          done.push(entry.id);
          continue;
        }
        // Stored as a log line shows it: the values a database error quotes, a credential in an address, the hub's secrets masked.
        const message = storableMessage(err);
        const { rows } = await tx.query<{ attempts: number; retry_at: Date }>(
          `update retrieval.pending set attempts = attempts + 1, last_error = $2, row_hashes = $4::text[],
                  retry_at = now() + least(power(2, least(attempts, ${BACKOFF_EXPONENT_MAX})), $3::int) * interval '1 second'
            where id = $1 returning attempts, retry_at`,
          [entry.id, message, PENDING_RETRY_MAX_SECONDS, left],
        );
        const failed = rows[0];
        const logged = loggableMessage(err);
        logger().warn(
          { tenantId: entry.tenant_id, pendingId: entry.id, connectorId: entry.connector_id, table: entry.table_name, rows: left.length, attempts: failed?.attempts, retryAt: failed?.retry_at, err: logged },
          `retrieval index: pending entry ${entry.id} (tenant ${entry.tenant_id}, ${entry.table_name}) failed ${failed?.attempts ?? 1} time(s), tried again at ${failed?.retry_at.toISOString() ?? 'the next pass'}: ${logged}`,
        );
      }
    }
    if (done.length) await tx.query('delete from retrieval.pending where id = any($1::bigint[])', [done]);
    return entries.length - later;
  });
}

/**
 * The rows of an entry that failed as a whole, `hashes`, in halves, each expanded on its own under a
 * savepoint, a half that fails split again down to single rows, until `until` (the pass's share of
 * SPLIT_BUDGET_MS): returns the hashes left, those whose rows failed alone, were not tried by then,
 * or wait for their connector's row. Before, one row that could not be indexed (a key too long for
 * the chunks' index) failed its entry for ever, and with it every row written in the same batch.
 */
async function expandInParts(tx: Tx, entry: PendingEntry, hashes: string[], until: number): Promise<string[]> {
  const left: string[] = [];
  const half = Math.ceil(hashes.length / 2);
  for (const part of [hashes.slice(0, half), hashes.slice(half)]) {
    if (Date.now() >= until) {
      left.push(...part);
      continue;
    }
    await tx.query('savepoint pending_part');
    try {
      const expanded = await expandEntry(tx, { ...entry, row_hashes: part });
      await tx.query('release savepoint pending_part');
      if (!expanded) left.push(...part);
    } catch {
      await tx.query('rollback to savepoint pending_part');
      await tx.query('release savepoint pending_part');
      left.push(...(part.length === 1 ? part : await expandInParts(tx, entry, part, until)));
    }
  }
  return left;
}

/**
 * One entry into chunks. `false`: not now, its connector's row being written (a re-apply, a
 * delete): the entry stays as it is for a later pass.
 */
async function expandEntry(tx: Tx, entry: PendingEntry): Promise<boolean> {
  // The connector's current tags (re-applied since the run?); a CSV import (no connector row) keeps
  // the entry's. Read under a share lock on the connector's row, held to the commit: a re-apply
  // changing the tags waits for this pass, then re-tags the chunks it made (retagChunks in
  // src/connectors/store.ts). Before, a re-apply committing between this read and the pass's commit
  // left the chunks it made or updated with the old tags (an existing chunk even lost its re-tag):
  // a scope the connector no longer declares went on showing them. A row being written is skipped,
  // never waited for: a delete holds it while it waits for the entries this pass holds.
  const { rows: owners } = await tx.query<{ scopes: string[] }>('select scopes from connectors.connectors where id = $1 for share skip locked', [entry.connector_id]);
  if (!owners[0]) {
    const { rows: busy } = await tx.query('select 1 from connectors.connectors where id = $1', [entry.connector_id]);
    if (busy.length) return false;
  }
  const scopes = owners[0]?.scopes ?? entry.scopes;
  const table = await existingTable(tx, entry.tenant_id, entry.table_name);
  if (table === undefined) return true;
  // Rows rewritten since have another hash now: their own later entry indexes them.
  // The payload as text, read as the engine reads a source (integers beyond ±(2^53 − 1) exactly).
  // Every row of the table holding one of the hashes: rows of identical content under other keys too.
  const { rows } = await tx.query<Row>(
    `select external_id, row_hash, connector_id::text as connector_id, endpoint_id::text as endpoint_id, data::text as data
       from ${table} where tenant_id = $1 and row_hash = any($2)`,
    [entry.tenant_id, entry.row_hashes],
  );
  if (rows.length === 0) return true;
  // The earlier version of a rewritten row: a chunk naming its key describes data that is gone,
  // whichever connector's chunk it is (a row belongs to its last writer: another connector of the
  // tenant may have written the key before, its chunk citing that version). It names another row of
  // its own connector that still holds that content (identical rows, one of them rewritten), or goes;
  // never the row that replaced it, another connector's.
  await settleRowChunks(tx, entry.tenant_id, entry.table_name, { keys: rows.map((r) => r.external_id) });
  // Written while indexing was off: the earlier versions' chunks settled, no chunk made of these rows.
  if (entry.settle_only) return true;
  // Rows of identical content (one row hash, under several keys: after a unique_key changed, or two
  // endpoints with different keys writing one table) are one chunk, as the unique index on
  // (tenant, corpus, row_hash) wants: it names, among the rows the entry's connector wrote, the row
  // of the smallest key (byte order), the same whichever of them was written last, and carries that
  // row's endpoint. Only when the connector holds none of them (another connector wrote the same
  // rows since) does it name the smallest key of all, with the entry's endpoint. A chunk of that
  // content naming another key of this table is replaced (its text names the key). One naming a row
  // of another table (the connector wrote that content there too) is taken over: it names this
  // table's row, its text with it, and loses its vector to be embedded again (a trigger moves the
  // tenant's generation, in-memory indexes reload it).
  const own = (r: Row) => r.connector_id === entry.connector_id;
  const chosen = new Map<string, Row>();
  for (const r of rows) {
    const first = chosen.get(r.row_hash);
    if (!first || (own(r) !== own(first) ? own(r) : keyBefore(r.external_id, first.external_id))) chosen.set(r.row_hash, r);
  }
  const unique = [...chosen.values()];
  const externalIds = unique.map((r) => r.external_id);
  const hashes = unique.map((r) => r.row_hash);
  await tx.query(
    `delete from retrieval.chunks c using unnest($4::text[], $5::text[]) as r(external_id, row_hash)
      where c.tenant_id = $1 and c.corpus = $2 and c.table_name = $3 and c.row_hash = r.row_hash and c.external_id <> r.external_id`,
    [entry.tenant_id, entry.corpus, entry.table_name, externalIds, hashes],
  );
  await tx.query(
    `insert into retrieval.chunks (tenant_id, corpus, connector_id, endpoint_uuid, table_name, scopes, row_hash, external_id, content)
     select $1, $2, $3, r.endpoint_uuid, $4, $5, r.row_hash, r.external_id, r.content
       from unnest($6::text[], $7::text[], $8::text[], $9::uuid[]) as r(row_hash, external_id, content, endpoint_uuid)
     on conflict (tenant_id, corpus, row_hash) where row_hash is not null do update
       set scopes = excluded.scopes, table_name = excluded.table_name, external_id = excluded.external_id,
           endpoint_uuid = excluded.endpoint_uuid, connector_id = excluded.connector_id, content = excluded.content,
           embedding = case when chunks.content is distinct from excluded.content then null else chunks.embedding end,
           model = case when chunks.content is distinct from excluded.content then null else chunks.model end,
           embedded_seq = case when chunks.content is distinct from excluded.content then null else chunks.embedded_seq end,
           embedded_at = case when chunks.content is distinct from excluded.content then null else chunks.embedded_at end,
           updated_at = now()
       where (chunks.scopes, chunks.table_name, chunks.external_id, chunks.endpoint_uuid, chunks.connector_id, chunks.content)
             is distinct from (excluded.scopes, excluded.table_name, excluded.external_id, excluded.endpoint_uuid, excluded.connector_id, excluded.content)`,
    [
      entry.tenant_id,
      entry.corpus,
      entry.connector_id,
      entry.table_name,
      scopes,
      hashes,
      externalIds,
      unique.map((r) => rowChunkText(entry.table_name, r.external_id, parseJsonExact(r.data))),
      unique.map((r) => (own(r) ? r.endpoint_id : entry.endpoint_uuid)),
    ],
  );
  return true;
}

/** A chunk waiting for its vector, as embedPending reads it. */
interface Unembedded {
  id: number;
  tenant_id: number;
  content: string;
}

/** What a batch came to: the vectors of the texts the model took, and the chunks it refused, alone. */
interface Embedded {
  vectors: Array<{ chunk: Unembedded; vector: Float32Array }>;
  refused: Array<{ chunk: Unembedded; error: string }>;
}

/**
 * Embeds up to `batch` chunks of active tenants that have no vector yet (oldest first, a chunk set aside until its
 * `embed_retry_at`), outside any transaction while the model works, then stores the vectors under
 * one advisory lock so that `embedded_seq` values become visible in their order (in-memory indexes
 * load what is newer than the last they saw). A vector is stored only on a chunk whose text is
 * still the one embedded: a chunk whose text changed meanwhile (its table or key named anew, a
 * workflow applied again) is embedded again by a later call.
 *
 * The batch is claimed (`embed_claimed_until`, `claimMs` from now: EMBED_CLAIM_MS) by the statement
 * that picks it, past chunks another call is claiming (`skip locked`): other processes' calls take
 * other chunks, and each text goes to the model once. The claim is given back when the call ends
 * (its outcome stored, or it failed, or was dropped); a process that dies mid-call leaves it to
 * lapse. A hub of the version before ignores claims (V11__chunk_embed_claim.sql).
 *
 * A call the model fails for the texts' sake (an HTTP error about the request, an answer it cannot
 * use, the local model failing) is split in halves, each embedded on its own, down to single texts:
 * a chunk that fails alone is set aside (`embed_attempts`, `embed_error`, `embed_retry_at`: 1 s
 * after its first failure, doubling up to PENDING_RETRY_MAX_SECONDS), logged once a failure as a
 * warning naming it and its tenant, and the others get their vectors. The splitting stops
 * SPLIT_BUDGET_MS after the call's failure (an endpoint failing every call is not called 2n - 1
 * times a pass): what was not tried by then waits for the next pass. A failure that says nothing
 * about the texts (EmbeddingUnavailable.aboutTheEndpoint: no answer, a refused address, a 401 or a
 * 429, vectors of another length) ends the call as before: nothing is stored or set aside, the same chunks are tried at the next pass.
 * Returns how many chunks got a vector.
 *
 * `outage` (the indexer pass's, src/retrieval/embedding/outage.ts): a call that failed as a whole
 * with an EmbeddingUnavailable (the endpoint's failure, or every call of the pass failing) is
 * reported to it and answers 0 rather than throwing, so that an endpoint away is logged once, then
 * at most once a minute, not at every pass; a call answered with vectors tells it the endpoint is back.
 *
 * `keepLease` (the pass's, src/retrieval/services.ts): asked before each call of the splitting, it
 * renews this process's lease on the model in use (at most a tenth of the lease apart), as the pass
 * does between its batches: a splitting of slow calls lasting longer than the lease no longer lets a
 * deferring process of another model take over while it runs. False (another model recorded now):
 * the splitting calls the model no more, and the batch is dropped (0, nothing stored or set aside).
 */
export async function embedPending(
  db: Database,
  port: EmbeddingPort,
  batch: number,
  pgvector?: { schema: string },
  signal?: AbortSignal,
  outage?: EmbeddingOutage,
  keepLease?: () => Promise<boolean>,
  claimMs = EMBED_CLAIM_MS,
): Promise<number> {
  // The batch claimed (`embed_claimed_until`) in the statement that picks it: another process's pass
  // skips it, and chunks locked by a claim being made elsewhere, rather than waiting for them.
  const { rows } = await db.crossTenantQuery<Unembedded & { claimed_until: string }>(
    'retrieval-embed',
    `update retrieval.chunks c set embed_claimed_until = now() + $2::int * interval '1 millisecond'
      where c.id in (select p.id from retrieval.chunks p
                      where p.embedding is null and (p.embed_retry_at is null or p.embed_retry_at <= now())
                        and (p.embed_claimed_until is null or p.embed_claimed_until < now()) and ${OF_ACTIVE_TENANT}
                      order by p.id limit $1 for update of p skip locked)
      returning c.id, c.tenant_id, c.content, c.embed_claimed_until::text as claimed_until`,
    [batch, claimMs],
  );
  if (rows.length === 0) return 0;
  rows.sort((a, b) => a.id - b.id);
  const claim = { ids: rows.map((r) => r.id), until: rows[0]!.claimed_until };
  // A batch that ends without storing anything gives its claim back at once, for the next pass here
  // or elsewhere (a release that fails leaves the claim to lapse).
  const release = () => db.crossTenant('retrieval-embed', (tx) => releaseClaim(tx, claim)).catch(() => undefined);
  if (signal?.aborted) {
    await release();
    return 0;
  }
  // No transaction is open while the model works: on `signal` the batch is dropped (its chunks stay
  // pending), the model's answer, should it still come, is ignored.
  let done: Embedded | undefined;
  try {
    done = await embedSplitting(port, rows, signal, keepLease);
  } catch (err) {
    await release();
    const failure = withoutTextsSent(err, rows.map((r) => r.content));
    if (!outage || !(failure instanceof EmbeddingUnavailable)) throw failure;
    outage.failed(failure);
    return 0;
  }
  if (done === undefined) {
    await release();
    return 0;
  }
  // Vectors, not only texts refused alone (a 5xx outage splits down to single texts too): the endpoint is back.
  if (done.vectors.length) outage?.answered();
  const { vectors, refused } = done;
  const stored = await db.crossTenant('retrieval-embed', async (tx) => {
    if (refused.length) {
      const { rows: failed } = await tx.query<{ id: number; tenant_id: number; attempts: number; retry_at: Date; error: string }>(
        `update retrieval.chunks c set embed_attempts = c.embed_attempts + 1, embed_error = f.error,
                embed_retry_at = now() + least(power(2, least(c.embed_attempts, ${BACKOFF_EXPONENT_MAX})), $4::int) * interval '1 second'
           from unnest($1::bigint[], $2::text[], $3::text[]) as f(id, content, error)
          where c.id = f.id and c.embedding is null and c.content = f.content
          returning c.id, c.tenant_id, c.embed_attempts as attempts, c.embed_retry_at as retry_at, f.error`,
        [refused.map((r) => r.chunk.id), refused.map((r) => r.chunk.content), refused.map((r) => r.error), PENDING_RETRY_MAX_SECONDS],
      );
      for (const f of failed) {
        logger().warn(
          { tenantId: f.tenant_id, chunkId: f.id, attempts: f.attempts, retryAt: f.retry_at, err: f.error },
          `retrieval embed: chunk ${f.id} (tenant ${f.tenant_id}) failed ${f.attempts} time(s) alone, tried again at ${f.retry_at.toISOString()}: ${f.error}`,
        );
      }
    }
    // The claim ends with the outcome stored (a chunk not tried by the split's end, or whose text changed, is free again).
    await releaseClaim(tx, claim);
    if (vectors.length === 0) return 0;
    await tx.query(`select pg_advisory_xact_lock(hashtext('svc-hub:retrieval:embed'))`);
    // With pgvector (src/retrieval/pgvector.ts) the same vector is written to `vec` as well.
    const vec = pgvector
      ? { set: `, vec = v.vec::${inExtension(pgvector.schema, 'vector')}`, from: ', $5::text[]', as: ', vec', values: [vectors.map((v) => vectorLiteral(v.vector))] }
      : { set: '', from: '', as: '', values: [] };
    const result = await tx.query(
      `update retrieval.chunks c set embedding = v.embedding${vec.set}, model = $4, embedded_seq = nextval('retrieval.embedded_seq'), embedded_at = now(),
              embed_attempts = 0, embed_error = null, embed_retry_at = null
         from unnest($1::bigint[], $2::text[], $3::bytea[]${vec.from}) as v(id, content, embedding${vec.as})
        where c.id = v.id and c.embedding is null and c.content = v.content`,
      [vectors.map((v) => v.chunk.id), vectors.map((v) => v.chunk.content), vectors.map((v) => encodeVector(v.vector)), modelName(port), ...vec.values],
    );
    return result.rowCount ?? 0;
  });
  return stored;
}

/**
 * How long embedPending's claim on a batch holds by default: longer than any call of the model (an
 * OpenAI-compatible endpoint's call, retries included, ends within its connect timeout plus its
 * timeout, 40 s by default; a failed batch's splitting adds SPLIT_BUDGET_MS and one more call), so
 * that no other process sends the same texts while it runs. A process that dies mid-call leaves its
 * chunks to the others this long after it claimed them.
 */
export const EMBED_CLAIM_MS = 5 * 60_000;

/** Clears a batch's claim, only where it is still this call's (a claim that lapsed and was taken by another process is left to it). */
async function releaseClaim(tx: Tx, claim: { ids: number[]; until: string }): Promise<void> {
  await tx.query('update retrieval.chunks set embed_claimed_until = null where id = any($1::bigint[]) and embed_claimed_until = $2::timestamptz', [claim.ids, claim.until]);
}

/** The longest failure reason the indexer logs or stores (`embed_error`); longer ones are cut, ending in `…`. */
export const REASON_CHARS = 200;
/**
 * A failure's message as the indexer logs and stores it: an embedding endpoint's error text is the
 * server's own, and some servers quote the input in it (`Input 'the tenant's row…' is too long`): the
 * rows' text would reach the hub's logs. Every run of 12 characters or more of a text sent is
 * masked ([text sent], maskTextsSent), then the message is cut to REASON_CHARS.
 */
export function failureReason(message: string, sent: readonly string[]): string {
  // Looked at up to a bound: a masked message is cut to REASON_CHARS anyway.
  const text = message.slice(0, 4 * REASON_CHARS);
  const out = maskTextsSent(text, sent);
  return out.length > REASON_CHARS || text.length < message.length ? `${out.slice(0, REASON_CHARS - 1)}…` : out;
}

/** The failure of a pass (logged by its clock job) without the texts sent: an EmbeddingUnavailable of the same kind and status whose message is failureReason's. */
function withoutTextsSent(err: unknown, sent: readonly string[]): unknown {
  if (!(err instanceof EmbeddingUnavailable)) return err;
  const reason = failureReason(err.message, sent);
  return reason === err.message ? err : new EmbeddingUnavailable(err.failure, reason, { httpStatus: err.httpStatus });
}

/** How long a failed call may be split further, from its failure: an endpoint failing every call (a 5xx outage) costs a pass this much, not 2n - 1 calls. */
export const SPLIT_BUDGET_MS = 2000;

/**
 * The vectors of `chunks` in one call of the model; when the model fails it for the texts' sake,
 * those of each half (and so on down), a text it fails alone refused, for SPLIT_BUDGET_MS from the
 * first failure (the parts not tried by then wait for the next pass). When nothing came of the
 * splitting, the first failure is thrown as it came. Undefined on `signal`, and when `keepLease`,
 * asked before each call of the splitting, says another model is recorded now.
 */
async function embedSplitting(
  port: EmbeddingPort,
  chunks: Unembedded[],
  signal: AbortSignal | undefined,
  keepLease: (() => Promise<boolean>) | undefined,
  until?: number,
): Promise<Embedded | undefined> {
  let answer: Float32Array[] | undefined;
  try {
    answer = await valueUnlessAborted(port.embed(chunks.map((c) => c.content)), signal);
  } catch (err) {
    if (err instanceof EmbeddingUnavailable && err.aboutTheEndpoint) throw err;
    if (chunks.length === 1) return { vectors: [], refused: [{ chunk: chunks[0]!, error: failureReason(storableMessage(err), [chunks[0]!.content]) }] };
    const deadline = until ?? Date.now() + SPLIT_BUDGET_MS;
    const found: Embedded = { vectors: [], refused: [] };
    const half = Math.ceil(chunks.length / 2);
    for (const part of [chunks.slice(0, half), chunks.slice(half)]) {
      if (Date.now() >= deadline) break;
      if (keepLease && !(await keepLease())) return undefined;
      const done = await embedSplitting(port, part, signal, keepLease, deadline);
      if (done === undefined) return undefined;
      found.vectors.push(...done.vectors);
      found.refused.push(...done.refused);
    }
    if (until === undefined && found.vectors.length === 0 && found.refused.length === 0) throw err;
    return found;
  }
  return answer && { vectors: answer.map((vector, i) => ({ chunk: chunks[i]!, vector })), refused: [] };
}

/** `work`'s value, or undefined as soon as `signal` aborts (work's own outcome is then ignored). */
function valueUnlessAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T | undefined> {
  return unlessAborted(work, signal).catch((err: unknown) => {
    if (signal?.aborted) return undefined;
    throw err;
  });
}

/** What checkModel found: whether this process's model is the one in use (it may embed), and which is. */
export interface ModelCheck {
  inUse: boolean;
  /** The recorded model, `provider:model (n dimensions)`. */
  recorded: string;
  /** This call recorded this process's model in place of another (or of none). */
  tookOver: boolean;
}

/**
 * Whether this process may embed: its model (name and dimensions) must be the one recorded in
 * `retrieval.embedding_model`, the one model whose vectors are stored (a trigger drops any other's:
 * V10__embedding_model.sql). Run before every pass's embedding, under the lock that stores vectors.
 *
 * - The recorded model is this one: confirmed (`seen_at`). At the process's first check (`first`),
 *   the vectors of other models are cleared too (forgetOtherModels).
 * - Another model, or none, is recorded and this is the process's first check (it has just started:
 *   in a rolling update, the new version), or no process of the recorded model has confirmed it for
 *   `leaseMs` (they are gone): this process takes over. It records its model and clears the others'
 *   vectors, which the next passes embed again.
 * - Otherwise it defers: it embeds nothing while the recorded model's processes run.
 *
 * So during a model change processes of two models never both store vectors, and after the last
 * process of the old model stops (or within `leaseMs` of it) every chunk is embedded by the new
 * model, without a restart.
 */
export async function checkModel(db: Database, port: EmbeddingPort, first: boolean, leaseMs: number): Promise<ModelCheck> {
  const model = modelName(port);
  const named = (m: string, d: number) => `${m} (${d} dimensions)`;
  return db.crossTenant('retrieval-model', async (tx) => {
    await tx.query(`select pg_advisory_xact_lock(hashtext('svc-hub:retrieval:embed'))`);
    const { rows } = await tx.query<{ model: string; dimensions: number; stale: boolean }>(
      `select model, dimensions, seen_at < now() - $1::int * interval '1 millisecond' as stale from retrieval.embedding_model`,
      [leaseMs],
    );
    const recorded = rows[0];
    if (recorded && recorded.model === model && recorded.dimensions === port.dimensions) {
      // Confirmed a tenth of a lease at most (one row every process of the model would update at every pass).
      await tx.query(`update retrieval.embedding_model set seen_at = now() where seen_at < now() - $1::int * interval '1 millisecond'`, [Math.floor(leaseMs / 10)]);
      if (first) await forgetOtherModels(tx, port);
      return { inUse: true, recorded: named(model, port.dimensions), tookOver: false };
    }
    if (recorded && !first && !recorded.stale) return { inUse: false, recorded: named(recorded.model, recorded.dimensions), tookOver: false };
    await tx.query(
      `insert into retrieval.embedding_model (model, dimensions) values ($1, $2)
       on conflict (singleton) do update set model = excluded.model, dimensions = excluded.dimensions, recorded_at = now(), seen_at = now()`,
      [model, port.dimensions],
    );
    const cleared = await forgetOtherModels(tx, port);
    // Claims of the model replaced (its processes' calls: their vectors are not stored now) are given
    // up: this model embeds those chunks at once, not when the claims of a process gone lapse.
    await tx.query('update retrieval.chunks set embed_claimed_until = null where embed_claimed_until is not null');
    logger().info(
      { model, dimensions: port.dimensions, previous: recorded && named(recorded.model, recorded.dimensions), chunks: cleared },
      `embedding model ${named(model, port.dimensions)} recorded in use${recorded ? ` in place of ${named(recorded.model, recorded.dimensions)}` : ''}: ${cleared} chunk(s) of other models will be embedded again`,
    );
    return { inUse: true, recorded: named(model, port.dimensions), tookOver: true };
  });
}

/**
 * Confirms, during a pass, that this process's model is still the one in use (`seen_at`), as checkModel
 * does at the pass's start: a pass may last longer than the lease (a backlog of pending entries turned
 * into chunks, a slow model), and a process of another model, deferring, took over when it saw no
 * confirmation for the lease, clearing every vector while this process went on embedding. False when
 * another model is recorded now (it took over): this process stops embedding.
 */
export async function confirmModel(db: Database, port: EmbeddingPort): Promise<boolean> {
  const { rows } = await db.crossTenantQuery(
    'retrieval-model',
    'update retrieval.embedding_model set seen_at = greatest(seen_at, now()) where model = $1 and dimensions = $2 returning 1',
    [modelName(port), port.dimensions],
  );
  return rows.length > 0;
}

/**
 * Vectors made by another model cannot be compared with this one's: they are cleared (and embedded
 * again by the next passes); the tenants concerned reload their in-memory indexes (a trigger moves
 * their generation). So are vectors of another length under the same model name (an
 * OpenAI-compatible model asked for other `dimensions`). Chunks embedPending set aside are tried again
 * at once. Run by checkModel (under its lock) when this process takes over and at its first check.
 */
async function forgetOtherModels(tx: Tx, port: EmbeddingPort): Promise<number> {
  const { rows } = await tx.query<{ tenant_id: number }>(
    `update retrieval.chunks set embedding = null, model = null, embedded_seq = null, embedded_at = null
      where embedding is not null and (model is distinct from $1 or octet_length(embedding) <> $2::int * 4) returning tenant_id`,
    [modelName(port), port.dimensions],
  );
  // Chunks set aside by embedPending are tried at once by this model (a start often follows a fix of
  // the model's configuration: its key, its address, the model itself).
  await tx.query('update retrieval.chunks set embed_attempts = 0, embed_error = null, embed_retry_at = null where embedding is null and embed_attempts > 0');
  return rows.length;
}

import { createHash } from 'node:crypto';
import type { Tx } from '../db/database.js';
import { logger } from '../observability/logger.js';
import { ExactNumber, jsonText, parseJsonExact } from './engine/exact-json.js';
import type { ReadPosition } from './engine/read.js';
import type { ConnectorSpec, EndpointSpec } from './types.js';

/**
 * The position a run cut by the page budget (`svc.connectors.max-pages`) leaves on its endpoint
 * (connectors.endpoints.resume, migrations/connectors/V11__endpoint_resume.sql), so that the
 * endpoint's next run reads on from there instead of reading the same first pages again for ever.
 * The runs from a fresh start to the one that completes form a chain: each sends the watermark the
 * first one was sent, carries the running maximum of `watermark_path` on, and the one that completes
 * promotes it over the whole chain and clears the position.
 */
export interface StoredResume {
  /** Where the read stopped (the engine's PageCapError `stoppedAt`). */
  read: ReadPosition;
  /** The watermark the chain's runs send (none: the chain is a full read). */
  watermark?: string;
  /** The running maximum of `watermark_path` over the chain's rows so far. */
  max?: string | number | ExactNumber;
  /** What the endpoint read when the position was stored (readFingerprint): another one makes it meaningless. */
  fingerprint: string;
}

/** The parts of a connector and an endpoint that decide what a position means. */
type Readable = Pick<ConnectorSpec, 'baseUrl' | 'graphqlPath'>;
type ReadingEndpoint = Pick<EndpointSpec, 'method' | 'path' | 'graphql' | 'query' | 'variables' | 'body' | 'soap' | 'pagination' | 'incremental' | 'target'>;

/**
 * A digest of what an endpoint reads and where it writes: its address, method, body, query and
 * variables, SOAP call, pagination, incremental mode and target table and key. A stored position
 * is resumed only by a run whose endpoint has the same digest (a re-apply changing any of these
 * clears it: applyConnector; a run in flight across such a re-apply stores one no later run takes).
 */
export function readFingerprint(connector: Readable, endpoint: ReadingEndpoint): string {
  const parts = {
    baseUrl: connector.baseUrl,
    graphqlPath: endpoint.graphql ? connector.graphqlPath : undefined,
    method: endpoint.method,
    path: endpoint.path,
    graphql: endpoint.graphql,
    query: endpoint.query,
    variables: endpoint.variables,
    body: endpoint.body,
    soap: endpoint.soap,
    pagination: endpoint.pagination,
    incremental: endpoint.incremental,
    table: endpoint.target.table,
    key: endpoint.target.unique_key,
  };
  const text = JSON.stringify(parts, (_key, value: unknown) => {
    if (typeof value === 'bigint') return String(value);
    if (value && typeof value === 'object' && !Array.isArray(value) && !(value instanceof ExactNumber)) {
      return Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    return value;
  });
  return createHash('sha256').update(text).digest('base64url');
}

/**
 * The stored position of an endpoint (its column's text) if a run of `endpoint` as it is now can
 * resume from it; undefined otherwise (none stored, or stored for what the endpoint read before a
 * re-apply: logged, and the run starts fresh).
 */
export function resumableFrom(text: string | undefined, connector: Readable & { name: string }, endpoint: ReadingEndpoint & { id: string }): StoredResume | undefined {
  if (text === undefined) return undefined;
  let stored: StoredResume;
  try {
    stored = parseJsonExact(text) as StoredResume;
  } catch {
    return undefined;
  }
  if (stored?.fingerprint !== readFingerprint(connector, endpoint) || !stored.read?.position) {
    logger().warn({ connector: connector.name, endpoint: endpoint.id }, `the stored position of ${connector.name}/${endpoint.id} was left by a run of what the endpoint read before a re-apply: not resumed, this run starts from the first page`);
    return undefined;
  }
  return stored;
}

/**
 * The condition under which a run's end may change its endpoint's watermark or position (`$1` the
 * endpoint, `$2` the instant its watermark was set or cleared when the run began, `$3`, `$4` the
 * table and unique_key the run wrote): nothing set or cleared them since (a delete or purge of rows
 * of its table, a reset, a re-apply changing its key or table, all of which clear both), and the
 * endpoint as stored writes what the run wrote.
 */
export const RUN_END_FENCE = `w.uuid = $1 and w.watermark_updated_at is not distinct from $2::timestamptz and w.target_table = $3
        and exists (select 1 from connectors.connectors c cross join lateral jsonb_array_elements(c.spec -> 'endpoints') e
                     where c.id = w.connector_id and e ->> 'uuid' = w.uuid::text and e -> 'target' ->> 'unique_key' = $4)`;

/** The columns that hold a stored position, as an update clears them. */
export const CLEAR_RESUME = 'resume = null, resume_shown = null, resume_run = null';

/**
 * Stores where a run cut by the page budget stopped (fenced as RUN_END_FENCE): its endpoint's next
 * run resumes there. The watermark is left as it is. Says whether it was stored.
 */
export async function storeResume(
  tx: Tx,
  endpointUuid: string,
  read: { at: string | null },
  target: { table: string; unique_key: string },
  resume: StoredResume,
  runId: string,
): Promise<boolean> {
  const { rowCount } = await tx.query(`update connectors.endpoints w set resume = $5, resume_shown = $6, resume_run = $7 where ${RUN_END_FENCE}`, [
    endpointUuid,
    read.at,
    target.table,
    target.unique_key,
    jsonText(resume),
    resume.read.shown,
    runId,
  ]);
  return (rowCount ?? 0) > 0;
}

/** Clears an endpoint's stored position (a chain that completed without a watermark to promote, or whose position went stale), fenced as RUN_END_FENCE. */
export async function clearResume(tx: Tx, endpointUuid: string, read: { at: string | null }, target: { table: string; unique_key: string }): Promise<void> {
  await tx.query(`update connectors.endpoints w set ${CLEAR_RESUME} where ${RUN_END_FENCE} and w.resume is not null`, [endpointUuid, read.at, target.table, target.unique_key]);
}

import { lazyCounter } from '../observability/metrics.js';

/** Spec 1 Observability: a run reaching a terminal status (best-effort, no connector tag). */
export const runsTotal = lazyCounter({ name: 'svc_runs_total', help: 'Connector runs that reached a terminal status', labelNames: ['status'] });

/** Rows quarantined: real losses only. */
export const deadLettersTotal = lazyCounter({ name: 'svc_dead_letters_total', help: 'Rows captured in the dead-letter queue', labelNames: ['reason'] });

/**
 * Spec 1 Observability, the csv_filesource family, on the one-shot CSV ingest path. The body of
 * `POST /api/platform/sources/csv/ingest` is the file (transport `upload`): opening it is reading it
 * as CSV (`result` ok, or error when it is refused as not CSV), its bytes are the body's. An upload
 * has no listing and no post-ingest action, so `csv_filesource_list_total`,
 * `csv_filesource_list_duration_seconds` and `csv_filesource_after_process_total` never fire.
 * `tenant` (the tenant's id) keeps each tenant's series its own: the connector name is the caller's
 * to choose, and /q/metrics is unauthenticated, so without it one tenant ingesting under another's
 * connector name would add to that tenant's series.
 */
export const csvOpenTotal = lazyCounter({ name: 'csv_filesource_open_total', help: 'CSV files opened for a one-shot ingest', labelNames: ['transport', 'connector', 'tenant', 'result'] });
export const csvBytesReadTotal = lazyCounter({ name: 'csv_filesource_bytes_read_total', help: 'Bytes of CSV files read by one-shot ingests', labelNames: ['transport', 'connector', 'tenant'] });

/**
 * The most connector names of one tenant that label the csv_filesource series of a process. The
 * name is the caller's to choose, and each new one would add series that stay until the process
 * ends: without a bound a tenant could grow /q/metrics (and every scraper's store) without end,
 * each with a request that writes nothing (a body refused as not CSV).
 */
export const CONNECTOR_LABELS_PER_TENANT = 100;

/** What counts a tenant's further names: no connector name can be it (names are lower-case letters, digits and dashes). */
export const OTHER_CONNECTORS = '_other';

const labelledConnectors = new Map<number, Set<string>>();

/**
 * The `connector` label of a tenant's CSV source: its name while the tenant has labelled fewer than
 * CONNECTOR_LABELS_PER_TENANT names in this process (or this one already), OTHER_CONNECTORS after.
 */
export function connectorLabel(tenantId: number, name: string): string {
  const names = labelledConnectors.get(tenantId) ?? new Set<string>();
  labelledConnectors.set(tenantId, names);
  if (names.has(name)) return name;
  if (names.size >= CONNECTOR_LABELS_PER_TENANT) return OTHER_CONNECTORS;
  names.add(name);
  return name;
}

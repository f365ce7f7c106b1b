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
 */
export const csvOpenTotal = lazyCounter({ name: 'csv_filesource_open_total', help: 'CSV files opened for a one-shot ingest', labelNames: ['transport', 'connector', 'result'] });
export const csvBytesReadTotal = lazyCounter({ name: 'csv_filesource_bytes_read_total', help: 'Bytes of CSV files read by one-shot ingests', labelNames: ['transport', 'connector'] });

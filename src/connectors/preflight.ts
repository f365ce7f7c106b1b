import { firstPage } from './engine/read.js';
import type { EngineContext } from './engine/read.js';
import { TooDeepForPath } from './jsonpath.js';
import { externalIdOf, keyProblem, missingKeyReason, prepareRow, unstorableRow } from './target/rows.js';
import { cutDeeperThan, MAX_JSON_DEPTH } from '../validation/input-limits.js';
import type { ConnectorSpec, EndpointSpec } from './types.js';

interface PreflightEndpoint {
  id: string;
  method: string;
  status: number;
  items: number;
  verdict: string;
  /** What a run leaves out of the request too (a declared header whose value_env resolves to nothing). */
  warnings?: string[];
  url?: string;
  sample?: unknown;
}

interface PreflightReport {
  ok: boolean;
  endpoints: PreflightEndpoint[];
  /** Disabled endpoints, not tried. */
  skipped: number;
}

/**
 * Spec 3 pre-flight: the first request a run would send, for every enabled endpoint, once (no
 * retry), writing nothing. The overall result fails when any endpoint did not answer readable data,
 * or answered records none of which its `unique_key` finds a key in (a run would dead-letter every
 * row); records of which only some lack a key give a warning, and so do records a run would
 * dead-letter `unstorable` (text PostgreSQL refuses, nesting too deep), each named as the run names it.
 */
export async function preflight(connector: ConnectorSpec, context: (connector: ConnectorSpec) => EngineContext): Promise<PreflightReport> {
  const endpoints: PreflightEndpoint[] = [];
  let skipped = 0;
  for (const endpoint of connector.endpoints) {
    if (!endpoint.enabled) {
      skipped++;
      continue;
    }
    const report = await firstPage(connector, endpoint, context(connector));
    const keys = report.verdict === 'ok' ? keyCheck(endpoint, report.items) : {};
    const entry: PreflightEndpoint = { id: endpoint.id, method: report.method, status: report.status, items: report.items.length, verdict: keys.verdict ?? report.verdict };
    const unstorable = report.verdict === 'ok' ? unstorableCheck(endpoint, report.items) : undefined;
    const warnings = [...(report.warnings ?? []), ...(keys.warning ? [keys.warning] : []), ...(unstorable ? [unstorable] : [])];
    if (warnings.length > 0) entry.warnings = warnings;
    if (report.url) entry.url = report.url;
    if (report.sample !== undefined) entry.sample = report.sample;
    endpoints.push(entry);
  }
  return { ok: endpoints.every((e) => e.verdict === 'ok'), endpoints, skipped };
}

/**
 * What the records of the first answer say of the endpoint's `unique_key` (read as a run reads it):
 * a verdict when it gives no key in any (the run would store no row), a warning when it does in some.
 * It "resolves to nothing" when none of those records has it; when some have it but not as one value
 * (a SOAP key element written twice), the first of them is named with the reason its dead letter gives.
 */
function keyCheck(endpoint: EndpointSpec, items: unknown[]): { verdict?: string; warning?: string } {
  const key = endpoint.target.unique_key;
  const soap = endpoint.soap !== undefined;
  let missing = 0;
  let named = '';
  items.forEach((item, i) => {
    if (asRunReads(item, (read) => externalIdOf(read, key)) !== undefined) return;
    missing++;
    if (named === '' && asRunReads(item, (read) => keyProblem(read, key, soap)) !== undefined) named = ` (record ${i + 1}: ${asRunReads(item, (read) => missingKeyReason(read, key, soap))})`;
  });
  if (missing === 0) return {};
  const gives = named === '' ? 'resolves to nothing in' : 'gives no key in';
  if (missing === items.length) {
    return {
      verdict: `unique_key ${key} ${gives} ${items.length === 1 ? 'the one record' : `all ${items.length} records`} read${named}: a run would dead-letter every row (missing_key) and store none; fix target.unique_key`,
    };
  }
  return { warning: `unique_key ${key} ${gives} ${missing} of the ${items.length} records read${named}: a run dead-letters those rows (missing_key)` };
}

/**
 * What `read` finds in a record as a run reads it. A key path searching at any depth (..) is not run over a record
 * nesting past its limit: a run dead-letters such a record (unstorable, deeper than MAX_JSON_DEPTH) with the key
 * read from the levels it keeps, and so is it read here.
 */
function asRunReads<T>(item: unknown, read: (item: unknown) => T): T {
  try {
    return read(item);
  } catch (err) {
    if (!(err instanceof TooDeepForPath)) throw err;
    return read(cutDeeperThan(item, MAX_JSON_DEPTH, {}));
  }
}

/** Records named at most in the warning of unstorable records. */
const UNSTORABLE_NAMED = 3;

/**
 * The records of the first answer a run would dead-letter `unstorable` before writing them (a NUL,
 * bytes that are not valid UTF-8 or half a surrogate pair in a key or a string, nesting deeper than
 * MAX_JSON_DEPTH), with the reason a run gives, the first few by their place in the answer; none
 * when there are none. Those without a key are missing_key (keyCheck). What only PostgreSQL refuses
 * (a number out of its column's range, a key too long to index) is not known here.
 */
function unstorableCheck(endpoint: EndpointSpec, items: unknown[]): string | undefined {
  const found: string[] = [];
  items.forEach((item, i) => {
    const row = prepareRow(item, endpoint.target);
    const why = row.tooDeep !== undefined ? `$ ${row.tooDeep}` : row.externalId === undefined ? undefined : unstorableRow(row);
    if (why) found.push(`record ${i + 1}: ${why}`);
  });
  if (found.length === 0) return undefined;
  const named = found.slice(0, UNSTORABLE_NAMED).join('; ') + (found.length > UNSTORABLE_NAMED ? `; and ${found.length - UNSTORABLE_NAMED} more` : '');
  return `${found.length} of the ${items.length} records read cannot be stored: a run dead-letters ${found.length === 1 ? 'it' : 'them'} (unstorable): ${named}`;
}

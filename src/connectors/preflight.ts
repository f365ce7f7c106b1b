import { firstPage } from './engine/read.js';
import type { EngineContext } from './engine/read.js';
import { TooDeepForPath } from './jsonpath.js';
import { externalIdOf } from './target/rows.js';
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
 * row); records of which only some lack a key give a warning.
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
    const warnings = [...(report.warnings ?? []), ...(keys.warning ? [keys.warning] : [])];
    if (warnings.length > 0) entry.warnings = warnings;
    if (report.url) entry.url = report.url;
    if (report.sample !== undefined) entry.sample = report.sample;
    endpoints.push(entry);
  }
  return { ok: endpoints.every((e) => e.verdict === 'ok'), endpoints, skipped };
}

/**
 * What the records of the first answer say of the endpoint's `unique_key` (read as a run reads it):
 * a verdict when it resolves to nothing in every one (the run would store no row), a warning when
 * it does in some.
 */
function keyCheck(endpoint: EndpointSpec, items: unknown[]): { verdict?: string; warning?: string } {
  const key = endpoint.target.unique_key;
  const missing = items.filter((item) => keyOf(item, key) === undefined).length;
  if (missing === 0) return {};
  if (missing === items.length) {
    return {
      verdict: `unique_key ${key} resolves to nothing in ${items.length === 1 ? 'the one record' : `all ${items.length} records`} read: a run would dead-letter every row (missing_key) and store none; fix target.unique_key`,
    };
  }
  return { warning: `unique_key ${key} resolves to nothing in ${missing} of the ${items.length} records read: a run dead-letters those rows (missing_key)` };
}

/**
 * A record's key as a run reads it. A key path searching at any depth (..) is not run over a record
 * nesting past its limit: a run dead-letters such a record (unstorable, deeper than MAX_JSON_DEPTH)
 * with the key read from the levels it keeps, and so is it read here.
 */
function keyOf(item: unknown, key: string): string | undefined {
  try {
    return externalIdOf(item, key);
  } catch (err) {
    if (!(err instanceof TooDeepForPath)) throw err;
    return externalIdOf(cutDeeperThan(item, MAX_JSON_DEPTH, {}), key);
  }
}

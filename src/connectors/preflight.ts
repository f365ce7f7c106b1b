import { firstPage } from './engine/read.js';
import type { EngineContext } from './engine/read.js';
import type { ConnectorSpec } from './types.js';

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
 * retry), writing nothing. The overall result fails when any endpoint did not answer readable data.
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
    const entry: PreflightEndpoint = { id: endpoint.id, method: report.method, status: report.status, items: report.items.length, verdict: report.verdict };
    if (report.warnings) entry.warnings = report.warnings;
    if (report.url) entry.url = report.url;
    if (report.sample !== undefined) entry.sample = report.sample;
    endpoints.push(entry);
  }
  return { ok: endpoints.every((e) => e.verdict === 'ok'), endpoints, skipped };
}

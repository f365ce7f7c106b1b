import type { Client } from './api-client.js';
import { until } from './until.js';

/**
 * Waits until the connector run `id` (GET /api/platform/runs/{id} on the hub at `base`) has ended,
 * whatever its outcome, and returns its record as the API gives it.
 */
export async function runEnded<T extends { status: string }>(base: string, id: string, headers: Record<string, string> = { 'X-Tenant-ID': '1' }, timeoutMs = 30_000): Promise<T> {
  let last: T | undefined;
  return until(
    `run ${id} to end`,
    async () => {
      last = (await (await fetch(`${base}/api/platform/runs/${id}`, { headers })).json()) as T;
      return last.status !== 'Running' && last.status !== 'Pending' && last;
    },
    { timeoutMs, everyMs: 50, detail: () => `last seen ${JSON.stringify(last)}` },
  );
}

/** Waits until the export run `id` of export `name` (read through `api`) is no longer Running, and returns its record. */
export async function exportRunEnded<T extends { status?: unknown }>(api: Client, name: string, id: string, timeoutMs = 30_000): Promise<T> {
  let last: T | undefined;
  return until(
    `export run ${name}/${id} to end`,
    async () => {
      last = (await api.get(`/api/exports/${name}/runs/${id}`)).body as T;
      return last.status !== 'Running' && last;
    },
    { timeoutMs, everyMs: 50, detail: () => `last seen ${JSON.stringify(last)}` },
  );
}

import pg from 'pg';

/**
 * What the database's client backends are doing during a hub run (`BENCH_WAITS=1`, bench/ingest.ts): pg_stat_activity
 * sampled every few milliseconds, each backend that is not idle counted by its state, its wait event (`CPU` for none)
 * and, when active, the start of its statement; and the backends that started during the run, per application name.
 * `idle in transaction` / `Client:ClientRead` is a transaction waiting for the hub's next message, `active` /
 * `Client:ClientRead` on a COPY a COPY waiting for its data. The sampling is itself a load on the database (a query
 * every few milliseconds): for a diagnosis, not beside figures that are reported.
 */
export function startWaitSampler(url: string): { stop(): Promise<WaitHistogram> } {
  const client = new pg.Client({ connectionString: url, application_name: 'bench wait sampler' });
  const samples: Record<string, number> = {};
  let running = true;
  const loop = (async (): Promise<WaitHistogram> => {
    await client.connect();
    try {
      const since = (await client.query<{ now: string }>('select clock_timestamp()::text as now')).rows[0]!.now;
      while (running) {
        const { rows } = await client.query<{ state: string; wait: string; statement: string }>(
          `select state, coalesce(wait_event_type || ':' || wait_event, 'CPU') as wait, left(query, 12) as statement from pg_stat_activity
            where backend_type = 'client backend' and pid <> pg_backend_pid() and state <> 'idle'`,
        );
        for (const r of rows) {
          const key = `${r.state} ${r.wait}${r.state === 'active' ? ` [${r.statement.replace(/\s+/g, ' ')}…]` : ''}`;
          samples[key] = (samples[key] ?? 0) + 1;
        }
        await new Promise((resolve) => setTimeout(resolve, 3));
      }
      const { rows } = await client.query<{ app: string; started: number }>(
        `select application_name as app, count(*)::int as started from pg_stat_activity
          where backend_type = 'client backend' and pid <> pg_backend_pid() and backend_start > $1::timestamptz group by 1 order by 1`,
        [since],
      );
      return { samples, startedDuringRun: Object.fromEntries(rows.map((r) => [r.app, r.started])) };
    } finally {
      await client.end();
    }
  })();
  return {
    stop() {
      running = false;
      return loop;
    },
  };
}

export interface WaitHistogram {
  /** Samples per `state wait_event [statement…]`. */
  samples: Record<string, number>;
  /** Client backends (still connected at the end) that started during the run, per application name. */
  startedDuringRun: Record<string, number>;
}

/** The histogram as shares of all samples, largest first. */
export function formatWaits(label: string, waits: WaitHistogram): string {
  const total = Object.values(waits.samples).reduce((a, b) => a + b, 0);
  const lines = Object.entries(waits.samples)
    .sort((a, b) => b[1] - a[1])
    .map(([key, n]) => `  ${((100 * n) / total).toFixed(1).padStart(5)}% ${key}`);
  const started = Object.entries(waits.startedDuringRun).map(([app, n]) => `${app} ${n}`).join(', ') || 'none';
  return `backend states of ${label} (${total} samples):\n${lines.join('\n')}\n  backends started during the run: ${started}`;
}

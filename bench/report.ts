/**
 * Renders the figures of bench/results/<name>.json as the Markdown tables of docs/performance.md and
 * writes them there, between the markers `<!-- bench:<name> -->` and `<!-- /bench:<name> -->` (the
 * prose around them is kept). `npm run bench` ends with it after a full run; run it alone with
 * `npm run bench:report` (`-- --print` to print the tables instead of writing them).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));
const DOC = fileURLToPath(new URL('../docs/performance.md', import.meta.url));

// biome-ignore lint/suspicious/noExplicitAny: the results are JSON written by the benches themselves
type Json = any;

const n = (value: number) => (Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : '-');
const f = (value: number, digits = 1) => (Number.isFinite(value) ? value.toFixed(digits) : '-');
const met = (ok: boolean) => (ok ? 'met' : '**not met**');

function row(cells: Array<string | number>): string {
  return `| ${cells.join(' | ')} |`;
}

function header(cells: string[], align: string[]): string {
  return `${row(cells)}\n${row(align)}`;
}

function machine(r: Json): string {
  const load = r.loadAverage ? `load average ${r.loadAverage.atStart.join(' / ')} at the start, ${r.loadAverage.atEnd.join(' / ')} at the end (1 / 5 / 15 min)` : '';
  const probe = r.probe
    ? `; a loopback round trip between two processes ${n(r.probe.loopbackRoundTripUs.p50)} µs (p50), SHA-256 on one core ${n(r.probe.sha256MBps)} MB/s at the start`
    : '';
  const code = r.code ? `; code of commit ${String(r.code.commit).slice(0, 12)}${r.code.dirty ? ' with uncommitted changes' : ''}` : '';
  return `Run of ${r.date} (${r.cpus} × ${r.cpuModel}, Node ${r.node}; ${load}${probe}${code}; ${f(r.benchSeconds, 0)} s).`;
}

function ingest(r: Json): string {
  const lines: string[] = [];
  lines.push(`${machine(r)} ${n(r.rows)} rows, ${r.rounds} rounds, chunks of ${n(r.chunkSize)}; medians of the rounds, ratios the medians of each round's own ratio.`);
  lines.push('');
  lines.push(
    header(
      ['dialect', 'hub rows/s (min–max)', 'COPY ceiling', '**hub/COPY**', 'with the merge', 'fetch ceiling', 'hub/fetch', 'run s', 'peak RSS MB', 'stored rows checked'],
      ['---', '---:', '---:', '---:', '---:', '---:', '---:', '---:', '---:', '---'],
    ),
  );
  for (const d of ['offset', 'cursor']) {
    const x = r.dialects[d];
    lines.push(
      row([
        d,
        `${n(x.rowsPerSec)} (${n(x.rowsPerSecRange[0])}–${n(x.rowsPerSecRange[1])})`,
        n(r.ceilingCopyRowsPerSec),
        `**${f(x.ratioToCopy, 3)}**`,
        x.ratioToCopyWithMerge === undefined ? '-' : f(x.ratioToCopyWithMerge, 3),
        n(x.ceilingFetchRowsPerSec),
        f(x.ratioToFetch, 3),
        f(x.seconds, 2),
        f(x.peakRssMb, 0),
        r.verified?.storedRowsMatchSource ? `${n(r.rows)} rows, ${n(r.rows)} distinct keys, each run` : 'no',
      ]),
    );
  }
  lines.push('');
  // Judged on the lower of the two ratios of each dialect: as the run sees it, and with each side's deferred GIN merge.
  const worst = Math.min(...['offset', 'cursor'].flatMap((d) => [r.dialects[d].ratioToCopy, r.dialects[d].ratioToCopyWithMerge ?? r.dialects[d].ratioToCopy]));
  lines.push(`Target hub/COPY ≥ 0.8, with and without the merge: ${met(worst >= 0.8)} (${f(worst, 3)} at the lowest).`);
  if (r.ceilingCopy) {
    const c = r.ceilingCopy;
    const times = (form: string) => c.fasterByRound.filter((x: string) => x === form).length;
    lines.push('');
    lines.push(
      c.threeStreamsRowsPerSec === undefined
        ? `COPY ceiling: each round's faster of one stream (${n(c.oneStreamRowsPerSec)} rows/s, median) and two concurrent streams on two connections (${n(c.twoStreamsRowsPerSec)} rows/s); two streams were the faster in ${times('two streams')} of ${c.fasterByRound.length} rounds.`
        : `COPY ceiling: each round's fastest of one stream (${n(c.oneStreamRowsPerSec)} rows/s, median), two concurrent streams on two connections (${n(c.twoStreamsRowsPerSec)} rows/s) and three on three (${n(c.threeStreamsRowsPerSec)} rows/s); the fastest was one stream in ${times('one stream')}, two in ${times('two streams')} and three in ${times('three streams')} of ${c.fasterByRound.length} rounds.`,
    );
  }
  if (r.rateLimit && typeof r.rateLimit === 'object') {
    const l = r.rateLimit;
    const setup = r.dialects.offset.tableSetupSeconds;
    lines.push('');
    lines.push(
      `Rate limit \`${l.limit}\` (${l.setBy === 'BENCH_RATE_LIMIT' ? 'set by `BENCH_RATE_LIMIT`' : "the bench's default"}): ${n(l.requestsPerRun)} requests per run allow a run as short as ${f(l.minimumRunSeconds, 2)} s${l.binds ? ' (**it paced the hub runs**)' : ' (it never made a request wait)'}.${setup === undefined ? '' : ` Each run's table made before its clock: ${f(setup, 3)} s (offset), ${f(r.dialects.cursor.tableSetupSeconds, 3)} s (cursor), medians, not in the run's time.`}`,
    );
  }
  if (r.breakdown.copyMergeSeconds !== undefined) {
    lines.push('');
    lines.push(
      `Deferred index work: a run and the COPY leave new entries of the GIN index on \`data\` in its pending list; the bench merges it after each (\`gin_clean_pending_list\`) and times it: ${f(r.dialects.offset.mergeSeconds, 2)} s after an offset run, ${f(r.dialects.cursor.mergeSeconds, 2)} s after a cursor run, ${f(r.breakdown.copyMergeSeconds, 2)} s after the COPY (medians). "with the merge" adds each side's merge to its time${r.ceilingCopy ? ' (the COPY side: the shortest of its forms with their merges)' : ''}.`,
    );
  }
  if (r.soap) {
    const x = r.soap;
    lines.push('');
    lines.push(
      `SOAP (\`soap-generic\`, the demo source's SOAP 1.1 service, same rows, pages and promoted columns, stored rows counted): ${n(x.rowsPerSec)} rows/s, **${f(x.ratioToRestOffset, 3)}** × the REST offset run of the same round (target ≥ ${x.target}: ${met(x.ratioToRestOffset >= x.target)}), ${f(x.ratioToCopy, 3)} × COPY.`,
    );
  }
  if (r.indexing) {
    const x = r.indexing;
    lines.push('');
    lines.push(
      `Retrieval hand-off (offset): ${n(x.withRowsPerSec)} rows/s with it, ${n(x.withoutRowsPerSec)} rows/s on a hub without it (\`svc.retrieval.index-rows: false\`), ratio **${f(x.ratio, 3)}**; target ≥ ${x.target}: ${met(x.ratio >= x.target)}. The pending entries were counted after each round: every row of the indexed runs, none of the other.`,
    );
  }
  lines.push('');
  lines.push(header(['write path alone (same rows, once)', 'rows/s'], ['---', '---:']));
  lines.push(row(['`prepareRow` (canonical JSON, sha256, promoted values)', n(r.breakdown.prepareRowRowsPerSec)]));
  const merged = r.breakdown.mergeChunksRowsPerSec !== undefined;
  lines.push(row([`\`upsertChunk\`, chunks of ${n(r.chunkSize)}, one after the other${merged ? ', a first load (plain insert)' : ''}`, n(r.breakdown.upsertChunksRowsPerSec)]));
  if (merged) lines.push(row([`\`upsertChunk\`, the same chunks merged (\`on conflict … do update\`, as after a stored key)`, n(r.breakdown.mergeChunksRowsPerSec)]));
  lines.push(row([r.ceilingCopy ? 'COPY, same shape: the ceiling (median of the rounds)' : 'COPY, same shape (median of the rounds)', n(r.ceilingCopyRowsPerSec)]));
  if (r.ceilingCopy) {
    lines.push(row(['COPY, same shape, one stream', n(r.ceilingCopy.oneStreamRowsPerSec)]));
    lines.push(row(['COPY, same shape, two concurrent streams', n(r.ceilingCopy.twoStreamsRowsPerSec)]));
    if (r.ceilingCopy.threeStreamsRowsPerSec !== undefined) lines.push(row(['COPY, same shape, three concurrent streams', n(r.ceilingCopy.threeStreamsRowsPerSec)]));
  }
  lines.push(row(['COPY, same shape without the GIN index on `data`', n(r.breakdown.copyWithoutGinIndexRowsPerSec)]));
  lines.push('');
  const cpu = (c: Json) => `${f(c.benchProcess, 2)} / ${c.postgres === null ? '-' : f(c.postgres, 2)}`;
  lines.push(header(['CPU seconds (mean of the rounds)', 'client process / PostgreSQL'], ['---', '---:']));
  lines.push(row(['hub run, offset', cpu(r.dialects.offset.cpuSeconds)]));
  lines.push(row(['hub run, cursor', cpu(r.dialects.cursor.cpuSeconds)]));
  if (r.ceilingCopy) {
    lines.push(row(['COPY ceiling, one stream', cpu(r.ceilingCopy.oneStreamCpuSeconds)]));
    lines.push(row(['COPY ceiling, two streams', cpu(r.ceilingCopy.twoStreamsCpuSeconds)]));
    if (r.ceilingCopy.threeStreamsCpuSeconds) lines.push(row(['COPY ceiling, three streams', cpu(r.ceilingCopy.threeStreamsCpuSeconds)]));
  } else lines.push(row(['COPY ceiling', cpu(r.breakdown.copyCpuSeconds)]));
  if (r.breakdown.copyMergeCpuSeconds) {
    lines.push(row(['pending-list merge after a hub run, offset', cpu(r.breakdown.hubMergeCpuSeconds.offset)]));
    lines.push(row(['pending-list merge after a hub run, cursor', cpu(r.breakdown.hubMergeCpuSeconds.cursor)]));
    lines.push(row(['pending-list merge after the COPY', cpu(r.breakdown.copyMergeCpuSeconds)]));
  }
  lines.push(row([`\`upsertChunk\` alone${merged ? ', first load' : ''}`, cpu(r.breakdown.upsertChunksCpuSeconds)]));
  if (merged) lines.push(row(['`upsertChunk` alone, merged', cpu(r.breakdown.mergeChunksCpuSeconds)]));
  return lines.join('\n');
}

function deliver(r: Json): string {
  const lines: string[] = [];
  lines.push(`${machine(r)} Integration with \`authMode: HMAC\`, \`svc.webhook.concurrency-per-integration\` ${r.concurrencyPerIntegration}.`);
  lines.push('');
  lines.push(header(['', 'per s', 'ceiling per s', '**ratio**', 'p50 ms', 'p99 ms', 'what the receiver got'], ['---', '---:', '---:', '---:', '---:', '---:', '---']));
  const got = (v: Json) => `${n(v.received)} of ${n(v.events)}, ${n(v.duplicates)} duplicates, ${n(v.signaturesVerified)} signatures right, ${n(v.badSignatures + v.unsigned)} wrong or missing`;
  const d = r.drain;
  lines.push(row([`drain of ${n(d.events)} pre-filled events (commit → last arrival)`, n(d.deliveriesPerSec), n(d.ceiling.requestsPerSec), `**${f(d.ratio, 3)}**`, '-', '-', got(d.verified)]));
  const around = d.ceiling.before && d.ceiling.after ? `, the mean of ${n(d.ceiling.before.requestsPerSec)}/s before the drain and ${n(d.ceiling.after.requestsPerSec)}/s after` : '';
  lines.push(
    row([
      `ceiling: plain POSTs, ${d.ceiling.concurrency} in flight (send → arrival${around})`,
      n(d.ceiling.requestsPerSec),
      n(d.ceiling.requestsPerSec),
      '1.000',
      f(d.ceiling.latencyMs.p50),
      f(d.ceiling.latencyMs.p99),
      `${n(d.ceiling.requests)} of ${n(d.ceiling.requests)}${d.ceiling.before ? ' in each run' : ''}`,
    ]),
  );
  const x = r.fixedRate;
  lines.push(
    row([
      `${n(x.rate)} events/s asked, ${n(x.emitEventsPerSec)}/s written by a separate process in transactions of ${n(x.batch)}${x.statements === 'chunk' ? ', one statement per transaction' : x.statements === 'event' ? ', one statement per event' : ''} (commit → arrival)`,
      n(x.emitEventsPerSec),
      '-',
      '-',
      `**${f(x.latencyMs.p50)}**`,
      f(x.latencyMs.p99),
      got(x.verified),
    ]),
  );
  lines.push(row([`one event at a time (${n(r.idle.events)} events)`, '-', '-', '-', f(r.idle.latencyMs.p50), f(r.idle.latencyMs.p99), `${n(r.idle.events)} of ${n(r.idle.events)}`]));
  if (d.cpuUsPerDelivery && d.ceiling.cpuUsPerDelivery) {
    const cpu = (c: Json) => [n(c.hubProcess), c.postgres === null ? '-' : n(c.postgres), c.receiver === null ? '-' : n(c.receiver), `**${n(c.all)}**`];
    lines.push('');
    lines.push(header(['CPU per delivery, µs', 'hub process', 'PostgreSQL', 'receiver', '**all**'], ['---', '---:', '---:', '---:', '---:']));
    lines.push(row(['drain', ...cpu(d.cpuUsPerDelivery)]));
    if (x.cpuUsPerDelivery) lines.push(row([`${n(x.rate)} events/s (PostgreSQL: the hub's statements; the writer's backends left out)`, ...cpu(x.cpuUsPerDelivery)]));
    lines.push(row(['ceiling: plain POSTs', ...cpu(d.ceiling.cpuUsPerDelivery)]));
  }
  if (d.eventLoopUtilization !== undefined) {
    lines.push('');
    lines.push(`During the drain the hub's event loop was busy ${f(d.eventLoopUtilization * 100, 1)} % of the time (\`performance.eventLoopUtilization\`, the bench's bookkeeping of arrivals included).`);
  }
  if (x.transactionsPerDelivery !== undefined) {
    lines.push('');
    lines.push(
      `At ${n(x.rate)} events/s: ${f(x.transactionsPerDelivery, 3)} PostgreSQL transactions per delivery (every autocommit statement is one; pg_stat_database, the writer's ${f(x.writerTransactionsPerDelivery, 3)} left out); the writer's backends spent ${n(Math.round((x.writersCpuSeconds * 1e6) / x.events))} µs of CPU per event written (${x.statements === 'chunk' ? `one INSERT per transaction of ${n(x.batch)} events, as a connector run writes a chunk's events` : 'one INSERT per event'})${x.emitterCpuSeconds !== undefined ? ` and its process ${n(Math.round((x.emitterCpuSeconds * 1e6) / x.events))} µs` : ''}: the load the machine carried besides the hub.`,
    );
  }
  if (x.latencyFromCommitSentMs) {
    const ms = (l: Json) => `p50 ${f(l.p50)}, p99 ${f(l.p99)}, max ${f(l.max)} ms`;
    lines.push('');
    lines.push(
      `At ${n(x.rate)} events/s, from the writer's acknowledgement of COMMIT to the arrival (the table's, and the target's): ${ms(x.latencyMs)}; from just before it sent COMMIT: ${ms(x.latencyFromCommitSentMs)}. The commit took effect between the two.`,
    );
  }
  if (x.tail && x.eventLoopDelay && x.gc) {
    const pauses = (g: Json) => `${n(g.count)} (${f(g.totalMs)} ms in all, the longest ${f(g.maxMs)})`;
    lines.push('');
    lines.push(
      `At ${n(x.rate)} events/s, deliveries over ${n(x.tail.slowMs)} ms by second of the phase (by commit): ${x.tail.slowBySecond.join(', ')}; the worst second (${n(x.tail.worstSecond.second)}) p99 ${f(x.tail.worstSecond.p99Ms)} ms over ${n(x.tail.worstSecond.events)} events. The hub's process meanwhile: event-loop delay p99 ${f(x.eventLoopDelay.p99Ms, 2)} ms, max ${f(x.eventLoopDelay.maxMs, 2)} ms; GC scavenges ${pauses(x.gc.minor)}, mark-compacts ${pauses(x.gc.major)}.`,
    );
  }
  const fc = r.finalCheck;
  if (fc) {
    lines.push('');
    lines.push(
      `Final check, once the hub's journal had no delivery open (waited for ${f(fc.waitedSeconds, 2)} s): ${n(fc.deliveries)} deliveries, ${n(fc.failed)} failed, ${n(fc.retried)} retried; the receiver got ${n(fc.receivedIds)} event ids over the run for ${n(fc.eventsWritten)} written (${n(fc.missing)} missing, ${n(fc.duplicates)} duplicates, ${n(fc.unexpectedIds)} never written) and ${n(fc.ceilingReceivedIds)} ceiling ids of ${n(fc.ceilingIds)} sent (${n(fc.ceilingDuplicates)} duplicates, ${n(fc.ceilingUnexpectedIds)} never sent); the fixed rate committed ${n(fc.fixedRateCommitted)} events of ${n(x.events)}.`,
    );
  }
  lines.push('');
  lines.push(
    `Targets: drain ≥ ${r.targets.drainRatio} × the ceiling ${met(r.targets.drainRatioMet)}; p50 < ${r.targets.fixedRateP50Ms} ms at ${n(x.rate)} events/s ${met(r.targets.fixedRateP50Met)}${x.emitEventsPerSec < x.rate * 0.95 ? ` (the writer reached only ${n(x.emitEventsPerSec)}/s)` : ''}.`,
  );
  return lines.join('\n');
}

function api(r: Json): string {
  const lines: string[] = [];
  lines.push(
    `${machine(r)} ${n(r.rate)} requests/s in all for ${r.seconds} s (after ${r.warmupSeconds} s unmeasured), ${r.connectionsPerRoute} connections per route, ${r.auth ? `every request with a bearer JWT (${r.auth}) that the hub verified` : 'through the dev bypass (no token verified)'}; seeded with ${r.seed.connectors} connectors and runs (${n(r.seed.rowsPerRun)} rows each), ${n(r.seed.deliveries)} deliveries; the load started once the retrieval backlog had drained (${f(r.seed.retrievalSettledSeconds, 1)} s after the seeding)${r.seed.analyzedSeconds !== undefined ? ` and autovacuum had analyzed the tables the routes read (${f(r.seed.analyzedSeconds, 1)} s more)` : ''}.`,
  );
  const table = (title: string, hub: Json, ceiling: Json) => {
    lines.push('');
    lines.push(title);
    lines.push('');
    lines.push(header(['route', 'per s', 'p50 ms', '**p99 ms**', 'max ms', 'errors', 'non-2xx', 'ceiling p50', 'ceiling p99'], ['---', '---:', '---:', '---:', '---:', '---:', '---:', '---:', '---:']));
    const line = (name: string, h: Json, c: Json) => row([name, n(h.perSec), f(h.p50, 2), `**${f(h.p99, 2)}**`, f(h.max), n(h.errors), n(h.non2xx), c ? f(c.p50, 2) : '-', c ? f(c.p99, 2) : '-']);
    lines.push(line('all routes', hub.overall, ceiling.overall));
    for (const name of Object.keys(hub.routes)) lines.push(line(`\`${name}\``, hub.routes[name], ceiling.routes[name]));
  };
  table('Evenly paced (open loop; each request timed from when it was due):', r.hub, r.ceiling);
  if (r.burst) table("autocannon at the same rate (its per-second quota: a burst at the start of every second):", r.burst.hub, r.burst.ceiling);
  lines.push('');
  if (r.hub.cpuUsPerRequest) {
    const cpu = (c: Json) => `${n(c.server)} µs in its process, ${c.postgres === null ? '-' : n(c.postgres)} µs in PostgreSQL, ${n(c.generator)} µs in the load generator`;
    lines.push(`CPU per request at an even ${n(r.rate)}/s: the hub ${cpu(r.hub.cpuUsPerRequest)}; the bare handler ${cpu(r.ceiling.cpuUsPerRequest)}.`);
  }
  if (r.serverSide) {
    const side = (x: Json) =>
      `requests p50 ${f(x.requestMs.p50, 2)} / p99 ${f(x.requestMs.p99, 2)} / max ${f(x.requestMs.max, 1)} ms from their arrival on its event loop to their response handed to the socket; garbage collection paused it for ${n(x.gc.minor.count)} scavenges (${f(x.gc.minor.totalMs, 0)} ms in all, the longest ${f(x.gc.minor.maxMs, 1)} ms) and ${n(x.gc.major.count)} mark-compacts (${f(x.gc.major.totalMs, 0)} ms, the longest ${f(x.gc.major.maxMs, 1)} ms)`;
    lines.push(`Inside the serving process at an even ${n(r.rate)}/s: the hub's ${side(r.serverSide.hub)}; the bare handler's ${side(r.serverSide.ceiling)}.`);
  }
  lines.push(`RSS of the hub's process: ${f(r.rss.beforeMb, 0)} MB before, ${f(r.rss.peakMb, 0)} MB peak, ${f(r.rss.afterMb, 0)} MB after the evenly paced load.`);
  // Results written before the target had a verdict per load hold the autocannon load's figures in burst.hub.
  const judged = (v: Json, o: Json) => v ?? { p99: o.p99, errors: o.errors, non2xx: o.non2xx, met: o.p99 < r.target.p99Ms && o.errors === 0 && o.non2xx === 0 };
  const verdict = (v: Json) => `p99 ${f(v.p99, 2)} ms, ${n(v.errors)} errors, ${n(v.non2xx)} non-2xx: ${met(v.met)}`;
  const even = judged(r.target.even, r.hub.overall);
  if (r.burst) {
    const autocannon = judged(r.target.autocannon, r.burst.hub.overall);
    lines.push(
      `Target p99 < ${r.target.p99Ms} ms over all routes at ${n(r.rate)} requests/s, with no errors and no non-2xx answers: through autocannon (the requirement's load) ${verdict(autocannon)}; evenly paced (without autocannon's bursts) ${verdict(even)}; both ${met(autocannon.met && even.met)}.`,
    );
  } else lines.push(`Target p99 < ${r.target.p99Ms} ms over all routes at an even ${n(r.rate)} requests/s, with no errors and no non-2xx answers: ${verdict(even)}.`);
  return lines.join('\n');
}

function search(r: Json): string {
  const lines: string[] = [];
  lines.push(`${machine(r)} ${n(r.queries)} queries of top ${r.topK} per dataset, ${r.dimensions} dimensions; recall@${r.topK} against the exact answer.`);
  lines.push('');
  lines.push(header(['dataset', 'path', '**p50 ms**', 'p99 ms', 'recall@10 (mean / worst)'], ['---', '---', '---:', '---:', '---:']));
  for (const d of r.datasets) {
    for (const [path, p] of Object.entries(d.paths as Record<string, Json>)) {
      lines.push(row([d.name, path, `**${f(p.p50, 2)}**`, f(p.p99, 2), `${f(p.recallMean, 3)} / ${f(p.recallMin, 2)}`]));
    }
  }
  const at = r.datasets.filter((d: Json) => d.rows === r.target.atRows && d.paths.index);
  const ok = at.length > 0 && at.every((d: Json) => d.paths.index.p50 <= r.target.p50Ms && d.paths.index.recallMean >= r.target.recallAt10);
  lines.push('');
  if (r.embedding) {
    lines.push(`The local embedding model (worker thread): ${n(r.embedding.textsPerSec)} partner-row chunks per second (${n(r.embedding.texts)} in ${f(r.embedding.seconds, 2)} s; loaded and warmed up in ${f(r.embedding.loadSeconds, 2)} s): how fast ingested rows become searchable.`);
    if (r.embeddingThreads) {
      const t = r.embeddingThreads;
      lines.push(`With \`svc.embedding.local-threads\` ${t.threads}: ${n(t.textsPerSec)} per second (${n(t.texts)} in ${f(t.seconds, 2)} s), ${f(t.textsPerSec / r.embedding.textsPerSec, 2)} × one thread.`);
    }
    lines.push('');
  }
  for (const d of r.datasets.filter((x: Json) => x.pgvector)) {
    lines.push(`pgvector ${d.pgvector.version} on PGlite (WebAssembly), ${d.name}: chunks loaded in ${f(d.pgvector.loadSeconds, 1)} s, HNSW index built in ${f(d.pgvector.indexSeconds, 1)} s.`);
    lines.push('');
  }
  lines.push(`Target: \`index\` p50 ≤ ${r.target.p50Ms} ms with recall@10 ≥ ${r.target.recallAt10} at ${n(r.target.atRows)} chunks: ${met(ok)}.`);
  return lines.join('\n');
}

function exportBench(r: Json): string {
  const lines: string[] = [];
  const sizes = r.sizes.map((s: Json) => `${n(s.rows)} (${f(s.fileMb, 0)} MB)`).join(' and ');
  lines.push(
    `${machine(r)} Rows exported: ${sizes}, ${r.columns.length} columns ordered by the key, ≈ ${f(r.sizes[0].bytesPerRow, 0)} bytes per record; ${r.rounds} round${r.rounds > 1 ? 's' : ''}, the better figure of each (the faster run; the lower peak, the rounds' range beside it)${r.sizes[0].destinations[r.destinations[0]].runs ? "; hub/ceiling is the median of each round's own ratio (with two rounds, their mean), the rounds' ratios beside it" : ''}. MB are MiB.`,
  );
  lines.push('');
  // Since 2026-12-01 the ceilings run in a process of their own (the note says so); before, in the hub's.
  const ceilingProcess = String(r.note).includes('a process of its own') ? 'its own process' : "the hub's process";
  lines.push(
    header(
      ['rows', 'destination', 'hub rows/s', 'hub MB/s', 'ceiling rows/s', 'ceiling MB/s', '**hub/ceiling**', 'per round', 'hub s', 'peak RSS MB (VmHWM, rounds)', `ceiling VmHWM MB (${ceilingProcess})`, 'stored file checked'],
      ['---:', '---', '---:', '---:', '---:', '---:', '---:', '---:', '---:', '---:', '---:', '---'],
    ),
  );
  for (const s of r.sizes) {
    for (const dest of r.destinations) {
      const x = s.destinations[dest];
      const hwm = x.hub.vmHwmMb === null ? `${f(x.hub.peakRssMb, 0)}–${f(x.hub.peakRssMbMax, 0)} (sampled)` : `${f(x.hub.vmHwmMb, 0)}–${f(x.hub.vmHwmMbMax, 0)}`;
      lines.push(
        row([
          n(s.rows),
          dest,
          n(x.hub.rowsPerSec),
          f(x.hub.mbPerSec),
          n(x.ceiling.rowsPerSec),
          f(x.ceiling.mbPerSec),
          `**${f(x.ratio, 3)}**`,
          (x.ratioPerRound ?? []).map((v: number) => f(v, 3)).join(', '),
          f(x.hub.seconds, 1),
          hwm,
          f(x.ceiling.vmHwmMb ?? x.ceiling.peakRssMb, 0),
          `${x.verified.length} run${x.verified.length > 1 ? 's' : ''}: ${n(x.verified[0].rowCount)} rows, ${n(x.verified[0].storedBytes)} bytes, SHA-256 read back`,
        ]),
      );
    }
  }
  lines.push('');
  const cpu = (c: Json) => `${f(c.exportProcess, 2)} / ${c.postgres === null ? '-' : f(c.postgres, 2)} / ${c.destinationServer === null ? '-' : f(c.destinationServer, 2)}`;
  lines.push(header(['CPU seconds of the faster run', 'exporting process / PostgreSQL / sshd or S3 stand-in'], ['---', '---:']));
  for (const s of r.sizes) {
    for (const dest of r.destinations) {
      const x = s.destinations[dest];
      lines.push(row([`${n(s.rows)} rows, ${dest}, hub`, cpu(x.hub.cpu)]));
      lines.push(row([`${n(s.rows)} rows, ${dest}, ceiling`, cpu(x.ceiling.cpu)]));
    }
  }
  lines.push('');
  if (r.sizes[0].destinations[r.destinations[0]].runs) {
    // Each hub run: the RSS it started from (after a full GC), its peak, and what it added.
    const young = r.sizes.some((s: Json) => r.destinations.some((d: string) => s.destinations[d].runs.some((run: Json) => run.hub.youngGenMb)));
    const mem = (h: Json) =>
      `${f(h.baselineRssMb, 0)} → ${f(h.vmHwmMb ?? h.peakRssMb, 0)} (${h.rssGrowthMb >= 0 ? '+' : ''}${f(h.rssGrowthMb, 0)})${h.youngGenMb ? `; ${f(h.youngGenMb.before, 0)} → ${f(h.youngGenMb.after, 0)}` : ''}`;
    lines.push(header([`hub runs: RSS before → peak (growth)${young ? "; V8's young generation before → after" : ''}, MB`, ...Array.from({ length: r.rounds }, (_v, i) => `round ${i + 1}`)], ['---', ...Array.from({ length: r.rounds }, () => '---:')]));
    for (const s of r.sizes) {
      for (const dest of r.destinations) {
        lines.push(row([`${n(s.rows)} rows, ${dest}`, ...s.destinations[dest].runs.map((run: Json) => mem(run.hub))]));
      }
    }
    lines.push('');
  }
  const idle = (p: Json) => `${f(p.rssMb, 0)} MB RSS (V8 heap ${f(p.heapUsedMb, 0)} MB used, ${f(p.externalMb, 0)} MB external)`;
  if (r.sizes[0].idleProcess) {
    // Since 2026-12-06 each size runs in a process of its own (its own hub, PostgreSQL, sshd and S3 stand-in, then the warm-up).
    lines.push(
      `Each size ran in a process of its own (a fresh hub, PostgreSQL, sshd and S3 stand-in, then the warm-up), so no size's peaks start from what an earlier size left (V8's heap may still differ: see each run's RSS before and young generation); that process, hub started, before its warm-up: ${r.sizes.map((s: Json) => `${n(s.rows)} rows ${idle(s.idleProcess)}`).join('; ')}.`,
    );
    lines.push('');
  } else if (r.idleProcess) {
    lines.push(`The bench's process, hub started, before any export: ${idle(r.idleProcess)}.`);
    lines.push('');
  }
  const t = r.targets;
  for (const dest of r.destinations) {
    const x = t.byDestination[dest];
    const flat = x.flat === null ? 'one size only' : `${met(x.flat)} (${f(x.rssRatio, 3)})`;
    const growth = x.rssGrowth
      ? ` The runs' own growth over the RSS they started from (the higher round): ${f(x.rssGrowth.smallestMb, 0)} MB at ${n(x.rssGrowth.smallestRows)} rows, ${f(x.rssGrowth.largestMb, 0)} MB at ${n(x.rssGrowth.largestRows)} rows.`
      : '';
    lines.push(
      `${dest}: hub ≥ ${t.ratio} × ceiling at every size ${met(x.ratioMet)} (lowest ${f(x.worstRatio, 3)}${x.rssGrowth ? ", the median of the rounds' ratios" : ''}); peak RSS < ${t.peakRssMb} MB at ${n(x.largestRows)} rows ${met(x.peakRssMet)} (${f(x.largestPeakRssMb, 0)} MB, the higher round); flat, largest ÷ smallest size ≤ ${t.flatRatio}: ${flat}.${growth}`,
    );
    lines.push('');
  }
  lines.pop();
  return lines.join('\n');
}

function workflows(r: Json): string {
  const lines: string[] = [];
  // Results before 2026-12-01 hold one quiet tick and one ceiling read per case.
  const reads: number | undefined = r.cases[0]?.ceilingReadsMs?.length;
  const repeats = reads ? `one run of each tick but the quiet one (the median of ${reads})` : 'one run of each tick';
  lines.push(`${machine(r)} Batches of ${n(r.batch)} records; ${repeats}; ms per tick.`);
  lines.push('');
  lines.push(
    header(
      ['entity', 'records', 'first tick (every record a new spell)', 'quiet tick', '1 % changed, 1 % gone', 'every dormant spell due', 'quiet after', reads ? `ceiling: one read of the relation (the median of ${reads})` : 'ceiling: one read of the relation', '**quiet / ceiling**', 'peak RSS MB', 'verified'],
      ['---', '---:', '---:', '---:', '---:', '---:', '---:', '---:', '---:', '---:', '---'],
    ),
  );
  for (const c of r.cases) {
    const t = c.ticks;
    lines.push(
      row([
        c.sources === 1 ? 'one source (key `external_id`)' : `${c.sources} sources (one keyed by a JSONPath)`,
        n(c.rows),
        n(t.first.ms),
        n(t.quiet.ms),
        n(t.changed.ms),
        `${n(t.due.ms)} (${n(t.due.emitted)} decisions)`,
        n(t.quietAfter.ms),
        n(c.ceilingMs),
        `**${f(c.quietToCeiling, 2)}**`,
        f(c.peakRssMb, 0),
        `${n(c.verified.spells)} spells; ${n(c.verified.decisions)} decisions, ${n(c.verified.distinctKeys)} keys; ${n(c.verified.afterLastTick)} after`,
      ]),
    );
  }
  // Linear in the records: from the smallest entity to the largest, the quiet tick grows no faster
  // than its ceiling (the one read of the relation it cannot avoid), with a quarter of slack.
  const verdicts: string[] = [];
  let ok = true;
  for (const sources of [...new Set<number>(r.cases.map((c: Json) => c.sources))]) {
    const cases = r.cases.filter((c: Json) => c.sources === sources).sort((a: Json, b: Json) => a.rows - b.rows);
    if (cases.length < 2) continue;
    const small = cases[0];
    const large = cases[cases.length - 1];
    const tick = large.ticks.quiet.ms / small.ticks.quiet.ms;
    const ceiling = large.ceilingMs / small.ceilingMs;
    ok &&= tick <= 1.25 * ceiling;
    verdicts.push(`${sources} source${sources > 1 ? 's' : ''}: quiet tick × ${f(tick, 1)} from ${n(small.rows)} to ${n(large.rows)} records, ceiling × ${f(ceiling, 1)}`);
  }
  if (verdicts.length) {
    lines.push('');
    lines.push(`Target: a tick linear in the records (the quiet tick grows at most 1.25 × as fast as its ceiling): ${met(ok)} (${verdicts.join('; ')}).`);
  }
  return lines.join('\n');
}

const RENDER: Record<string, (r: Json) => string> = { ingest, deliver, api, search, export: exportBench, workflows };

const print = process.argv.includes('--print');
let doc = readFileSync(DOC, 'utf8');
for (const [name, render] of Object.entries(RENDER)) {
  const file = `${RESULTS}${name}.json`;
  if (!existsSync(file)) {
    process.stderr.write(`no bench/results/${name}.json: run npm run bench:${name} first\n`);
    continue;
  }
  const text = render(JSON.parse(readFileSync(file, 'utf8')));
  if (print) {
    process.stdout.write(`\n## ${name}\n\n${text}\n`);
    continue;
  }
  const open = `<!-- bench:${name} -->`;
  const close = `<!-- /bench:${name} -->`;
  const start = doc.indexOf(open);
  const end = doc.indexOf(close);
  if (start < 0 || end < start) throw new Error(`docs/performance.md has no ${open} … ${close} block`);
  doc = `${doc.slice(0, start + open.length)}\n${text}\n${doc.slice(end)}`;
}
if (!print) {
  writeFileSync(DOC, doc);
  process.stdout.write('wrote the tables of docs/performance.md from bench/results/\n');
}

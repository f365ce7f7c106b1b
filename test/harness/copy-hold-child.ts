import { Database } from '../../src/db/database.js';
import { roleUrl } from '../../src/db/roles.js';
import type { PreparedRow } from '../../src/connectors/target/rows.js';
import { upsertChunk } from '../../src/connectors/target/writer.js';
import type { Target } from '../../src/connectors/types.js';
import { cpuMs, loopHeld } from './loop-held.js';

/**
 * The child process of src/connectors/target/writer.test.ts ("holds the event loop…"), started with `--expose-gc
 * --single-threaded`: how long the event loop is held at most while one large chunk is written (staged with COPY) into
 * `COPY_HOLD.table` of tenant `COPY_HOLD.ids.tenantId` of the database at COPY_HOLD_URL (an owner URL), against how long
 * the chunk's COPY text takes to make and encode in one go, both in processor time (loopHeld's `heldCpuMs`): the
 * machine's other work, which takes the core from the process in the middle of a stretch, is in neither. In a process of
 * its own the heap holds the writer, its pool and the chunk only (in a jest worker a collection of every module graph
 * of the files it ran before landed in the hold), each try starts from a collected heap (the reference's 18 MB of text,
 * a try's pieces, are garbage of this process's own), and V8 runs no background thread (compilers, concurrent marking)
 * whose processor time would count. Tries stop at the first under `COPY_HOLD.bound`, at most `COPY_HOLD.tries`. The
 * result is the line `COPY_HOLD <json>` of standard output: the best ratio, and each try's figures.
 */

const input = JSON.parse(process.env.COPY_HOLD ?? '{}') as { table: string; promote: Target['promote']; ids: { tenantId: number; connectorId: string; endpointUuid: string }; roles: { app: string; worker: string }; bound: number; tries: number };
const ownerUrl = process.env.COPY_HOLD_URL;
const gc = (globalThis as { gc?: () => void }).gc;
if (!ownerUrl || !gc) throw new Error('copy-hold-child: COPY_HOLD_URL and --expose-gc are needed (src/connectors/target/writer.test.ts starts it)');

const target: Target = { kind: 'hybrid', table: input.table, unique_key: '$.id', promote: input.promote };
// 1,000 rows of 18 KB of JSON (a CSV row of 1,600 columns is as long), one text shared: little garbage to collect.
const json = JSON.stringify(Object.fromEntries(Array.from({ length: 1600 }, (_, i) => [`c${i}`, 'x'])));
const nulls = Object.fromEntries(input.promote.map((p) => [p.name, null]));
const chunk: PreparedRow[] = Array.from({ length: 1000 }, (_, n) => ({ externalId: `wide${n}`, data: {}, json, rowHash: 'h'.repeat(64), promoted: nulls, rejects: [] }));

/** The reference: the chunk's COPY text made and encoded in one go (what the writer did before its pieces). */
function atOnce(): { ms: number; cpuMs: number } {
  const started = performance.now();
  const startedCpu = cpuMs();
  let text = '';
  for (const r of chunk) text += `${r.externalId}\t${r.rowHash}\t${r.json}${'\t\\N'.repeat(input.promote.length)}\n`;
  Buffer.from(text);
  return { ms: performance.now() - started, cpuMs: cpuMs() - startedCpu };
}

const db = new Database({ appUrl: roleUrl(ownerUrl, input.roles.app), workerUrl: roleUrl(ownerUrl, input.roles.worker), poolSize: 1 });
const runs: Array<{ heldMs: number; heldCpuMs: number; atOnceMs: number; atOnceCpuMs: number; written: number }> = [];
let best = Number.POSITIVE_INFINITY;
try {
  for (let tries = 0; tries < input.tries && best >= input.bound; tries++) {
    gc();
    const { value: written, heldMs, heldCpuMs } = await loopHeld(() => db.withTenant(input.ids.tenantId, (tx) => upsertChunk(tx, target, chunk, input.ids)), { everyMs: 1, afterMs: 5 });
    gc();
    const reference = atOnce();
    runs.push({ heldMs, heldCpuMs, atOnceMs: reference.ms, atOnceCpuMs: reference.cpuMs, written });
    best = Math.min(best, heldCpuMs / reference.cpuMs);
  }
} finally {
  await db.close();
}
process.stdout.write(`\nCOPY_HOLD ${JSON.stringify({ best, runs })}\n`);

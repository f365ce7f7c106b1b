import type { Tx } from '../db/database.js';
import { isDecision } from '../events/catalog.js';
import type { EventWriter, OutboxEvent } from '../events/outbox.js';
import { matchesSubscription } from '../events/topics.js';
import { logger } from '../observability/logger.js';
import { type CompiledWhen, compileWhen, evaluateWhen, type WhenOutcome } from './cel.js';
import { type ActiveProcess, processesOfTenants } from './store.js';
import { renderMessage } from './template.js';

/**
 * The process consumer (docs/processes.md): an outbox consumer with its own cursor
 * (`OutboxLoop` named `processes`, with `handleBatchInTx`). For each event of a batch, never a
 * `decision.*` one (decisions do not feed processes), it evaluates the tenant's processes whose
 * `event` glob matches and emits one `spec.decision` event per match, payload `{process, message,
 * sourceEventId, sourceType}`, in the transaction that advances the cursor past the batch.
 */

export const PROCESS_CONSUMER = 'processes';

/** Evaluations of one process stopped for time in one batch after which it is skipped for the rest of the batch. */
export const MAX_TIMEOUTS_PER_BATCH = 3;

/**
 * How often an evaluation stopped for time is run again before it counts as false. The time limit
 * is wall-clock (V8 interrupts the script): a garbage collection, a busy machine or the first
 * evaluation after a start (code still being compiled) can stop even a trivial condition once.
 * A condition that is really too costly is stopped every time.
 */
export const TIMEOUT_RETRIES = 2;

/** An evaluation, run again while it is stopped for time, at most `retries` more times. */
export function evaluateRetryingTimeouts(evaluate: () => WhenOutcome, retries = TIMEOUT_RETRIES): WhenOutcome {
  let outcome = evaluate();
  for (let again = 0; again < retries && 'error' in outcome && outcome.timedOut; again++) outcome = evaluate();
  return outcome;
}

/** Compiled `when`s, by tenant, name and version (updatedAt): compiled once per version. */
const compiled = new Map<string, CompiledWhen | Error>();

function whenOf(p: ActiveProcess): CompiledWhen | Error {
  const key = `${p.tenantId}/${p.name}/${p.updatedAt.getTime()}`;
  let c = compiled.get(key);
  if (!c) {
    try {
      c = compileWhen(p.when!);
    } catch (err) {
      c = err as Error;
    }
    if (compiled.size > 10_000) compiled.clear();
    compiled.set(key, c);
  }
  return c;
}

export function processBatchHandler(events: EventWriter): (tx: Tx, batch: OutboxEvent[]) => Promise<void> {
  return async (tx, batch) => {
    const watched = batch.filter((e) => !isDecision(e.type));
    if (watched.length === 0) return;
    const processes = await processesOfTenants(tx, [...new Set(watched.map((e) => e.tenantId))]);
    if (processes.length === 0) return;
    // A process whose condition keeps running out of time is skipped for the rest of the batch, so
    // one tenant's costly condition cannot hold every tenant's decisions back for long.
    const timeouts = new Map<string, number>();
    for (const event of watched) {
      for (const p of processes) {
        if (p.tenantId !== event.tenantId || !matchesSubscription(p.event, event.type)) continue;
        if (p.when !== null) {
          const when = whenOf(p);
          if (when instanceof Error) {
            logger().warn({ tenant: p.tenantId, process: p.name, err: when }, `process ${p.name}: spec.when does not compile; it matches nothing`);
            continue;
          }
          const key = `${p.tenantId}/${p.name}`;
          if ((timeouts.get(key) ?? 0) >= MAX_TIMEOUTS_PER_BATCH) continue;
          const outcome = evaluateRetryingTimeouts(() => evaluateWhen(when, { type: event.type, tenantId: event.tenantId, payload: event.payload }));
          if ('error' in outcome) {
            if (outcome.timedOut) {
              timeouts.set(key, (timeouts.get(key) ?? 0) + 1);
              logger().warn({ tenant: p.tenantId, process: p.name, eventId: event.id }, `process ${p.name}: spec.when ${outcome.error}; counted as false`);
            } else logger().debug({ tenant: p.tenantId, process: p.name, eventId: event.id, reason: outcome.error }, 'process condition failed; counted as false');
          }
          if (!outcome.result) continue;
        }
        const view = { id: event.id, type: event.type, tenantId: event.tenantId, payload: event.payload, createdAt: event.createdAt.toISOString() };
        const message = p.message ? renderMessage(p.message, view) : `${event.type} (event ${event.id}) matched process ${p.name}`;
        await events.emit(tx, p.decision, { process: p.name, message, sourceEventId: event.id, sourceType: event.type }, event.tenantId);
      }
    }
  };
}

import type { Config } from '../src/config/config.js';
import type { RunRecord } from '../src/connectors/runs/ledger.js';
import type { ExportRun } from '../src/exports/runs/ledger.js';
import type { AreaServices } from '../src/runtime/services.js';
import { delay } from '../src/connectors/rate-limit.js';
import { HubError } from '../src/errors.js';
import { logger } from '../src/observability/logger.js';
import { startHub } from './compose.js';
import { boundedCommand, NO_SIGNAL, startedOrInterrupted, stopLimitMs } from './stop.js';
import { RUN_USAGE } from './usage.js';

export { RUN_USAGE } from './usage.js';

interface RunArgs {
  kind: 'connector' | 'export';
  name: string;
  tenant: string;
  endpoint?: string;
  scheduled: boolean;
}

export function parseRunArgs(argv: string[]): RunArgs | string {
  const [kind, name, ...rest] = argv;
  if (kind !== 'connector' && kind !== 'export') return `unknown run target '${kind ?? ''}'`;
  if (!name || name.startsWith('--')) return `a${kind === 'export' ? 'n' : ''} ${kind} NAME is required`;
  const args: RunArgs = { kind, name, tenant: '', scheduled: false };
  for (let i = 0; i < rest.length; i++) {
    const flag = rest[i];
    if (flag === '--scheduled') args.scheduled = true;
    else if (flag === '--tenant' || (flag === '--endpoint' && kind === 'connector')) {
      const value = rest[++i];
      if (!value || value.startsWith('--')) return `${flag} needs a value`;
      if (flag === '--tenant') args.tenant = value;
      else args.endpoint = value;
    } else return `unexpected argument '${flag}'`;
  }
  if (!args.tenant) return '--tenant CODE is required';
  return args;
}

/**
 * `svc-hub run connector|export …`: in process; exit 1 when a run Failed. `stop` (the executable's
 * SIGINT or SIGTERM: a CronJob's pod being deleted) stops the hub: its runs end Failed `interrupted`
 * at once, as on any clean stop, instead of being left to the interrupted-run sweep. That stop, and
 * the hub's stop after the run, have the roles' time limit (cmd/stop.ts): past it the steps still
 * pending are logged and the exit code is 1.
 */
export async function runCommand(
  config: Config,
  argv: string[],
  out: (line: string) => void = (l) => process.stdout.write(`${l}\n`),
  stop?: AbortSignal,
): Promise<number> {
  const args = parseRunArgs(argv);
  if (typeof args === 'string') {
    process.stderr.write(`svc-hub run: ${args}\n\n${RUN_USAGE}`);
    return 2;
  }
  // A signal during the hub's start interrupts it (cmd/stop.ts, `startedOrInterrupted`): no run, exit 1.
  return startedOrInterrupted({
    start: (startSteps) => startHub(config, { api: false, background: false, stopsOnSignals: stop !== undefined, interrupt: stop, startSteps }),
    run: (hub) => {
      const onStop = () => {
        out('stopping: the run ends Failed interrupted');
        // The same promise as `close` below awaits, which reports a failed stop: not an unhandled rejection meanwhile.
        hub.stop().catch(() => undefined);
      };
      if (stop?.aborted) onStop();
      else stop?.addEventListener('abort', onStop, { once: true });
      // The hub's stop, on a signal or after the run, is bounded as the roles' is (cmd/stop.ts).
      return boundedCommand({
        work: () => runOn(hub.services, args, out, stop).finally(() => stop?.removeEventListener('abort', onStop)),
        workStep: `the ${args.kind} run`,
        close: () => hub.stop(),
        closeSteps: () => hub.stopPending(),
        stop,
        limitMs: stopLimitMs(config),
      });
    },
    stop: stop ?? NO_SIGNAL,
    limitMs: stopLimitMs(config),
    pending: (hub) => hub.stopPending(),
    interruptedCode: 1,
  });
}

/** The run asked for, on a hub started for it: its exit code. */
async function runOn(services: AreaServices, args: RunArgs, out: (line: string) => void, stop?: AbortSignal): Promise<number> {
  try {
    const tenant = await services.admin.tenants.byCode(args.tenant);
    if (!tenant) {
      out(`tenant ${args.tenant} not found`);
      return 1;
    }
    // A deactivated tenant's schedules do not fire (the hub's own scheduler skips them too): its
    // CronJob's run is skipped and succeeds, so Kubernetes counts no failure; a run asked for by hand is refused.
    if (!tenant.active) {
      if (args.scheduled) {
        out(`${args.kind} ${args.name} skipped: tenant ${args.tenant} is deactivated, and its schedules do not fire`);
        return 0;
      }
      out(`tenant ${args.tenant} is deactivated: no run`);
      return 1;
    }
    if (args.kind === 'export') return await runExport(services, tenant.id, args, out, stop);
    const tenantId = tenant.id;
    const connector = await services.connectors.byName(tenantId, args.name);
    if (!connector) {
      out(`connector ${args.name} not found in tenant ${args.tenant}`);
      return 1;
    }
    let runs: RunRecord[];
    if (args.scheduled) {
      const outcome = await services.connectors.scheduler.fire(tenantId, connector.id, args.endpoint);
      if (outcome.kind === 'not-due') {
        out(`connector ${args.name} has no schedule slot due`);
        return 0;
      }
      if (outcome.kind === 'in-flight' || outcome.kind === 'withdrawn') {
        out(`slot ${outcome.slot.toISOString()} skipped: ${outcome.reason}`);
        return 0;
      }
      if (outcome.kind !== 'started') {
        out(`slot ${outcome.slot.toISOString()} ${outcome.kind === 'already-claimed' ? 'already ran' : 'is outside the window'}: skipped`);
        return 0;
      }
      runs = await outcome.triggered.done;
    } else {
      const triggered = await services.connectors.runner.trigger(tenantId, connector, { endpoint: args.endpoint, triggeredBy: 'cli' });
      runs = await triggered.done;
    }
    for (const run of runs) out(summary(run));
    return runs.some((r) => r.status === 'Failed') ? 1 : 0;
  } catch (err) {
    // A refusal the hub answers an API caller with (an export NAME the tenant does not have, a run
    // already in flight: a 4xx) says everything in its message: one line, no stack. Anything else
    // is a defect, logged with its stack.
    const refusal = err instanceof HubError && err.render().status < 500;
    if (!refusal) logger().error({ err }, 'svc-hub run failed');
    const hint = (err as { hint?: unknown }).hint;
    out(`error: ${(err as Error).message}${typeof hint === 'string' ? ` (${hint})` : ''}`);
    return 1;
  }
}

/** How often a scheduled export's slot that found a run in flight is claimed again. */
const BUSY_RETRY_MS = 1_000;

async function runExport(services: AreaServices, tenantId: number, args: RunArgs, out: (line: string) => void, stop?: AbortSignal): Promise<number> {
  let run: ExportRun;
  if (args.scheduled) {
    const fire = () => services.exports.scheduler.fire(tenantId, args.name);
    let outcome = await fire();
    if (outcome.kind === 'busy') {
      // A run of the export in flight (a manual run, a retry): the in-process scheduler claims the
      // slot at a later tick, once that run has ended. A CronJob fires once per slot, so its job
      // waits for that here, or the slot's file would never be made.
      const slot = outcome.slot.toISOString();
      out(`slot ${slot} waits: a run is in flight; it runs once that run has ended`);
      while (outcome.kind === 'busy') {
        if (!(await delay(BUSY_RETRY_MS, stop).then(() => true, () => false))) {
          out(`stopped while slot ${slot} waited for the run in flight: not run`);
          return 1;
        }
        outcome = await fire();
      }
    }
    if (outcome.kind === 'not-due') {
      out(`export ${args.name} has no schedule slot due`);
      return 0;
    }
    if (outcome.kind === 'withdrawn') {
      out(`slot ${outcome.slot.toISOString()} skipped: ${outcome.reason}`);
      return 0;
    }
    if (outcome.kind === 'already-run') {
      out(`slot ${outcome.slot.toISOString()} already ran: skipped`);
      return 0;
    }
    run = await outcome.done;
  } else {
    run = await services.exports.runNow(tenantId, args.name);
  }
  const base = `export ${run.exportName} ${run.status} run=${run.id} attempt=${run.attempt}`;
  out(run.status === 'Completed'
    ? `${base} rows=${run.rowCount} bytes=${run.byteCount} sha256=${run.sha256} location=${run.location}`
    : `${base} failureCode=${run.failureCode} reason=${JSON.stringify(run.failureReason)}`);
  return run.status === 'Completed' ? 0 : 1;
}

function summary(run: RunRecord): string {
  const ms = run.endedAt ? Date.parse(run.endedAt) - Date.parse(run.startedAt) : 0;
  const base = `${run.connector}/${run.endpoint} ${run.status} in=${run.recordsIn} out=${run.recordsOut} skipped=${run.recordsSkipped} dead=${run.deadLetterCount} ${ms}ms run=${run.id}`;
  return run.errorMessage ? `${base} error=${JSON.stringify(run.errorMessage)}` : base;
}

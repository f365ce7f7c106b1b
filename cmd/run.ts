import type { Config } from '../src/config/config.js';
import type { RunRecord } from '../src/connectors/runs/ledger.js';
import { logger } from '../src/observability/logger.js';
import { startHub } from './compose.js';

export const RUN_USAGE = `usage: svc-hub run connector NAME --tenant CODE [--endpoint ID] [--scheduled]

  Runs the connector's enabled endpoints (or the one named) once, in this process, prints one line
  per run and exits non-zero when a run failed. --scheduled takes the latest due slot of the stored
  schedule: it honours the window fence and is skipped when that slot already ran (what a CronJob runs).
`;

interface RunArgs {
  kind: 'connector';
  name: string;
  tenant: string;
  endpoint?: string;
  scheduled: boolean;
}

export function parseRunArgs(argv: string[]): RunArgs | string {
  const [kind, name, ...rest] = argv;
  if (kind !== 'connector') return kind === 'export' ? 'svc-hub run export is not available yet' : `unknown run target '${kind ?? ''}'`;
  if (!name || name.startsWith('--')) return 'a connector NAME is required';
  const args: RunArgs = { kind, name, tenant: '', scheduled: false };
  for (let i = 0; i < rest.length; i++) {
    const flag = rest[i];
    if (flag === '--scheduled') args.scheduled = true;
    else if (flag === '--tenant' || flag === '--endpoint') {
      const value = rest[++i];
      if (!value || value.startsWith('--')) return `${flag} needs a value`;
      if (flag === '--tenant') args.tenant = value;
      else args.endpoint = value;
    } else return `unexpected argument '${flag}'`;
  }
  if (!args.tenant) return '--tenant CODE is required';
  return args;
}

/** `svc-hub run connector …`: one run per endpoint, in process; exit 1 when one Failed. */
export async function runCommand(config: Config, argv: string[], out: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): Promise<number> {
  const args = parseRunArgs(argv);
  if (typeof args === 'string') {
    process.stderr.write(`svc-hub run: ${args}\n\n${RUN_USAGE}`);
    return 2;
  }
  const hub = await startHub(config, { api: false, background: false });
  try {
    const { services } = hub;
    const tenant = await services.admin.tenants.byCode(args.tenant);
    if (!tenant?.active) {
      out(`tenant ${args.tenant} not found`);
      return 1;
    }
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
    logger().error({ err }, 'svc-hub run failed');
    out(`error: ${(err as Error).message}`);
    return 1;
  } finally {
    await hub.stop();
  }
}

function summary(run: RunRecord): string {
  const ms = run.endedAt ? Date.parse(run.endedAt) - Date.parse(run.startedAt) : 0;
  const base = `${run.connector}/${run.endpoint} ${run.status} in=${run.recordsIn} out=${run.recordsOut} skipped=${run.recordsSkipped} dead=${run.deadLetterCount} ${ms}ms run=${run.id}`;
  return run.errorMessage ? `${base} error=${JSON.stringify(run.errorMessage)}` : base;
}

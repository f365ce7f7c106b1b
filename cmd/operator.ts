import { existsSync, readFileSync } from 'node:fs';
import type { V1PodTemplateSpec } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { type KubeTarget, kubeConfig } from '../kube/kube-config.js';
import { Operator } from '../operator/reconciler.js';
import type { Config } from '../src/config/config.js';
import { ConfigError } from '../src/config/config.js';
import { Leadership } from '../src/dispatch/leader.js';
import { MANIFEST_KINDS } from '../src/manifests/kinds.js';
import { KUBECTL_YAML } from '../src/manifests/yaml.js';
import { interruptibleStart } from '../src/db/pool.js';
import { logger } from '../src/observability/logger.js';
import { type Hub, startHub } from './compose.js';
import type { PendingSteps } from './stop.js';
import { leaderElector } from './leader.js';

/**
 * `svc-hub operator`: the reconciler of the custom resources (operator/reconciler.ts) on the hub's
 * database, serving only /q/health* and /q/metrics for the probes, and working only while it holds
 * the leadership (a Lease `<svc.leader.lease-name without -dispatch>-operator` in Kubernetes, an
 * advisory lock elsewhere), so several replicas may run and one reconciles.
 */

export interface OperatorProcess {
  hub: Hub;
  operator: Operator;
  leadership: Leadership;
  /** Settles once the latest start or stop of the operator on a change of leadership is done. */
  transition(): Promise<void>;
  stop(): Promise<void>;
}

/** The operator's Lease: `svc-hub-dispatch` -> `svc-hub-operator`, `<release>-svc-hub-dispatch` -> `<release>-svc-hub-operator`. */
export const operatorLeaseName = (dispatchLease: string): string => `${dispatchLease.replace(/-dispatch$/, '')}-operator`;

/** The pod template of scheduled runs, or undefined when the file is absent. */
export function loadRunJobTemplate(path: string): V1PodTemplateSpec | undefined {
  if (!existsSync(path)) return undefined;
  let template: V1PodTemplateSpec;
  try {
    template = parse(readFileSync(path, 'utf8'), KUBECTL_YAML) as V1PodTemplateSpec;
  } catch (err) {
    throw ConfigError.of('svc.operator.run-job-template', `${path} is not YAML: ${(err as Error).message}`);
  }
  if (!template?.spec?.containers?.[0]?.image) {
    throw ConfigError.of('svc.operator.run-job-template', `${path} is not a pod template with a container and its image (spec.containers[0].image)`);
  }
  return template;
}

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** The namespaces of `svc.operator.namespace` (comma-separated); empty: all. */
export function watchedNamespaces(value: string | undefined): string[] {
  return [...new Set((value ?? '').split(',').map((n) => n.trim()).filter(Boolean))];
}

/** `svc.operator.instance`, checked as the label value it becomes. */
export function operatorInstance(config: Config): string | undefined {
  const instance = config.optional('svc.operator.instance')?.trim() || undefined;
  if (instance && (instance.length > 63 || !LABEL_VALUE.test(instance))) {
    throw ConfigError.of('svc.operator.instance', `'${instance}' is not a label value (at most 63 letters, digits, '-', '_' and '.', beginning and ending with a letter or digit)`);
  }
  return instance;
}

export interface OperatorStartOptions {
  kube?: KubeTarget;
  env?: NodeJS.ProcessEnv;
  stopsOnSignals?: boolean;
  interrupt?: AbortSignal;
  startSteps?: PendingSteps;
  /** The monotonic clock of its Lease (cmd/leader.ts); tests move it by hand. */
  leaseClock?: () => number;
}

export async function startOperator(config: Config, opts: OperatorStartOptions = {}): Promise<OperatorProcess> {
  const templatePath = config.string('svc.operator.run-job-template');
  const runJobTemplate = loadRunJobTemplate(templatePath);
  if (!runJobTemplate) logger().warn(`no run pod template at ${templatePath} (svc.operator.run-job-template): resources with a schedule get no CronJob`);
  const instance = operatorInstance(config);
  const kc = kubeConfig(opts.kube);
  const cronJobNamespace =
    config.optional('svc.operator.cronjob-namespace') || (opts.env ?? process.env).POD_NAMESPACE || kc.getContextObject(kc.getCurrentContext())?.namespace || 'default';
  const hub = await startHub(config, { api: true, operationsOnly: true, background: false, stopsOnSignals: opts.stopsOnSignals, interrupt: opts.interrupt, startSteps: opts.startSteps });
  let elector: ReturnType<typeof leaderElector>;
  try {
    elector = leaderElector(config, hub.workerUrl, { leaseName: operatorLeaseName(config.string('svc.leader.lease-name')), env: opts.env, kube: opts.kube, monotonic: opts.leaseClock });
  } catch (err) {
    await hub.stop();
    throw err;
  }
  const workers = 2;
  const operator = new Operator({
    kinds: MANIFEST_KINDS,
    manifests: hub.services.manifests,
    kc,
    namespaces: watchedNamespaces(config.optional('svc.operator.namespace')),
    instance,
    cronJobNamespace,
    resyncEvery: config.duration('svc.operator.resync-every'),
    runPollEvery: config.duration('svc.operator.run-poll-every'),
    backoffBase: config.duration('svc.operator.backoff-base'),
    backoffMax: config.duration('svc.operator.backoff-max'),
    qps: config.int('svc.operator.rate-limit.qps'),
    burst: config.int('svc.operator.rate-limit.burst'),
    runJobTemplate,
    runJobTemplatePath: templatePath,
    runDeadline: config.duration('svc.operator.run-deadline'),
    runJobConfigMap: config.optional('svc.operator.run-job-configmap')?.trim() || undefined,
    workers,
    listPageSize: config.int('svc.operator.list-page-size'),
    // A replica resumed after a pause past its lease duration writes nothing until it has renewed.
    leading: () => elector.isLeader(),
  });
  const leadership = new Leadership(elector, { checkEvery: config.duration('svc.leader.check-every') });
  // Readiness: a leader is ready while it reconciles (its term started, every informer listed, its
  // workers alive); a follower is ready as a standby (it would take over; not being ready would only
  // stall rollouts, as no traffic is sent to an operator).
  hub.services.readinessChecks.push(() => {
    if (!leadership.isLeader()) return { name: 'operator', status: 'UP', data: { role: 'standby' } };
    const health = operator.health();
    return { name: 'operator', status: health.reconciling ? 'UP' : 'DOWN', data: { role: 'leader', ...health.data } };
  });
  // Only the leader watches and reconciles; a follower waits, and takes over when the leader goes.
  // Each leadership is a term of its own (operator/reconciler.ts): losing the Lease ends the term,
  // winning it again starts a new one with a fresh queue, informers and caches.
  let transition: Promise<void> = Promise.resolve();
  leadership.onElected(() => {
    transition = transition
      .then(() => operator.start())
      .catch(async (err: unknown) => {
        // Holding the Lease without reconciling would keep every standby out: give it up and try again.
        logger().error({ err }, 'the operator failed to start; giving the leadership up');
        await operator.stop().catch(() => undefined);
        await elector.release().catch(() => undefined);
      });
  });
  elector.onLost(() => {
    logger().warn('operator leadership lost: reconciling stops until it is regained');
    transition = transition.then(() => operator.stop()).catch((err: unknown) => logger().error({ err }, 'the operator failed to stop'));
  });
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      await transition;
      await operator.stop();
      await leadership.stop();
      await hub.stop();
    })();
    return stopping;
  };
  // A signal during the start (`interrupt`) interrupts this step too, as the hub's: the advisory
  // lock's connect or statement is cut, or a Lease's request aborted (interruptibleStart,
  // kube/lease.ts), and what was started is stopped.
  try {
    opts.interrupt?.throwIfAborted();
    const electing = interruptibleStart(opts.interrupt, () => leadership.start());
    await (opts.startSteps ? opts.startSteps.step(OPERATOR_ELECTION_START, electing) : electing);
    opts.interrupt?.throwIfAborted();
  } catch (err) {
    await stop();
    throw err;
  }
  return { hub, operator, leadership, transition: () => transition, stop };
}

/** The operator's first leader election, a step of its start (named while it runs, cmd/stop.ts). */
export const OPERATOR_ELECTION_START = "the operator's leader election's start";

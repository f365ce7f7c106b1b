import type { KubeApiStandIn } from './kube-api.js';
import { until } from './until.js';

/** What an operator reports of its work (Operator.progress, operator/reconciler.ts). */
export interface Progressing {
  progress(): { reconciles: number; idle: boolean; resourceVersions: string[] };
}

/**
 * Waits until `operators` have handled everything the stand-in holds: each one idle (no key queued,
 * reconciled or waiting out a retry; no sweep, poll or Event under way) with every informer at the
 * stand-in's current resourceVersion (a bookmark carries it there over a watch that saw no change),
 * all at one instant. The stand-in runs in the test's process: nothing changes between the reads.
 * Nothing more happens then until the test changes something, or a timer of an operator's fires.
 * What "nothing more arrives" checks wait on, instead of a quiet spell.
 */
export async function operatorsSettled(api: KubeApiStandIn, operators: readonly Progressing[]): Promise<void> {
  const caughtUp = () => {
    const at = Number(api.resourceVersion);
    return operators.every((op) => {
      const { idle, resourceVersions } = op.progress();
      return idle && resourceVersions.every((v) => Number(v) >= at);
    });
  };
  await until(
    'the operators to settle',
    () => {
      if (caughtUp()) return true;
      api.bookmark();
      return false;
    },
    { detail: () => `${JSON.stringify(operators.map((op) => op.progress()))} at resourceVersion ${api.resourceVersion}` },
  );
}

import { lazyCounter } from '../observability/metrics.js';

/** Spec 1 Observability: a run reaching a terminal status (best-effort, no connector tag). */
export const runsTotal = lazyCounter({ name: 'svc_runs_total', help: 'Connector runs that reached a terminal status', labelNames: ['status'] });

/** Rows quarantined: real losses only. */
export const deadLettersTotal = lazyCounter({ name: 'svc_dead_letters_total', help: 'Rows captured in the dead-letter queue', labelNames: ['reason'] });

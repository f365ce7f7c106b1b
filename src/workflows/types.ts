import type { Transition } from './manifest/validate.js';

/** The normalised model of a workflow kept in `spec` (src/workflows/store.ts): the entity as stored, the scope resolved. */
export interface WorkflowSpec {
  entity: string;
  scope: string | null;
  stateColumn: string;
  states: string[];
  transitions: Transition[];
  dormancy: { after: string; states: string[] } | null;
}

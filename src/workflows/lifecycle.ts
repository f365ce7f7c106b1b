import type { KeyedDocument } from '../retrieval/keyed-corpus.js';
import type { WorkflowSpec } from './types.js';

/** The retrieval corpus of a workflow's lifecycle. */
export const lifecycleCorpus = (name: string): string => `workflow:${name}`;

/**
 * The lifecycle of a workflow as documents for retrieval (corpus `workflow:<name>`, chunks without
 * a row hash): one overview, and one document per state saying where a record comes from, where it
 * may go and whether it can become dormant there.
 */
export function lifecycleDocuments(name: string, spec: WorkflowSpec): KeyedDocument[] {
  const moves = spec.transitions.map((t) => `${t.from} -> ${t.to}`);
  const dormancy = spec.dormancy
    ? `A record that stays in ${spec.dormancy.states.join(' or ')} for ${spec.dormancy.after} is dormant: the hub announces it once per stay as decision.dormant.${name}.`
    : 'No dormancy is declared.';
  const docs: KeyedDocument[] = [
    {
      key: 'lifecycle',
      content:
        `Workflow ${name}: the lifecycle of entity ${spec.entity} (scope ${spec.scope ?? 'none'}), read from its column ${spec.stateColumn}. ` +
        `States: ${spec.states.join(', ')}. ` +
        `Transitions: ${moves.length ? moves.join(', ') : 'none declared'}. ${dormancy}`,
    },
  ];
  for (const state of spec.states) {
    const from = spec.transitions.filter((t) => t.to === state).map((t) => t.from);
    const to = spec.transitions.filter((t) => t.from === state).map((t) => t.to);
    const dormant = spec.dormancy?.states.includes(state) ? ` A record staying in ${state} for ${spec.dormancy.after} is dormant (decision.dormant.${name}).` : '';
    docs.push({
      key: `state:${state}`,
      content:
        `State ${state} of workflow ${name} (entity ${spec.entity}, ${spec.stateColumn} = ${state}). ` +
        `Reached from: ${from.length ? from.join(', ') : 'no declared state'}. Leads to: ${to.length ? to.join(', ') : 'no declared state'}.${dormant}`,
    });
  }
  return docs;
}

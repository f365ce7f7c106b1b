import type { Issue } from '../../validation/schema-errors.js';
import { addSchemaErrors, compiledOnce, Issues, type Json, manifestObject } from '../../manifests/checking.js';
import { durationInterval } from '../duration.js';
import { workflowManifestSchema } from './schema.js';

/**
 * Checks a Workflow manifest and normalises it (docs/workflows.md): the JSON Schema first (every
 * structural error at once), then the rules that span fields: states unique, transitions and
 * dormancy states among `spec.states`, `spec.dormancy.after` a duration. Every issue names its
 * field. Pure: whether the entity exists and has the state column is checked by the store.
 */

export type { Issue };

export interface Transition {
  from: string;
  to: string;
}

/** A checked manifest. */
export interface WorkflowDraft {
  /** metadata.name, lower-case. */
  name: string;
  /** spec.entity as written (the store resolves it, case-insensitively). */
  entity: string;
  scope?: string;
  stateColumn: string;
  states: string[];
  transitions: Transition[];
  /** null without spec.dormancy. */
  dormancy: { after: string; states: string[] } | null;
}

export interface WorkflowCheck {
  errors: Issue[];
  warnings: Issue[];
  workflow?: WorkflowDraft;
}

const schemaCheck = compiledOnce(workflowManifestSchema);
const quoted = (v: unknown) => JSON.stringify(v);

export function checkWorkflowManifest(given: unknown): WorkflowCheck {
  const errors = new Issues();
  const warnings: Issue[] = [];
  const input = manifestObject(given, errors, 'apiVersion, kind, metadata, spec', workflowManifestSchema);
  if (!input) return { errors: errors.list, warnings };
  const check = schemaCheck();
  if (!check(input)) addSchemaErrors(errors, check.errors);
  if (errors.count) return { errors: errors.list, warnings };
  const workflow = normalise(input, errors, warnings);
  return errors.count || !workflow ? { errors: errors.list, warnings } : { errors: [], warnings, workflow };
}

interface RawSpec {
  entity: string;
  scope?: string;
  stateColumn: string;
  states: string[];
  transitions?: Transition[];
  dormancy?: { after: string; states?: string[] };
}

function normalise(input: Json, errors: Issues, warnings: Issue[]): WorkflowDraft | undefined {
  const name = (input.metadata as { name: string }).name.toLowerCase();
  const spec = input.spec as RawSpec;

  const states = new Map<string, number>();
  spec.states.forEach((s, i) => {
    const first = states.get(s);
    if (first !== undefined) errors.add(`spec.states[${i}]`, `duplicate state ${quoted(s)}: spec.states[${first}] has it too`);
    else states.set(s, i);
  });
  const declared = `(${[...states.keys()].join(', ')})`;

  const transitions: Transition[] = [];
  const seen = new Set<string>();
  (spec.transitions ?? []).forEach((t, i) => {
    for (const end of ['from', 'to'] as const) {
      if (!states.has(t[end])) errors.add(`spec.transitions[${i}].${end}`, `spec.transitions[${i}].${end} ${quoted(t[end])} is not one of spec.states ${declared}`);
    }
    const id = JSON.stringify([t.from, t.to]);
    if (seen.has(id)) warnings.push({ field: `spec.transitions[${i}]`, message: `transition ${t.from} -> ${t.to} is declared twice` });
    else {
      seen.add(id);
      transitions.push({ from: t.from, to: t.to });
    }
  });

  let dormancy: WorkflowDraft['dormancy'] = null;
  if (spec.dormancy) {
    const after = spec.dormancy.after;
    if (durationInterval(after) === undefined) {
      errors.add('spec.dormancy.after', `spec.dormancy.after ${quoted(after)} must be a duration greater than zero and at most 100 years: <n>s, <n>m, <n>h, <n>d (90s, 15m, 2h, 30d) or ISO-8601 (P30D, PT15M)`);
    }
    const dormant = spec.dormancy.states ?? [...states.keys()];
    dormant.forEach((s, i) => {
      if (!states.has(s)) errors.add(`spec.dormancy.states[${i}]`, `spec.dormancy.states[${i}] ${quoted(s)} is not one of spec.states ${declared}`);
    });
    dormancy = { after, states: [...new Set(dormant)] };
  }

  if (errors.count) return undefined;
  const draft: WorkflowDraft = { name, entity: spec.entity, stateColumn: spec.stateColumn, states: [...states.keys()], transitions, dormancy };
  if (spec.scope !== undefined) draft.scope = spec.scope;
  return draft;
}

import { addSchemaErrors, compiledOnce, Issues, manifestObject, schemaError } from '../../manifests/checking.js';
import type { Issue } from '../../validation/schema-errors.js';
import { CelError, compileWhen } from '../cel.js';
import { processManifestSchema } from './schema.js';

/**
 * Checks a Process manifest (docs/processes.md): the JSON Schema, then what it cannot say. Every
 * issue names its field (`spec.when`, `spec.event`, …). Pure: no database.
 */

export interface ProcessDraft {
  /** metadata.name, lower-case. */
  name: string;
  event: string;
  when: string | null;
  decision: string;
  message: string;
}

export interface ProcessCheck {
  errors: Issue[];
  process?: ProcessDraft;
}

const schemaCheck = compiledOnce(processManifestSchema);

/** What the segments of a decision type may hold (DECISION_PATTERN's `[A-Za-z0-9_-]`). */
const SEGMENT = /^[A-Za-z0-9_-]+$/;
const DECISION_FORM = 'decision. followed by one or more segments separated by dots, each of ASCII letters (A-Z, a-z), digits, _ or - (e.g. decision.big-run)';

/**
 * Why a `spec.decision` that DECISION_PATTERN refuses is wrong: the first fault found (the prefix,
 * an empty segment, a character no segment may hold), then the form it must have.
 */
export function decisionFault(value: string): string {
  const must = `must be ${DECISION_FORM}`;
  if (!value.startsWith('decision.')) {
    if (value.toLowerCase().startsWith('decision.')) return `spec.decision must start with decision. in lower case, not ${JSON.stringify(value.slice(0, 9))}: it ${must}`;
    return `spec.decision must start with decision.: it ${must}`;
  }
  const segments = value.slice('decision.'.length).split('.');
  const empty = segments.indexOf('');
  if (empty >= 0) return `spec.decision has an empty segment (${empty === segments.length - 1 ? 'it ends with a dot' : 'two dots in a row'}): it ${must}`;
  for (const s of segments) {
    if (SEGMENT.test(s)) continue;
    const bad = [...s].find((c) => !SEGMENT.test(c))!;
    const code = `U+${bad.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
    return `spec.decision holds ${JSON.stringify(bad)} (${code}) in segment ${JSON.stringify(s)}, which a segment may not hold: it ${must}`;
  }
  return `spec.decision ${must}`;
}

/** Whether an event glob can only ever match `decision.*` types (which never feed processes). */
export function onlyDecisions(glob: string): boolean {
  return glob === 'decision' ? false : glob.startsWith('decision.');
}

export function checkProcessManifest(given: unknown): ProcessCheck {
  const errors = new Issues();
  const input = manifestObject(given, errors, 'apiVersion, kind, metadata, spec', processManifestSchema);
  if (!input) return { errors: errors.list };
  const check = schemaCheck();
  if (!check(input)) {
    // A decision type the pattern refuses is told what is wrong with it, not only the prefix.
    const refine = (e: { keyword: string; data?: unknown }, field: string) => (field === 'spec.decision' && e.keyword === 'pattern' && typeof e.data === 'string' ? decisionFault(e.data) : undefined);
    addSchemaErrors(errors, check.errors, (e) => schemaError(e, refine));
  }
  if (errors.count) return { errors: errors.list };

  const spec = input.spec as { event: string; when?: string; decision: string; message?: string };
  if (onlyDecisions(spec.event)) {
    errors.add('spec.event', `spec.event ${spec.event} matches only decision.* events, and decisions never feed processes (no loops)`);
  }
  if (spec.decision === 'decision.dormant' || spec.decision.startsWith('decision.dormant.')) {
    // The inbox lists decision.dormant.<workflow> by that workflow's scopes: a process's would be taken for the workflow's.
    errors.add('spec.decision', `spec.decision ${spec.decision} is a type of the workflows' dormancy decisions (decision.dormant.<workflow>), which only the hub emits: choose another (e.g. decision.big-run)`);
  }
  if (spec.when !== undefined) {
    try {
      compileWhen(spec.when);
    } catch (err) {
      if (!(err instanceof CelError)) throw err;
      errors.add('spec.when', `spec.when ${err.message}`);
    }
  }
  if (errors.count) return { errors: errors.list };
  return {
    errors: [],
    process: {
      name: (input.metadata as { name: string }).name.toLowerCase(),
      event: spec.event,
      when: spec.when ?? null,
      decision: spec.decision,
      message: spec.message ?? '',
    },
  };
}

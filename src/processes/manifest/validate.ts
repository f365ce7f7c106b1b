import { addSchemaErrors, compiledOnce, Issues, manifestObject } from '../../manifests/checking.js';
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

/** Whether an event glob can only ever match `decision.*` types (which never feed processes). */
export function onlyDecisions(glob: string): boolean {
  return glob === 'decision' ? false : glob.startsWith('decision.');
}

export function checkProcessManifest(given: unknown): ProcessCheck {
  const errors = new Issues();
  const input = manifestObject(given, errors, 'apiVersion, kind, metadata, spec');
  if (!input) return { errors: errors.list };
  const check = schemaCheck();
  if (!check(input)) addSchemaErrors(errors, check.errors);
  if (errors.count) return { errors: errors.list };

  const spec = input.spec as { event: string; when?: string; decision: string; message?: string };
  if (onlyDecisions(spec.event)) {
    errors.add('spec.event', `spec.event ${spec.event} matches only decision.* events, and decisions never feed processes (no loops)`);
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

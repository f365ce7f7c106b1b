import { appsManifestSchema, said } from '../../manifests/checking.js';
import { WHEN_MAX } from '../cel.js';

/**
 * THE JSON Schema (draft 2020-12) of an `apps.svc.io/v1` Process manifest (docs/processes.md): the
 * apply path (validate.ts), the CRD generator (src/manifests/kinds.ts) and the OpenAPI document use
 * this one object. What a schema cannot say (the glob reaching only `decision.*`, CEL compiling and
 * type-checking) lives in validate.ts.
 */

export const KIND = 'Process';

/** The integration-subscription syntax: an exact event type or `prefix.*`. */
export const EVENT_PATTERN = '^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*(\\.\\*)?$';
/** `decision.` and at least one more dotted segment. */
export const DECISION_PATTERN = '^decision(\\.[A-Za-z0-9_-]+)+$';
export const MESSAGE_MAX = 2000;

const spec: Record<string, unknown> = {
  type: 'object',
  required: ['event', 'decision'],
  additionalProperties: false,
  properties: {
    event: said(
      {
        type: 'string',
        minLength: 1,
        maxLength: 200,
        pattern: EVENT_PATTERN,
        description: 'The events the process watches: an exact event type or a `prefix.*` pattern, the syntax of integration subscriptions (`connector.run.*`). Never only `decision.*` types: decisions do not feed processes.',
      },
      'must be an event type or a prefix.* pattern (e.g. connector.run.completed or connector.run.*)',
    ),
    when: {
      type: 'string',
      minLength: 1,
      maxLength: WHEN_MAX,
      description: 'Optional condition in Common Expression Language over `type` (string), `tenantId` (int) and `payload` (map); checked at apply. An evaluation that fails (a missing field) or runs too long counts as false.',
    },
    decision: said(
      { type: 'string', maxLength: 200, pattern: DECISION_PATTERN, description: 'The type of the decision event emitted for each matching event; starts with `decision.`.' },
      'must be decision. followed by one or more segments separated by dots, each of ASCII letters (A-Z, a-z), digits, _ or - (e.g. decision.big-run)',
    ),
    message: {
      type: 'string',
      maxLength: MESSAGE_MAX,
      description: 'The decision\'s message: `{{path}}` is filled from the event (`payload.run_id`, `type`, `tenantId`, `id`); a string as is, any other value as JSON, an unknown path as the empty string.',
    },
  },
};

export const processManifestSchema: Record<string, unknown> = appsManifestSchema(
  KIND,
  'A process manifest: a reaction to events. For each event matching `spec.event` whose `spec.when` holds, the hub emits one `spec.decision` event, which lands in the tenant\'s inbox. The same bytes go to POST /api/processes/apply or to kubectl apply.',
  spec,
);

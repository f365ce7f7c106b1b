import { appsManifestSchema, said, SLUG_PATTERN } from '../../manifests/checking.js';

/**
 * THE JSON Schema (draft 2020-12) of an `apps.svc.io/v1` Workflow manifest: the one place its shape
 * is written. The apply path checks manifests against it with ajv (validate.ts); the CRD generator
 * (src/manifests/kinds.ts) and the OpenAPI document reuse the same object. Plain JSON, only the
 * keywords a Kubernetes structural schema understands, closed at every level.
 *
 * What a schema cannot say lives in validate.ts (transitions and dormancy states among `states`,
 * the duration `after`); what needs the tenant's database (the entity exists, the state column is
 * one of its canonical columns) is the store's.
 */

export const API_VERSION = 'apps.svc.io/v1';
export const KIND = 'Workflow';
export const NAME_PATTERN = SLUG_PATTERN;

/** A state: a value of the state column, as stored (case-sensitive). */
const STATE: Record<string, unknown> = { type: 'string', minLength: 1, maxLength: 200 };
const SCOPE_PATTERN = '^\\S{1,100}$';

export const MAX_STATES = 200;

const spec: Record<string, unknown> = {
  type: 'object',
  required: ['entity', 'stateColumn', 'states'],
  additionalProperties: false,
  properties: {
    entity: { type: 'string', minLength: 1, maxLength: 63, description: 'The name of an applied Entity of the tenant (case-insensitive).' },
    scope: said(
      { type: 'string', pattern: SCOPE_PATTERN, description: 'The business scope of the workflow; default: the entity\'s first scope.' },
      'must be a non-blank scope tag without whitespace (at most 100 characters)',
    ),
    stateColumn: { type: 'string', minLength: 1, maxLength: 63, description: 'The canonical column of the entity holding each record\'s state.' },
    states: { type: 'array', minItems: 1, maxItems: MAX_STATES, items: STATE, description: 'The states of the lifecycle: values of the state column.' },
    transitions: {
      type: 'array',
      maxItems: 1000,
      items: {
        type: 'object',
        required: ['from', 'to'],
        additionalProperties: false,
        properties: { from: STATE, to: STATE },
      },
      description: 'The declared moves between states (documentation and the lifecycle corpus; any observed change of state starts a new spell).',
    },
    dormancy: {
      type: 'object',
      required: ['after'],
      additionalProperties: false,
      properties: {
        after: { type: 'string', minLength: 1, maxLength: 100, description: 'How long a record may stay in one state before it is dormant: 90s, 15m, 2h, 30d or an ISO-8601 duration (P30D, PT15M).' },
        states: { type: 'array', minItems: 1, maxItems: MAX_STATES, items: STATE, description: 'The states in which a record can become dormant; default all of spec.states.' },
      },
      description: 'A record that stays in one of these states longer than `after` is announced once per spell as `decision.dormant.<workflow>`.',
    },
  },
};

export const workflowManifestSchema: Record<string, unknown> = appsManifestSchema(
  KIND,
  'A workflow manifest: the lifecycle of an Entity\'s records (a state column, its states and transitions) and when a record staying in a state is dormant. The same bytes go to POST /api/workflows/apply or to kubectl apply.',
  spec,
);

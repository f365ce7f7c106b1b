import { connectorHandler } from '../connectors/manifest-handler.js';
import { connectorManifestSchema } from '../connectors/manifest/schema.js';
import { entityHandler } from '../entities/manifest-handler.js';
import { entityManifestSchema } from '../entities/manifest/schema.js';
import { exportHandler } from '../exports/manifest-handler.js';
import { exportManifestSchema } from '../exports/manifest/schema.js';
import { processHandler } from '../processes/manifest-handler.js';
import { processManifestSchema } from '../processes/manifest/schema.js';
import { workflowHandler } from '../workflows/manifest-handler.js';
import { workflowManifestSchema } from '../workflows/manifest/schema.js';
import type { ManifestHandler } from './handler.js';

/**
 * The registry of manifest kinds: every kind the hub accepts as a Kubernetes-shaped manifest
 * and therefore serves as a custom resource. The CRD generator
 * (src/manifests/crd.ts, scripts/generate-crds.ts) and, later, the operator read this list and
 * nothing else: a new kind (Export, Entity, Workflow, Process) joins by adding one entry with the
 * JSON Schema its apply path validates with, with no generator or operator code of its own.
 */

export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  jsonPath: string;
  description?: string;
  priority?: number;
}

export interface ManifestKind {
  kind: string;
  /** API group, also the CRD group (`connectors.svc.io`). */
  group: string;
  version: string;
  plural: string;
  singular: string;
  shortNames: string[];
  categories?: string[];
  /**
   * The JSON Schema of the whole manifest (envelope: apiVersion, kind, metadata, spec and any
   * top-level extras), the one the apply path validates with.
   */
  schema: Record<string, unknown>;
  /** Whether the status carries `lastRun {id, status, endedAt}` (connectors and exports). */
  lastRun: boolean;
  /** `kubectl get` columns, in order. */
  printerColumns: PrinterColumn[];
  /** What applying and deleting a manifest of this kind does in the hub (the same functions as its HTTP paths). */
  handler: ManifestHandler;
  /**
   * The object of another kind a manifest of this kind takes something from when it is applied (a
   * Workflow's default scope is its Entity's first scope), named in its spec (`name` reads it): the
   * operator reconciles the resources naming an object again when it changes that object.
   */
  dependsOn?: { kind: string; name: (spec: Record<string, unknown>) => unknown };
}

export const READY_COLUMN: PrinterColumn = {
  name: 'Ready',
  type: 'string',
  jsonPath: '.status.conditions[?(@.type=="Ready")].status',
  description: 'The Ready condition: True once the hub holds the resource as applied.',
};
export const REASON_COLUMN: PrinterColumn = {
  name: 'Reason',
  type: 'string',
  jsonPath: '.status.conditions[?(@.type=="Ready")].reason',
  description: 'Why the resource is (not) Ready: Applied, Invalid, TenantUnresolved, Conflict, HubUnavailable, …',
};
export const SCHEDULE_COLUMN: PrinterColumn = { name: 'Schedule', type: 'string', jsonPath: '.spec.schedule', description: '5-field cron, UTC.' };
export const LAST_RUN_COLUMN: PrinterColumn = {
  name: 'Last run',
  type: 'string',
  jsonPath: '.status.lastRun.status',
  description: 'Status of the latest run.',
};
export const AGE_COLUMN: PrinterColumn = { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' };

export const MANIFEST_KINDS: readonly ManifestKind[] = [
  {
    kind: 'Connector',
    group: 'connectors.svc.io',
    version: 'v1',
    plural: 'connectors',
    singular: 'connector',
    shortNames: ['conn'],
    categories: ['svc-hub'],
    schema: connectorManifestSchema,
    lastRun: true,
    printerColumns: [
      READY_COLUMN,
      REASON_COLUMN,
      SCHEDULE_COLUMN,
      LAST_RUN_COLUMN,
      AGE_COLUMN,
    ],
    handler: connectorHandler,
  },
  {
    kind: 'Entity',
    group: 'apps.svc.io',
    version: 'v1',
    plural: 'entities',
    singular: 'entity',
    shortNames: ['ent'],
    categories: ['svc-hub'],
    schema: entityManifestSchema,
    lastRun: false,
    printerColumns: [
      READY_COLUMN,
      REASON_COLUMN,
      { name: 'Key', type: 'string', jsonPath: '.spec.key', description: 'The canonical key column.', priority: 1 },
      AGE_COLUMN,
    ],
    handler: entityHandler,
  },
  {
    kind: 'Export',
    group: 'apps.svc.io',
    version: 'v1',
    plural: 'exports',
    singular: 'export',
    shortNames: ['svcexp'],
    categories: ['svc-hub'],
    schema: exportManifestSchema,
    lastRun: true,
    printerColumns: [
      READY_COLUMN,
      REASON_COLUMN,
      { name: 'Entity', type: 'string', jsonPath: '.spec.source.entity', description: 'The entity exported.' },
      { name: 'Destination', type: 'string', jsonPath: '.spec.destination.kind', description: 'sftp or s3.' },
      SCHEDULE_COLUMN,
      LAST_RUN_COLUMN,
      AGE_COLUMN,
    ],
    handler: exportHandler,
  },
  {
    kind: 'Workflow',
    group: 'apps.svc.io',
    version: 'v1',
    plural: 'workflows',
    singular: 'workflow',
    shortNames: ['wf'],
    categories: ['svc-hub'],
    schema: workflowManifestSchema,
    lastRun: false,
    printerColumns: [
      READY_COLUMN,
      REASON_COLUMN,
      { name: 'Entity', type: 'string', jsonPath: '.spec.entity', description: 'The entity whose records the workflow follows.' },
      { name: 'State column', type: 'string', jsonPath: '.spec.stateColumn', description: 'The canonical column holding the state.', priority: 1 },
      { name: 'Dormant after', type: 'string', jsonPath: '.spec.dormancy.after', description: 'How long a record may stay in a state before it is dormant.', priority: 1 },
      AGE_COLUMN,
    ],
    handler: workflowHandler,
    dependsOn: { kind: 'Entity', name: (spec) => spec.entity },
  },
  {
    kind: 'Process',
    group: 'apps.svc.io',
    version: 'v1',
    plural: 'processes',
    singular: 'process',
    shortNames: ['svcproc'],
    categories: ['svc-hub'],
    schema: processManifestSchema,
    lastRun: false,
    printerColumns: [
      READY_COLUMN,
      REASON_COLUMN,
      { name: 'Event', type: 'string', jsonPath: '.spec.event', description: 'The event type or prefix.* pattern watched.' },
      { name: 'Decision', type: 'string', jsonPath: '.spec.decision', description: 'The decision emitted.' },
      AGE_COLUMN,
    ],
    handler: processHandler,
  },
];

/** `apiVersion` of a kind's manifests (`connectors.svc.io/v1`). */
export const apiVersionOf = (k: ManifestKind): string => `${k.group}/${k.version}`;

/** The CRD name, also the file name under crds/ without `.yaml` (`connectors.connectors.svc.io`). */
export const crdNameOf = (k: ManifestKind): string => `${k.plural}.${k.group}`;

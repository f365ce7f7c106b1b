import { connectorHandler } from '../connectors/manifest-handler.js';
import { connectorManifestSchema } from '../connectors/manifest/schema.js';
import type { Tx } from '../db/database.js';

/**
 * The registry of manifest kinds: every kind the hub accepts as a Kubernetes-shaped manifest
 * (CONTRACTS.md section 5) and therefore serves as a custom resource. The CRD generator
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

/**
 * What the hub does with a manifest of a kind, in the caller's tenant transaction: the same
 * functions as the kind's HTTP paths, so a custom resource behaves exactly like the same bytes sent
 * to `POST /api/<plural>/apply`. The operator calls these and nothing kind-specific.
 */
export interface ManifestHandler {
  /** The manifest as last applied and its schedule, or undefined when the hub holds no such name. */
  stored(tx: Tx, name: string): Promise<{ manifest: unknown; schedule: string | null } | undefined>;
  /** Validates and stores (create or update by name); throws ValidationError naming the field. */
  apply(tx: Tx, manifest: unknown, actor: string): Promise<{ created: boolean; warnings: string[]; schedule: string | null }>;
  /** Deletes by name (with what it owns in the hub); false when there was none. */
  remove(tx: Tx, name: string): Promise<boolean>;
  /** The latest run (kinds with `lastRun`). */
  lastRun?(tx: Tx, name: string): Promise<{ id: string; status: string; endedAt: string | null } | undefined>;
  /**
   * The (tenant code, name) of resources whose runs started or ended after `since`, read in a
   * transaction that sees every tenant: the operator refreshes their `lastRun` at once.
   */
  runsSince?(tx: Tx, since: Date): Promise<Array<{ tenant: string; name: string }>>;
  /** The words after `svc-hub run` that run it once (kinds with schedules): `['connector', name]`. */
  runArgs?(name: string): string[];
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
  /** What applying and deleting a manifest of this kind does in the hub. */
  hub: ManifestHandler;
}

export const READY_COLUMN: PrinterColumn = {
  name: 'Ready',
  type: 'string',
  jsonPath: '.status.conditions[?(@.type=="Ready")].status',
  description: 'The Ready condition: True once the hub holds the resource as applied.',
};
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
    categories: ['svc'],
    schema: connectorManifestSchema,
    lastRun: true,
    printerColumns: [
      READY_COLUMN,
      { name: 'Schedule', type: 'string', jsonPath: '.spec.schedule', description: '5-field cron, UTC.', priority: 1 },
      LAST_RUN_COLUMN,
      AGE_COLUMN,
    ],
    hub: connectorHandler,
  },
];

/** `apiVersion` of a kind's manifests (`connectors.svc.io/v1`). */
export const apiVersionOf = (k: ManifestKind): string => `${k.group}/${k.version}`;

/** The CRD name, also the file name under crds/ without `.yaml` (`connectors.connectors.svc.io`). */
export const crdNameOf = (k: ManifestKind): string => `${k.plural}.${k.group}`;

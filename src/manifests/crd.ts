import { stringify } from 'yaml';
import { apiVersionOf, crdNameOf, type ManifestKind, MANIFEST_KINDS } from './kinds.js';
import { isObject, type Schema, toStructural } from './structural.js';

/**
 * CustomResourceDefinitions generated from the registered manifest kinds (kinds.ts): each kind's
 * JSON Schema, the one its apply path validates with, translated into a Kubernetes structural
 * schema (apiextensions.k8s.io/v1). Pure: scripts/generate-crds.ts writes the result to crds/,
 * test/crds.test.ts compares it with what is there.
 *
 * The translation of each kind's JSON Schema is structural.ts's (`toStructural`); here:
 * - The root: `apiVersion` and `kind` keep only their type (the apiserver owns them), `metadata`
 *   keeps only restrictions on `name` (all Kubernetes allows), the top-level extras (for a Connector
 *   `connector_type`, `scopes`) are declared beside `spec` (a custom resource may carry top-level
 *   fields only when the root schema declares them), and `status` is the status schema of
 *   CONTRACTS.md section 6, written by the operator through the status subresource.
 */

const ENVELOPE = new Set(['apiVersion', 'kind', 'metadata', 'status']);

/**
 * The status of every registered kind (docs/kubernetes.md, "Status"); `lastRun` for connectors and
 * exports. Every field the operator writes is declared here: an API server prunes undeclared ones.
 */
function statusSchema(kind: ManifestKind): Schema {
  const properties: Schema = {
    observedGeneration: { type: 'integer', format: 'int64', description: 'The metadata.generation the conditions describe.' },
    tenant: { type: 'string', description: 'The code of the tenant the hub holds the resource in.' },
    conditions: {
      type: 'array',
      description: '`Ready`, `Reconciling`, `Stalled` (kstatus), plus `Scheduled` where the resource has a schedule.',
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['type'],
      items: {
        type: 'object',
        required: ['type', 'status'],
        properties: {
          type: { type: 'string', description: 'Ready, Reconciling, Stalled or Scheduled.' },
          status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
          reason: { type: 'string', description: 'CamelCase reason (e.g. Applied, Invalid, TenantUnresolved, Conflict, HubUnavailable).' },
          message: { type: 'string', description: 'Human-readable detail; a validation error names its field.' },
          lastTransitionTime: { type: 'string', format: 'date-time' },
          observedGeneration: { type: 'integer', format: 'int64' },
        },
      },
    },
  };
  if (kind.lastRun) {
    properties.lastRun = {
      type: 'object',
      description: 'The latest run.',
      properties: {
        id: { type: 'string', description: 'Run id in the hub.' },
        status: { type: 'string', description: 'Running, Completed, Partial, Failed, …' },
        endedAt: { type: 'string', format: 'date-time', nullable: true, description: 'Absent while the run runs.' },
      },
    };
  }
  return { type: 'object', description: 'Written by the operator through the status subresource.', properties };
}

/** The openAPIV3Schema of a kind: its manifest schema made structural, with the envelope Kubernetes owns. */
function openApiSchemaOf(kind: ManifestKind): Schema {
  const root = kind.schema;
  const converted = toStructural(root, root);
  const properties = (converted.properties ?? {}) as Record<string, Schema>;
  const metadata = isObject(properties.metadata?.properties) ? properties.metadata.properties : {};
  const name = metadata.name as Schema | undefined;
  const rootProperties: Record<string, Schema> = {
    apiVersion: { type: 'string', description: `${apiVersionOf(kind)}.` },
    kind: { type: 'string', description: `${kind.kind}.` },
    metadata: { type: 'object', ...(name ? { properties: { name } } : {}) },
  };
  for (const [key, sub] of Object.entries(properties)) if (!ENVELOPE.has(key)) rootProperties[key] = sub;
  rootProperties.status = statusSchema(kind);
  const required = ((converted.required ?? []) as string[]).filter((key) => !ENVELOPE.has(key));
  return {
    type: 'object',
    ...(typeof converted.description === 'string' ? { description: converted.description } : {}),
    ...(required.length ? { required } : {}),
    properties: rootProperties,
  };
}

export function crdOf(kind: ManifestKind): Schema {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: crdNameOf(kind) },
    spec: {
      group: kind.group,
      names: {
        kind: kind.kind,
        listKind: `${kind.kind}List`,
        plural: kind.plural,
        singular: kind.singular,
        ...(kind.shortNames.length ? { shortNames: kind.shortNames } : {}),
        ...(kind.categories?.length ? { categories: kind.categories } : {}),
      },
      scope: 'Namespaced',
      versions: [
        {
          name: kind.version,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: kind.printerColumns,
          schema: { openAPIV3Schema: openApiSchemaOf(kind) },
        },
      ],
    },
  };
}

const HEADER = (kind: ManifestKind) =>
  `# Generated by scripts/generate-crds.ts (npm run crds) from the ${kind.kind} manifest JSON Schema\n` +
  '# registered in src/manifests/kinds.ts. Do not edit: regenerate, then npm run chart:crds.\n';

/** Every registered kind's CRD as the text of crds/<plural>.<group>.yaml, keyed by file name (YAML 1.1, as Kubernetes reads it). */
export function renderCrds(kinds: readonly ManifestKind[] = MANIFEST_KINDS): Map<string, string> {
  const files = new Map<string, string>();
  for (const kind of kinds) files.set(`${crdNameOf(kind)}.yaml`, HEADER(kind) + stringify(crdOf(kind), { version: '1.1' }));
  return files;
}

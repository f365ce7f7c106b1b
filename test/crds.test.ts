import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { Ajv, type ValidateFunction } from 'ajv';
import { parse } from 'yaml';
import { checkManifest } from '../src/connectors/manifest/validate.js';
import { checkEntityManifest } from '../src/entities/manifest/validate.js';
import { checkProcessManifest } from '../src/processes/manifest/validate.js';
import { checkAgainstEntity, checkExportManifest } from '../src/exports/manifest/validate.js';
import { crdOf, renderCrds } from '../src/manifests/crd.js';
import { AGE_COLUMN, crdNameOf, type ManifestKind, MANIFEST_KINDS } from '../src/manifests/kinds.js';
import { packageRoot } from '../src/package-root.js';
import { re2Pattern } from '../src/manifests/re2.js';
import { applyDefaults, type JSONSchemaProps, re2Problem, re2RegExp } from './harness/kube-schema.js';
import { checkWorkflowManifest } from '../src/workflows/manifest/validate.js';

/**
 * The CRDs of crds/, generated from the registered manifest kinds (src/manifests/kinds.ts,
 * scripts/generate-crds.ts): not stale, structural as apiextensions.k8s.io/v1 requires, and
 * agreeing with the apply-time validator on the examples/ manifests (which must work with both
 * `kubectl apply -f` and `POST /api/connectors/apply` or `POST /api/entities/apply`). No Kubernetes API server runs here: the
 * structural rules and the pruning are re-checked by the walkers below.
 */

const ROOT = packageRoot();
const CRDS = join(ROOT, 'crds');
const EXAMPLES = join(ROOT, 'examples');

type Schema = Record<string, unknown>;
interface Crd {
  metadata: { name: string };
  spec: {
    group: string;
    scope: string;
    names: { kind: string; plural: string };
    versions: {
      name: string;
      served: boolean;
      storage: boolean;
      subresources: { status: Schema };
      additionalPrinterColumns: { name: string; type: string; jsonPath: string }[];
      schema: { openAPIV3Schema: Schema };
    }[];
  };
}

/** The fields of apiextensions.k8s.io/v1 JSONSchemaProps; anything else is refused by the apiserver. */
const JSON_SCHEMA_PROPS = new Set([
  'id', '$schema', '$ref', 'description', 'type', 'format', 'title', 'default', 'maximum', 'exclusiveMaximum', 'minimum',
  'exclusiveMinimum', 'maxLength', 'minLength', 'pattern', 'maxItems', 'minItems', 'uniqueItems', 'multipleOf', 'enum',
  'maxProperties', 'minProperties', 'required', 'items', 'allOf', 'oneOf', 'anyOf', 'not', 'properties',
  'additionalProperties', 'patternProperties', 'dependencies', 'additionalItems', 'definitions', 'externalDocs', 'example',
  'nullable',
]);
const X_KEYWORDS = [
  'x-kubernetes-preserve-unknown-fields', 'x-kubernetes-int-or-string', 'x-kubernetes-embedded-resource', 'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys', 'x-kubernetes-map-type', 'x-kubernetes-validations',
];
const TYPES = new Set(['object', 'array', 'string', 'integer', 'number', 'boolean']);
const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Violations of the structural-schema rules (Kubernetes docs, "Specifying a structural schema"), one line each. */
function structuralProblems(node: Schema, path = '', inJunctor = false): string[] {
  const problems: string[] = [];
  const at = path || '<root>';
  for (const key of Object.keys(node)) {
    if (!JSON_SCHEMA_PROPS.has(key) && !key.startsWith('x-kubernetes-')) problems.push(`${at}: unknown keyword ${key}`);
  }
  for (const key of ['$ref', '$schema', 'id', 'definitions', 'patternProperties', 'dependencies', 'additionalItems']) {
    if (key in node) problems.push(`${at}: ${key} is not allowed`);
  }
  if (inJunctor) {
    for (const key of ['type', 'additionalProperties', 'default', 'nullable', 'description', 'title']) {
      if (key in node) problems.push(`${at}: ${key} inside allOf/anyOf/oneOf/not`);
    }
  } else {
    const escaped = node['x-kubernetes-int-or-string'] === true || node['x-kubernetes-preserve-unknown-fields'] === true;
    if (typeof node.type !== 'string' && !escaped) problems.push(`${at}: no type and no x-kubernetes-* escape`);
    if (node.type !== undefined && !TYPES.has(node.type as string)) problems.push(`${at}: type ${JSON.stringify(node.type)}`);
  }
  if (node.additionalProperties === false) problems.push(`${at}: additionalProperties: false`);
  if (node.additionalProperties !== undefined && node.properties !== undefined) problems.push(`${at}: additionalProperties beside properties`);
  if (node.type === 'array' && !isObject(node.items)) problems.push(`${at}: array without an items schema`);
  if (node['x-kubernetes-int-or-string'] === true && node.type !== undefined) problems.push(`${at}: int-or-string with a type`);
  if (isObject(node.properties)) {
    for (const [name, sub] of Object.entries(node.properties)) problems.push(...structuralProblems(sub as Schema, `${path}.${name}`, inJunctor));
  }
  if (isObject(node.items)) problems.push(...structuralProblems(node.items, `${path}[]`, inJunctor));
  if (isObject(node.additionalProperties)) problems.push(...structuralProblems(node.additionalProperties, `${path}{}`, inJunctor));
  for (const junctor of ['allOf', 'anyOf', 'oneOf']) {
    for (const [i, branch] of ((node[junctor] as Schema[] | undefined) ?? []).entries()) problems.push(...structuralProblems(branch, `${path}.${junctor}[${i}]`, true));
  }
  if (isObject(node.not)) problems.push(...structuralProblems(node.not, `${path}.not`, true));
  return problems;
}

/** The root rules: metadata may restrict name and generateName only; apiVersion and kind are strings. */
function rootProblems(root: Schema): string[] {
  const problems: string[] = [];
  const props = (root.properties ?? {}) as Record<string, Schema>;
  if (root.type !== 'object') problems.push('root: not type object');
  const metadata = props.metadata;
  if (metadata) {
    if (metadata.type !== 'object') problems.push('metadata: not type object');
    for (const key of Object.keys(metadata)) if (!['type', 'properties', 'description'].includes(key)) problems.push(`metadata: ${key}`);
    for (const key of Object.keys((metadata.properties ?? {}) as Schema)) if (!['name', 'generateName'].includes(key)) problems.push(`metadata.${key}`);
  }
  for (const key of ['apiVersion', 'kind']) {
    if (props[key] && (props[key].type !== 'string' || Object.keys(props[key]).some((k) => !['type', 'description'].includes(k)))) problems.push(`${key}: only a string`);
  }
  return problems;
}

/**
 * The fields of `value` the schema does not declare (outside x-kubernetes-preserve-unknown-fields):
 * what the apiserver would prune, and what `kubectl apply` (strict field validation) refuses.
 */
function undeclared(value: unknown, schema: Schema, path = ''): string[] {
  if (schema['x-kubernetes-preserve-unknown-fields'] === true && !schema.properties) return [];
  if (Array.isArray(value)) return isObject(schema.items) ? value.flatMap((v, i) => undeclared(v, schema.items as Schema, `${path}[${i}]`)) : [];
  if (!isObject(value)) return [];
  const props = (schema.properties ?? {}) as Record<string, Schema>;
  const found: string[] = [];
  for (const [key, v] of Object.entries(value)) {
    const field = path ? `${path}.${key}` : key;
    if (props[key]) found.push(...undeclared(v, props[key], field));
    else if (isObject(schema.additionalProperties)) found.push(...undeclared(v, schema.additionalProperties, field));
    else if (schema['x-kubernetes-preserve-unknown-fields'] !== true && !(path === 'metadata')) found.push(field);
  }
  return found;
}

function crdValidator(schema: Schema): ValidateFunction {
  // Patterns read as kube-apiserver reads them (RE2), not as JavaScript does.
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false, code: { regExp: re2RegExp as never } });
  for (const keyword of X_KEYWORDS) ajv.addKeyword(keyword);
  return ajv.compile(schema);
}

const yamlFiles = (dir: string) => readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort();
const readCrd = (file: string) => parse(readFileSync(join(CRDS, file), 'utf8'), { version: '1.1' }) as Crd;
const schemaOf = (crd: Crd) => crd.spec.versions[0]!.schema.openAPIV3Schema;
const connectorCrd = () => readCrd(`${crdNameOf(MANIFEST_KINDS.find((k) => k.kind === 'Connector')!)}.yaml`);

describe('crds/', () => {
  it('is what npm run crds generates from the registered kinds (not stale, nothing extra)', () => {
    const generated = renderCrds();
    expect(yamlFiles(CRDS)).toEqual([...generated.keys()].sort());
    for (const [file, text] of generated) {
      // A failure here means crds/ is stale: run npm run crds, then npm run chart:crds.
      expect({ file, text: readFileSync(join(CRDS, file), 'utf8') }).toEqual({ file, text });
    }
  });

  it.each(MANIFEST_KINDS.map((k) => [k.kind, k] as const))('%s: an apiextensions.k8s.io/v1 CRD, namespaced, v1 served and stored, status subresource, printer columns', (_, kind) => {
    const crd = readCrd(`${crdNameOf(kind)}.yaml`);
    expect(crd).toEqual(expect.objectContaining({ apiVersion: 'apiextensions.k8s.io/v1', kind: 'CustomResourceDefinition' }));
    expect(crd.metadata.name).toBe(`${kind.plural}.${kind.group}`);
    expect(crd.spec.group).toBe(kind.group);
    expect(crd.spec.scope).toBe('Namespaced');
    expect(crd.spec.names).toEqual(expect.objectContaining({ kind: kind.kind, plural: kind.plural, singular: kind.singular, listKind: `${kind.kind}List` }));
    expect(crd.spec.versions).toHaveLength(1);
    const version = crd.spec.versions[0]!;
    expect(version).toEqual(expect.objectContaining({ name: kind.version, served: true, storage: true, subresources: { status: {} } }));
    const columns = Object.fromEntries(version.additionalPrinterColumns.map((c) => [c.name, c]));
    expect(columns.Ready).toEqual(expect.objectContaining({ type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' }));
    expect(columns.Age).toEqual(expect.objectContaining({ type: 'date', jsonPath: '.metadata.creationTimestamp' }));
    if (kind.lastRun) expect(columns['Last run']).toEqual(expect.objectContaining({ type: 'string', jsonPath: '.status.lastRun.status' }));
    expect(columns.Reason).toEqual(expect.objectContaining({ type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].reason' }));
    expect(version.additionalPrinterColumns.slice(0, 2).map((c) => c.name)).toEqual(['Ready', 'Reason']);
    // Kinds with schedules (those that run) show the schedule by default (no priority).
    if (kind.handler.runArgs) expect(columns.Schedule).toEqual({ name: 'Schedule', type: 'string', jsonPath: '.spec.schedule', description: '5-field cron, UTC.' });
    expect(version.additionalPrinterColumns.at(-1)).toEqual(AGE_COLUMN);

    const status = (schemaOf(crd).properties as Record<string, Schema>).status!;
    const props = status.properties as Record<string, Schema>;
    expect(props.observedGeneration!.type).toBe('integer');
    // Declared, or a real API server prunes it from every status write.
    expect(props.tenant).toEqual(expect.objectContaining({ type: 'string' }));
    expect(Object.keys(props).sort()).toEqual(['conditions', 'observedGeneration', 'tenant', ...(kind.lastRun ? ['lastRun'] : [])].sort());
    const condition = (props.conditions!.items as Schema).properties as Record<string, Schema>;
    expect(Object.keys(condition).sort()).toEqual(['lastTransitionTime', 'message', 'observedGeneration', 'reason', 'status', 'type']);
    if (kind.lastRun) expect(Object.keys(props.lastRun!.properties as Schema).sort()).toEqual(['endedAt', 'id', 'status']);
  });

  it.each(yamlFiles(CRDS))('%s has a structural schema', (file) => {
    const schema = schemaOf(readCrd(file));
    expect([...structuralProblems(schema), ...rootProblems(schema)]).toEqual([]);
  });

  it('quotes what YAML 1.1 would read as booleans (the status enum True/False)', () => {
    const text = readFileSync(join(CRDS, 'connectors.connectors.svc.io.yaml'), 'utf8');
    expect(text).toContain('- "True"');
    const conditions = ((schemaOf(connectorCrd()).properties as Record<string, Schema>).status!.properties as Record<string, Schema>).conditions!;
    expect(((conditions.items as Schema).properties as Record<string, Schema>).status!.enum).toEqual(['True', 'False', 'Unknown']);
  });

  it('declares the Connector envelope extras at the root and keeps unknown spec keys (a warning in the apply path)', () => {
    const schema = schemaOf(connectorCrd());
    const props = schema.properties as Record<string, Schema>;
    expect(Object.keys(props).sort()).toEqual(['apiVersion', 'connector_type', 'kind', 'metadata', 'scopes', 'spec', 'status']);
    expect(schema.required).toEqual(['connector_type', 'spec']);
    expect(props.spec!['x-kubernetes-preserve-unknown-fields']).toBe(true);
    const endpoint = (props.spec!.properties as Record<string, Schema>).endpoints!.items as Schema;
    expect(endpoint['x-kubernetes-preserve-unknown-fields']).toBeUndefined();
    const endpointProps = endpoint.properties as Record<string, Schema>;
    expect(endpointProps.body).toEqual(expect.objectContaining({ 'x-kubernetes-preserve-unknown-fields': true }));
    expect(endpointProps.variables).toEqual(expect.objectContaining({ type: 'object', 'x-kubernetes-preserve-unknown-fields': true }));
  });
});

/** Every `pattern` string in a schema. */
function patternsOf(schema: unknown): string[] {
  if (Array.isArray(schema)) return schema.flatMap(patternsOf);
  if (schema === null || typeof schema !== 'object') return [];
  return Object.entries(schema as Schema).flatMap(([key, value]) => (key === 'pattern' && typeof value === 'string' ? [value] : key === 'enum' ? [] : patternsOf(value)));
}

/**
 * The resources of a Kubernetes cluster without add-ons (`kubectl api-resources`, 1.33): their plurals and short
 * names. kubectl expands a category before it resolves a resource's name (ReplaceAliases in cli-runtime's
 * resource builder), so a category that is one of these names takes it over for everyone on the cluster
 * (`kubectl get svc` listing these kinds instead of Services), and a short name or a name that is one is never
 * reached.
 */
const BUILT_IN_PLURALS = [
  'bindings', 'componentstatuses', 'configmaps', 'endpoints', 'events', 'limitranges', 'namespaces', 'nodes', 'persistentvolumeclaims',
  'persistentvolumes', 'pods', 'podtemplates', 'replicationcontrollers', 'resourcequotas', 'secrets', 'serviceaccounts', 'services',
  'mutatingwebhookconfigurations', 'validatingadmissionpolicies', 'validatingadmissionpolicybindings', 'validatingwebhookconfigurations',
  'customresourcedefinitions', 'apiservices', 'controllerrevisions', 'daemonsets', 'deployments', 'replicasets', 'statefulsets',
  'selfsubjectreviews', 'tokenreviews', 'localsubjectaccessreviews', 'selfsubjectaccessreviews', 'selfsubjectrulesreviews',
  'subjectaccessreviews', 'horizontalpodautoscalers', 'cronjobs', 'jobs', 'certificatesigningrequests', 'leases', 'endpointslices',
  'flowschemas', 'prioritylevelconfigurations', 'ingressclasses', 'ingresses', 'networkpolicies', 'runtimeclasses', 'poddisruptionbudgets',
  'clusterrolebindings', 'clusterroles', 'rolebindings', 'roles', 'priorityclasses', 'csidrivers', 'csinodes', 'csistoragecapacities',
  'storageclasses', 'volumeattachments',
];
const BUILT_IN_SHORT_NAMES = [
  'cs', 'cm', 'ep', 'ev', 'limits', 'ns', 'no', 'pvc', 'pv', 'po', 'rc', 'quota', 'sa', 'svc', 'crd', 'crds', 'ds', 'deploy', 'rs', 'sts',
  'hpa', 'cj', 'csr', 'ing', 'netpol', 'pdb', 'pc', 'sc',
];
const singularOf = (plural: string) => (/ies$/.test(plural) ? plural.replace(/ies$/, 'y') : /(ss|ch|sh|x)es$/.test(plural) ? plural.slice(0, -2) : plural.replace(/s$/, ''));
const BUILT_IN_NAMES = new Set([...BUILT_IN_PLURALS, ...BUILT_IN_PLURALS.map(singularOf), ...BUILT_IN_SHORT_NAMES]);

describe('the names kubectl knows the kinds by', () => {
  it('are no built-in resource\'s plural, singular or short name: not their names, short names or categories', () => {
    const taken = MANIFEST_KINDS.flatMap((kind) =>
      [kind.plural, kind.singular, ...(kind.shortNames ?? []), ...(kind.categories ?? [])].filter((name) => BUILT_IN_NAMES.has(name)).map((name) => `${kind.kind}: ${name}`),
    );
    expect(taken).toEqual([]);
    expect(['service', 'svc', 'pod', 'deployment', 'networkpolicy', 'ingressclass'].every((name) => BUILT_IN_NAMES.has(name))).toBe(true);
  });

  it('put every kind in the category svc-hub (kubectl get svc-hub)', () => {
    for (const kind of MANIFEST_KINDS) expect(readCrd(`${crdNameOf(kind)}.yaml`).spec.names).toMatchObject({ categories: ['svc-hub'] });
  });
});

describe('patterns, as the hub reads them (JavaScript) and as kube-apiserver reads the CRD (RE2)', () => {
  const hubPatterns = [...new Set(MANIFEST_KINDS.flatMap((k) => patternsOf(k.schema)))];
  // Each whitespace and line end the two read differently, alone and between and around other text.
  const odd = ['\t', '\n', '\v', '\f', '\r', ' ', '\u00a0', '\u1680', '\u2000', '\u200a', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000', '\ufeff', '\u0085', '\u180e', '\u200b'];
  const samples = (base: string[]) => base.flatMap((b) => [b, ...odd.flatMap((o) => [`${b}${o}`, `${o}${b}`, `${b.slice(0, 1)}${o}${b.slice(1)}`])]);
  const bases = ['a', 'crm', 'http://h/x', 'https://h.example:8443/v1', 'ext.a_b', 'secret:X', '/items', 'decision.x', '09:00-17:00', '10/m', ''];

  it.each(hubPatterns)('%s reads the same in the CRD', (pattern) => {
    const crd = re2Pattern(pattern);
    expect(re2Problem(crd)).toBeUndefined();
    const hub = new RegExp(pattern, 'u');
    const differ = samples(bases).filter((text) => hub.test(text) !== re2RegExp(crd).test(text));
    expect(differ.map((t) => JSON.stringify(t))).toEqual([]);
  });
});

describe('the translation of JSON Schema constructs a structural schema forbids', () => {
  const kind = (schema: Schema): ManifestKind => ({
    kind: 'Thing', group: 'apps.svc.io', version: 'v1', plural: 'things', singular: 'thing', shortNames: [], schema, lastRun: false, printerColumns: [AGE_COLUMN], handler: MANIFEST_KINDS[0]!.handler,
  });
  const schema: Schema = {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    additionalProperties: false,
    required: ['apiVersion', 'kind', 'metadata', 'spec'],
    $defs: { column: { type: 'object', additionalProperties: false, required: ['name'], properties: { name: { type: 'string' }, examples: { type: 'array' } } } },
    properties: {
      apiVersion: { const: 'apps.svc.io/v1' },
      kind: { const: 'Thing' },
      metadata: { type: 'object', required: ['name'], properties: { name: { type: 'string' }, labels: { type: 'object' } } },
      spec: {
        type: 'object',
        properties: {
          scope: { oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }] },
          port: { type: ['integer', 'string'] },
          note: { type: ['string', 'null'] },
          columns: { type: 'array', items: { $ref: '#/$defs/column' } },
          mode: { const: 'on' },
          weight: { type: 'number', exclusiveMinimum: 0 },
          tags: { type: 'object', additionalProperties: { type: 'string' } },
          anything: {},
        },
      },
    },
  };

  it('inlines $ref, drops additionalProperties: false, and escapes unions', () => {
    const crd = crdOf(kind(schema)) as unknown as Crd;
    const root = schemaOf(crd);
    expect([...structuralProblems(root), ...rootProblems(root)]).toEqual([]);
    const spec = (root.properties as Record<string, Schema>).spec!.properties as Record<string, Schema>;
    expect(spec.scope).toEqual({ 'x-kubernetes-preserve-unknown-fields': true });
    expect(spec.port).toEqual({ 'x-kubernetes-int-or-string': true });
    expect(spec.note).toEqual({ type: 'string', nullable: true });
    expect(spec.columns!.items).toEqual({ type: 'object', required: ['name'], properties: { name: { type: 'string' }, examples: { type: 'array', items: { 'x-kubernetes-preserve-unknown-fields': true } } } });
    expect(spec.mode).toEqual({ type: 'string', enum: ['on'] });
    expect(spec.weight).toEqual({ type: 'number', minimum: 0, exclusiveMinimum: true });
    expect(spec.tags).toEqual({ type: 'object', additionalProperties: { type: 'string' } });
    expect(spec.anything).toEqual({ 'x-kubernetes-preserve-unknown-fields': true });
    expect((root.properties as Record<string, Schema>).metadata).toEqual({ type: 'object', properties: { name: { type: 'string' } } });
    expect(root.required).toEqual(['spec']);
    // `on` is quoted in the YAML 1.1 text, so Kubernetes reads the string.
    expect(renderCrds([kind(schema)]).get('things.apps.svc.io.yaml')).toContain('- "on"');
  });
});

const kindOf = (file: string) => (parse(readFileSync(join(EXAMPLES, file), 'utf8')) as { kind?: unknown }).kind;

describe('examples/', () => {
  const files = yamlFiles(EXAMPLES).filter((f) => kindOf(f) === 'Connector');
  const crdSchema = schemaOf(connectorCrd());
  const validate = crdValidator(crdSchema);
  const load = (file: string) => parse(readFileSync(join(EXAMPLES, file), 'utf8')) as Schema & { metadata: { name: string; labels: Record<string, string> }; spec: Schema & { endpoints: Schema[] } };

  it('holds one Connector per demo dialect', () => {
    const soap = ['fault', 'fault200', 'flaky', 'mute', 'sap', 'session', 'siebel', 'tail'].map((s) => `soap-${s}`);
    expect(files).toEqual(['down', 'drf', 'flaky', 'graphql', 'hdr', 'liar', 'link', 'offset', 'open', ...soap, 'spring', 'v1'].map((d) => `${d}.yaml`));
  });

  it.each(files)('%s reads the same as YAML 1.1 (kubectl) and 1.2 (the HTTP apply path)', (file) => {
    const text = readFileSync(join(EXAMPLES, file), 'utf8');
    expect(parse(text, { version: '1.1' })).toEqual(parse(text));
  });

  it.each(files)('%s passes the apply-time validator with no error and no warning', (file) => {
    const manifest = load(file);
    const check = checkManifest(manifest);
    expect(check.errors).toEqual([]);
    expect(check.warnings).toEqual([]);
    expect(manifest.metadata.labels).toEqual({ 'svc.io/tenant': 'default' });
    expect(manifest.spec.base_url).toBe('http://demo-source:8099');
    expect(manifest.metadata.name).toBe(`demo-${file.replace(/\.yaml$/, '')}`);
  });

  it.each(files)('%s passes the CRD schema, with no field the apiserver would prune or kubectl refuse', (file) => {
    const manifest = load(file);
    expect(validate(manifest) ? [] : validate.errors).toEqual([]);
    expect(undeclared(manifest, crdSchema)).toEqual([]);
  });

  it('keeps credentials out of the manifests: *_env names only', () => {
    const names = new Set<string>();
    for (const file of files) {
      const auth = (load(file).spec.auth ?? {}) as Record<string, string>;
      for (const [key, value] of Object.entries(auth)) if (key.endsWith('_env')) names.add(value);
      expect(auth.token_value).toBeUndefined();
    }
    expect([...names].sort()).toEqual(['DEMO_API_KEY', 'DEMO_BEARER_TOKEN', 'DEMO_PASSWORD']);
  });

  it('are refused by both the CRD schema and the apply path when broken the same way', () => {
    const base = load('offset.yaml');
    const broken: [string, (m: typeof base) => void][] = [
      ['connector_type', (m) => { m.connector_type = 'soap'; }],
      ['spec.base_url', (m) => { m.spec.base_url = 'demo-source:8099'; }],
      ['spec.endpoints[0].id', (m) => { m.spec.endpoints[0]!.id = 'Offset_Partners'; }],
      ['spec.endpoints[0].pagination.kind', (m) => { (m.spec.endpoints[0]!.pagination as Schema).kind = 'pages'; }],
      ['spec.endpoints[0].target.table', (m) => { (m.spec.endpoints[0]!.target as Schema).table = 'partners'; }],
      ['spec.endpoints[0].pagination.limit', (m) => { (m.spec.endpoints[0]!.pagination as Schema).limit = '100'; }],
      ['spec.default_rate_limit', (m) => { m.spec.default_rate_limit = 'fast'; }],
      ['metadata.name', (m) => { m.metadata.name = 'Demo_Offset'; }],
    ];
    for (const [field, breakIt] of broken) {
      const manifest = structuredClone(base);
      breakIt(manifest);
      expect({ field, crd: validate(manifest) }).toEqual({ field, crd: false });
      expect(checkManifest(manifest).errors.map((e) => e.field)).toContain(field);
    }
  });

  it('a scope holding a non-breaking space is refused by the CRD schema as by the apply path (RE2\'s \\s alone would take it)', () => {
    const base = load('offset.yaml');
    const manifest = { ...structuredClone(base), scopes: ['crm\u00a0sales'] };
    expect(validate(manifest)).toBe(false);
    expect(checkManifest(manifest).errors.map((e) => e.field)).toContain('scopes[0]');
    expect(re2RegExp('^\\S{1,100}$').test('crm\u00a0sales')).toBe(true);
  });
});

describe('examples/ Entity manifests', () => {
  const files = yamlFiles(EXAMPLES).filter((f) => kindOf(f) === 'Entity');
  const crdSchema = schemaOf(readCrd(`${crdNameOf(MANIFEST_KINDS.find((k) => k.kind === 'Entity')!)}.yaml`));
  const validate = crdValidator(crdSchema);
  const load = (file: string) => parse(readFileSync(join(EXAMPLES, file), 'utf8')) as Schema & { metadata: { labels: Record<string, string> }; spec: { sources: Array<{ table: string }> } };

  it('holds the partner entity, and nothing but Connectors, Entities, Exports and Processes is there', () => {
    expect(files).toEqual(['entity-partner.yaml']);
    expect(yamlFiles(EXAMPLES).filter((f) => !['Connector', 'Entity', 'Export', 'Process'].includes(String(kindOf(f))))).toEqual([]);
  });

  it.each(files)('%s reads the same as YAML 1.1 (kubectl) and 1.2 (the HTTP apply path)', (file) => {
    const text = readFileSync(join(EXAMPLES, file), 'utf8');
    expect(parse(text, { version: '1.1' })).toEqual(parse(text));
  });

  it.each(files)('%s passes the apply-time validator with no error and no warning, and reads tables the example connectors write', (file) => {
    const manifest = load(file);
    const check = checkEntityManifest(manifest);
    expect(check.errors).toEqual([]);
    expect(check.warnings).toEqual([]);
    expect(manifest.metadata.labels).toEqual({ 'svc.io/tenant': 'default' });
    const written = new Set(
      yamlFiles(EXAMPLES)
        .filter((f) => kindOf(f) === 'Connector')
        .flatMap((f) => (parse(readFileSync(join(EXAMPLES, f), 'utf8')) as { spec: { endpoints: Array<{ target: { table: string } }> } }).spec.endpoints.map((e) => e.target.table)),
    );
    for (const source of manifest.spec.sources) expect({ table: source.table, written: written.has(source.table) }).toEqual({ table: source.table, written: true });
  });

  it.each(files)('%s passes the CRD schema, with no field the apiserver would prune or kubectl refuse', (file) => {
    const manifest = load(file);
    expect(validate(manifest) ? [] : validate.errors).toEqual([]);
    expect(undeclared(manifest, crdSchema)).toEqual([]);
  });

  it('are refused by both the CRD schema and the apply path when broken the same way', () => {
    const base = load('entity-partner.yaml') as unknown as Schema & { spec: Schema & { columns: Schema[]; sources: Schema[] } };
    const broken: [string, (m: typeof base) => void][] = [
      ['spec.key', (m) => { delete m.spec.key; }],
      ['spec.columns[0].type', (m) => { m.spec.columns[0]!.type = 'varchar'; }],
      ['spec.columns[1].name', (m) => { m.spec.columns[1]!.name = 'Name'; }],
      ['spec.sources[0].table', (m) => { m.spec.sources[0]!.table = 'open_partners'; }],
      ['spec.sources', (m) => { m.spec.sources = []; }],
      ['metadata.name', (m) => { (m.metadata as Schema).name = 'partner_1'; }],
    ];
    for (const [field, breakIt] of broken) {
      const manifest = structuredClone(base);
      breakIt(manifest);
      expect({ field, crd: validate(manifest) }).toEqual({ field, crd: false });
      expect(checkEntityManifest(manifest).errors.map((e) => e.field)).toContain(field);
    }
  });
});

describe('examples/ Export manifests', () => {
  const files = yamlFiles(EXAMPLES).filter((f) => kindOf(f) === 'Export');
  const crdSchema = schemaOf(readCrd(`${crdNameOf(MANIFEST_KINDS.find((k) => k.kind === 'Export')!)}.yaml`));
  const validate = crdValidator(crdSchema);
  const load = (file: string) => parse(readFileSync(join(EXAMPLES, file), 'utf8')) as Schema & { metadata: { labels: Record<string, string> } };
  const entity = parse(readFileSync(join(EXAMPLES, 'entity-partner.yaml'), 'utf8')) as { metadata: { name: string }; spec: { scope: string; columns: Array<{ name: string }> } };

  it('holds an SFTP and an S3 export of the partner entity', () => {
    expect(files).toEqual(['export-partners-s3.yaml', 'export-partners-sftp.yaml']);
  });

  it.each(files)('%s reads the same as YAML 1.1 (kubectl) and 1.2, passes the apply path against the example entity, and the CRD schema', (file) => {
    const text = readFileSync(join(EXAMPLES, file), 'utf8');
    expect(parse(text, { version: '1.1' })).toEqual(parse(text));
    const manifest = load(file);
    const check = checkExportManifest(manifest);
    expect(check.errors).toEqual([]);
    expect(check.warnings).toEqual([]);
    expect(checkAgainstEntity(check.spec!, { name: entity.metadata.name, scopes: [entity.spec.scope], columns: entity.spec.columns.map((c) => c.name) })).toEqual([]);
    expect(manifest.metadata.labels).toEqual({ 'svc.io/tenant': 'default' });
    expect(validate(manifest) ? [] : validate.errors).toEqual([]);
    expect(undeclared(manifest, crdSchema)).toEqual([]);
  });
});

describe('examples/ Process manifests', () => {
  const files = yamlFiles(EXAMPLES).filter((f) => kindOf(f) === 'Process');
  const crdSchema = schemaOf(readCrd(`${crdNameOf(MANIFEST_KINDS.find((k) => k.kind === 'Process')!)}.yaml`));
  const validate = crdValidator(crdSchema);
  const load = (file: string) => parse(readFileSync(join(EXAMPLES, file), 'utf8')) as Schema & { metadata: { labels: Record<string, string> } };

  it('holds the big-runs process', () => {
    expect(files).toEqual(['process-big-runs.yaml']);
  });

  it.each(files)('%s reads the same as YAML 1.1 (kubectl) and 1.2, passes the apply-time validator and the CRD schema', (file) => {
    const text = readFileSync(join(EXAMPLES, file), 'utf8');
    expect(parse(text, { version: '1.1' })).toEqual(parse(text));
    const manifest = load(file);
    expect(checkProcessManifest(manifest).errors).toEqual([]);
    expect(manifest.metadata.labels).toEqual({ 'svc.io/tenant': 'default' });
    expect(validate(manifest) ? [] : validate.errors).toEqual([]);
    expect(undeclared(manifest, crdSchema)).toEqual([]);
  });

  it('refuses a decision without the prefix in both the CRD schema and the apply path; an unknown key is refused at apply and undeclared in the CRD', () => {
    const base = load('process-big-runs.yaml') as unknown as Schema & { spec: Schema };
    const badDecision = { ...base, spec: { ...base.spec, decision: 'big-run' } };
    expect(validate(badDecision)).toBe(false);
    expect(checkProcessManifest(badDecision).errors.map((e) => e.field)).toEqual(['spec.decision']);
    const unknownKey = { ...base, spec: { ...base.spec, on: 'x' } };
    expect(undeclared(unknownKey, crdSchema)).not.toEqual([]);
    expect(checkProcessManifest(unknownKey).errors.map((e) => e.field)).toEqual(['spec.on']);
  });
});

/** The Workflow manifest of CONTRACTS.md section 5a. */
const workflowManifest = () => ({
  apiVersion: 'apps.svc.io/v1',
  kind: 'Workflow',
  metadata: { name: 'partner-status', labels: { 'svc.io/tenant': 'default' } },
  spec: {
    entity: 'partner',
    scope: 'partners',
    stateColumn: 'status',
    states: ['prospect', 'active', 'closed'],
    transitions: [{ from: 'prospect', to: 'active' }, { from: 'active', to: 'closed' }],
    dormancy: { after: '30d', states: ['prospect', 'active'] },
  },
});

describe('the Workflow CRD', () => {
  const crdSchema = schemaOf(readCrd(`${crdNameOf(MANIFEST_KINDS.find((k) => k.kind === 'Workflow')!)}.yaml`));
  const validate = crdValidator(crdSchema);
  const manifest = workflowManifest;

  it('is workflows.apps.svc.io, in category svc-hub, and takes the manifest of section 5a as the apply path does, with nothing pruned', () => {
    const crd = readCrd('workflows.apps.svc.io.yaml');
    expect(crd.spec.names).toMatchObject({ kind: 'Workflow', plural: 'workflows', categories: ['svc-hub'] });
    expect(crd.spec.scope).toBe('Namespaced');
    const m = manifest();
    expect(checkWorkflowManifest(m).errors).toEqual([]);
    expect(validate(m) ? [] : validate.errors).toEqual([]);
    expect(undeclared(m, crdSchema)).toEqual([]);
  });

  it('refuses what the apply path refuses by its schema, naming the same field', () => {
    const broken: Array<[string, (m: ReturnType<typeof manifest>) => void]> = [
      ['spec.states', (m) => { m.spec.states = []; }],
      ['spec.transitions[0].from', (m) => { (m.spec.transitions[0] as Schema).from = 3; }],
      ['spec.dormancy.after', (m) => { (m.spec.dormancy as Schema).after = 30; }],
      ['metadata.name', (m) => { m.metadata.name = 'Partner_Status'; }],
    ];
    for (const [field, breakIt] of broken) {
      const m = manifest();
      breakIt(m);
      expect({ field, crd: validate(m) }).toEqual({ field, crd: false });
      expect(checkWorkflowManifest(m).errors.map((e) => e.field)).toContain(field);
    }
  });
});

/** `value` with a null for every property its schema declares and it leaves out, at every depth. */
function withNulls(value: unknown, schema: Schema | undefined): { value: unknown; nulls: number } {
  let nulls = 0;
  const fill = (v: unknown, node: Schema | undefined): unknown => {
    if (!node) return v;
    if (Array.isArray(v)) return v.map((item) => fill(item, isObject(node.items) ? node.items : undefined));
    if (!isObject(v)) return v;
    const props = (node.properties ?? {}) as Record<string, Schema>;
    const out: Schema = {};
    for (const [key, item] of Object.entries(v)) out[key] = fill(item, props[key] ?? (isObject(node.additionalProperties) ? node.additionalProperties : undefined));
    for (const key of Object.keys(props)) {
      if (!(key in out)) {
        out[key] = null;
        nulls++;
      }
    }
    return out;
  };
  return { value: fill(value, schema), nulls };
}

describe('a null where the CRD schema takes none', () => {
  const checks: Record<string, (m: unknown) => unknown> = {
    Connector: checkManifest,
    Entity: checkEntityManifest,
    Export: checkExportManifest,
    Process: checkProcessManifest,
    Workflow: checkWorkflowManifest,
  };
  const manifests: Array<[string, Schema]> = [
    ...yamlFiles(EXAMPLES).map((f): [string, Schema] => [f, parse(readFileSync(join(EXAMPLES, f), 'utf8')) as Schema]),
    ['the workflow of section 5a', workflowManifest() as Schema],
  ];

  it.each(manifests)('%s: kube-apiserver drops it with its key, and the apply path reads the manifest as if it were left out (the same result)', (_name, manifest) => {
    const kind = MANIFEST_KINDS.find((k) => k.kind === manifest.kind)!;
    const crdSchema = schemaOf(readCrd(`${crdNameOf(kind)}.yaml`));
    const { value, nulls } = withNulls(manifest, crdSchema);
    expect(nulls).toBeGreaterThan(0);
    // What the operator is given: the stand-in prunes such nulls as the apiserver's PruneNonNullableNullsWithoutDefaults.
    expect(applyDefaults(structuredClone(value), crdSchema as JSONSchemaProps)).toEqual(manifest);
    const check = checks[kind.kind]!;
    expect(check(value)).toEqual(check(manifest));
    expect((check(manifest) as { errors: unknown[] }).errors).toEqual([]);
  });
});

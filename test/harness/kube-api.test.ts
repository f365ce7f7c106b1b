import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { BatchV1Api, CoreV1Api, CustomObjectsApi, type KubernetesObject, makeInformer, PatchStrategy, setHeaderOptions, type V1CronJob } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { kubeConfig } from '../../kube/kube-config.js';
import { type CustomResourceDefinition, KubeApiStandIn, type KubeObject, loadCrds, typesOfCrd } from './kube-api.js';
import { until } from './until.js';
import { sameQuantity } from '../../operator/quantity.js';

/**
 * The SCRIPTED KUBERNETES API STAND-IN (kube-api.ts) is as strict as kube-apiserver where the
 * operator's tests depend on it: each behaviour below is driven through the real
 * @kubernetes/client-node, and each assertion fails on the lax stand-in it replaced.
 */

const NS = 'strict';
const WIDGET_CRD: CustomResourceDefinition = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'widgets.test.svc.io' },
  spec: {
    group: 'test.svc.io',
    names: { kind: 'Widget', plural: 'widgets' },
    scope: 'Namespaced',
    versions: [
      {
        name: 'v1',
        served: true,
        subresources: { status: {} },
        schema: {
          openAPIV3Schema: {
            type: 'object',
            properties: {
              spec: {
                type: 'object',
                required: ['size'],
                properties: {
                  size: { type: 'integer', format: 'int32', minimum: 1, maximum: 10 },
                  mode: { type: 'string', enum: ['fast', 'slow'], default: 'fast' },
                  code: { type: 'string', pattern: '^[a-z]+$', minLength: 2, maxLength: 5 },
                  tags: { type: 'array', items: { type: 'string' }, minItems: 1, maxItems: 2, 'x-kubernetes-list-type': 'set' },
                  port: { 'x-kubernetes-int-or-string': true },
                  when: { type: 'string', format: 'date-time' },
                  note: { type: 'string', nullable: true },
                  label: { type: 'string', default: 'none' },
                  limits: { type: 'object', additionalProperties: { type: 'integer', minimum: 0 } },
                  extra: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true, properties: { known: { type: 'object', properties: { a: { type: 'string' } } } } },
                  template: { type: 'object', 'x-kubernetes-embedded-resource': true, 'x-kubernetes-preserve-unknown-fields': true },
                  policy: { type: 'object', default: { retries: 3 }, properties: { retries: { type: 'integer' }, backoff: { type: 'string', default: '1s' } } },
                  target: { type: 'object', properties: { host: { type: 'string' }, ip: { type: 'string' } }, oneOf: [{ required: ['host'] }, { required: ['ip'] }] },
                  level: { type: 'string', anyOf: [{ pattern: '^lo' }, { pattern: '^hi' }] },
                  word: { type: 'string', not: { enum: ['forbidden'] }, allOf: [{ minLength: 2 }, { maxLength: 9 }] },
                },
              },
              status: { type: 'object', properties: { phase: { type: 'string', enum: ['Ready', 'Failed'] }, count: { type: 'integer' } } },
            },
          },
        },
      },
    ],
  },
};
const WIDGET = { group: 'test.svc.io', version: 'v1', plural: 'widgets' };

let api: KubeApiStandIn;
let custom: CustomObjectsApi;
let core: CoreV1Api;
let batch: BatchV1Api;

beforeAll(async () => {
  api = await new KubeApiStandIn([...loadCrds(), WIDGET_CRD]).start();
  const kc = kubeConfig({ server: api.url, token: 'stand-in' });
  custom = kc.makeApiClient(CustomObjectsApi);
  core = kc.makeApiClient(CoreV1Api);
  batch = kc.makeApiClient(BatchV1Api);
  api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
});

afterAll(async () => {
  await api?.close();
});

interface StatusBody {
  kind: string;
  apiVersion: string;
  status: string;
  reason: string;
  code: number;
  message: string;
  details?: { name: string; group: string; kind: string; causes: Array<{ reason: string; message: string; field: string }> };
}

/** The Status a refused call answered (fails the test when the call succeeded). */
async function refusal(call: Promise<unknown>): Promise<StatusBody & { httpCode: number }> {
  try {
    await call;
  } catch (err) {
    const e = err as { code?: number; body?: unknown };
    const body = typeof e.body === 'string' ? JSON.parse(e.body) : e.body;
    return { ...(body as StatusBody), httpCode: e.code ?? 0 };
  }
  throw new Error('the stand-in accepted what kube-apiserver refuses');
}

const widget = (name: string, spec: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  apiVersion: 'test.svc.io/v1',
  kind: 'Widget',
  metadata: { name, namespace: NS },
  spec,
  ...extra,
});
const createWidget = (body: object) => custom.createNamespacedCustomObject({ ...WIDGET, namespace: NS, body }) as Promise<KubeObject>;
const example = (file: string): KubeObject => parse(readFileSync(new URL(`../../examples/${file}`, import.meta.url), 'utf8')) as KubeObject;

describe('custom resources are served from their CRDs', () => {
  it('registers every CRD of crds/, and a custom type given without a schema takes its CRD (which must agree)', () => {
    for (const crd of loadCrds()) {
      const t = api.typeOf(`${crd.spec.group}/${crd.spec.versions[0]!.name}`, crd.spec.names.plural);
      expect(t).toMatchObject({ kind: crd.spec.names.kind, namespaced: true, statusSubresource: true });
      expect(t.schema?.properties?.spec).toBeDefined();
    }
    expect(KubeApiStandIn.withCrds().typeOf('apps.svc.io/v1', 'exports').schema).toEqual(loadCrds().find((c) => c.spec.names.plural === 'exports')!.spec.versions[0]!.schema!.openAPIV3Schema);
    const lone = new KubeApiStandIn([{ group: 'connectors.svc.io', version: 'v1', plural: 'connectors', kind: 'Connector', namespaced: true, statusSubresource: true }]);
    expect(lone.typeOf('connectors.svc.io/v1', 'connectors').schema?.properties?.status).toBeDefined();
    expect(() => new KubeApiStandIn([{ group: 'connectors.svc.io', version: 'v1', plural: 'connectors', kind: 'Connector', namespaced: false, statusSubresource: true }])).toThrow(/namespaced/);
    expect(() => new KubeApiStandIn([{ group: 'nowhere.svc.io', version: 'v1', plural: 'things', kind: 'Thing', namespaced: true, statusSubresource: true }])).toThrow(/no CRD/);
  });

  it('refuses a CRD whose pattern RE2 cannot read, as kube-apiserver does (JavaScript reads it; Go does not)', () => {
    const crd = structuredClone(loadCrds().find((c) => c.spec.names.plural === 'connectors')!);
    const spec = (crd.spec.versions[0]!.schema!.openAPIV3Schema as { properties: Record<string, { pattern?: string }> }).properties.spec!;
    for (const [pattern, problem] of [
      ['^[\\u0080-\\u00ff]*$', 'invalid escape sequence: `\\u`'],
      ['^(?=x)', 'invalid or unsupported Perl syntax: `(?=`'],
      ['^(?<!y)x', 'invalid or unsupported Perl syntax: `(?<!`'],
      ['(a)\\1', 'invalid escape sequence: `\\1`'],
    ] as const) {
      spec.pattern = pattern;
      expect(() => typesOfCrd(crd)).toThrow(`openAPIV3Schema.properties.spec.pattern: Invalid value: ${JSON.stringify(pattern)}: must be a valid regular expression, but isn't: error parsing regexp: ${problem}`);
    }
    for (const pattern of ['^[\\t -~\\x80-\\xff]*$', '^\\d{1,3}(\\.\\d+)?$', "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", '^(?:a|b)\\p{L}$']) {
      spec.pattern = pattern;
      expect(typesOfCrd(crd)).toHaveLength(1);
    }
  });
});

describe('1. validation against the openAPIV3Schema: 422 Invalid with the Status of kube-apiserver', () => {
  it('answers a value outside an enum of a repository CRD with the full Status', async () => {
    const entity = example('entity-partner.yaml');
    (entity.spec as { columns: Array<{ type: string }> }).columns[0]!.type = 'float';
    const s = await refusal(custom.createNamespacedCustomObject({ group: 'apps.svc.io', version: 'v1', plural: 'entities', namespace: NS, body: { ...entity, metadata: { ...entity.metadata, namespace: NS } } }));
    expect(s.httpCode).toBe(422);
    expect(s).toMatchObject({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'Invalid', code: 422 });
    expect(s.message).toBe(
      'Entity.apps.svc.io "partner" is invalid: spec.columns[0].type: Unsupported value: "float": supported values: "text", "bigint", "numeric", "timestamptz", "boolean"',
    );
    expect(s.details).toEqual({
      name: 'partner',
      group: 'apps.svc.io',
      kind: 'Entity',
      causes: [{ reason: 'FieldValueNotSupported', message: 'Unsupported value: "float": supported values: "text", "bigint", "numeric", "timestamptz", "boolean"', field: 'spec.columns[0].type' }],
    });
    expect(api.get('apps.svc.io/v1', 'entities', NS, 'partner')).toBeUndefined();
  });

  it('lists several errors in brackets, a missing required field as FieldValueRequired', async () => {
    const s = await refusal(custom.createNamespacedCustomObject({ group: 'apps.svc.io', version: 'v1', plural: 'entities', namespace: NS, body: { apiVersion: 'apps.svc.io/v1', kind: 'Entity', metadata: { name: 'empty' }, spec: { key: '' } } }));
    expect(s.code).toBe(422);
    expect(s.message).toMatch(/^Entity\.apps\.svc\.io "empty" is invalid: \[.*\]$/);
    expect(s.details!.causes).toEqual(
      expect.arrayContaining([
        { reason: 'FieldValueRequired', message: 'Required value', field: 'spec.scope' },
        { reason: 'FieldValueRequired', message: 'Required value', field: 'spec.columns' },
        { reason: 'FieldValueInvalid', message: 'Invalid value: "": spec.key in body should be at least 1 chars long', field: 'spec.key' },
      ]),
    );
    const noSpec = await refusal(custom.createNamespacedCustomObject({ group: 'apps.svc.io', version: 'v1', plural: 'entities', namespace: NS, body: { apiVersion: 'apps.svc.io/v1', kind: 'Entity', metadata: { name: 'nospec' } } }));
    expect(noSpec.message).toBe('Entity.apps.svc.io "nospec" is invalid: spec: Required value');
  });

  it('checks metadata.name against the pattern the CRD gives it', async () => {
    const entity = example('entity-partner.yaml');
    const long = 'a'.repeat(64);
    const s = await refusal(custom.createNamespacedCustomObject({ group: 'apps.svc.io', version: 'v1', plural: 'entities', namespace: NS, body: { ...entity, metadata: { name: long } } }));
    expect(s.details!.causes.map((c) => c.field)).toEqual(['metadata.name']);
    expect(s.details!.causes[0]!.message).toContain('metadata.name in body should match');
  });

  const cases: Array<[string, Record<string, unknown>, string, string, RegExp]> = [
    ['type', { size: 'big' }, 'spec.size', 'FieldValueInvalid', /^Invalid value: "string": spec\.size in body must be of type integer: "string"$/],
    ['minimum', { size: 0 }, 'spec.size', 'FieldValueInvalid', /should be greater than or equal to 1$/],
    ['maximum', { size: 11 }, 'spec.size', 'FieldValueInvalid', /should be less than or equal to 10$/],
    ['int32', { size: 1, limits: { a: 1.5 } }, 'spec.limits.a', 'FieldValueInvalid', /must be of type integer/],
    ['additionalProperties', { size: 1, limits: { a: -1 } }, 'spec.limits.a', 'FieldValueInvalid', /greater than or equal to 0/],
    ['pattern', { size: 1, code: 'AB' }, 'spec.code', 'FieldValueInvalid', /should match '\^\[a-z\]\+\$'$/],
    ['minLength', { size: 1, code: 'a' }, 'spec.code', 'FieldValueInvalid', /should be at least 2 chars long/],
    ['maxLength', { size: 1, code: 'abcdef' }, 'spec.code', 'FieldValueTooLong', /^Too long: must have at most 5 bytes$/],
    ['minItems', { size: 1, tags: [] }, 'spec.tags', 'FieldValueInvalid', /should have at least 1 items/],
    ['maxItems', { size: 1, tags: ['a', 'b', 'c'] }, 'spec.tags', 'FieldValueTooMany', /^Too many: 3: must have at most 2 items$/],
    ['list-type set', { size: 1, tags: ['a', 'a'] }, 'spec.tags[1]', 'FieldValueDuplicate', /^Duplicate value: "a"$/],
    ['items', { size: 1, tags: [3] }, 'spec.tags[0]', 'FieldValueInvalid', /must be of type string/],
    ['int-or-string', { size: 1, port: true }, 'spec.port', 'FieldValueInvalid', /must be of type integer-or-string/],
    ['date-time', { size: 1, when: 'yesterday' }, 'spec.when', 'FieldValueInvalid', /must be of type date-time: "yesterday"/],
    ['not nullable', { size: 1, code: null, tags: null, word: 'ab', mode: 'medium' }, 'spec.mode', 'FieldValueNotSupported', /^Unsupported value: "medium": supported values: "fast", "slow"$/],
    ['embedded-resource', { size: 1, template: { kind: 'Pod', metadata: {} } }, 'spec.template.apiVersion', 'FieldValueRequired', /^Required value: must not be empty$/],
    ['oneOf (none)', { size: 1, target: {} }, 'spec.target', 'FieldValueInvalid', /must validate one and only one schema \(oneOf\)\. Found none valid$/],
    ['oneOf (two)', { size: 1, target: { host: 'h', ip: '1.2.3.4' } }, 'spec.target', 'FieldValueInvalid', /Found 2 valid alternatives$/],
    ['anyOf', { size: 1, level: 'mid' }, 'spec.level', 'FieldValueInvalid', /must validate at least one schema \(anyOf\)$/],
    ['not', { size: 1, word: 'forbidden' }, 'spec.word', 'FieldValueInvalid', /must not validate the schema \(not\)$/],
    ['allOf', { size: 1, word: 'x' }, 'spec.word', 'FieldValueInvalid', /should be at least 2 chars long$/],
  ];
  it.each(cases)('%s', async (_what, spec, field, reason, message) => {
    const s = await refusal(createWidget(widget('w-invalid', spec)));
    expect(s.code).toBe(422);
    expect(s.details!.causes).toHaveLength(1);
    expect(s.details!.causes[0]).toMatchObject({ field, reason });
    expect(s.details!.causes[0]!.message).toMatch(message);
    expect(s.message).toBe(`Widget.test.svc.io "w-invalid" is invalid: ${field}: ${s.details!.causes[0]!.message}`);
  });

  it('accepts what the schema allows (int-or-string either way, a nullable null, one oneOf branch, an embedded resource)', async () => {
    const created = await createWidget(
      widget('w-valid', { size: 10, code: 'ab', tags: ['a', 'b'], port: 'http', when: '2026-01-02T03:04:05Z', note: null, target: { ip: '10.0.0.1' }, level: 'hi', word: 'fine', template: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' } } }),
    );
    expect(created.spec).toMatchObject({ port: 'http', note: null, target: { ip: '10.0.0.1' } });
    const updated = (await custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w-valid', body: { ...created, spec: { ...created.spec, port: 8080 } } })) as KubeObject;
    expect(updated.spec!.port).toBe(8080);
  });

  it('validates an update too, and a write to /status validates status', async () => {
    const created = await createWidget(widget('w-update', { size: 1 }));
    const s = await refusal(custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w-update', body: { ...created, spec: { size: 99 } } }));
    expect(s.details!.causes[0]!.field).toBe('spec.size');
    const st = await refusal(custom.replaceNamespacedCustomObjectStatus({ ...WIDGET, namespace: NS, name: 'w-update', body: { ...created, status: { phase: 'Sideways' } } }));
    expect(st.code).toBe(422);
    expect(st.details!.causes).toEqual([{ reason: 'FieldValueNotSupported', field: 'status.phase', message: 'Unsupported value: "Sideways": supported values: "Ready", "Failed"' }]);
    const patched = await refusal(
      custom.patchNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w-update', body: { spec: { size: 'x' } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch)),
    );
    expect(patched.details!.causes[0]!.field).toBe('spec.size');
    expect(api.get('test.svc.io/v1', 'widgets', NS, 'w-update')!.spec!.size).toBe(1);
  });
});

describe('1b. a stricter CRD over stored objects, and status writes before Kubernetes 1.30', () => {
  /** WIDGET_CRD with spec.mode held to `slow` (a CRD upgraded since the objects were stored). */
  const stricter = (): CustomResourceDefinition => {
    const crd = structuredClone(WIDGET_CRD);
    const spec = crd.spec.versions[0]!.schema!.openAPIV3Schema!.properties!.spec!;
    spec.properties!.mode = { type: 'string', enum: ['slow'] };
    return crd;
  };
  const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

  it('updateCrd keeps the objects stored; a status write validates the whole object before 1.30 (pre130: 422 naming the spec), status only otherwise; an update of such an object is refused either way', async () => {
    for (const pre130 of [false, true]) {
      const server = await new KubeApiStandIn([WIDGET_CRD], { pre130 }).start();
      server.createNamespace(NS);
      try {
        const client = kubeConfig({ server: server.url, token: 'stand-in' }).makeApiClient(CustomObjectsApi);
        const created = (await client.createNamespacedCustomObject({ ...WIDGET, namespace: NS, body: widget('w', { size: 1, mode: 'fast' }) })) as KubeObject;
        server.updateCrd(stricter());
        expect(server.get('test.svc.io/v1', 'widgets', NS, 'w')!.spec!.mode).toBe('fast');
        // A new object is held to the new schema.
        const create = await refusal(client.createNamespacedCustomObject({ ...WIDGET, namespace: NS, body: widget('w2', { size: 1, mode: 'fast' }) }));
        expect(create.details!.causes).toEqual([{ reason: 'FieldValueNotSupported', field: 'spec.mode', message: 'Unsupported value: "fast": supported values: "slow"' }]);
        const write = client.patchNamespacedCustomObjectStatus(
          { ...WIDGET, namespace: NS, name: 'w', body: { metadata: { resourceVersion: created.metadata.resourceVersion }, status: { phase: 'Ready' } } },
          mergePatch,
        );
        if (pre130) {
          const st = await refusal(write);
          expect(st).toMatchObject({ httpCode: 422, code: 422, reason: 'Invalid', message: 'Widget.test.svc.io "w" is invalid: spec.mode: Unsupported value: "fast": supported values: "slow"' });
          expect(server.get('test.svc.io/v1', 'widgets', NS, 'w')!.status).toBeUndefined();
        } else {
          await write;
          expect(server.get('test.svc.io/v1', 'widgets', NS, 'w')!.status).toEqual({ phase: 'Ready' });
        }
        // The main resource: validated whole, unchanged fields included (no ratcheting), a finalizer added too.
        const current = server.get('test.svc.io/v1', 'widgets', NS, 'w')!;
        const update = await refusal(client.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w', body: { ...current, metadata: { ...current.metadata, finalizers: ['svc.io/cleanup'] } } }));
        expect(update.details!.causes.map((c) => c.field)).toEqual(['spec.mode']);
        // Fixed, it is written again.
        await client.patchNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w', body: { spec: { mode: 'slow' } } }, mergePatch);
        await client.patchNamespacedCustomObjectStatus({ ...WIDGET, namespace: NS, name: 'w', body: { status: { phase: 'Failed' } } }, mergePatch);
        expect(server.get('test.svc.io/v1', 'widgets', NS, 'w')!.status).toEqual({ phase: 'Failed' });
      } finally {
        await server.close();
      }
    }
  });

  it('updateCrd refuses a CRD of a type not served, or of another scope', () => {
    const other = structuredClone(WIDGET_CRD);
    other.spec.names.plural = 'gadgets';
    expect(() => api.updateCrd(other)).toThrow('serves no custom resource gadgets.test.svc.io/v1');
    const clusterWide = structuredClone(WIDGET_CRD);
    clusterWide.spec.scope = 'Cluster';
    expect(() => api.updateCrd(clusterWide)).toThrow('namespaced is true served but false in the CRD');
  });
});

describe('2. pruning of undeclared fields', () => {
  it('drops unknown fields of the main resource silently, keeps those under x-kubernetes-preserve-unknown-fields, keeps ObjectMeta', async () => {
    const entity = example('entity-partner.yaml');
    const spec = entity.spec as { columns: Array<Record<string, unknown>>; scope: unknown };
    spec.columns[0]!.colour = 'red';
    spec.scope = { free: { form: true } };
    const created = (await custom.createNamespacedCustomObject({
      group: 'apps.svc.io',
      version: 'v1',
      plural: 'entities',
      namespace: NS,
      body: { ...entity, connector_type: 'rest', metadata: { ...entity.metadata, name: 'pruned', labels: { a: 'b' }, bogusMeta: 1 }, spec: { ...spec, bogus: 1 } },
    })) as KubeObject;
    const stored = api.get('apps.svc.io/v1', 'entities', NS, 'pruned')!;
    for (const o of [created, stored]) {
      expect(o).not.toHaveProperty('connector_type');
      expect(o.spec).not.toHaveProperty('bogus');
      expect((o.spec as typeof spec).columns[0]).not.toHaveProperty('colour');
      expect((o.spec as typeof spec).scope).toEqual({ free: { form: true } });
      expect(o.metadata).not.toHaveProperty('bogusMeta');
      expect(o.metadata.labels).toEqual({ a: 'b' });
    }
  });

  it('prunes below a preserved node only the declared sub-objects, and an embedded resource keeps its metadata', async () => {
    const created = await createWidget(widget('w-preserve', { size: 1, extra: { anything: { deep: 1 }, known: { a: 'x', b: 'dropped' } }, template: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', labels: { x: 'y' } }, spec: { any: 1 } } }));
    expect(created.spec!.extra).toEqual({ anything: { deep: 1 }, known: { a: 'x' } });
    expect(created.spec!.template).toEqual({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', labels: { x: 'y' } }, spec: { any: 1 } });
  });

  it('drops unknown fields written through the status subresource (what the real server did to status.tenant before the CRDs declared it)', async () => {
    const connector = example('open.yaml');
    const created = (await custom.createNamespacedCustomObject({ group: 'connectors.svc.io', version: 'v1', plural: 'connectors', namespace: NS, body: { ...connector, metadata: { ...connector.metadata, namespace: NS } } })) as KubeObject;
    const condition = { type: 'Ready', status: 'True', reason: 'Applied', message: 'ok', lastTransitionTime: '2026-01-01T00:00:00Z', observedGeneration: 1 };
    const written = (await custom.replaceNamespacedCustomObjectStatus({
      group: 'connectors.svc.io',
      version: 'v1',
      plural: 'connectors',
      namespace: NS,
      name: created.metadata.name,
      body: { ...created, status: { observedGeneration: 1, tenant: 'default', owner: 'someone', conditions: [{ ...condition, extra: 1 }] } },
    })) as KubeObject;
    expect(written.status).toEqual({ observedGeneration: 1, tenant: 'default', conditions: [condition] });
    expect(api.get('connectors.svc.io/v1', 'connectors', NS, created.metadata.name)!.status).toEqual({ observedGeneration: 1, tenant: 'default', conditions: [condition] });
  });
});

describe('3. defaults from the schema', () => {
  it('applies defaults on create (nested in a default too), replaces a non-nullable null by its default or drops it, keeps a nullable one', async () => {
    const created = await createWidget(widget('w-defaults', { size: 1, label: null, note: null, code: null, limits: { a: null, b: 1 } }));
    expect(created.spec).toEqual({ size: 1, mode: 'fast', label: 'none', note: null, limits: { b: 1 }, policy: { retries: 3, backoff: '1s' } });
    expect(api.get('test.svc.io/v1', 'widgets', NS, 'w-defaults')!.spec).toEqual(created.spec);
  });

  it('applies defaults on update and on read', async () => {
    const created = await createWidget(widget('w-defaults-2', { size: 1, mode: 'slow', policy: { retries: 1 } }));
    const { mode: _mode, ...rest } = created.spec as Record<string, unknown>;
    const updated = (await custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w-defaults-2', body: { ...created, spec: { ...rest, policy: {} } } })) as KubeObject;
    expect(updated.spec).toMatchObject({ mode: 'fast', policy: { backoff: '1s' } });
    const read = (await custom.getNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w-defaults-2' })) as KubeObject;
    expect(read.spec).toEqual(updated.spec);
    const listed = (await custom.listNamespacedCustomObject({ ...WIDGET, namespace: NS, fieldSelector: 'metadata.name=w-defaults-2' })) as { items: KubeObject[] };
    expect(listed.items.map((i) => i.spec)).toEqual([updated.spec]);
  });
});

describe('4. metadata.generateName', () => {
  it('names the object <generateName><5 random characters>; neither name nor generateName is 422', async () => {
    const a = await createWidget({ ...widget('', { size: 1 }), metadata: { generateName: 'gen-', namespace: NS } });
    const b = await createWidget({ ...widget('', { size: 1 }), metadata: { generateName: 'gen-', namespace: NS } });
    expect(a.metadata.name).toMatch(/^gen-[bcdfghjklmnpqrstvwxz2456789]{5}$/);
    expect(b.metadata.name).not.toBe(a.metadata.name);
    expect(api.get('test.svc.io/v1', 'widgets', NS, a.metadata.name)).toBeDefined();
    const s = await refusal(createWidget({ ...widget('', { size: 1 }), metadata: { namespace: NS } }));
    expect(s.code).toBe(422);
    expect(s.message).toBe('Widget.test.svc.io "" is invalid: metadata.name: Required value: name or generateName is required');
    expect(s.details!.causes).toEqual([{ reason: 'FieldValueRequired', field: 'metadata.name', message: 'Required value: name or generateName is required' }]);
  });
});

describe('5. resourceVersion on update', () => {
  it('a custom resource (or its status) cannot be updated unconditionally: 422', async () => {
    const created = await createWidget(widget('w-rv', { size: 1 }));
    const { resourceVersion: _rv, ...meta } = created.metadata;
    const s = await refusal(custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w-rv', body: { ...created, metadata: meta, spec: { size: 2 } } }));
    expect(s.code).toBe(422);
    expect(s.message).toBe('Widget.test.svc.io "w-rv" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update');
    expect(s.details!.causes).toEqual([{ reason: 'FieldValueInvalid', field: 'metadata.resourceVersion', message: 'Invalid value: 0x0: must be specified for an update' }]);
    const st = await refusal(custom.replaceNamespacedCustomObjectStatus({ ...WIDGET, namespace: NS, name: 'w-rv', body: { ...created, metadata: meta, status: { phase: 'Ready' } } }));
    expect(st.code).toBe(422);
    // An old one is a 409 Conflict; the current one goes through.
    await custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w-rv', body: { ...created, spec: { size: 2 } } });
    expect((await refusal(custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w-rv', body: { ...created, spec: { size: 3 } } }))).code).toBe(409);
  });

  it('a CronJob can (batch/v1 allows unconditional update)', async () => {
    const job = await batch.createNamespacedCronJob({ namespace: NS, body: cronJob('unconditional', '0 * * * *') });
    const { resourceVersion: _rv, ...meta } = job.metadata!;
    const updated = await batch.replaceNamespacedCronJob({ namespace: NS, name: 'unconditional', body: { ...job, metadata: meta, spec: { ...job.spec!, schedule: '5 * * * *' } } });
    expect(updated.spec!.schedule).toBe('5 * * * *');
  });

  it('the uid an update names is a precondition: one of an object deleted and created again under the name is a 409', async () => {
    const job = await batch.createNamespacedCronJob({ namespace: NS, body: cronJob('recreated', '0 * * * *') });
    await batch.deleteNamespacedCronJob({ namespace: NS, name: 'recreated' });
    const again = await batch.createNamespacedCronJob({ namespace: NS, body: cronJob('recreated', '0 * * * *') });
    const { resourceVersion: _rv, ...meta } = job.metadata!;
    const refused = await refusal(batch.replaceNamespacedCronJob({ namespace: NS, name: 'recreated', body: { ...job, metadata: meta } }));
    expect(refused).toMatchObject({ httpCode: 409, reason: 'Conflict', message: `Operation cannot be fulfilled on cronjobs.batch "recreated": Precondition failed: UID in precondition: ${job.metadata!.uid}, UID in object meta: ${again.metadata!.uid}` });
  });
});

describe('6. a watch from a compacted resourceVersion', () => {
  it('answers 200, then one ERROR event with a 410 Expired Status, and ends the stream', async () => {
    const rv = api.resourceVersion;
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'moves-the-counter' } });
    api.compact();
    const res = await fetch(`${api.url}/apis/test.svc.io/v1/namespaces/${NS}/widgets?watch=true&resourceVersion=${rv}`, { headers: { Authorization: 'Bearer stand-in' } });
    expect(res.status).toBe(200);
    const lines = (await res.text()).split('\n').filter(Boolean);
    expect(lines.map((l) => JSON.parse(l))).toEqual([
      { type: 'ERROR', object: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: `too old resource version: ${rv} (${api.resourceVersion})`, reason: 'Expired', code: 410 } },
    ]);
  });

  it('without a resourceVersion, or from "0", starts with the state now (an ADDED event of each matching object, no history), never 410', async () => {
    api.apply('widgets', { ...widget('now-a', { size: 1 }), metadata: { name: 'now-a', namespace: NS, labels: { now: 'yes' } } } as KubeObject);
    api.apply('widgets', { ...widget('now-b', { size: 1 }), metadata: { name: 'now-b', namespace: NS, labels: { now: 'yes' } } } as KubeObject);
    api.apply('widgets', { ...widget('now-b', { size: 2 }), metadata: { name: 'now-b', namespace: NS, labels: { now: 'yes' } } } as KubeObject);
    api.remove('test.svc.io/v1', 'widgets', NS, 'now-a');
    api.compact();
    for (const from of ['', '&resourceVersion=0']) {
      const controller = new AbortController();
      const res = await fetch(`${api.url}/apis/test.svc.io/v1/namespaces/${NS}/widgets?watch=true&labelSelector=now%3Dyes${from}`, { headers: { Authorization: 'Bearer stand-in' }, signal: controller.signal });
      // What the stream holds half a second after it opened.
      const reader = res.body!.getReader();
      let text = '';
      const closeAt = Date.now() + 500;
      for (;;) {
        const chunk = await Promise.race([reader.read(), new Promise<undefined>((r) => setTimeout(() => r(undefined), Math.max(0, closeAt - Date.now())))]);
        if (!chunk || chunk.done) break;
        text += new TextDecoder().decode(chunk.value);
      }
      controller.abort();
      const events = text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { type: string; object: KubeObject });
      expect(events.map((e) => [e.type, e.object.metadata.name, e.object.spec?.size])).toEqual([['ADDED', 'now-b', 2]]);
    }
  });

  it("makes @kubernetes/client-node's informer list again, and it sees what changed meanwhile", async () => {
    const kc = kubeConfig({ server: api.url, token: 'stand-in' });
    const path = `/apis/test.svc.io/v1/namespaces/${NS}/widgets`;
    const informer = makeInformer<KubernetesObject>(kc, path, () => custom.listNamespacedCustomObject({ ...WIDGET, namespace: NS }) as never);
    const errors: unknown[] = [];
    informer.on('error', (err) => errors.push(err));
    await informer.start();
    try {
      await until('the first watch', () => api.requests.some((r) => r.path === path && r.query.watch === 'true'));
      const listsBefore = api.requests.filter((r) => r.path === path && r.query.watch === undefined).length;
      api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'moves-it-again' } });
      api.compact(); // closes the watch: the informer comes back from its old resourceVersion
      api.apply('widgets', widget('after-compaction', { size: 1 }) as KubeObject);
      await until('the informer to see it', () => informer.list(NS).some((o) => o.metadata?.name === 'after-compaction'), 10_000);
      const watches = api.requests.filter((r) => r.path === path && r.query.watch === 'true');
      expect(watches.length).toBeGreaterThanOrEqual(2);
      expect(api.requests.filter((r) => r.path === path && r.query.watch === undefined).length).toBeGreaterThan(listsBefore);
      expect(errors).toEqual([]);
    } finally {
      await informer.stop();
    }
  });
});

describe('7. label and field selectors', () => {
  beforeAll(() => {
    const labelled: Array<[string, Record<string, string>]> = [
      ['sel-a', { tier: 'web', env: 'prod' }],
      ['sel-b', { tier: 'db', env: 'prod' }],
      ['sel-c', { tier: 'web', env: 'dev', canary: 'yes' }],
      ['sel-d', {}],
    ];
    for (const [name, labels] of labelled) api.apply('widgets', { ...widget(name, { size: 1 }), metadata: { name, namespace: NS, labels: { set: 'sel', ...labels } } } as KubeObject);
  });
  const names = async (labelSelector: string, fieldSelector?: string) =>
    ((await custom.listNamespacedCustomObject({ ...WIDGET, namespace: NS, labelSelector: `set=sel${labelSelector ? `,${labelSelector}` : ''}`, fieldSelector })) as { items: KubeObject[] }).items.map((o) => o.metadata.name).sort();

  it.each([
    ['', ['sel-a', 'sel-b', 'sel-c', 'sel-d']],
    ['tier=web', ['sel-a', 'sel-c']],
    ['tier==web', ['sel-a', 'sel-c']],
    ['tier!=web', ['sel-b', 'sel-d']],
    ['tier in (db, web)', ['sel-a', 'sel-b', 'sel-c']],
    ['tier notin (web)', ['sel-b', 'sel-d']],
    ['canary', ['sel-c']],
    ['!canary', ['sel-a', 'sel-b', 'sel-d']],
    ['tier=web,env=prod', ['sel-a']],
  ])('list with labelSelector %j', async (selector, expected) => {
    expect(await names(selector)).toEqual(expected);
  });

  it('fieldSelector metadata.name and metadata.namespace; a malformed selector is a 400', async () => {
    expect(await names('', 'metadata.name=sel-b')).toEqual(['sel-b']);
    expect(await names('', 'metadata.name!=sel-b,metadata.namespace=strict')).toEqual(['sel-a', 'sel-c', 'sel-d']);
    expect(await names('', 'metadata.namespace=elsewhere')).toEqual([]);
    expect((await refusal(custom.listNamespacedCustomObject({ ...WIDGET, namespace: NS, labelSelector: 'tier in (web' }))).code).toBe(400);
    expect((await refusal(custom.listNamespacedCustomObject({ ...WIDGET, namespace: NS, fieldSelector: 'spec.size=1' }))).message).toBe('field label not supported: spec.size');
  });

  it('a watch with a labelSelector sees only matching objects; one that stops matching is DELETED, one that starts is ADDED', async () => {
    const from = api.resourceVersion;
    api.apply('widgets', { ...widget('sel-e', { size: 1 }), metadata: { name: 'sel-e', namespace: NS, labels: { tier: 'web' } } } as KubeObject);
    api.apply('widgets', { ...widget('sel-f', { size: 1 }), metadata: { name: 'sel-f', namespace: NS, labels: { tier: 'db' } } } as KubeObject);
    api.apply('widgets', { ...widget('sel-e', { size: 1 }), metadata: { name: 'sel-e', namespace: NS, labels: { tier: 'db' } } } as KubeObject);
    api.apply('widgets', { ...widget('sel-f', { size: 1 }), metadata: { name: 'sel-f', namespace: NS, labels: { tier: 'web' } } } as KubeObject);
    const controller = new AbortController();
    const res = await fetch(`${api.url}/apis/test.svc.io/v1/namespaces/${NS}/widgets?watch=true&resourceVersion=${from}&labelSelector=tier%3Dweb`, { headers: { Authorization: 'Bearer stand-in' }, signal: controller.signal });
    const reader = res.body!.getReader();
    let text = '';
    while (text.split('\n').filter(Boolean).length < 3) text += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    const events = text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { type: string; object: KubeObject });
    expect(events.map((e) => [e.type, e.object.metadata.name])).toEqual([
      ['ADDED', 'sel-e'],
      ['DELETED', 'sel-e'],
      ['ADDED', 'sel-f'],
    ]);
    // The DELETED of an object that stopped matching carries it as it was (the watch cache's
    // previous object: still matching), at the resourceVersion of the change.
    const stopped = events[1]!.object;
    expect(stopped.metadata.labels).toEqual({ tier: 'web' });
    expect(Number(stopped.metadata.resourceVersion)).toBeGreaterThan(Number(events[0]!.object.metadata.resourceVersion));
  });
});

function cronJob(name: string, schedule: string, extra: { timeZone?: string; containers?: unknown[]; restartPolicy?: string | null } = {}): V1CronJob {
  const podSpec: Record<string, unknown> = { containers: extra.containers ?? [{ name: 'run', image: 'svc-hub:test' }] };
  if (extra.restartPolicy !== null) podSpec.restartPolicy = extra.restartPolicy ?? 'Never';
  return {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: { name, namespace: NS },
    spec: { schedule, ...(extra.timeZone ? { timeZone: extra.timeZone } : {}), jobTemplate: { spec: { template: { spec: podSpec as never } } } },
  };
}

describe('8. CronJob validation', () => {
  let seq = 0;
  const create = (schedule: string, extra: Parameters<typeof cronJob>[2] = {}, name = `cj-${++seq}`) => batch.createNamespacedCronJob({ namespace: NS, body: cronJob(name, schedule, extra) });

  it.each([
    '*/15 * * * *',
    '0 2 * * *',
    '0-30/5 1,13 1-15 JAN-jun mon-FRI',
    '0 0 ? * SUN',
    '5 4 * DEC SAT',
    '@yearly',
    '@annually',
    '@monthly',
    '@weekly',
    '@daily',
    '@midnight',
    '@hourly',
    '@every 1h30m',
  ])('accepts the schedule %j', async (schedule) => {
    expect((await create(schedule)).spec!.schedule).toBe(schedule);
  });

  it.each([
    ['0 0 L * *', /failed to parse int from L/],
    ['0 0 * * 5#3', /failed to parse int from 5#3/],
    ['0 0 15W * *', /failed to parse int from 15W/],
    ['0 0 0 * * *', /expected exactly 5 fields, found 6/],
    ['0 0 * *', /expected exactly 5 fields, found 4/],
    ['60 * * * *', /end of range \(60\) above maximum \(59\)/],
    ['0 0 0 * *', /beginning of range \(0\) below minimum \(1\)/],
    ['0 0 * * 7', /above maximum \(6\)/],
    ['*/0 * * * *', /step of range should be a positive number/],
    ['@reboot', /unrecognized descriptor: @reboot/],
    ['@every forever', /failed to parse duration/],
  ])('refuses the schedule %j', async (schedule, reason) => {
    const s = await refusal(create(schedule));
    expect(s.code).toBe(422);
    expect(s.details!.causes).toHaveLength(1);
    expect(s.details!.causes[0]!.field).toBe('spec.schedule');
    expect(s.details!.causes[0]!.message).toMatch(reason);
    expect(s.message).toMatch(new RegExp(`^CronJob\\.batch "cj-\\d+" is invalid: spec\\.schedule: Invalid value: ${JSON.stringify(schedule).replace(/[*?()#]/g, '\\$&')}: `));
  });

  it('refuses TZ= and CRON_TZ= in the schedule, an unknown timeZone, and takes a real one', async () => {
    for (const schedule of ['TZ=UTC 0 * * * *', 'CRON_TZ=Europe/Paris 0 * * * *']) {
      const s = await refusal(create(schedule));
      expect(s.details!.causes).toEqual([{ reason: 'FieldValueInvalid', field: 'spec.schedule', message: `Invalid value: ${JSON.stringify(schedule)}: cannot use TZ or CRON_TZ in schedule, use timeZone field instead` }]);
    }
    const tz = await refusal(create('0 * * * *', { timeZone: 'Mars/Olympus_Mons' }));
    expect(tz.details!.causes).toEqual([{ reason: 'FieldValueInvalid', field: 'spec.timeZone', message: 'Invalid value: "Mars/Olympus_Mons": unknown time zone Mars/Olympus_Mons' }]);
    for (const timeZone of ['Etc/UTC', 'UTC', 'Europe/Paris', 'America/Argentina/Buenos_Aires']) expect((await create('0 * * * *', { timeZone })).spec!.timeZone).toBe(timeZone);
  });

  it('refuses a name over 52 characters, a template without containers, and a restartPolicy a Job does not take; defaults the policy and history limits', async () => {
    const long = await refusal(create('0 * * * *', {}, 'c'.repeat(53)));
    expect(long.details!.causes).toEqual([{ reason: 'FieldValueInvalid', field: 'metadata.name', message: `Invalid value: "${'c'.repeat(53)}": must be no more than 52 characters` }]);
    expect((await create('0 * * * *', {}, 'c'.repeat(52))).metadata!.name).toHaveLength(52);
    const empty = await refusal(create('0 * * * *', { containers: [] }));
    expect(empty.details!.causes).toEqual([{ reason: 'FieldValueRequired', field: 'spec.jobTemplate.spec.template.spec.containers', message: 'Required value' }]);
    const defaulted = await create('0 * * * *');
    expect(defaulted.spec).toMatchObject({ concurrencyPolicy: 'Allow', suspend: false, successfulJobsHistoryLimit: 3, failedJobsHistoryLimit: 1 });
    const always = await refusal(create('0 * * * *', { restartPolicy: null }));
    expect(always.details!.causes).toEqual([
      { reason: 'FieldValueNotSupported', field: 'spec.jobTemplate.spec.template.spec.restartPolicy', message: 'Unsupported value: "Always": supported values: "OnFailure", "Never"' },
    ]);
  });
});

describe('8b. CronJob resource quantities', () => {
  let seq = 0;
  const withResources = (requests: Record<string, unknown>) =>
    cronJob(`q-${++seq}`, '0 * * * *', { containers: [{ name: 'run', image: 'svc-hub:test', resources: { requests, limits: requests } }] }) as V1CronJob & { spec: { jobTemplate: { spec: { template: { spec: Record<string, unknown> } } } } };

  it.each([
    [1, '1'],
    ['1000m', '1'],
    [0.5, '500m'],
    ['1024Mi', '1Gi'],
    ['1.5Gi', '1536Mi'],
    ['0.1Ki', '102400m'],
    ['2000', '2k'],
    ['1500', '1500'],
    ['1000e0', '1e3'],
    ['129M', '129M'],
    ['0.0000000001', '1n'],
    ['16Ei', '9223372036854775807'],
  ])('stores %j and answers it as %j (canonical), which the operator reads as the same value', async (written, canonical) => {
    const body = withResources({ cpu: written, memory: written });
    const created = (await batch.createNamespacedCronJob({ namespace: NS, body })) as unknown as { spec: { jobTemplate: { spec: { template: { spec: { containers: Array<{ resources: { requests: Record<string, unknown>; limits: Record<string, unknown> } }> } } } } } };
    const resources = created.spec.jobTemplate.spec.template.spec.containers[0]!.resources;
    expect(resources).toEqual({ requests: { cpu: canonical, memory: canonical }, limits: { cpu: canonical, memory: canonical } });
    // The operator's own comparison (written apart from this stand-in) agrees, rounding and cap included.
    expect(sameQuantity(written, canonical)).toBe(true);
  });

  it('an emptyDir sizeLimit too; a quantity the server cannot read is a 400 BadRequest of the whole object', async () => {
    const body = withResources({ cpu: '1' });
    body.spec.jobTemplate.spec.template.spec.volumes = [{ name: 'tmp', emptyDir: { sizeLimit: '1024Mi' } }];
    (body.spec.jobTemplate.spec.template.spec.containers as unknown as Array<Record<string, unknown>>)[0]!.env = [
      { name: 'MEM', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: '1024Ki' } } },
    ];
    const created = (await batch.createNamespacedCronJob({ namespace: NS, body })) as unknown as {
      spec: { jobTemplate: { spec: { template: { spec: { volumes: Array<{ emptyDir: { sizeLimit: string } }>; containers: Array<{ env: Array<{ valueFrom: { resourceFieldRef: { divisor: string } } }> }> } } } } };
    };
    expect(created.spec.jobTemplate.spec.template.spec.volumes[0]!.emptyDir.sizeLimit).toBe('1Gi');
    expect(created.spec.jobTemplate.spec.template.spec.containers[0]!.env[0]!.valueFrom.resourceFieldRef.divisor).toBe('1Mi');
    const s = await refusal(batch.createNamespacedCronJob({ namespace: NS, body: withResources({ cpu: 'lots' }) }));
    expect(s.code).toBe(400);
    expect(s.reason).toBe('BadRequest');
    expect(s.message).toContain('quantities must match the regular expression');
  });
});

describe('9. Events', () => {
  it('need an involvedObject in their namespace, honour generateName, and are listable (by involvedObject too)', async () => {
    const involvedObject = { apiVersion: 'test.svc.io/v1', kind: 'Widget', name: 'w-valid', namespace: NS };
    const none = await refusal(core.createNamespacedEvent({ namespace: NS, body: { metadata: { generateName: 'w-valid.' }, reason: 'Applied', message: 'm' } as never }));
    expect(none.code).toBe(422);
    // involvedObject is a struct: one not sent is decoded empty, whose namespace ('') is not the Event's.
    expect(none.details!.causes).toEqual([{ reason: 'FieldValueInvalid', field: 'involvedObject.namespace', message: 'Invalid value: "": does not match event.namespace' }]);
    const elsewhere = await refusal(core.createNamespacedEvent({ namespace: NS, body: { metadata: { generateName: 'w-valid.' }, involvedObject: { ...involvedObject, namespace: 'other' }, reason: 'Applied', message: 'm' } }));
    expect(elsewhere.message).toBe('Event "" is invalid: involvedObject.namespace: Invalid value: "other": does not match event.namespace'.replace('""', `"${elsewhere.details!.name}"`));
    const created = await core.createNamespacedEvent({ namespace: NS, body: { metadata: { generateName: 'w-valid.' }, involvedObject, reason: 'Applied', message: 'applied', type: 'Normal', firstTimestamp: new Date(), count: 1 } });
    expect(created.metadata!.name).toMatch(/^w-valid\.[bcdfghjklmnpqrstvwxz2456789]{5}$/);
    const listed = await core.listNamespacedEvent({ namespace: NS, fieldSelector: 'involvedObject.name=w-valid' });
    expect(listed.items.map((e) => [e.metadata!.name, e.reason, e.message])).toEqual([[created.metadata!.name, 'Applied', 'applied']]);
    expect(api.list('v1', 'events', NS)).toHaveLength(1);
  });
});

describe('10. names and namespaces (and the rest of what the server checks of any object)', () => {
  it('a custom resource name must be a DNS-1123 subdomain (253 at most)', async () => {
    for (const name of ['Bad_Name', 'ends-with-dash-', 'x'.repeat(254)]) {
      const s = await refusal(createWidget(widget(name, { size: 1 })));
      expect(s.code).toBe(422);
      expect(s.details!.causes.map((c) => c.field)).toEqual(['metadata.name']);
    }
    expect((await refusal(createWidget(widget('Bad_Name', { size: 1 })))).message).toMatch(/^Widget\.test\.svc\.io "Bad_Name" is invalid: metadata\.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of/);
    expect((await createWidget(widget('a.b-c', { size: 1 }))).metadata.name).toBe('a.b-c');
    expect((await createWidget(widget('x'.repeat(253), { size: 1 }))).metadata.name).toHaveLength(253);
  });

  it("the body's namespace must be the URL's (400), and on update its name too", async () => {
    const s = await refusal(custom.createNamespacedCustomObject({ ...WIDGET, namespace: NS, body: { ...widget('w-ns', { size: 1 }), metadata: { name: 'w-ns', namespace: 'other' } } }));
    expect(s).toMatchObject({ httpCode: 400, reason: 'BadRequest', message: 'the namespace of the provided object does not match the namespace sent on the request' });
    const created = await createWidget(widget('w-ns', { size: 1 }));
    const renamed = await refusal(custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'w-ns', body: { ...created, metadata: { ...created.metadata, name: 'w-other' } } }));
    expect(renamed).toMatchObject({ httpCode: 400, message: 'the name of the object (w-other) does not match the name on the URL (w-ns)' });
  });

  it('a custom resource body names its apiVersion and kind (400 otherwise)', async () => {
    const { kind: _kind, ...noKind } = widget('w-nokind', { size: 1 });
    expect((await refusal(createWidget(noKind))).message).toMatch(/^Object 'Kind' is missing in/);
    expect((await refusal(createWidget({ ...widget('w-kind', { size: 1 }), apiVersion: 'test.svc.io/v2' }))).message).toBe(
      'the API version in the data (test.svc.io/v2) does not match the expected API version (test.svc.io/v1)',
    );
  });

  it('label keys and values, and ownerReferences, are checked on every type', async () => {
    const labels = await refusal(createWidget({ ...widget('w-labels', { size: 1 }), metadata: { name: 'w-labels', labels: { ok: 'bad value!' } } }));
    expect(labels.details!.causes.map((c) => c.field)).toEqual(['metadata.labels']);
    const owner = await refusal(batch.createNamespacedCronJob({ namespace: NS, body: { ...cronJob('owned', '0 * * * *'), metadata: { name: 'owned', ownerReferences: [{ apiVersion: 'test.svc.io/v1', kind: 'Widget', name: 'w', uid: '' }] } } }));
    expect(owner.details!.causes).toEqual([{ reason: 'FieldValueInvalid', field: 'metadata.ownerReferences[0].uid', message: 'Invalid value: "": uid must not be empty' }]);
  });
});

describe('11. RBAC, when enforced: a service account may call only what its grants allow (403 Forbidden otherwise)', () => {
  it('checks verb, resource and subresource, namespace (a Namespace in its own), and resourceNames', async () => {
    const rbac = await new KubeApiStandIn([WIDGET_CRD]).start();
    try {
      rbac.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'mine' } });
      rbac.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'theirs' } });
      rbac.enforceRbac(
        [
          { namespace: 'mine', rules: [{ apiGroups: ['test.svc.io'], resources: ['widgets'], verbs: ['get', 'list', 'create'] }, { apiGroups: [''], resources: ['namespaces'], resourceNames: ['mine'], verbs: ['get'] }] },
          { rules: [{ apiGroups: ['test.svc.io'], resources: ['widgets/status'], verbs: ['patch'] }] },
        ],
        ['admin'],
      );
      const as = (token: string) => kubeConfig({ server: rbac.url, token });
      const sa = as('sa').makeApiClient(CustomObjectsApi);
      const saCore = as('sa').makeApiClient(CoreV1Api);
      const body = { apiVersion: 'test.svc.io/v1', kind: 'Widget', metadata: { name: 'w', namespace: 'mine' }, spec: { size: 1 } };
      await sa.createNamespacedCustomObject({ ...WIDGET, namespace: 'mine', body });
      await sa.getNamespacedCustomObject({ ...WIDGET, namespace: 'mine', name: 'w' });
      await saCore.readNamespace({ name: 'mine' });
      // Another verb, another namespace, another Namespace, the cluster scope: refused as kube-apiserver words it.
      const replaced = await refusal(sa.replaceNamespacedCustomObject({ ...WIDGET, namespace: 'mine', name: 'w', body }));
      expect(replaced).toMatchObject({
        httpCode: 403,
        reason: 'Forbidden',
        message: 'widgets.test.svc.io "w" is forbidden: User "sa" cannot update resource "widgets" in API group "test.svc.io" in the namespace "mine"',
      });
      expect((await refusal(sa.listNamespacedCustomObject({ ...WIDGET, namespace: 'theirs' }))).httpCode).toBe(403);
      expect((await refusal(saCore.readNamespace({ name: 'theirs' }))).httpCode).toBe(403);
      expect((await refusal(saCore.listNamespace())).message).toBe('namespaces is forbidden: User "sa" cannot list resource "namespaces" in API group "" at the cluster scope');
      expect((await refusal(sa.listClusterCustomObject({ ...WIDGET }))).httpCode).toBe(403);
      // The status subresource is a resource of its own: granted cluster-wide here, the main resource's patch is not.
      const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
      await sa.patchNamespacedCustomObjectStatus({ ...WIDGET, namespace: 'mine', name: 'w', body: { status: { phase: 'Ready' } } }, merge);
      expect((await refusal(sa.patchNamespacedCustomObject({ ...WIDGET, namespace: 'mine', name: 'w', body: { spec: { size: 2 } } }, merge))).httpCode).toBe(403);
      // An exempt token (the test's own, as an administrator) is not checked.
      await as('admin').makeApiClient(CustomObjectsApi).replaceNamespacedCustomObject({ ...WIDGET, namespace: 'mine', name: 'w', body: rbac.get('test.svc.io/v1', 'widgets', 'mine', 'w')! });
    } finally {
      await rbac.close();
    }
  });
});

describe('12. deletion', () => {
  it('answers 409 to a DELETE whose preconditions the object no longer meets; a first deletion with finalizers bumps the generation', async () => {
    const body = widget('gone-twice', { size: 1 });
    const created = await createWidget({ ...body, metadata: { ...body.metadata, finalizers: ['test.svc.io/hold'] } });
    const uid = created.metadata.uid!;
    const wrongUid = await refusal(custom.deleteNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'gone-twice', body: { preconditions: { uid: 'not-the-uid' } } }));
    expect(wrongUid).toMatchObject({ httpCode: 409, reason: 'Conflict', message: `Operation cannot be fulfilled on widgets.test.svc.io "gone-twice": Precondition failed: UID in precondition: not-the-uid, UID in object meta: ${uid}` });
    const staleVersion = await refusal(custom.deleteNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'gone-twice', body: { preconditions: { resourceVersion: '1' } } }));
    expect(staleVersion.httpCode).toBe(409);
    expect(api.get('test.svc.io/v1', 'widgets', NS, 'gone-twice')?.metadata.deletionTimestamp).toBeUndefined();
    await custom.deleteNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'gone-twice', body: { preconditions: { uid } } });
    const marked = api.get('test.svc.io/v1', 'widgets', NS, 'gone-twice')!;
    expect(marked.metadata.deletionTimestamp).toBeDefined();
    expect(marked.metadata.generation).toBe((created.metadata.generation ?? 1) + 1);
  });

  it('an update that empties the finalizers of an object being deleted is not written: the object is deleted as stored, its DELETED event carrying the finalizers', async () => {
    const body = widget('last-finalizer', { size: 1 });
    await createWidget({ ...body, metadata: { ...body.metadata, finalizers: ['test.svc.io/hold'] } });
    await custom.deleteNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'last-finalizer' });
    const marked = api.get('test.svc.io/v1', 'widgets', NS, 'last-finalizer')!;
    const from = api.resourceVersion;
    const controller = new AbortController();
    const res = await fetch(`${api.url}/apis/test.svc.io/v1/namespaces/${NS}/widgets?watch=true&resourceVersion=${from}&fieldSelector=metadata.name%3Dlast-finalizer`, { headers: { Authorization: 'Bearer stand-in' }, signal: controller.signal });
    const answer = (await custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'last-finalizer', body: { ...marked, metadata: { ...marked.metadata, finalizers: [] } } })) as KubeObject;
    expect(answer.metadata.finalizers).toEqual(['test.svc.io/hold']);
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes('\n')) text += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    const events = text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { type: string; object: KubeObject });
    expect(events.map((e) => [e.type, e.object.metadata.finalizers, e.object.metadata.resourceVersion])).toEqual([['DELETED', ['test.svc.io/hold'], String(Number(from) + 1)]]);
    expect(api.get('test.svc.io/v1', 'widgets', NS, 'last-finalizer')).toBeUndefined();
  });
});

describe('12c. managedFields', () => {
  interface Entry {
    manager: string;
    operation: string;
    subresource?: string;
    time: string;
    fieldsV1: Record<string, unknown>;
  }
  const entries = (name: string) => (api.get('test.svc.io/v1', 'widgets', NS, name)!.metadata.managedFields ?? []) as Entry[];
  const status = (name: string, body: object, fieldManager?: string) =>
    custom.patchNamespacedCustomObjectStatus({ ...WIDGET, namespace: NS, name, body, ...(fieldManager ? { fieldManager } : {}) }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));

  it('records each writer (the User-Agent up to its "/", or ?fieldManager=) and subresource apart, with the fields it set; its time moves only when its fields grow; what a client sends is not taken', async () => {
    await createWidget(widget('managed', { size: 1 }));
    // @kubernetes/client-node's User-Agent is `kubernetes-client-javascript/<version>`.
    const agent = 'kubernetes-client-javascript';
    // The fields it sent, and those the CRD's defaults filled in.
    expect(entries('managed')).toEqual([expect.objectContaining({ manager: agent, operation: 'Update', apiVersion: 'test.svc.io/v1', fieldsType: 'FieldsV1', fieldsV1: { 'f:spec': expect.objectContaining({ 'f:size': {} }) } })]);
    expect(entries('managed')[0]).not.toHaveProperty('subresource');
    await status('managed', { status: { phase: 'Ready' } });
    expect(entries('managed')).toEqual([expect.objectContaining({ manager: agent }), expect.objectContaining({ manager: agent, subresource: 'status', fieldsV1: { 'f:status': { 'f:phase': {} } } })]);
    const first = entries('managed')[1]!;
    // A new value of a field it owns: the entry is left as it was (time too).
    await status('managed', { status: { phase: 'Failed' } });
    expect(entries('managed')[1]).toEqual(first);
    // A field it did not own: the entry grows.
    await status('managed', { status: { count: 2 } });
    expect(entries('managed')[1]!.fieldsV1).toEqual({ 'f:status': { 'f:phase': {}, 'f:count': {} } });
    // Another manager's write is an entry of its own.
    await status('managed', { status: { count: 3 } }, 'someone-else');
    expect(entries('managed').map((e) => [e.manager, e.subresource])).toEqual([[agent, undefined], [agent, 'status'], ['someone-else', 'status']]);
    // managedFields sent with an update are not taken.
    const current = api.get('test.svc.io/v1', 'widgets', NS, 'managed')!;
    await custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: NS, name: 'managed', body: { ...current, metadata: { ...current.metadata, managedFields: [] } } });
    expect(entries('managed')).toHaveLength(3);
  });
});

describe('12d. deleting a Namespace', () => {
  it('refuses a create in a namespace that does not exist: 404 NotFound `namespaces "<ns>" not found` (NamespaceLifecycle, before validation), whatever the type; reads and lists there answer as usual', async () => {
    const gone = 'never-created';
    const notFound = { httpCode: 404, kind: 'Status', reason: 'NotFound', message: `namespaces "${gone}" not found`, details: { name: gone, kind: 'namespaces' } };
    // An invalid object too (spec.size out of range): admission answers before validation.
    expect(await refusal(custom.createNamespacedCustomObject({ ...WIDGET, namespace: gone, body: { ...widget('w', { size: 0 }), metadata: { name: 'w', namespace: gone } } }))).toMatchObject(notFound);
    expect(await refusal(core.createNamespacedConfigMap({ namespace: gone, body: { metadata: { name: 'cm' }, data: {} } }))).toMatchObject(notFound);
    expect(await refusal(batch.createNamespacedCronJob({ namespace: gone, body: { ...cronJob('cj', '0 * * * *'), metadata: { name: 'cj' } } }))).toMatchObject(notFound);
    const involvedObject = { apiVersion: 'test.svc.io/v1', kind: 'Widget', name: 'w', namespace: gone };
    expect(await refusal(core.createNamespacedEvent({ namespace: gone, body: { metadata: { generateName: 'w.' }, involvedObject, reason: 'Applied', message: 'm' } }))).toMatchObject(notFound);
    expect(await refusal(custom.getNamespacedCustomObject({ ...WIDGET, namespace: gone, name: 'w' }))).toMatchObject({ httpCode: 404, message: 'widgets.test.svc.io "w" not found' });
    expect((await core.listNamespacedConfigMap({ namespace: gone })).items).toEqual([]);
    // Once the Namespace exists, the same create succeeds; the scripted apply creates a missing Namespace first (kubectl create namespace).
    api.createNamespace(gone);
    expect((await core.createNamespacedConfigMap({ namespace: gone, body: { metadata: { name: 'cm' }, data: {} } })).metadata?.namespace).toBe(gone);
    api.apply('configmaps', { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cm', namespace: 'applied-into' } });
    expect(api.get('v1', 'namespaces', undefined, 'applied-into')).toBeDefined();
  });

  it('makes it Terminating, deletes what is in it (what has finalizers waits for them), refuses new content (403), and removes it once empty', async () => {
    api.apply('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'doomed' } });
    const body = { ...widget('held', { size: 1 }), metadata: { name: 'held', namespace: 'doomed', finalizers: ['test.svc.io/hold'] } };
    await custom.createNamespacedCustomObject({ ...WIDGET, namespace: 'doomed', body });
    await custom.createNamespacedCustomObject({ ...WIDGET, namespace: 'doomed', body: { ...widget('free', { size: 1 }), metadata: { name: 'free', namespace: 'doomed' } } });
    await core.createNamespacedConfigMap({ namespace: 'doomed', body: { metadata: { name: 'cm' }, data: {} } });
    await core.deleteNamespace({ name: 'doomed' });
    const ns = api.get('v1', 'namespaces', undefined, 'doomed');
    expect(ns?.metadata.deletionTimestamp).toBeDefined();
    expect(ns?.status).toMatchObject({ phase: 'Terminating' });
    expect(api.list('test.svc.io/v1', 'widgets', 'doomed').map((o) => [o.metadata.name, Boolean(o.metadata.deletionTimestamp)])).toEqual([['held', true]]);
    expect(api.list('v1', 'configmaps', 'doomed')).toEqual([]);
    const refused = await refusal(core.createNamespacedConfigMap({ namespace: 'doomed', body: { metadata: { name: 'late' }, data: {} } }));
    expect(refused).toMatchObject({ httpCode: 403, reason: 'Forbidden', message: 'configmaps "late" is forbidden: unable to create new content in namespace doomed because it is being terminated' });
    // An update of what is in it is allowed: the finalizer taken off, the last object goes, and the Namespace with it.
    const held = api.get('test.svc.io/v1', 'widgets', 'doomed', 'held')!;
    await custom.replaceNamespacedCustomObject({ ...WIDGET, namespace: 'doomed', name: 'held', body: { ...held, metadata: { ...held.metadata, finalizers: [] } } });
    expect(api.get('test.svc.io/v1', 'widgets', 'doomed', 'held')).toBeUndefined();
    expect(api.get('v1', 'namespaces', undefined, 'doomed')).toBeUndefined();
  });
});

describe('12b. garbage collection by ownerReferences', () => {
  it('deleting an owner deletes its dependents; a dependent written naming an absent owner (no such object, or one of another uid) is deleted at once', async () => {
    const owner = await core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: 'gc-owner' }, data: {} } });
    const ref = (uid: string) => [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'gc-owner', uid }];
    const job = (name: string, uid: string) => ({ ...cronJob(name, '0 * * * *'), metadata: { name, ownerReferences: ref(uid) } });
    await batch.createNamespacedCronJob({ namespace: NS, body: job('gc-kept', owner.metadata!.uid!) });
    // The write is answered (201), then the collector finds the owner absent.
    await batch.createNamespacedCronJob({ namespace: NS, body: job('gc-stale', 'not-the-owners-uid') });
    await batch.createNamespacedCronJob({ namespace: NS, body: { ...cronJob('gc-nobody', '0 * * * *'), metadata: { name: 'gc-nobody', ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'no-such-map', uid: 'u' }] } } });
    const names = () => api.list('batch/v1', 'cronjobs', NS).map((o) => o.metadata.name).filter((n) => n.startsWith('gc-'));
    expect(names()).toEqual(['gc-kept']);
    await core.deleteNamespacedConfigMap({ name: 'gc-owner', namespace: NS });
    expect(names()).toEqual([]);
  });
});

describe('13. built-in objects are decoded into their Go structs (unknown fields, omitempty, defaults)', () => {
  /** A raw write to the stand-in: the answer's status, body and Warning headers. */
  async function write(method: 'POST' | 'PUT', path: string, body: unknown) {
    const res = await fetch(`${api.url}${path}`, { method, headers: { authorization: 'Bearer stand-in', 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> & { message?: string }, warning: res.headers.get('warning') };
  }
  const cronJobs = `/apis/batch/v1/namespaces/${NS}/cronjobs`;
  const job = (name: string, container: Record<string, unknown>, podSpec: Record<string, unknown> = {}, spec: Record<string, unknown> = {}) => ({
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: { name, namespace: NS },
    spec: { schedule: '0 * * * *', ...spec, jobTemplate: { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'run', image: 'svc-hub:1', ...container }], ...podSpec } } } } },
  });

  it('drops empty omitempty values, keeps pointers to zero, and applies the defaults of the job and pod templates', async () => {
    const created = await write(
      'POST',
      cronJobs,
      job(
        'decoded',
        {
          args: [],
          env: [{ name: 'EMPTY', value: '' }, { name: 'SET', value: 'x' }, { name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }, { name: 'MEM', valueFrom: { resourceFieldRef: { resource: 'limits.memory' } } }],
          volumeMounts: [{ name: 'tmp', mountPath: '/tmp', readOnly: false, subPath: '' }],
          ports: [{ containerPort: 8080 }],
          readinessProbe: { httpGet: { port: 8080 } },
          securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true },
          workingDir: '',
        },
        { automountServiceAccountToken: false, nodeSelector: {}, volumes: [{ name: 'tmp', emptyDir: {} }, { name: 'nothing' }, { name: 'cm', configMap: { name: 'x' } }], hostNetwork: false },
        { suspend: false, startingDeadlineSeconds: 0 },
      ),
    );
    expect(created.status).toBe(201);
    expect(created.warning).toBeNull();
    const stored = api.get('batch/v1', 'cronjobs', NS, 'decoded')!;
    // biome-ignore lint/suspicious/noExplicitAny: a deep read of the stored CronJob
    const spec = stored.spec as Record<string, any>;
    expect(spec).toMatchObject({ concurrencyPolicy: 'Allow', suspend: false, startingDeadlineSeconds: 0, successfulJobsHistoryLimit: 3, failedJobsHistoryLimit: 1 });
    expect(spec.jobTemplate.metadata).toEqual({ creationTimestamp: null });
    const template = spec.jobTemplate.spec.template;
    expect(template.metadata).toEqual({ creationTimestamp: null });
    expect(template.spec).toEqual({
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      containers: [
        {
          name: 'run',
          image: 'svc-hub:1',
          env: [{ name: 'EMPTY' }, { name: 'SET', value: 'x' }, { name: 'POD', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.name' } } }, { name: 'MEM', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: '0' } } }],
          volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }],
          ports: [{ containerPort: 8080, protocol: 'TCP' }],
          readinessProbe: { httpGet: { port: 8080, path: '/', scheme: 'HTTP' }, timeoutSeconds: 1, periodSeconds: 10, successThreshold: 1, failureThreshold: 3 },
          securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true },
          resources: {},
          imagePullPolicy: 'IfNotPresent',
          terminationMessagePath: '/dev/termination-log',
          terminationMessagePolicy: 'File',
        },
      ],
      volumes: [{ name: 'tmp', emptyDir: {} }, { name: 'nothing', emptyDir: {} }, { name: 'cm', configMap: { name: 'x', defaultMode: 420 } }],
      dnsPolicy: 'ClusterFirst',
      securityContext: {},
      terminationGracePeriodSeconds: 30,
      schedulerName: 'default-scheduler',
    });
    expect(stored.status).toEqual({});
  });

  it('pulls a :latest or untagged image Always, a tagged or pinned one IfNotPresent, and keeps an explicit policy', async () => {
    const policies: Array<[Record<string, unknown>, string]> = [
      [{ image: 'svc-hub:latest' }, 'Always'],
      [{ image: 'registry.example.com:5000/svc-hub' }, 'Always'],
      [{ image: 'registry.example.com:5000/svc-hub:1.2' }, 'IfNotPresent'],
      [{ image: `svc-hub@sha256:${'a'.repeat(64)}` }, 'IfNotPresent'],
      [{ image: 'svc-hub:latest', imagePullPolicy: 'Never' }, 'Never'],
    ];
    for (const [i, [container, expected]] of policies.entries()) {
      expect((await write('POST', cronJobs, job(`pull-${i}`, container))).status).toBe(201);
      // biome-ignore lint/suspicious/noExplicitAny: a deep read of the stored CronJob
      expect((api.get('batch/v1', 'cronjobs', NS, `pull-${i}`)!.spec as any).jobTemplate.spec.template.spec.containers[0].imagePullPolicy).toBe(expected);
    }
  });

  it('drops unknown fields with a Warning header (fieldValidation Warn, the default), silently with Ignore, and refuses them with Strict (400)', async () => {
    const withUnknown = (name: string) => ({ ...job(name, { bogus: 1 }), spec: { ...job(name, { bogus: 1 }).spec, foo: 'bar' }, metadata: { name, namespace: NS, color: 'red' } });
    const warned = await write('POST', cronJobs, withUnknown('unknown-warn'));
    expect(warned.status).toBe(201);
    // In the order of the body (spec.foo comes after jobTemplate in it).
    expect(warned.warning).toBe('299 - "unknown field \\"metadata.color\\"", 299 - "unknown field \\"spec.jobTemplate.spec.template.spec.containers[0].bogus\\"", 299 - "unknown field \\"spec.foo\\""');
    expect(api.requests.at(-1)!.warnings).toEqual(['unknown field "metadata.color"', 'unknown field "spec.jobTemplate.spec.template.spec.containers[0].bogus"', 'unknown field "spec.foo"']);
    const stored = api.get('batch/v1', 'cronjobs', NS, 'unknown-warn')!;
    expect(stored.spec!.foo).toBeUndefined();
    expect(stored.metadata.color).toBeUndefined();
    const ignored = await write('POST', `${cronJobs}?fieldValidation=Ignore`, withUnknown('unknown-ignore'));
    expect([ignored.status, ignored.warning]).toEqual([201, null]);
    const strict = await write('POST', `${cronJobs}?fieldValidation=Strict`, withUnknown('unknown-strict'));
    expect(strict.status).toBe(400);
    expect(strict.body).toMatchObject({
      reason: 'BadRequest',
      message:
        'CronJob in version "v1" cannot be handled as a CronJob: strict decoding error: unknown field "metadata.color", unknown field "spec.jobTemplate.spec.template.spec.containers[0].bogus", unknown field "spec.foo"',
    });
    expect(api.get('batch/v1', 'cronjobs', NS, 'unknown-strict')).toBeUndefined();
    // A custom resource too: its CRD's schema is its type.
    const widgets = `/apis/test.svc.io/v1/namespaces/${NS}/widgets`;
    const strictWidget = await write('POST', `${widgets}?fieldValidation=Strict`, widget('w-strict', { size: 1, foo: 1 }));
    expect([strictWidget.status, strictWidget.body.message]).toEqual([400, 'Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.foo"']);
    const warnedWidget = await write('POST', widgets, widget('w-warned', { size: 1, foo: 1 }));
    expect([warnedWidget.status, warnedWidget.warning]).toEqual([201, '299 - "unknown field \\"spec.foo\\""']);
  });

  it('refuses a value of the wrong JSON type (400), as the Go decoder does', async () => {
    const wrong = await write('POST', cronJobs, job('wrong-type', { env: [{ name: 'N', value: 5 }] }));
    expect(wrong.status).toBe(400);
    expect(wrong.body.message).toBe('CronJob in version "v1" cannot be handled as a CronJob: json: cannot unmarshal number into Go struct field CronJob.spec.jobTemplate.spec.template.spec.containers.env.value of type string');
  });

  it("refuses a job template's negative activeDeadlineSeconds (422) and a fractional one (400), takes 0, and holds a pod's deadline to 1..2^31-1, as validateJobSpec and ValidatePodSpec do", async () => {
    const withDeadline = (name: string, jobDeadline: unknown, podDeadline?: unknown) => {
      const body = job(name, {}, podDeadline === undefined ? {} : { activeDeadlineSeconds: podDeadline });
      Object.assign(body.spec.jobTemplate.spec, { activeDeadlineSeconds: jobDeadline, backoffLimit: -1 });
      return body;
    };
    const negative = await write('POST', cronJobs, withDeadline('deadline-negative', -1, 0));
    expect(negative.status).toBe(422);
    expect(negative.body.message).toBe(
      'CronJob.batch "deadline-negative" is invalid: [spec.jobTemplate.spec.activeDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0, spec.jobTemplate.spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0, spec.jobTemplate.spec.template.spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive]',
    );
    const fractional = await write('POST', cronJobs, withDeadline('deadline-fractional', 1.5));
    expect(fractional.status).toBe(400);
    const zero = job('deadline-zero', {});
    Object.assign(zero.spec.jobTemplate.spec, { activeDeadlineSeconds: 0 });
    const created = await write('POST', cronJobs, zero);
    expect(created.status).toBe(201);
    // biome-ignore lint/suspicious/noExplicitAny: a deep read of the answer
    expect((created.body.spec as any).jobTemplate.spec.activeDeadlineSeconds).toBe(0);
  });

  it('a Lease needs a duration of at least 1 s and no negative transition count (422), on create and update', async () => {
    const leases = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`;
    const body = (spec: Record<string, unknown>) => ({ apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'validated' }, spec: { holderIdentity: 'a', ...spec } });
    const zero = await write('POST', leases, body({ leaseDurationSeconds: 0, leaseTransitions: -1 }));
    expect(zero.status).toBe(422);
    expect(zero.body.message).toBe('Lease.coordination.k8s.io "validated" is invalid: [spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0, spec.leaseTransitions: Invalid value: -1: must to greater or equal than 0]');
    const created = await write('POST', leases, body({ leaseDurationSeconds: 15, leaseTransitions: 0 }));
    expect(created.status).toBe(201);
    const updated = await write('PUT', `${leases}/validated`, { ...created.body, spec: { ...(created.body.spec as object), leaseDurationSeconds: -5 } });
    expect(updated.status).toBe(422);
    expect(updated.body.message).toBe('Lease.coordination.k8s.io "validated" is invalid: spec.leaseDurationSeconds: Invalid value: -5: must be greater than 0');
  });

  it('a Lease keeps an empty holderIdentity (a pointer) and drops an unknown field; an Event answers its times to the second, reportingComponent always', async () => {
    const leases = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`;
    const lease = await write('POST', leases, { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'decoded' }, spec: { holderIdentity: '', leaseTransitions: 0, holder: 'x' } });
    expect(lease.status).toBe(201);
    expect(lease.body.spec).toEqual({ holderIdentity: '', leaseTransitions: 0 });
    const involvedObject = { apiVersion: 'test.svc.io/v1', kind: 'Widget', name: 'w-valid', namespace: NS };
    const event = await core.createNamespacedEvent({ namespace: NS, body: { metadata: { generateName: 'decoded.' }, involvedObject, reason: 'Applied', firstTimestamp: new Date('2026-01-02T03:04:05.678Z'), count: 0 } });
    const stored = api.get('v1', 'events', NS, event.metadata!.name!)!;
    expect(stored).toMatchObject({ firstTimestamp: '2026-01-02T03:04:05Z', lastTimestamp: null, eventTime: null, source: {}, reportingComponent: '', reportingInstance: '' });
    expect(stored.count).toBeUndefined();
  });
});

describe('14. chunked lists: limit and continue, as kube-apiserver serves them from etcd', () => {
  interface Page {
    metadata: { resourceVersion?: string; continue?: string; remainingItemCount?: number };
    items: KubeObject[];
  }
  const CHUNKS = 'chunks';
  const listPage = (params: { namespace?: string; limit?: number; _continue?: string; labelSelector?: string; resourceVersion?: string }) =>
    (params.namespace === undefined
      ? custom.listClusterCustomObject({ ...WIDGET, ...params })
      : custom.listNamespacedCustomObject({ ...WIDGET, ...params, namespace: params.namespace })) as Promise<Page>;
  const names = (page: Page) => page.items.map((o) => o.metadata.name);
  const put = (namespace: string, name: string, size = 1, labels: Record<string, string> = {}) =>
    api.apply('widgets', { ...widget(name, { size }), metadata: { name, namespace, labels } } as KubeObject);
  /** A GET of the widgets of `namespace` with a raw query, answered as sent. */
  const raw = async (namespace: string, query: string) => {
    const res = await fetch(`${api.url}/apis/test.svc.io/v1/namespaces/${namespace}/widgets?${query}`, { headers: { Authorization: 'Bearer stand-in' } });
    return { status: res.status, body: (await res.json()) as StatusBody & Page };
  };
  const token = (json: unknown) => Buffer.from(JSON.stringify(json)).toString('base64url');

  beforeAll(() => {
    // Created out of order: a list answers them in key order all the same.
    for (const name of ['w-c', 'w-a', 'w-e', 'w-b', 'w-d']) put(CHUNKS, name);
  });

  it('answers at most `limit` items in key order, a continue token and remainingItemCount while more remain; the pages make the unchunked list', async () => {
    const whole = await listPage({ namespace: CHUNKS });
    expect(names(whole)).toEqual(['w-a', 'w-b', 'w-c', 'w-d', 'w-e']);
    expect(whole.metadata.continue).toBeUndefined();
    expect(whole.metadata.remainingItemCount).toBeUndefined();

    const first = await listPage({ namespace: CHUNKS, limit: 2 });
    expect(names(first)).toEqual(['w-a', 'w-b']);
    expect(first.metadata.remainingItemCount).toBe(3);
    expect(first.metadata.continue).toMatch(/^[A-Za-z0-9_-]+$/);
    const second = await listPage({ namespace: CHUNKS, limit: 2, _continue: first.metadata.continue });
    expect(names(second)).toEqual(['w-c', 'w-d']);
    expect(second.metadata.remainingItemCount).toBe(1);
    const last = await listPage({ namespace: CHUNKS, limit: 2, _continue: second.metadata.continue });
    expect(names(last)).toEqual(['w-e']);
    // The last page: neither a token nor a count (a limit that ends exactly on the last item too).
    expect(last.metadata.continue).toBeUndefined();
    expect(last.metadata.remainingItemCount).toBeUndefined();
    expect((await listPage({ namespace: CHUNKS, limit: 5 })).metadata.continue).toBeUndefined();
    expect([...names(first), ...names(second), ...names(last)]).toEqual(names(whole));
    // The token is kube-apiserver's: the revision of the first page and the key after the last item answered.
    expect(JSON.parse(Buffer.from(first.metadata.continue!, 'base64url').toString())).toEqual({ v: 'meta.k8s.io/v1', rv: Number(first.metadata.resourceVersion), start: 'w-b\u0000' });
    // A limit of 0 (or below) is no limit; one that is not a number is refused.
    expect(names(await listPage({ namespace: CHUNKS, limit: 0 }))).toEqual(names(whole));
    const notANumber = await raw(CHUNKS, 'limit=ten');
    expect(notANumber.status).toBe(400);
    expect(notANumber.body.reason).toBe('BadRequest');
  });

  it('orders a list across namespaces by <namespace>/<name> byte by byte, as etcd keys sort ("order-b/…" < "order/…" < "order0/…")', async () => {
    put('order', 'x');
    put('order-b', 'y');
    put('order0', 'z');
    const across = (page: Page) => page.items.filter((o) => o.metadata.namespace!.startsWith('order')).map((o) => `${o.metadata.namespace}/${o.metadata.name}`);
    expect(across(await listPage({}))).toEqual(['order-b/y', 'order/x', 'order0/z']);
    // Chunked the same way: the token's key is <namespace>/<name> across namespaces.
    const first = await listPage({ limit: 1, labelSelector: '!absent' });
    expect(JSON.parse(Buffer.from(first.metadata.continue!, 'base64url').toString()).start).toBe(`${first.items[0]!.metadata.namespace}/${first.items[0]!.metadata.name}\u0000`);
  });

  it('serves every page at the first page\'s resourceVersion: what is created, changed or deleted after it does not show', async () => {
    const first = await listPage({ namespace: CHUNKS, limit: 2 });
    const rv = first.metadata.resourceVersion;
    const before = api.get('test.svc.io/v1', 'widgets', CHUNKS, 'w-c')!;
    put(CHUNKS, 'w-bb'); // sorts into the second page
    put(CHUNKS, 'w-c', 7); // changed
    api.remove('test.svc.io/v1', 'widgets', CHUNKS, 'w-d'); // deleted
    const second = await listPage({ namespace: CHUNKS, limit: 2, _continue: first.metadata.continue });
    expect(names(second)).toEqual(['w-c', 'w-d']);
    expect(second.items[0]).toEqual(before);
    expect(second.metadata.resourceVersion).toBe(rv);
    const last = await listPage({ namespace: CHUNKS, limit: 2, _continue: second.metadata.continue });
    expect(names(last)).toEqual(['w-e']);
    expect(last.metadata.resourceVersion).toBe(rv);
    // A new list sees the new state, at the new revision.
    const now = await listPage({ namespace: CHUNKS });
    expect(names(now)).toEqual(['w-a', 'w-b', 'w-bb', 'w-c', 'w-e']);
    expect((now.items[3]!.spec as { size: number }).size).toBe(7);
    expect(Number(now.metadata.resourceVersion)).toBeGreaterThan(Number(rv));
  });

  it('with a labelSelector: only matching items, at most `limit`, no remainingItemCount; a page may hold fewer, even none, and only the token says more remain', async () => {
    const SEL = 'chunks-sel';
    for (const [name, color] of [['s-a', 'red'], ['s-b', 'blue'], ['s-c', 'red'], ['s-d', 'blue'], ['s-e', 'blue']] as const) put(SEL, name, 1, { color });
    const first = await listPage({ namespace: SEL, limit: 2, labelSelector: 'color=red' });
    expect(names(first)).toEqual(['s-a', 's-c']);
    expect(first.metadata.remainingItemCount).toBeUndefined();
    // Keys remain after s-c (s-d, s-e), though none matches: the token is there.
    expect(first.metadata.continue).toBeDefined();
    const second = await listPage({ namespace: SEL, limit: 2, labelSelector: 'color=red', _continue: first.metadata.continue });
    expect(names(second)).toEqual([]);
    expect(second.metadata.continue).toBeUndefined();
    expect(second.metadata.resourceVersion).toBe(first.metadata.resourceVersion);
    const blue = await listPage({ namespace: SEL, limit: 1, labelSelector: 'color=blue' });
    const pages = [names(blue)];
    for (let page = blue; page.metadata.continue; ) {
      page = await listPage({ namespace: SEL, limit: 1, labelSelector: 'color=blue', _continue: page.metadata.continue });
      pages.push(names(page));
    }
    expect(pages).toEqual([['s-b'], ['s-d'], ['s-e']]);
  });

  it.each([
    ['not base64url', 'a+b/c', 'invalid continue token: continue key is not valid: illegal base64 data at input byte 1'],
    ['not JSON', Buffer.from('{rv').toString('base64url'), 'invalid continue token: continue key is not valid: '],
    ['another version', token({ v: 'meta.k8s.io/v2', rv: 5, start: 'w-a\u0000' }), 'invalid continue token: continue key is not valid: server does not recognize this encoded version meta.k8s.io/v2'],
    ['no revision', token({ v: 'meta.k8s.io/v1', rv: 0, start: 'w-a\u0000' }), 'invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)'],
    ['a revision that is not a number', token({ v: 'meta.k8s.io/v1', rv: '5', start: 'w-a\u0000' }), 'invalid continue token: continue key is not valid: json: cannot unmarshal string'],
    ['no start key', token({ v: 'meta.k8s.io/v1', rv: 5, start: '' }), 'invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)'],
    ['a start key out of the prefix', token({ v: 'meta.k8s.io/v1', rv: 5, start: '../other/x' }), 'invalid continue token: continue key is not valid: ../other/x'],
  ])('refuses a continue token that is %s: 400 BadRequest', async (_what, continueToken, message) => {
    const { status: code, body } = await raw(CHUNKS, `limit=2&continue=${encodeURIComponent(continueToken)}`);
    expect(code).toBe(400);
    expect(body).toMatchObject({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'BadRequest', code: 400 });
    expect(body.message.startsWith(message)).toBe(true);
  });

  it('refuses a continue token with a resourceVersion: 400 BadRequest', async () => {
    const first = await listPage({ namespace: CHUNKS, limit: 2 });
    const { status: code, body } = await raw(CHUNKS, `limit=2&continue=${first.metadata.continue}&resourceVersion=${first.metadata.resourceVersion}`);
    expect(code).toBe(400);
    expect(body.message).toBe('specifying resource version is not allowed when using continue');
  });

  it('answers 410 Expired to a token whose revision was compacted, with a token to continue inconsistently; a new list works', async () => {
    const first = await listPage({ namespace: CHUNKS, limit: 2 });
    // Compaction at the current revision leaves it readable: the token still works.
    api.compact();
    expect(names(await listPage({ namespace: CHUNKS, limit: 2, _continue: first.metadata.continue }))).toEqual(['w-bb', 'w-c']);
    // A write, then compaction past the token's revision: it has expired.
    put(CHUNKS, 'w-ab');
    api.compact();
    const expired = await refusal(listPage({ namespace: CHUNKS, limit: 2, _continue: first.metadata.continue }));
    expect(expired.httpCode).toBe(410);
    const { httpCode: _, ...body } = expired;
    expect(body).toEqual({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: { continue: expect.any(String) },
      status: 'Failure',
      message:
        'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.',
      reason: 'Expired',
      code: 410,
    });
    // That token continues after the same key, from the latest revision: w-ab (created since) is not there, being before it.
    const inconsistent = await listPage({ namespace: CHUNKS, limit: 10, _continue: (body as unknown as Page).metadata.continue });
    expect(names(inconsistent)).toEqual(['w-bb', 'w-c', 'w-e']);
    expect(inconsistent.metadata.resourceVersion).toBe(api.resourceVersion);
    // Starting again: every page of the new list is served.
    const again = await listPage({ namespace: CHUNKS, limit: 3 });
    expect(names(again)).toEqual(['w-a', 'w-ab', 'w-b']);
    expect(names(await listPage({ namespace: CHUNKS, limit: 3, _continue: again.metadata.continue }))).toEqual(['w-bb', 'w-c', 'w-e']);
  });

  it('beforeList runs a scripted write before a later page is served', async () => {
    let ran = 0;
    api.beforeList(new RegExp(`/namespaces/${CHUNKS}/widgets$`), () => ran++, { continued: true });
    const first = await listPage({ namespace: CHUNKS, limit: 2 });
    expect(ran).toBe(0);
    await listPage({ namespace: CHUNKS, limit: 2, _continue: first.metadata.continue });
    await listPage({ namespace: CHUNKS, limit: 2, _continue: first.metadata.continue });
    expect(ran).toBe(1);
  });
});

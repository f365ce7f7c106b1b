import { describe, expect, it } from '@jest/globals';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { parseMapping } from '../mapping.js';
import { entityManifestSchema } from './schema.js';
import { checkEntityManifest, RESERVED_COLUMNS } from './validate.js';

type Json = Record<string, unknown>;

/** The manifest of docs/entities.md: two sources fused on the partner id. */
function manifest(spec: Json = {}, top: Json = {}): Json {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name: 'partner' },
    spec: {
      scope: 'crm',
      key: 'partner_id',
      columns: [
        { name: 'partner_id', type: 'text', label: 'Partner id' },
        { name: 'email', type: 'text', label: 'E-mail' },
        { name: 'country', type: 'text', values: ['FR', 'DE', 'ES'] },
      ],
      sources: [
        { table: 'ext.partners', key: 'external_id', columns: { partner_id: 'external_id', email: '$.contact.email', country: 'country' } },
        { table: 'ext.erp_partners', key: '$.code', columns: { email: 'email' } },
      ],
      ...spec,
    },
    ...top,
  };
}

const spec = (m: Json) => m.spec as Json & { columns: Json[]; sources: Array<Json & { columns?: Json }> };

/** The errors of a manifest, as `{field: message}`. */
function errorsOf(m: unknown): Record<string, string> {
  return Object.fromEntries(checkEntityManifest(m).errors.map((e) => [e.field, e.message]));
}

/** The one error a broken manifest gets at `field`. */
function refusedAt(m: unknown, field: string, message?: RegExp) {
  const errors = errorsOf(m);
  expect(Object.keys(errors)).toContain(field);
  if (message) expect(errors[field]).toMatch(message);
}

describe('a valid manifest', () => {
  it('normalises to the stored model: name lower-case, scope a list, optional fields only when given', () => {
    const m = manifest({ scope: ['crm', 'sales', 'crm'] }, { metadata: { name: 'Partner', labels: { 'svc.io/tenant': 'default' } } });
    const result = checkEntityManifest(m);
    expect(result.errors).toEqual([]);
    expect(result.warnings).toEqual([]);
    expect(result.entity).toEqual({
      name: 'partner',
      scopes: ['crm', 'sales'],
      key: 'partner_id',
      columns: [
        { name: 'partner_id', type: 'text', label: 'Partner id' },
        { name: 'email', type: 'text', label: 'E-mail' },
        { name: 'country', type: 'text', values: ['FR', 'DE', 'ES'] },
      ],
      sources: [
        { table: 'ext.partners', key: 'external_id', columns: { partner_id: 'external_id', email: '$.contact.email', country: 'country' } },
        { table: 'ext.erp_partners', key: '$.code', columns: { email: 'email' } },
      ],
    });
  });

  it('takes one scope as a string, a status (written by Kubernetes) and every column type', () => {
    const m = manifest({
      columns: [
        { name: 'partner_id', type: 'bigint' },
        { name: 'credit', type: 'numeric', description: 'Credit limit in EUR', examples: ['1000'] },
        { name: 'seen', type: 'timestamptz' },
        { name: 'active', type: 'boolean', values: ['true', 'false'], examples: ['true'] },
      ],
      sources: [{ table: 'ext.partners', key: 'external_id', columns: { credit: 'credit_limit', seen: '$.updated_at', active: "$['is active']" } }],
    }, { status: { conditions: [] } });
    const result = checkEntityManifest(m);
    expect(result.errors).toEqual([]);
    expect(result.entity!.scopes).toEqual(['crm']);
  });

  it('lets a source bring the key only (its columns empty)', () => {
    const m = manifest();
    spec(m).sources.push({ table: 'ext.blocklist', key: 'external_id', columns: {} });
    expect(checkEntityManifest(m).errors).toEqual([]);
  });

  it('warns about an example outside the declared values', () => {
    const m = manifest();
    spec(m).columns[2] = { name: 'country', type: 'text', values: ['FR', 'DE', 'FR'], examples: ['FR', 'IT'] };
    const result = checkEntityManifest(m);
    expect(result.errors).toEqual([]);
    expect(result.entity!.columns[2]!.values).toEqual(['FR', 'DE']);
    expect(result.warnings).toEqual([{ field: 'spec.columns[2].examples[1]', message: '"IT" is not one of spec.columns[2].values' }]);
  });
});

describe('the envelope', () => {
  it.each([
    ['apiVersion', { apiVersion: 'connectors.svc.io/v1' }],
    ['kind', { kind: 'Connector' }],
    ['metadata.name', { metadata: { name: 'no_underscores' } }],
    ['metadata.name', { metadata: { name: '-partner' } }],
    ['metadata.name', { metadata: { name: 'x'.repeat(64) } }],
    ['metadata', { metadata: undefined }],
    ['connector_type', { connector_type: 'rest-generic' }],
    ['scopes', { scopes: ['crm'] }],
  ])('refuses a wrong or unknown %s', (field, over) => {
    refusedAt(manifest({}, over), field);
  });

  it('refuses what is not an object, too deep, or unstorable text', () => {
    expect(errorsOf('kind: Entity')).toEqual({ '': expect.stringContaining('must be an object') });
    let deep: unknown = 'x';
    for (let i = 0; i < 70; i++) deep = [deep];
    expect(Object.keys(errorsOf(manifest({}, { metadata: { name: 'p', labels: deep } })))).toEqual(['']);
    refusedAt(manifest({}, { metadata: { name: 'p', annotations: { note: 'a\u0000b' } } }), 'metadata.annotations.note', /NUL/);
  });

  it('refuses unknown keys at every level of spec', () => {
    refusedAt(manifest({ view: true }), 'spec.view', /not a known field/);
    const m = manifest();
    spec(m).columns[1]!.nullable = true;
    spec(m).sources[1]!.where = 'x > 1';
    const errors = errorsOf(m);
    expect(errors['spec.columns[1].nullable']).toMatch(/not a known field/);
    expect(errors['spec.sources[1].where']).toMatch(/not a known field/);
  });
});

describe('spec fields', () => {
  it.each([
    ['spec.scope', { scope: '' }],
    ['spec.scope', { scope: 'two words' }],
    ['spec.scope', { scope: [] }],
    ['spec.scope[1]', { scope: ['crm', 'a b'] }],
    ['spec.scope', { scope: 7 }],
    ['spec.key', { key: undefined }],
    ['spec.columns', { columns: [] }],
    ['spec.sources', { sources: [] }],
    ['spec.sources', { sources: Array.from({ length: 17 }, (_, i) => ({ table: `ext.t${i}`, key: 'external_id', columns: {} })) }],
  ])('refuses %s when it is %j', (field, over) => {
    refusedAt(manifest(over), field);
  });

  it.each([
    ['Email', /lower-case column name/],
    ['1st', /lower-case column name/],
    ['_private', /lower-case column name/],
    ['x'.repeat(64), /lower-case column name/],
  ])('refuses the column name %s', (name, message) => {
    const m = manifest();
    spec(m).columns[1]!.name = name;
    refusedAt(m, 'spec.columns[1].name', message);
  });

  it.each(RESERVED_COLUMNS.map((name) => [name]))('refuses the reserved column name %s, saying it is reserved', (name) => {
    const m = manifest();
    spec(m).columns[1]!.name = name;
    refusedAt(m, 'spec.columns[1].name', /is reserved/);
  });

  it('refuses a column type, label, examples or values of the wrong shape', () => {
    const m = manifest();
    Object.assign(spec(m).columns[1]!, { type: 'varchar', label: '', examples: [1], values: [] });
    const errors = errorsOf(m);
    expect(errors['spec.columns[1].type']).toMatch(/must be one of text, bigint, numeric, timestamptz, boolean/);
    expect(errors['spec.columns[1].label']).toMatch(/must not be empty/);
    expect(errors['spec.columns[1].examples[0]']).toMatch(/must be a string/);
    expect(errors['spec.columns[1].values']).toMatch(/at least 1 item/);
  });

  it('refuses a column declared twice', () => {
    const m = manifest();
    spec(m).columns.push({ name: 'email', type: 'text' });
    refusedAt(m, 'spec.columns[3].name', /duplicate column "email": spec.columns\[1\]/);
  });

  it('refuses a key that is not one of the columns', () => {
    refusedAt(manifest({ key: 'id' }), 'spec.key', /must name one of spec.columns \(partner_id, email, country\)/);
  });
});

describe('sources', () => {
  it.each(['partners', 'ext.Partners', 'ext.', 'other.partners', 'ext.a.b', 'ext."x"'])('refuses the table %s', (table) => {
    const m = manifest();
    spec(m).sources[0]!.table = table;
    refusedAt(m, 'spec.sources[0].table', /must be ext.<name>/);
  });

  it('refuses the same table twice', () => {
    const m = manifest();
    spec(m).sources[1]!.table = 'ext.partners';
    refusedAt(m, 'spec.sources[1].table', /duplicate source table ext.partners: spec.sources\[0\]/);
  });

  it('refuses a missing table, key or columns', () => {
    const m = manifest();
    delete spec(m).sources[1]!.columns;
    delete spec(m).sources[0]!.key;
    const errors = errorsOf(m);
    expect(errors['spec.sources[1].columns']).toBe('spec.sources[1].columns is required');
    expect(errors['spec.sources[0].key']).toBe('spec.sources[0].key is required');
  });

  it('refuses a mapped column that is not declared', () => {
    const m = manifest();
    spec(m).sources[1]!.columns = { email: 'email', phone: 'phone' };
    refusedAt(m, 'spec.sources[1].columns.phone', /"phone" is not one of spec.columns/);
  });

  it('refuses a canonical column no source maps, naming the column', () => {
    const m = manifest();
    spec(m).columns.push({ name: 'city', type: 'text' });
    refusedAt(m, 'spec.columns[3].name', /column city is mapped by no source/);
  });

  it('counts the key column as mapped by every source through its key', () => {
    const m = manifest();
    spec(m).sources[0]!.columns = { email: 'email', country: 'country' };
    expect(errorsOf(m)).toEqual({});
  });

  it('refuses a key column mapped to something else than the source\'s key', () => {
    const m = manifest();
    spec(m).sources[1]!.columns = { email: 'email', partner_id: 'external_id' };
    refusedAt(m, 'spec.sources[1].columns.partner_id', /must be spec.sources\[1\].key \("\$.code"\)/);
  });

  it.each([
    ['Email', /column of the table/],
    ['contact.email', /column of the table/],
    ['data', /bookkeeping column/],
    ['row_hash', /bookkeeping column/],
    ['tenant_id', /bookkeeping column/],
    ['$', /\$ alone is the whole payload/],
    ['$.contact..email', /must continue after "\." with a name/],
    ['$.contact.*', /must continue after "\." with a name/],
    ['$.lines[*].sku', /no wildcards/],
    ['$.lines[-1]', /no wildcards/],
    ['$.lines[?(@.a)]', /no wildcards/],
    ["$['unterminated]", /unterminated/],
    ["$['a\\b']", /may escape only/],
    ['$..email', /must continue after/],
    ['$ .email', /simple path/],
  ])('refuses the mapping %s naming the field', (mapping, message) => {
    const m = manifest();
    spec(m).sources[0]!.columns = { ...spec(m).sources[0]!.columns, email: mapping };
    refusedAt(m, 'spec.sources[0].columns.email', message);
  });

  it('names a bookkeeping column once, quoted, before the reason', () => {
    const m = manifest();
    spec(m).sources[0]!.columns = { ...spec(m).sources[0]!.columns, email: 'data' };
    expect(errorsOf(m)['spec.sources[0].columns.email']).toBe(
      'spec.sources[0].columns.email "data" is a bookkeeping column of every ext table, not data; map external_id, a promoted column or a JSONPath into data',
    );
  });

  it('refuses a key mapping the same way, naming spec.sources[i].key', () => {
    const m = manifest();
    spec(m).sources[1]!.key = '$.codes[*]';
    refusedAt(m, 'spec.sources[1].key', /no wildcards/);
  });

  it('names a mapped column that is not an identifier with brackets', () => {
    const m = manifest();
    spec(m).sources[1]!.columns = { email: 'email', 'e-mail': 'x' };
    refusedAt(m, 'spec.sources[1].columns["e-mail"]', /is not one of spec.columns/);
  });
});

describe('mappings', () => {
  it.each([
    ['external_id', { kind: 'column', column: 'external_id' }],
    ['credit_limit', { kind: 'column', column: 'credit_limit' }],
    ['$.contact.email', { kind: 'path', pgPath: '$."contact"."email"' }],
    ['$.lines[0].sku', { kind: 'path', pgPath: '$."lines"[0]."sku"' }],
    ["$['a b']['x\\'y']", { kind: 'path', pgPath: '$."a b"."x\'y"' }],
    ['$["say \\"hi\\""]', { kind: 'path', pgPath: '$."say \\"hi\\""' }],
    ["$['back\\\\slash']", { kind: 'path', pgPath: '$."back\\\\slash"' }],
    ['$.last', { kind: 'path', pgPath: '$."last"' }],
    ["$['\u0001']", { kind: 'path', pgPath: '$."\\u0001"' }],
  ])('reads %s', (text, expected) => {
    expect(parseMapping(text)).toEqual(expected);
  });
});

describe('the JSON Schema', () => {
  it('compiles under ajv strict mode and is the one the validator uses', () => {
    const ajv = new Ajv2020({ strict: true, allowUnionTypes: true });
    expect(() => ajv.compile(entityManifestSchema)).not.toThrow();
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import type { Promote } from '../connectors/types.js';
import { tenantTableSql } from '../connectors/target/ddl.js';
import { guardQuery } from '../retrieval/analytic/guards.js';
import { EntityDefinitionError, entityRelation, typedEntityRelation } from './relation.js';
import { applyEntity, type EntityDef, loadEntity } from './store.js';

/**
 * The fused relation (relation.ts) against real ext tables of two tenants (made by ExtSchema, the
 * runner's own DDL, and filled as the owner): values and their text form, precedence, the conflict
 * ledger's shape, keys left out, duplicate keys, several sources, a dropped table or column, and
 * one tenant's entity never reading another's rows.
 */

let hub: TestHub;
let owner: pg.Client;
const A = 2;
const B = 3;
const CONNECTOR = '00000000-0000-0000-0000-00000000000c';
const ENDPOINT = '00000000-0000-0000-0000-00000000000e';

const promote = (name: string, type: Promote['type']): Promote => ({ name, path: `$.${name}`, type });

/** Inserts rows into a tenant's ext table as the owner: `[external_id, data, {promoted column: value}]`. */
async function rows(tenant: number, table: string, list: Array<[string, Record<string, unknown>, Record<string, unknown>?]>) {
  for (const [externalId, data, promoted = {}] of list) {
    const names = Object.keys(promoted);
    await owner.query(
      `insert into ext_t${tenant}.${table} (tenant_id, external_id, row_hash, data, connector_id, endpoint_id${names.map((n) => `, ${n}`).join('')})
       values ($1, $2, md5($2 || random()::text), $3, $4, $5${names.map((_, i) => `, $${i + 6}`).join('')})`,
      [tenant, externalId, JSON.stringify(data), CONNECTOR, ENDPOINT, ...names.map((n) => promoted[n])],
    );
  }
}

const partner = (over: Record<string, unknown> = {}) => ({
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
      { name: 'credit', type: 'numeric' },
      { name: 'since', type: 'timestamptz' },
    ],
    sources: [
      { table: 'ext.partners', key: 'external_id', columns: { partner_id: 'external_id', email: '$.contact.email', country: 'country', credit: 'credit_limit', since: 'since' } },
      { table: 'ext.erp_partners', key: '$.code', columns: { email: 'email', country: '$.land' } },
    ],
    ...over,
  },
});

describe('typed columns as analytic chat reads them', () => {
  // What a source sends (JSON, as Python's json.dumps writes numbers), and what each typed column reads.
  // [key, the JSON text of count, of at]
  const SENT: Array<[string, string, string]> = [
    ['n1', '5', '0'],
    ['n2', '5.0', '"2025-01-02T03:04:05Z"'],
    ['n3', '"5.0"', '"now"'],
    ['n4', '"1.5e3"', '"today"'],
    ['n5', '-9223372036854775808.00', '"epoch"'],
    ['n6', '5.5', '" Tomorrow 10:00"'],
    ['n7', '9223372036854775808', '"yesterday"'],
    ['n8', '"NaN"', '"infinity"'],
    ['n9', '"Infinity"', '"-infinity"'],
    ['n10', '"five"', '"2025-01-02 epoch"'],
    ['n11', '"0x1F"', '"2025-06-01 12:00 Europe/Paris"'],
    ['n12', '" 1_000 "', '"Jan 2 2025 AD"'],
  ];

  beforeAll(async () => {
    await hub.services.connectors.ext.ensureTable(A, 'ext.typed_values', []);
    for (const [id, count, at] of SENT) {
      const data = `{"id": "${id}", "count": ${count}, "at": ${at}}`;
      await owner.query(`insert into ext_t${A}.typed_values (tenant_id, external_id, row_hash, data, connector_id, endpoint_id) values ($1, $2, md5($2), $3::jsonb, $4, $5)`, [A, id, data, CONNECTOR, ENDPOINT]);
    }
    const manifest = {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'typed' },
      spec: {
        scope: 'crm',
        key: 'id',
        columns: [{ name: 'id', type: 'text' }, { name: 'count', type: 'bigint' }, { name: 'at', type: 'timestamptz' }],
        sources: [{ table: 'ext.typed_values', key: '$.id', columns: { id: '$.id', count: '$.count', at: '$.at' } }],
      },
    };
    expect((await apply(A, manifest)).warnings).toEqual([]);
  });

  it('a bigint reads an integral numeric within range (5.0, 1.5e3), NULL for a fraction, a word or out of range; a timestamptz refuses PostgreSQL\'s special words (now, today, epoch, infinity …)', async () => {
    await hub.services.db.withTenant(A, async (tx) => {
      const typed = await typedEntityRelation(tx, (await loadEntity(tx, 'typed'))!);
      const { rows: read } = await tx.query<{ id: string; count: string | null; at: Date | string | null }>(`select id, count::text as count, at from (${typed}) t`);
      const byKey = Object.fromEntries(read.map((r) => [r.id, [r.count, r.at instanceof Date ? r.at.toISOString() : r.at]]));
      expect(byKey).toEqual({
        n1: ['5', null],
        n2: ['5', '2025-01-02T03:04:05.000Z'],
        n3: ['5', null],
        n4: ['1500', null],
        n5: ['-9223372036854775808', null],
        n6: [null, null],
        n7: [null, null],
        n8: [null, null],
        n9: [null, null],
        n10: [null, null],
        n11: ['31', '2025-06-01T10:00:00.000Z'],
        n12: ['1000', '2025-01-02T00:00:00.000Z'],
      });
    });
  });
});

async function apply(tenant: number, manifest: unknown) {
  return hub.services.db.withTenant(tenant, (tx) => applyEntity(tx, manifest, { actor: 'test' }));
}

/** The fused rows of a tenant's entity, by _entity_id, and the relation's column names. */
async function fused(tenant: number, name: string, after?: string): Promise<{ columns: string[]; rows: Array<Record<string, unknown>> }> {
  return hub.services.db.withTenant(tenant, async (tx) => {
    const entity = (await loadEntity(tx, name))!;
    const sql = await entityRelation(tx, entity, { after });
    const result = await tx.query<Record<string, unknown>>(`select * from (${sql}) e order by _entity_id`);
    return { columns: result.fields.map((f) => f.name), rows: result.rows };
  });
}

const byId = (list: Array<Record<string, unknown>>) => Object.fromEntries(list.map((r) => [r._entity_id as string, r]));

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await owner.query(`insert into core.tenants (id, code, name) values ($1, 'acme', 'Acme'), ($2, 'globex', 'Globex')`, [A, B]);
  const ext = hub.services.connectors.ext;
  for (const tenant of [A, B]) {
    await ext.ensureTable(tenant, 'ext.partners', [promote('country', 'text'), promote('credit_limit', 'numeric'), promote('since', 'timestamptz')]);
    await ext.ensureTable(tenant, 'ext.erp_partners', [promote('email', 'text'), promote('code', 'bigint')]);
  }
  await rows(A, 'partners', [
    ['1', { contact: { email: 'a@x' } }, { country: 'FR', credit_limit: '1000.50', since: '2025-01-02T03:04:05Z' }],
    ['2', { contact: { email: 'same@x' } }, { country: 'DE' }],
    ['3', { contact: {} }, { country: 'ES' }],
    ['6', { contact: { email: null } }, {}],
    ['7', { contact: { email: 'seven@x' } }, { country: 'FR' }],
    ['9', { contact: { email: '' } }, { country: '' }],
    ['', { contact: { email: 'empty@x' } }, {}],
  ]);
  await rows(A, 'erp_partners', [
    ['e1', { code: '1', land: 'DE' }, { email: 'b@x' }],
    ['e2', { code: 2 }, { email: 'same@x' }],
    ['e4', { code: '4', land: 'ES' }, { email: 'four@x' }],
    ['e5a', { code: '5' }, { email: 'first@x' }],
    ['e5b', { code: '5' }, { email: 'second@x' }],
    ['e6', { code: '6' }, { email: 'six@x' }],
    ['e7', { code: '7', land: 'FR' }, { email: 'seven@x' }],
    ['e9', { code: '9', land: 'ES' }, { email: 'nine@x' }],
    ['enull', { code: null }, { email: 'nokey@x' }],
    ['enone', {}, { email: 'nokey@x' }],
    ['eempty', { code: '' }, { email: 'nokey@x' }],
    // Keyed by the promoted bigint `code` (entity erp), not by $.code (entity partner leaves them out).
    ['e10', {}, { email: 'ten@x', code: 10 }],
    ['e11', {}, { email: 'eleven@x', code: '011' }],
  ]);
  // Their tenant: a table of the same name with rows of its own.
  await rows(B, 'partners', [['1', { contact: { email: 'globex@x' } }, { country: 'XX' }], ['99', { contact: { email: 'only-globex@x' } }, {}]]);
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('the fused relation of two sources', () => {
  let result: { columns: string[]; rows: Array<Record<string, unknown>> };
  let since: string;

  beforeAll(async () => {
    // PostgreSQL's own text form of the timestamp, in the session's time zone (the relation casts ::text).
    since = await hub.services.db.withTenant(A, async (tx) => (await tx.query<{ t: string }>(`select '2025-01-02T03:04:05Z'::timestamptz::text as t`)).rows[0]!.t);
    const applied = await apply(A, partner());
    expect(applied.warnings).toEqual([]);
    result = await fused(A, 'partner');
  });

  it('has _entity_id, the canonical columns in declared order, _conflicts and _resolution', () => {
    expect(result.columns).toEqual(['_entity_id', 'partner_id', 'email', 'country', 'credit', 'since', '_conflicts', '_resolution']);
  });

  it('holds one row per key of any source; keys that are NULL, missing or empty are left out', () => {
    expect(result.rows.map((r) => r._entity_id)).toEqual(['1', '2', '3', '4', '5', '6', '7', '9']);
  });

  it('takes the first non-null value in declared source order and records a disagreement', () => {
    expect(byId(result.rows)['1']).toEqual({
      _entity_id: '1',
      partner_id: '1',
      email: 'a@x',
      country: 'FR',
      credit: '1000.50',
      since: since,
      _conflicts: { email: { 'ext.partners': 'a@x', 'ext.erp_partners': 'b@x' }, country: { 'ext.partners': 'FR', 'ext.erp_partners': 'DE' } },
      _resolution: 'precedence',
    });
  });

  it('records nothing when the sources agree (a JSON number key meets a text key of the same digits)', () => {
    expect(byId(result.rows)['2']).toEqual(expect.objectContaining({ email: 'same@x', country: 'DE', _conflicts: {}, _resolution: 'none' }));
    expect(byId(result.rows)['7']).toEqual(expect.objectContaining({ email: 'seven@x', country: 'FR', _conflicts: {}, _resolution: 'none' }));
  });

  it('falls through to a later source where the first has NULL (JSON null or absent), without a conflict', () => {
    expect(byId(result.rows)['6']).toEqual(expect.objectContaining({ partner_id: '6', email: 'six@x', country: null, _conflicts: {}, _resolution: 'none' }));
    expect(byId(result.rows)['3']).toEqual(expect.objectContaining({ partner_id: '3', email: null, country: 'ES', credit: null, since: null, _conflicts: {} }));
  });

  it('lets a later source\'s value win over an empty text, without a conflict', () => {
    expect(byId(result.rows)['9']).toEqual(expect.objectContaining({ email: 'nine@x', country: 'ES', _conflicts: {}, _resolution: 'none' }));
  });

  it('keeps a key only the second source has, the key column being _entity_id', () => {
    expect(byId(result.rows)['4']).toEqual(expect.objectContaining({ partner_id: '4', email: 'four@x', country: 'ES', _resolution: 'none' }));
  });

  it('keeps the row with the smallest id when a source holds a key twice', () => {
    expect(byId(result.rows)['5']).toEqual(expect.objectContaining({ email: 'first@x', _conflicts: {} }));
  });
});

describe('three sources', () => {
  it('lists every source with a value in a conflict, and takes the first', async () => {
    await hub.services.connectors.ext.ensureTable(A, 'ext.crm_contacts', [promote('mail', 'text')]);
    await rows(A, 'crm_contacts', [['1', {}, { mail: 'c@x' }], ['2', {}, { mail: 'same@x' }], ['8', {}, { mail: 'eight@x' }]]);
    const m = partner();
    m.spec.sources.unshift({ table: 'ext.crm_contacts', key: 'external_id', columns: { email: 'mail' } } as (typeof m.spec.sources)[number]);
    m.metadata.name = 'contact';
    await apply(A, m);
    const got = byId((await fused(A, 'contact')).rows);
    expect(Object.keys(got)).toEqual(['1', '2', '3', '4', '5', '6', '7', '8', '9']);
    expect(got['1']).toEqual(expect.objectContaining({
      email: 'c@x',
      _conflicts: { email: { 'ext.crm_contacts': 'c@x', 'ext.partners': 'a@x', 'ext.erp_partners': 'b@x' }, country: { 'ext.partners': 'FR', 'ext.erp_partners': 'DE' } },
      _resolution: 'precedence',
    }));
    expect(got['2']).toEqual(expect.objectContaining({ email: 'same@x', _conflicts: {}, _resolution: 'none' }));
    expect(got['8']).toEqual(expect.objectContaining({ partner_id: '8', email: 'eight@x', country: null, _resolution: 'none' }));
  });
});

describe('the records after a key (`after`, how the workflow sweep goes on with a pass)', () => {
  it('are exactly the rows of the whole relation whose key sorts after it, whichever sources hold them', async () => {
    // Entity contact (three sources, the last keyed by a JSONPath): keys 1 to 9, of one source or several.
    const whole = (await fused(A, 'contact')).rows;
    for (const after of ['', '1', '3', '4', '45', '5', '8', '9', 'z']) {
      const got = (await fused(A, 'contact', after)).rows;
      expect({ after, rows: got }).toEqual({ after, rows: whole.filter((r) => (r._entity_id as string) > after) });
    }
    // A quote in the key is a literal, not SQL.
    expect((await fused(A, 'contact', "5' or ''='")).rows.map((r) => r._entity_id)).toEqual(['6', '7', '8', '9']);
  });
});

describe('one source', () => {
  it('is that source\'s rows with a key, a typed key in its text form, never a conflict', async () => {
    await apply(A, {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'erp' },
      spec: { scope: ['erp'], key: 'code', columns: [{ name: 'code', type: 'bigint' }, { name: 'email', type: 'text' }], sources: [{ table: 'ext.erp_partners', key: 'code', columns: { email: 'email' } }] },
    });
    const { columns, rows: got } = await fused(A, 'erp');
    expect(columns).toEqual(['_entity_id', 'code', 'email', '_conflicts', '_resolution']);
    // Only the rows whose promoted `code` is set; 011 stored as bigint reads 11.
    expect(got).toEqual([
      { _entity_id: '10', code: '10', email: 'ten@x', _conflicts: {}, _resolution: 'none' },
      { _entity_id: '11', code: '11', email: 'eleven@x', _conflicts: {}, _resolution: 'none' },
    ]);
  });

  it('reads JSONPath keys with quotes and backslashes in them, passed as literals', async () => {
    await hub.services.connectors.ext.ensureTable(A, 'ext.odd', []);
    await rows(A, 'odd', [['r1', { "it's": { 'say "hi"': 'v1' }, 'back\\slash': 'k1' }]]);
    await apply(A, {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'odd' },
      spec: {
        scope: 'odd',
        key: 'k',
        columns: [{ name: 'k', type: 'text' }, { name: 'v', type: 'text' }],
        sources: [{ table: 'ext.odd', key: "$['back\\\\slash']", columns: { v: `$['it\\'s']["say \\"hi\\""]` } }],
      },
    });
    expect((await fused(A, 'odd')).rows).toEqual([{ _entity_id: 'k1', k: 'k1', v: 'v1', _conflicts: {}, _resolution: 'none' }]);
  });
});

describe('a definition the database no longer serves', () => {
  it('throws EntityDefinitionError naming a source table that does not exist (yet)', async () => {
    const applied = await apply(A, { ...partner(), metadata: { name: 'future' }, spec: { ...partner().spec, sources: [...partner().spec.sources, { table: 'ext.not_yet', key: 'external_id', columns: {} }] } });
    expect(applied.warnings).toEqual([{ field: 'spec.sources[2].table', message: expect.stringContaining('ext.not_yet does not exist yet') }]);
    const entity = (await hub.services.db.withTenant(A, (tx) => loadEntity(tx, 'future')))!;
    await expect(hub.services.db.withTenant(A, (tx) => entityRelation(tx, entity))).rejects.toEqual(new EntityDefinitionError('source table ext.not_yet of entity future does not exist'));
  });

  it('throws it for a dropped table and for a dropped column, naming the entity and the column', async () => {
    const ext = hub.services.connectors.ext;
    await ext.ensureTable(A, 'ext.gone', [promote('mail', 'text')]);
    await apply(A, {
      apiVersion: 'apps.svc.io/v1',
      kind: 'Entity',
      metadata: { name: 'fragile' },
      spec: { scope: 'crm', key: 'id', columns: [{ name: 'id', type: 'text' }, { name: 'email', type: 'text' }], sources: [{ table: 'ext.gone', key: 'external_id', columns: { email: 'mail' } }] },
    });
    const entity = (await hub.services.db.withTenant(A, (tx) => loadEntity(tx, 'FRAGILE')))! satisfies EntityDef;
    await expect(hub.services.db.withTenant(A, (tx) => entityRelation(tx, entity))).resolves.toContain('"ext_t2"."gone"');
    await owner.query('alter table ext_t2.gone drop column mail');
    await expect(hub.services.db.withTenant(A, (tx) => entityRelation(tx, entity))).rejects.toThrow(new EntityDefinitionError('column mail of ext.gone (entity fragile, column email) does not exist'));
    await owner.query('drop table ext_t2.gone');
    await expect(hub.services.db.withTenant(A, (tx) => entityRelation(tx, entity))).rejects.toThrow(new EntityDefinitionError('source table ext.gone of entity fragile does not exist'));
  });
});

describe('tenants', () => {
  it('reads only the caller\'s tables: their entity of the same name fuses their rows', async () => {
    expect(await hub.services.db.withTenant(B, (tx) => loadEntity(tx, 'partner'))).toBeUndefined();
    await apply(B, partner({ sources: [partner().spec.sources[0]] }));
    const theirs = (await fused(B, 'partner')).rows;
    expect(theirs.map((r) => [r._entity_id, r.email, r.country])).toEqual([['1', 'globex@x', 'XX'], ['99', 'only-globex@x', null]]);
    const mine = byId((await fused(A, 'partner')).rows);
    expect(mine['99']).toBeUndefined();
    expect(mine['1']!.email).toBe('a@x');
  });

  it('runs the relation of my entity under my tenant even if its SQL were sent as theirs: their schema is not mine', async () => {
    const sql = await hub.services.db.withTenant(A, async (tx) => entityRelation(tx, (await loadEntity(tx, 'partner'))!));
    // Row-level security holds my rows from their session (and the check constraint pins the schema to me).
    const seen = await hub.services.db.withTenant(B, (tx) => tx.query(`select * from (${sql}) e`));
    expect(seen.rows).toEqual([]);
  });
});

describe('the relation analytic chat reads (typedEntityRelation)', () => {
  // 5 sources × 30 columns: with the conflict comparisons (every pair of sources on every column)
  // its SQL was 80 KB (17 KB without), and analytic chat holds a query to 100,000 characters of entity SQL, each
  // naming counting: such an entity could not be named twice (a self join).
  const SOURCES = 5;
  const COLUMNS = Array.from({ length: 29 }, (_, j) => `c${j + 1}`);
  const wide = {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Entity',
    metadata: { name: 'wide' },
    spec: {
      scope: 'wide',
      key: 'id',
      columns: [{ name: 'id', type: 'text' }, ...COLUMNS.map((name) => ({ name, type: 'text' }))],
      sources: Array.from({ length: SOURCES }, (_, i) => ({ table: `ext.wide${i}`, key: '$.id', columns: Object.fromEntries(COLUMNS.map((c) => [c, `$.${c}`])) })),
    },
  };

  beforeAll(async () => {
    for (let i = 0; i < SOURCES; i++) {
      await hub.services.connectors.ext.ensureTable(A, `ext.wide${i}`, []);
      // Keys 1..3 in every source, key 4 only in the last; source i gives c1 only for key 1 (a conflict), c2 agreed, c3 from source 2 on.
      const keys = i === SOURCES - 1 ? ['1', '2', '3', '4'] : ['1', '2', '3'];
      await rows(A, `wide${i}`, keys.map((k) => [`w${i}-${k}`, { id: k, c1: k === '1' ? `from${i}` : null, c2: `agreed${k}`, ...(i >= 2 ? { c3: `s${i}` } : {}), c29: `${k}-${i}` }]));
    }
    expect((await apply(A, wide)).warnings).toEqual([]);
  });

  it('builds no conflict ledger: the fused relation it reads has _entity_id and the canonical columns only', async () => {
    await hub.services.db.withTenant(A, async (tx) => {
      const entity = (await loadEntity(tx, 'wide'))!;
      const fusedOnly = await entityRelation(tx, entity, { conflicts: false });
      const result = await tx.query(`select * from (${fusedOnly}) e limit 0`);
      expect(result.fields.map((f) => f.name)).toEqual(['_entity_id', 'id', ...COLUMNS]);
      const typed = await typedEntityRelation(tx, entity);
      expect(/_conflicts|_resolution|jsonb_build_object|jsonb_strip_nulls|precedence/.exec(typed)?.[0]).toBeUndefined();
      // The other readers (exports, workflows) still get the ledger.
      expect((await tx.query(`select * from (${await entityRelation(tx, entity)}) e limit 0`)).fields.map((f) => f.name)).toEqual(['_entity_id', 'id', ...COLUMNS, '_conflicts', '_resolution']);
    });
  });

  it('fits twice in one analytic query and answers the same rows as the full relation', async () => {
    await hub.services.db.withTenant(A, async (tx) => {
      const entity = (await loadEntity(tx, 'wide'))!;
      const typed = await typedEntityRelation(tx, entity);
      const full = await entityRelation(tx, entity);
      expect(full.length).toBeGreaterThan(70_000);
      expect(typed.length).toBeLessThan(50_000);
      const card = { scope: 'wide', relations: [{ name: 'entity.wide', entity: 'wide', columns: wide.spec.columns }] };
      const verdict = await guardQuery('select a.id, a.c1, a.c2, a.c3, b.c29 from entity.wide a join entity.wide b on b.id = a.id order by a.id', card, {
        resolveRelation: (name) => tenantTableSql(A, name),
        resolveSubquery: (name) => (name === 'entity.wide' ? typed : undefined),
      });
      expect(verdict).toMatchObject({ ok: true });
      if (!verdict.ok) return;
      const answered = (await tx.query(verdict.sql)).rows;
      const expected = (await tx.query(`select id, c1, c2, c3, c29 from (${full}) e order by id`)).rows;
      expect(answered).toEqual(expected);
      expect(answered).toEqual([
        { id: '1', c1: 'from0', c2: 'agreed1', c3: 's2', c29: '1-0' },
        { id: '2', c1: null, c2: 'agreed2', c3: 's2', c29: '2-0' },
        { id: '3', c1: null, c2: 'agreed3', c3: 's2', c29: '3-0' },
        { id: '4', c1: null, c2: 'agreed4', c3: 's4', c29: '4-4' },
      ]);
      // Every canonical column, as the typed relation gives them, equals the full relation's.
      const all = ['id', ...COLUMNS].map((c) => `"${c}"`).join(', ');
      expect((await tx.query(`select * from (${typed}) t order by id`)).rows).toEqual((await tx.query(`select ${all} from (${full}) e order by id`)).rows);
    });
  });
});

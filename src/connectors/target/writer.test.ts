import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { migratedDatabase, type MigratedDatabase, TEST_ROLES } from '../../../test/harness/database.js';
import type { Tx } from '../../db/database.js';
import { refusedValueCode } from '../../validation/database-refusals.js';
import type { Promote, Target } from '../types.js';
import { ExtSchema } from './ddl.js';
import { type PreparedRow, prepareRow } from './rows.js';
import { isKeyConflict, upsertChanged, upsertChunk } from './writer.js';

/**
 * The writer against a real PostgreSQL: chunks large enough to be staged with COPY keep every byte
 * of awkward text (the COPY escapes), duplicate keys collapse to the last, changed rows are reported
 * with their op, two chunks in one transaction do not see each other's staging, a pooled connection's
 * staging table starts every transaction empty, and a refused value fails the statement with its code;
 * with `expectNew` new rows are inserted as they are and a stored key fails the statement as a key
 * conflict, staged or not, without touching the stored row. A large chunk's COPY text is made and sent a piece at a
 * time (the event loop is not held for the whole of it), a row longer than a piece cut between two characters. A connection keeps one staging table
 * whatever the number of promoted columns of the chunks it stages, grown as wider ones come, its
 * growth undone with a transaction (or savepoint) rolled back.
 */

let m: MigratedDatabase;
let ext: ExtSchema;
const ids = { tenantId: 1, connectorId: '00000000-0000-4000-8000-000000000001', endpointUuid: '00000000-0000-4000-8000-000000000002' };
const target: Target = {
  kind: 'hybrid',
  table: 'ext.writer_rows',
  unique_key: '$.id',
  promote: [
    { name: 'name', path: '$.name', type: 'text' },
    { name: 'n', path: '$.n', type: 'bigint' },
    { name: 'at', path: '$.at', type: 'timestamptz' },
  ],
};
const AWKWARD = ['back\\slash', 'tab\there', 'new\nline', 'cr\rhere', '\\N', '\\.', 'quote " and \' both', 'ünï €', '\\\\t'];

function rows(from: number, count: number, version = 1): PreparedRow[] {
  return Array.from({ length: count }, (_v, i) => {
    const n = from + i;
    const word = AWKWARD[n % AWKWARD.length]!;
    return prepareRow({ id: `k${n}${n % 7 === 0 ? word : ''}`, name: `${word} ${n}`, n: n * version, at: '2024-01-02T03:04:05Z', nested: { word, list: [word, n] } }, target);
  });
}

async function stored(): Promise<Map<string, { data: unknown; name: string | null; n: number | null; at: Date | null }>> {
  const { rows: found } = await m.owner.query('select external_id, data, name, n, at from ext_t1.writer_rows');
  return new Map(found.map((r) => [r.external_id as string, { data: r.data, name: r.name, n: r.n === null ? null : Number(r.n), at: r.at }]));
}

beforeAll(async () => {
  // One connection: every transaction reuses the session (and its staging table).
  m = await migratedDatabase({ 1: 'one' }, 1);
  ext = new ExtSchema(m.ownerUrl, TEST_ROLES);
  await ext.ensureTable(1, target.table, target.promote);
});

afterAll(async () => {
  await ext?.close();
  await m?.close();
});

describe('upsertChunk (staged with COPY)', () => {
  it('stores every row of a large chunk byte for byte, the last of duplicate keys winning', async () => {
    const chunk = rows(0, 300);
    const twin = prepareRow({ id: chunk[5]!.externalId, name: 'the last word', n: 1, at: '2024-01-01T00:00:00Z' }, target);
    const written = await m.db.withTenant(1, (tx) => upsertChunk(tx, target, [...chunk, twin], ids));
    expect(written).toBe(301);
    const table = await stored();
    expect(table.size).toBe(300);
    for (const row of chunk.slice(6)) {
      expect(table.get(row.externalId!)).toEqual({ data: row.data, name: row.promoted.name, n: Number(row.promoted.n), at: new Date('2024-01-02T03:04:05Z') });
    }
    expect(table.get(chunk[5]!.externalId!)!.name).toBe('the last word');
  });

  it('reports new and changed rows, not unchanged ones, and empties its staging between chunks of one transaction', async () => {
    const changed = await m.db.withTenant(1, async (tx) => {
      const first = await upsertChanged(tx, target, [...rows(100, 100), ...rows(300, 100)], ids);
      const second = await upsertChanged(tx, target, rows(400, 80), ids);
      return [first, second];
    });
    expect(changed[0]!.written).toBe(200);
    expect(changed[0]!.changed.filter((c) => c.op === 'update')).toEqual([]); // rows 100..199 are as stored
    expect(changed[0]!.changed.map((c) => c.externalId).sort()).toEqual(rows(300, 100).map((r) => r.externalId).sort());
    expect(changed[0]!.changed.every((c) => c.op === 'insert')).toBe(true);
    expect(changed[1]!.changed.map((c) => c.externalId).sort()).toEqual(rows(400, 80).map((r) => r.externalId).sort());

    const updated = await m.db.withTenant(1, (tx) => upsertChanged(tx, target, [...rows(0, 70, 2), ...rows(70, 30)], ids));
    expect(updated.changed.map((c) => c.op)).toEqual(Array(69).fill('update')); // n = 0 × 2 is unchanged
    expect((await stored()).size).toBe(480);
  });

  it('starts each transaction with an empty staging table, after a commit and after a rollback', async () => {
    await expect(
      m.db.withTenant(1, async (tx) => {
        await upsertChunk(tx, target, rows(1000, 100), ids);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    const changed = await m.db.withTenant(1, (tx) => upsertChanged(tx, target, rows(2000, 70), ids));
    expect(changed.changed).toHaveLength(70);
    const table = await stored();
    expect(table.has(rows(1000, 1)[0]!.externalId!)).toBe(false);
    expect(table.size).toBe(550);
    // Rows staged by a committed transaction are gone too: deleted behind the writer's back, they stay deleted.
    await m.owner.query(`delete from ext_t1.writer_rows where external_id = any($1)`, [rows(2000, 70).map((r) => r.externalId)]);
    await m.db.withTenant(1, (tx) => upsertChunk(tx, target, rows(2100, 70), ids));
    const after = await stored();
    expect(after.has(rows(2000, 1)[0]!.externalId!)).toBe(false);
    expect(after.size).toBe(550);
  });

  it('fails a chunk holding a value its column refuses with the refusal code, the transaction usable after a savepoint', async () => {
    const chunk = rows(3000, 100);
    chunk[42] = { ...chunk[42]!, promoted: { ...chunk[42]!.promoted, n: 'not a number' } };
    const outcome = await m.db.withTenant(1, async (tx) => {
      await tx.query('savepoint w');
      const code = await upsertChunk(tx, target, chunk, ids).then(
        () => undefined,
        (err: unknown) => refusedValueCode(err),
      );
      await tx.query('rollback to savepoint w');
      const rest = await upsertChunk(tx, target, chunk.filter((_r, i) => i !== 42), ids);
      return { code, rest };
    });
    expect(outcome).toEqual({ code: '22P02', rest: 99 });
    expect((await stored()).size).toBe(649);
  });

  it.each([
    ['staged with COPY', 100],
    ['as one JSON array', 10],
  ])('with expectNew (%s): inserts new rows, reports them all as inserted, and fails on a stored key as a key conflict', async (_how, count) => {
    const base = count === 100 ? 5000 : 6000;
    const fresh = rows(base, count);
    const inserted = await m.db.withTenant(1, (tx) => upsertChanged(tx, target, fresh, ids, { expectNew: true }));
    expect(inserted.written).toBe(count);
    expect(inserted.changed).toEqual(fresh.map((r) => ({ externalId: r.externalId, op: 'insert' })));
    const table = await stored();
    for (const row of fresh) expect(table.get(row.externalId!)).toEqual({ data: row.data, name: row.promoted.name, n: Number(row.promoted.n), at: new Date('2024-01-02T03:04:05Z') });

    // One stored key among new ones: the statement fails, nothing of it lands, the stored row is as it was.
    const mixed = [...rows(base + count, count - 1), ...rows(base, 1, 3)];
    const failure = await m.db.withTenant(1, (tx) => upsertChunk(tx, target, mixed, ids, { expectNew: true })).catch((err: unknown) => err);
    expect(isKeyConflict(failure)).toBe(true);
    expect(refusedValueCode(failure)).toBeUndefined();
    const after = await stored();
    expect(after.size).toBe(table.size);
    expect(after.get(fresh[0]!.externalId!)!.n).toBe(Number(fresh[0]!.promoted.n));
    // Without the option the same chunk merges.
    expect(await m.db.withTenant(1, (tx) => upsertChunk(tx, target, mixed, ids))).toBe(count);
    expect((await stored()).get(fresh[0]!.externalId!)!.n).toBe(base * 3);
  });
});

describe('upsertChunk: a large chunk is made and sent a piece at a time', () => {
  it('holds the event loop a fraction of what making and encoding its COPY text at once takes', async () => {
    // Measured in a process of its own (test/harness/copy-hold-child.ts), in processor time: 1,000 rows of 18 KB of JSON
    // (a CSV row of 1,600 columns is as long) written there, the longest stretch between two turns of its event loop
    // against the chunk's text made and encoded in one go there. Measured here in time, the figure held a collection of
    // this worker's whole heap (the modules of every file it ran: 0.50 at best of five beside other test files, 0.27
    // alone) and whatever the machine's other work took from the process mid-stretch (one try in five above 1 under load).
    // In the child, made and encoded in one go (the code before the pieces) a chunk holds the loop 1.4 to 1.65 times
    // the reference; in pieces 0.1 to 0.45, 0.1 to 0.2 at best of five: the bound sits between the two.
    const BOUND = 0.6;
    const child = spawn(process.execPath, ['--expose-gc', '--single-threaded', '--import', 'tsx', fileURLToPath(new URL('../../../test/harness/copy-hold-child.ts', import.meta.url))], {
      env: { ...process.env, COPY_HOLD_URL: m.ownerUrl, COPY_HOLD: JSON.stringify({ table: target.table, promote: target.promote, ids, roles: TEST_ROLES, bound: BOUND, tries: 5 }) },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 50_000, // killed within the case's time
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (err += d));
    const [code] = (await once(child, 'close')) as [number | null];
    const line = out.split('\n').find((l) => l.startsWith('COPY_HOLD '));
    expect({ code, err: line ? '' : err }).toEqual({ code: 0, err: '' });
    const { best, runs } = JSON.parse(line!.slice('COPY_HOLD '.length)) as { best: number; runs: Array<{ written: number }> };
    expect(runs.map((r) => r.written)).toEqual(runs.map(() => 1000));
    expect(best).toBeLessThan(BOUND);
    const { rows: found } = await m.owner.query(`select count(*)::int as n, bool_and(data = $1::jsonb) as same from ext_t1.writer_rows where external_id like 'wide%'`, [
      JSON.stringify(Object.fromEntries(Array.from({ length: 1600 }, (_, i) => [`c${i}`, 'x']))),
    ]);
    expect(found).toEqual([{ n: 1000, same: true }]);
  }, 60_000);

  it('stages one row longer than a piece, cut between characters: its text stored as it was', async () => {
    // Over 1 MiB of JSON each (staged, not sent as one JSON array), cut into pieces of 65,536 characters: emoji
    // (two UTF-16 units each) at both alignments, so that a piece would end between the two halves of one.
    const long = [prepareRow({ id: 'long-even', name: '😀'.repeat(600_000) }, target), prepareRow({ id: 'long-odd', name: `é${'😀'.repeat(600_000)}` }, target)];
    for (const row of long) expect(await m.db.withTenant(1, (tx) => upsertChunk(tx, target, [row], ids))).toBe(1);
    const table = await stored();
    for (const row of long) expect(table.get(row.externalId!)).toEqual({ data: row.data, name: row.promoted.name, n: null, at: null });
  });
});

describe('one staging table per connection', () => {
  // A database of its own, one connection: the first staging of the connection is this suite's.
  let one: MigratedDatabase;
  let oneExt: ExtSchema;
  const promote = (name: string, type: Promote['type']): Promote => ({ name, path: `$.${name}`, type });
  const narrow: Target = { kind: 'hybrid', table: 'ext.stage_narrow', unique_key: '$.id', promote: [promote('score', 'numeric')] };
  const middle: Target = { kind: 'hybrid', table: 'ext.stage_middle', unique_key: '$.id', promote: [promote('flag', 'boolean'), promote('n', 'bigint'), promote('name', 'text')] };
  const wide: Target = {
    kind: 'hybrid',
    table: 'ext.stage_wide',
    unique_key: '$.id',
    promote: [promote('name', 'text'), promote('n', 'bigint'), promote('at', 'timestamptz'), promote('flag', 'boolean'), promote('score', 'numeric')],
  };
  const bare: Target = { kind: 'hybrid', table: 'ext.stage_bare', unique_key: '$.id', promote: [] };
  const source = (n: number, version: number) => ({ id: `s${n}`, name: `name ${n} v${version}`, n: n * version, at: new Date(Date.UTC(2024, 0, 1, 0, 0, n + version)).toISOString(), flag: (n + version) % 2 === 0, score: n * version + 0.5 });
  const chunk = (target: Target, from: number, version = 1) => Array.from({ length: 80 }, (_v, i) => prepareRow(source(from + i, version), target));
  const normal = (type: Promote['type'], value: unknown) =>
    value === null ? null : type === 'bigint' || type === 'numeric' ? Number(value) : type === 'timestamptz' ? new Date(value as string).toISOString() : value;

  /** Every row of the target's table: its data and promoted values as the source gave them. */
  async function expectTable(target: Target, rows: Map<number, number>): Promise<void> {
    const columns = target.promote.map((p) => p.name);
    const { rows: found } = await one.owner.query(`select external_id, data${columns.map((c) => `, ${c}`).join('')} from ext_t1.${target.table.slice(4)} order by external_id`);
    const expected = [...rows].map(([n, version]) => {
      const data = source(n, version);
      return Object.fromEntries([['external_id', data.id], ['data', data], ...target.promote.map((p) => [p.name, normal(p.type, data[p.name as keyof typeof data])])]);
    });
    const seen = found.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, k === 'external_id' || k === 'data' ? v : normal(target.promote.find((p) => p.name === k)!.type, v instanceof Date ? v.toISOString() : v)])));
    expect(seen).toEqual(expected.sort((a, b) => (a.external_id < b.external_id ? -1 : 1)));
  }

  const written = new Map<Target, Map<number, number>>([narrow, middle, wide, bare].map((t) => [t, new Map()]));
  const record = (target: Target, from: number, version = 1) => {
    for (let i = 0; i < 80; i++) written.get(target)!.set(from + i, version);
  };
  const write = async (tx: Tx, target: Target, from: number, version = 1) => {
    expect(await upsertChunk(tx, target, chunk(target, from, version), ids)).toBe(80);
  };

  beforeAll(async () => {
    one = await migratedDatabase({ 1: 'one' }, 1);
    oneExt = new ExtSchema(one.ownerUrl, TEST_ROLES);
    for (const target of [narrow, middle, wide, bare]) await oneExt.ensureTable(1, target.table, target.promote);
  });

  afterAll(async () => {
    await oneExt?.close();
    await one?.close();
  });

  it('stages chunks of 1, 3, 5 and 0 promoted columns in one table, grown as needed, its growth undone by a rollback', async () => {
    const session = async () =>
      one.db.withTenant(1, async (tx) => {
        const { rows: found } = await tx.query<{ pid: number; relname: string; columns: number }>(
          `select pg_backend_pid() as pid, c.relname, (select count(*)::int from pg_attribute a where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped) as columns
             from pg_class c where c.relnamespace = pg_my_temp_schema() and starts_with(c.relname, 'svc_ingest_stage') order by c.relname`,
        );
        return found;
      });
    // A staging table of the former kind, one per number of promoted columns, on the connection.
    const pid = await one.db.withTenant(1, async (tx) => {
      await tx.query('create temp table svc_ingest_stage_2 (external_id text, row_hash text, data jsonb, p0 text, p1 text) on commit delete rows');
      return (await tx.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    });

    await one.db.withTenant(1, (tx) => write(tx, narrow, 0));
    record(narrow, 0);
    // Grown for 3 columns, then rolled back: the table is back to 1 column, and the next chunk of 3 grows it again.
    await expect(
      one.db.withTenant(1, async (tx) => {
        await write(tx, middle, 0);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(await session()).toEqual([{ pid, relname: 'svc_ingest_stage', columns: 4 }]);
    await one.db.withTenant(1, (tx) => write(tx, middle, 100));
    record(middle, 100);
    // Grown for 5 columns under a savepoint rolled back to, then grown again in the same transaction.
    await one.db.withTenant(1, async (tx) => {
      await write(tx, narrow, 100);
      await tx.query('savepoint s');
      await write(tx, wide, 0);
      await tx.query('rollback to savepoint s');
      await write(tx, wide, 100);
    });
    record(narrow, 100);
    record(wide, 100);
    // Narrower chunks after a wider one, in one transaction (each sees only its own rows), and in the next.
    await one.db.withTenant(1, async (tx) => {
      await write(tx, wide, 200, 2);
      await write(tx, narrow, 0, 2);
      await write(tx, bare, 0);
      await write(tx, middle, 100, 3);
    });
    record(wide, 200, 2);
    record(narrow, 0, 2);
    record(bare, 0);
    record(middle, 100, 3);
    await one.db.withTenant(1, (tx) => write(tx, narrow, 200));
    record(narrow, 200);

    expect(await session()).toEqual([{ pid, relname: 'svc_ingest_stage', columns: 8 }]);
    for (const [target, rows] of written) await expectTable(target, rows);
  });
});

describe('ExtSchema grants', () => {
  it('lets the analytic role (src/retrieval/analytic/run.ts) read the table it makes, and nothing more', async () => {
    const { rows: found } = await m.owner.query(
      `select has_schema_privilege($1, 'ext_t1', 'usage') as usage, has_table_privilege($1, 'ext_t1.writer_rows', 'select') as select,
              has_table_privilege($1, 'ext_t1.writer_rows', 'insert') as insert, has_table_privilege($1, 'ext_t1.writer_rows', 'delete') as delete`,
      [TEST_ROLES.analytic],
    );
    expect(found).toEqual([{ usage: true, select: true, insert: false, delete: false }]);
  });
});

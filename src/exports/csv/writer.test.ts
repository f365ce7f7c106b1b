import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Database, type Tx } from '../../db/database.js';
import { createTestDatabase } from '../../../test/harness/database.js';
import { type CsvSnapshotSpec, checkDelimiter, csvSnapshot } from './writer.js';

let db: Database;

beforeAll(async () => {
  const url = await createTestDatabase('csv');
  db = new Database({ appUrl: url, workerUrl: url, poolSize: 2 });
  await db.app.query(`
    create table quoting (id text, v text, w text);
    insert into quoting values ('1', 'say "hi"', 'x,y'), ('2', E'a\\nb', E'c\\r\\nd'), ('3', E'e\\rf', ''), ('4', null, '"');
    create table pair (a text, b text);
    create table unicode (k text, v text collate "unicode");
    insert into unicode values ('1', 'é'), ('2', '😀'), ('3', 'Straße 日本'), ('4', E'\\u00a0\\u2028');
    -- A linguistic collation (a < B < é < Z), so that only the writer's COLLATE "C" gives byte order.
    create table sorting (k text collate "unicode", a text collate "unicode", b text collate "unicode");
    insert into sorting values
      ('B', '2', 'x'), ('a', '1', 'y'), ('é', '0', 'z'), (null, '0', 'w'), ('a', '0', 'q'), ('a', '0', null),
      ('a', null, 'a'), ('', '9', '9'), ('Z', '5', '5'), ('aa', '3', '3');
    create table empty (a text, b text);
    create table typed (ts timestamptz, d date, i interval, f float8, b bytea);
  `);
});

afterAll(() => db.close());

/** The two ways to the bytes: COPY (a Tx with copyTo), and the cursor (the same Tx without it). */
const PATHS: Array<[string, (tx: Tx) => Tx]> = [
  ['COPY', (tx) => tx],
  ['cursor', (tx) => ({ tenantId: tx.tenantId, query: tx.query })],
];

async function collect(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** The file of `spec` in one transaction (after `before`, statements run in it first). */
async function file(through: (tx: Tx) => Tx, spec: CsvSnapshotSpec, before?: string): Promise<{ bytes: Buffer; rows: number }> {
  return db.withoutTenant(async (tx) => {
    if (before) await tx.query(before);
    const stream = csvSnapshot(through(tx), spec);
    const bytes = await collect(stream);
    return { bytes, rows: stream.rows };
  });
}

const utf8 = (s: string) => Buffer.from(s, 'utf8');
const pairSpec = (delimiter: string, header = true): CsvSnapshotSpec => ({ relation: 'select a, b from pair', columns: ['a', 'b'], order: ['a'], delimiter, header });

describe.each(PATHS)('the bytes of an export through %s', (_name, through) => {
  it('quotes every value and every header name, doubles inner quotes, keeps CR, LF and CRLF inside values, ends every record with CRLF', async () => {
    const { bytes, rows } = await file(through, { relation: 'select * from quoting', columns: ['id', 'v', 'w'], order: ['id'], delimiter: ',', header: true });
    expect(bytes.toString('utf8')).toBe('"id","v","w"\r\n"1","say ""hi""","x,y"\r\n"2","a\nb","c\r\nd"\r\n"3","e\rf",""\r\n"4",,""""\r\n');
    expect(rows).toBe(4);
  });

  it('writes NULL as an empty unquoted field and an empty string as ""; a row of one NULL is an empty record', async () => {
    const { bytes } = await file(through, { relation: `select * from (values (null, ''), ('', null), (null, null)) as v(a, b)`, columns: ['a', 'b'], order: [], delimiter: ',', header: false });
    expect(bytes.toString('utf8')).toBe('"",\r\n,""\r\n,\r\n');
    const single = await file(through, { relation: 'select null::text as a', columns: ['a'], order: ['a'], delimiter: ',', header: false });
    expect(single.bytes.toString('utf8')).toBe('\r\n');
    expect(single.rows).toBe(1);
  });

  it('omits the header when header is false', async () => {
    const { bytes } = await file(through, { relation: 'select * from quoting', columns: ['w', 'id'], order: ['id'], delimiter: ',', header: false });
    expect(bytes.toString('utf8')).toBe('"x,y","1"\r\n"c\r\nd","2"\r\n"","3"\r\n"""","4"\r\n');
  });

  it('quotes header names with quotes, delimiters and line breaks in them as values are quoted', async () => {
    const { bytes } = await file(through, {
      relation: `select 'v' as "say ""hi""", null::text as "a;b", '' as "new\nline"`,
      columns: ['say "hi"', 'a;b', 'new\nline'],
      order: [],
      delimiter: ';',
      header: true,
    });
    expect(bytes.toString('utf8')).toBe('"say ""hi""";"a;b";"new\nline"\r\n"v";;""\r\n');
  });

  it('writes UTF-8 as is, without a byte-order mark, 4-byte characters included', async () => {
    const { bytes } = await file(through, { relation: 'select * from unicode', columns: ['v'], order: [], delimiter: ',', header: false });
    // Sorted by their bytes: S (53) < U+00A0 (c2 a0) < é (c3 a9) < 😀 (f0 9f 98 80).
    expect(bytes.equals(utf8('"Straße 日本"\r\n"\u00a0\u2028"\r\n"é"\r\n"😀"\r\n'))).toBe(true);
    expect(bytes.subarray(0, 3).equals(Buffer.from([0xef, 0xbb, 0xbf]))).toBe(false);
    expect(bytes.includes(Buffer.from([0xf0, 0x9f, 0x98, 0x80]))).toBe(true);
  });

  it('with no rows writes the header alone, or nothing at all without a header', async () => {
    const spec: CsvSnapshotSpec = { relation: 'select * from empty', columns: ['a', 'b'], order: ['b'], delimiter: ',', header: true };
    expect((await file(through, spec)).bytes.toString('utf8')).toBe('"a","b"\r\n');
    const none = await file(through, { ...spec, header: false });
    expect(none.bytes.length).toBe(0);
    expect(none.rows).toBe(0);
  });

  it('sorts by the order columns, then the remaining columns in their declared order, byte-wise with NULLs last', async () => {
    const { bytes } = await file(through, { relation: 'select * from sorting', columns: ['a', 'k', 'b'], order: ['k'], delimiter: ',', header: false });
    // 'B' (42) < 'Z' (5a) < 'a' (61) < 'aa' < 'é' (c3 a9); ties on k by a, then b; NULLs after every value.
    expect(bytes.toString('utf8').split('\r\n')).toEqual([
      '"9","","9"',
      '"2","B","x"',
      '"5","Z","5"',
      '"0","a","q"',
      '"0","a",',
      '"1","a","y"',
      ',"a","a"',
      '"3","aa","3"',
      '"0","é","z"',
      '"0",,"w"',
      '',
    ]);
  });

  it('with no order columns sorts by every column in declared order', async () => {
    const { bytes } = await file(through, { relation: 'select * from sorting', columns: ['b', 'a'], order: [], delimiter: '|', header: false });
    expect(bytes.toString('utf8')).toBe('"3"|"3"\r\n"5"|"5"\r\n"9"|"9"\r\n"a"|\r\n"q"|"0"\r\n"w"|"0"\r\n"x"|"2"\r\n"y"|"1"\r\n"z"|"0"\r\n|"0"\r\n');
  });

  it.each([',', ';', '\t', '|', '§', '😀', '\\', ' ', 'x', "'", '\u0001'])('uses %j as the delimiter, quoting values that contain it', async (d) => {
    await db.withoutTenant(async (tx) => {
      await tx.query('delete from pair');
      await tx.query('insert into pair values ($1, null), ($2, $3)', [`p${d}q`, '', `${d}${d}`]);
      const bytes = await collect(csvSnapshot(through(tx), pairSpec(d)));
      expect(bytes.equals(utf8(`"a"${d}"b"\r\n""${d}"${d}${d}"\r\n"p${d}q"${d}\r\n`))).toBe(true);
      await tx.query('delete from pair');
    });
  });

  it('writes typed values cast to text in UTC and ISO whatever the session says', async () => {
    const relation = 'select ts::text as ts, d::text as d, i::text as i, f::text as f, b::text as b from typed';
    const spec: CsvSnapshotSpec = { relation, columns: ['ts', 'd', 'i', 'f', 'b'], order: ['ts'], delimiter: ',', header: false };
    const before =
      "set local TimeZone = 'Asia/Tokyo'; set local DateStyle = 'SQL, DMY'; set local IntervalStyle = 'sql_standard'; set local extra_float_digits = 0; set local bytea_output = 'escape'";
    const bytes = await db.withoutTenant(async (tx) => {
      await tx.query(before);
      await tx.query("insert into typed values ('2024-01-01 09:30:00+09', '2024-03-05', '1 day 2 hours', 0.1::float8 + 0.2, '\\x01ff')");
      // The session's own rendering, to show the settings matter.
      const { rows } = await tx.query(relation);
      expect(rows).toEqual([{ ts: '01/01/2024 09:30:00 JST', d: '05/03/2024', i: '1 2:00:00', f: '0.3', b: '\\001\\377' }]);
      const out = await collect(csvSnapshot(through(tx), spec));
      await tx.query('delete from typed');
      return out;
    });
    expect(bytes.toString('utf8')).toBe('"2024-01-01 00:30:00+00","2024-03-05","1 day 02:00:00","0.30000000000000004","\\x01ff"\r\n');
  });

  it('fails the stream, and the transaction with it, when the relation fails', async () => {
    const failed = file(through, { relation: 'select (1 / (g - 3))::text as a from generate_series(1, 5) g', columns: ['a'], order: ['a'], delimiter: ',', header: true });
    await expect(failed).rejects.toThrow('division by zero');
    expect((await file(through, pairSpec(','))).bytes.toString('utf8')).toBe('"a","b"\r\n');
  });
});

describe('which path', () => {
  /** A Tx that records the first words of what it is asked to run (cursor names as svc_csv_N). */
  function recording(tx: Tx, log: string[], copy: boolean): Tx {
    const head = (sql: string) => /^\w+(?: \w+)?/.exec(sql.replace(/svc_csv_\d+/, 'svc_csv_N'))![0];
    return {
      tenantId: tx.tenantId,
      query: (text, values) => {
        log.push(head(text));
        return tx.query(text, values);
      },
      ...(copy
        ? {
            copyTo: (sql: string, options?: { crlf?: boolean }) => {
              log.push(head(sql));
              return tx.copyTo!(sql, options);
            },
          }
        : {}),
    };
  }

  it('one-byte delimiters go through one COPY, others and Txs without copyTo through a cursor fetched in batches', async () => {
    const relation = 'select g::text as a, null::text as b from generate_series(1, 12001) g';
    const run = (delimiter: string, copy: boolean) =>
      db.withoutTenant(async (tx) => {
        const log: string[] = [];
        const stream = csvSnapshot(recording(tx, log, copy), { relation, columns: ['a', 'b'], order: ['a'], delimiter, header: true });
        const bytes = await collect(stream);
        return { log, bytes, rows: stream.rows };
      });
    const copied = await run(';', true);
    expect(copied.log).toEqual(['select set_config', 'copy']);
    expect(copied.rows).toBe(12001);
    const cursor = await run('§', true);
    expect(cursor.log).toEqual(['select set_config', 'declare svc_csv_N', 'fetch forward', 'fetch forward', 'fetch forward', 'close svc_csv_N']);
    expect(cursor.rows).toBe(12001);
    const noCopy = await run(';', false);
    expect(noCopy.log[1]).toBe('declare svc_csv_N');
    expect(noCopy.bytes.equals(copied.bytes)).toBe(true);
    expect(cursor.bytes.toString('utf8')).toBe(copied.bytes.toString('utf8').replaceAll(';', '§'));
  });
});

describe("PostgreSQL's CSV, as the COPY path relies on it", () => {
  async function raw(sql: string): Promise<string> {
    return db.withoutTenant(async (tx) => (await collect(tx.copyTo!(sql))).toString('utf8'));
  }
  const values = `select * from (values ('a"b', null, ''), (E'x\\ny', E'r\\rz', E'\\\\.'), (null, null, null)) as v("we""ird", "sp ace", c)`;

  it('FORCE_QUOTE * quotes every non-null value, doubles quotes, leaves NULL empty and unquoted, ends records with a bare LF', async () => {
    expect(await raw(`copy (${values}) to stdout (format csv, force_quote *, null '')`)).toBe('"a""b",,""\n"x\ny","r\rz","\\."\n,,\n');
  });

  it('does not force-quote the names of its own HEADER line (why the writer writes the header)', async () => {
    expect(await raw(`copy (${values} limit 0) to stdout (format csv, force_quote *, null '', header)`)).toBe('"we""ird",sp ace,c\n');
  });

  it('refuses a delimiter of more than one byte (why other delimiters go through a cursor)', async () => {
    await expect(raw(`copy (${values}) to stdout (format csv, force_quote *, delimiter '§')`)).rejects.toThrow('COPY delimiter must be a single one-byte character');
  });
});

describe('an abandoned export', () => {
  const big: CsvSnapshotSpec = { relation: "select g::text || repeat('x', 100) as a from generate_series(1, 300000) g", columns: ['a'], order: [], delimiter: ',', header: true };

  it('through COPY cuts the connection: the transaction fails, the process lives, and the pool serves the next', async () => {
    const uncaught: Error[] = [];
    const onUncaught = (err: Error) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      const abandoned = db.withoutTenant(async (tx) => {
        const stream = csvSnapshot(tx, big);
        let chunks = 0;
        // The header, then the first chunk of 30 MB from COPY.
        for await (const _chunk of stream) if (++chunks === 2) break;
        await tx.query('select 1');
      });
      await expect(abandoned).rejects.toThrow(/Connection terminated|not queryable/);
      const { rows } = await db.withoutTenant((tx) => tx.query<{ one: number }>('select 1 as one'));
      expect(rows[0]!.one).toBe(1);
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });

  it('through a cursor leaves the transaction usable', async () => {
    const one = await db.withoutTenant(async (tx) => {
      const stream = csvSnapshot(tx, { ...big, delimiter: '§' });
      let chunks = 0;
      for await (const _chunk of stream) if (++chunks === 2) break;
      return (await tx.query<{ one: number }>('select 1 as one')).rows[0]!.one;
    });
    expect(one).toBe(1);
  });
});

describe('what the writer refuses before it runs anything', () => {
  it.each(['', '"', '\r', '\n', '\0', ',,', '\ud800', 'ab', '\ufeff'])('the delimiter %j', (d) => {
    expect(() => checkDelimiter(d)).toThrow('the delimiter must be one character');
  });

  it.each([',', '§', '😀', '\t', '\u2028'])('accepts the delimiter %j', (d) => {
    expect(() => checkDelimiter(d)).not.toThrow();
  });

  it('an order column that is not a column, duplicate columns, no columns', () => {
    const tx: Tx = { tenantId: undefined, query: () => Promise.reject(new Error('not to be called')) };
    const base: CsvSnapshotSpec = { relation: 'select 1', columns: ['a', 'b'], order: ['a'], delimiter: ',', header: true };
    expect(() => csvSnapshot(tx, { ...base, order: ['c'] })).toThrow('order column "c" is not one of');
    expect(() => csvSnapshot(tx, { ...base, columns: ['a', 'a'] })).toThrow('unique');
    expect(() => csvSnapshot(tx, { ...base, columns: [], order: [] })).toThrow('at least one column');
  });
});

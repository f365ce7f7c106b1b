import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import pg from 'pg';
import { to as copyToStdout } from 'pg-copy-streams';
import { createTestDatabase } from '../../test/harness/database.js';
import { CopyOutParser } from './copy-records.js';
import { Database } from './database.js';

/** One backend message: its code, its length (itself included) and its payload. */
const message = (code: string, payload: Buffer = Buffer.alloc(0)) => {
  const head = Buffer.alloc(5);
  head.write(code, 0, 'latin1');
  head.writeUInt32BE(payload.length + 4, 1);
  return Buffer.concat([head, payload]);
};
const copyOutResponse = message('H', Buffer.from([0, 0, 1, 0, 0]));
const notice = message('N', Buffer.from('SNOTICE\0Mhello\0\0', 'latin1'));
const parameterStatus = message('S', Buffer.from('application_name\0x\0', 'latin1'));
const copyDone = message('c');
/** What follows CopyDone: CommandComplete and ReadyForQuery, for the connection's own parser. */
const trailer = Buffer.concat([message('C', Buffer.from('COPY 2\0', 'latin1')), message('Z', Buffer.from('T', 'latin1'))]);
const errorResponse = message('E', Buffer.from('SERROR\0C22012\0Mdivision by zero\0\0', 'latin1'));

/** Feeds `bytes` cut at `cuts` and gathers what the parser gave until its end. */
function parse(bytes: Buffer, cuts: number[], crlf: boolean) {
  const parser = new CopyOutParser(crlf);
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((x, y) => x - y);
  const out: Buffer[] = [];
  let end: string | undefined;
  let rest: Buffer[] = [];
  let from = 0;
  for (const cut of [...at, bytes.length]) {
    const chunk = bytes.subarray(from, cut);
    from = cut;
    if (end) {
      rest.push(chunk);
      continue;
    }
    const parsed = parser.feed(chunk);
    if (parsed.data) out.push(parsed.data);
    if (parsed.end) {
      end = parsed.end;
      rest = [parsed.rest!];
    }
  }
  return { data: Buffer.concat(out), end, rest: Buffer.concat(rest), records: parser.records };
}

describe('CopyOutParser', () => {
  // Records as PostgreSQL's CSV makes them: quoted values may hold newlines and carriage returns; every record ends with \n.
  const record = fc
    .array(fc.option(fc.string({ unit: fc.constantFrom('"', '\n', '\r', ',', 'a', 'é', '😀') }), { nil: null }), { minLength: 1, maxLength: 3 })
    .map((values) => `${values.map((v) => (v === null ? '' : `"${v.replaceAll('"', '""')}"`)).join(',')}\n`);
  /** Records, with the messages the server may send in between (a notice, a parameter status) at random places. */
  const stream = fc.array(fc.oneof({ weight: 5, arbitrary: record }, { weight: 1, arbitrary: fc.constantFrom<'notice' | 'status'>('notice', 'status') }), { maxLength: 12 });
  const wire = (items: Array<string>) =>
    Buffer.concat([
      copyOutResponse,
      ...items.map((item) => (item === 'notice' ? notice : item === 'status' ? parameterStatus : message('d', Buffer.from(item, 'utf8')))),
      copyDone,
      trailer,
    ]);

  it('gives every record, CRLF-ended, however the bytes are cut, and leaves what follows CopyDone unread', () => {
    fc.assert(
      fc.property(stream, fc.array(fc.nat(), { maxLength: 10 }), (items, cuts) => {
        const records = items.filter((i) => i !== 'notice' && i !== 'status');
        const got = parse(wire(items), cuts, true);
        expect(got.data.toString('utf8')).toBe(records.map((r) => `${r.slice(0, -1)}\r\n`).join(''));
        expect(got.records).toBe(records.length);
        expect(got.end).toBe('done');
        expect(got.rest.equals(trailer)).toBe(true);
      }),
      { numRuns: 400 },
    );
  });

  it('without crlf, the records as sent', () => {
    fc.assert(
      fc.property(stream, fc.array(fc.nat(), { maxLength: 10 }), (items, cuts) => {
        const records = items.filter((i) => i !== 'notice' && i !== 'status');
        const got = parse(wire(items), cuts, false);
        expect(got.data.toString('utf8')).toBe(records.join(''));
        expect(got.records).toBe(records.length);
      }),
      { numRuns: 200 },
    );
  });

  it('stops at an ErrorResponse and leaves it, whole, to the connection', () => {
    fc.assert(
      fc.property(fc.array(fc.nat(), { maxLength: 6 }), (cuts) => {
        const bytes = Buffer.concat([copyOutResponse, message('d', Buffer.from('"1"\n')), errorResponse, message('Z', Buffer.from('E', 'latin1'))]);
        const got = parse(bytes, cuts, true);
        expect(got.end).toBe('error');
        expect(got.rest.equals(bytes.subarray(bytes.indexOf(errorResponse)))).toBe(true);
        // The record before it was whole; whether its bytes were handed on depends on the cut, never a part of it.
        expect(['', '"1"\r\n']).toContain(got.data.toString('utf8'));
      }),
      { numRuns: 100 },
    );
  });

  it('refuses a record that does not end with a newline', () => {
    const parser = new CopyOutParser(true);
    expect(() => parser.feed(Buffer.concat([copyOutResponse, message('d', Buffer.from('"1"'))]))).toThrow('did not end with a newline');
  });

  it('makes one buffer per chunk, whatever the number of records in it', () => {
    const parser = new CopyOutParser(true);
    const many = Buffer.concat([copyOutResponse, ...Array.from({ length: 1000 }, (_v, i) => message('d', Buffer.from(`"${i}"\n`)))]);
    const parsed = parser.feed(many);
    expect(parser.records).toBe(1000);
    expect(parsed.data!.toString('latin1').split('\r\n')).toHaveLength(1001);
    // One allocation, sliced: the data's buffer is the chunk-sized one.
    expect(parsed.data!.buffer.byteLength).toBeGreaterThanOrEqual(many.length);
  });
});

describe('COPY … TO STDOUT through the hub\'s transactions', () => {
  let db: Database;
  let owner: pg.Client;

  beforeAll(async () => {
    const url = await createTestDatabase('copyout');
    db = new Database({ appUrl: url, workerUrl: url, poolSize: 1 });
    owner = new pg.Client({ connectionString: url });
    await owner.connect();
    await owner.query(`create table odd (id int, v text);
      insert into odd values (1, E'a\\nb'), (2, E'c\\r\\nd'), (3, 'say "hi"'), (4, null), (5, repeat('x', 3000000)), (6, 'é😀');`);
  });

  afterAll(async () => {
    await owner.end();
    await db.close();
  });

  /** The bytes of `sql` by pg-copy-streams' own stream, on the owner's connection. */
  async function reference(sql: string): Promise<Buffer> {
    const chunks: Buffer[] = [];
    for await (const chunk of owner.query(copyToStdout(sql))) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  const csv = `copy (select * from odd order by id) to stdout (format csv, force_quote *, null '')`;

  it('gives the bytes COPY sends (a 3 MB value across many reads, newlines inside values), and counts the records', async () => {
    const expected = await reference(csv);
    const got = await db.withoutTenant(async (tx) => {
      const copy = tx.copyTo!(csv);
      const chunks: Buffer[] = [];
      for await (const chunk of copy) chunks.push(chunk as Buffer);
      return { bytes: Buffer.concat(chunks), records: copy.records, rowCount: (copy as unknown as { rowCount: number }).rowCount };
    });
    expect(got.bytes.equals(expected)).toBe(true);
    expect(got.records).toBe(6);
    expect(got.rowCount).toBe(6);
  });

  it('with crlf, ends each record with CRLF and nothing else changes (CR and LF inside values stay)', async () => {
    const expected = (await reference(csv)).toString('utf8');
    const got = await db.withoutTenant(async (tx) => {
      const chunks: Buffer[] = [];
      for await (const chunk of tx.copyTo!(csv, { crlf: true })) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    });
    const records = ['"1","a\nb"\n', '"2","c\r\nd"\n', '"3","say ""hi"""\n', '"4",\n', `"5","${'x'.repeat(3000000)}"\n`, '"6","é😀"\n'];
    expect(expected).toBe(records.join(''));
    expect(got).toBe(records.map((r) => `${r.slice(0, -1)}\r\n`).join(''));
  });

  it('a failure in the middle of the rows fails the stream and the transaction; the pool goes on', async () => {
    const failing = db.withoutTenant(async (tx) => {
      let records = 0;
      const copy = tx.copyTo!(`copy (select 1 / (5000 - g) from generate_series(1, 10000) g) to stdout`, { crlf: true });
      try {
        for await (const _chunk of copy) records = copy.records;
      } finally {
        expect(records).toBeLessThan(5000);
      }
    });
    await expect(failing).rejects.toThrow('division by zero');
    const after = await db.withoutTenant((tx) => tx.query<{ one: number }>('select 1 as one'));
    expect(after.rows[0]!.one).toBe(1);
  });

  it('an empty result: no bytes, no records, and the connection is ready for the next statement', async () => {
    const got = await db.withoutTenant(async (tx) => {
      const copy = tx.copyTo!(`copy (select * from odd where false) to stdout (format csv)`, { crlf: true });
      const chunks: Buffer[] = [];
      for await (const chunk of copy) chunks.push(chunk as Buffer);
      const next = await tx.query<{ n: number }>('select count(*)::int as n from odd');
      return { bytes: Buffer.concat(chunks).length, records: copy.records, n: next.rows[0]!.n };
    });
    expect(got).toEqual({ bytes: 0, records: 0, n: 6 });
  });
});

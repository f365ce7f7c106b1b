import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import pgUtils from 'pg/lib/utils.js';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { type CommitHook, outsideCommitHooks, runWithCommitHook } from './database.js';
import { until } from '../../test/harness/until.js';

/**
 * A transaction's opening statements (`begin`, the tenant setting) travel in one message with its
 * first statement (src/db/opening-query.ts): one round trip fewer per transaction. These tests hold
 * the saving (counted in the server's ReadyForQuery messages) and everything the opening promised
 * before: the first statement runs inside the transaction, under the tenant's row-level security,
 * through either protocol, and a failure leaves nothing behind on the pooled connection.
 */
let t: MigratedDatabase;
/** ReadyForQuery messages received on the application pool's connections: one per round trip. */
let roundTrips = 0;
const counted = new WeakSet<object>();

beforeAll(async () => {
  // One connection: whatever a transaction leaves on it, the next one meets.
  t = await migratedDatabase({ 101: 'acme', 102: 'globex' }, 1);
  await t.owner.query(`insert into core.users (tenant_id, login) values (101, 'ann'), (101, 'bob'), (102, 'carl')`);
  t.db.app.on('acquire', (client: pg.PoolClient) => {
    const connection = (client as unknown as { connection: NodeJS.EventEmitter }).connection;
    if (counted.has(connection)) return;
    counted.add(connection);
    connection.on('readyForQuery', () => {
      roundTrips += 1;
    });
  });
});

afterAll(async () => t.close());

beforeEach(() => {
  roundTrips = 0;
});

const logins = (r: pg.QueryResult<{ login: string }>) => r.rows.map((x) => x.login).sort();

describe("a transaction's opening travels with its first statement", () => {
  it('a one-statement transaction takes two round trips (statement with its opening, commit)', async () => {
    const result = await t.db.withTenant(101, (tx) => tx.query<{ login: string }>('select login from core.users where login <> $1', ['nobody']));
    expect(logins(result)).toEqual(['ann', 'bob']);
    expect(roundTrips).toBe(2);
  });

  it('a statement without parameters (simple protocol) sees the tenant too, and only its own result is answered', async () => {
    const result = await t.db.withTenant(102, (tx) => tx.query<{ login: string }>('select login from core.users'));
    expect(logins(result)).toEqual(['carl']);
    expect(result.command).toBe('SELECT');
    expect(result.rowCount).toBe(1);
    expect(roundTrips).toBe(2);
  });

  it('a statement with parameters (extended protocol) answers its own fields and count', async () => {
    const result = await t.db.withTenant(101, (tx) =>
      tx.query<{ tenant: string; n: number }>(`select current_setting('svc.tenant_id') as tenant, $1::int as n`, [7]),
    );
    expect(result.rows).toEqual([{ tenant: '101', n: 7 }]);
    expect(result.fields.map((f) => f.name)).toEqual(['tenant', 'n']);
  });

  it('a multi-statement text answers its own results only', async () => {
    const result = (await t.db.withTenant(101, (tx) => tx.query('select 1 as a; select 2 as b'))) as unknown as pg.QueryResult[];
    expect(Array.isArray(result)).toBe(true);
    expect(result.map((r) => r.rows[0])).toEqual([{ a: 1 }, { b: 2 }]);
  });

  it('the first statement runs inside the transaction: a later failure undoes it', async () => {
    for (const values of [['dora'], undefined]) {
      await expect(
        t.db.withTenant(101, async (tx) => {
          if (values) await tx.query('insert into core.users (tenant_id, login) values (101, $1)', values);
          else await tx.query(`insert into core.users (tenant_id, login) values (101, 'dora')`);
          await tx.query('select 1/0');
        }),
      ).rejects.toThrow(/division by zero/);
      const { rows } = await t.owner.query(`select count(*)::int as n from core.users where login = 'dora'`);
      expect(rows[0].n).toBe(0);
    }
  });

  it('the first statement writes under the tenant: another tenant’s row is refused by row-level security', async () => {
    await expect(t.db.withTenant(101, (tx) => tx.query('insert into core.users (tenant_id, login) values ($1, $2)', [102, 'mallory']))).rejects.toThrow(
      /row-level security/,
    );
    // The same connection (pool of one) serves the next transaction cleanly, with no tenant left on it.
    const { rows } = await t.db.withoutTenant((tx) => tx.query<{ tenant: string | null }>(`select current_setting('svc.tenant_id', true) as tenant`));
    expect(rows[0]!.tenant ?? '').toBe('');
    const users = await t.db.withoutTenant((tx) => tx.query('select login from core.users'));
    expect(users.rowCount).toBe(0);
  });

  it('a failed first statement fails the transaction and leaves the connection usable', async () => {
    await expect(t.db.withTenant(101, (tx) => tx.query('select no_such_column from core.users where login = $1', ['ann']))).rejects.toThrow(/no_such_column/);
    await expect(t.db.withTenant(101, (tx) => tx.query('select no_such_column from core.users'))).rejects.toThrow(/no_such_column/);
    const result = await t.db.withTenant(101, (tx) => tx.query<{ login: string }>('select login from core.users'));
    expect(logins(result)).toEqual(['ann', 'bob']);
  });

  it('a unit of work that runs no statement sends nothing', async () => {
    await expect(t.db.withTenant(101, async () => 'nothing')).resolves.toBe('nothing');
    expect(roundTrips).toBe(0);
  });

  it('a COPY as the first statement runs after the opening: out under the tenant, in inside the transaction', async () => {
    const out = await t.db.withTenant(102, async (tx) => {
      const chunks: Buffer[] = [];
      for await (const chunk of tx.copyTo!(`copy (select current_setting('svc.tenant_id'), count(*) from core.users) to stdout`)) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString();
    });
    expect(out).toBe('102\t1\n');

    // COPY FROM is refused on tables under row-level security: a session's temporary table (the pool
    // holds one connection) shows that a COPY first is inside the transaction, undone with it.
    await t.db.withoutTenant((tx) => tx.query('create temporary table if not exists copied (login text)'));
    await expect(
      t.db.withTenant(101, async (tx) => {
        await tx.copyFrom!('copy copied (login) from stdin', 'erin\n');
        await tx.query('select 1/0');
      }),
    ).rejects.toThrow(/division by zero/);
    await t.db.withTenant(101, (tx) => tx.copyFrom!('copy copied (login) from stdin', 'frank\n'));
    const { rows } = await t.db.withoutTenant((tx) => tx.query('select login from copied'));
    expect(rows).toEqual([{ login: 'frank' }]);
  });

  it('a COPY FROM takes its opening and the statements given before it in its own message: with the commit, two round trips', async () => {
    await t.db.withoutTenant((tx) => tx.query('create temporary table if not exists staged (login text, tenant text)'));
    roundTrips = 0;
    const copied = await t.db.withTenant(101, (tx) =>
      tx.copyFrom!('copy staged (login) from stdin', 'gail\n', { before: ['truncate staged', `select set_config('svc.staged', 'yes', true)`] }),
    );
    expect(copied).toBe(1);
    expect(roundTrips).toBe(2);
    // Inside an open transaction, the statements before run first as well, in the COPY's message.
    roundTrips = 0;
    const seen = await t.db.withTenant(101, async (tx) => {
      await tx.query('select 1');
      await tx.copyFrom!('copy staged (login) from stdin', 'hugo\n', { before: ['truncate staged'] });
      return (await tx.query<{ login: string }>('select login from staged')).rows;
    });
    expect(seen).toEqual([{ login: 'hugo' }]);
    expect(roundTrips).toBe(4);

    // A statement before that fails fails the COPY, which takes none of its rows; the connection is usable after it.
    let taken = 0;
    function* rows() {
      taken++;
      yield 'ida\n';
    }
    await expect(t.db.withTenant(101, (tx) => tx.copyFrom!('copy staged (login) from stdin', rows(), { before: ['select 1/0'] }))).rejects.toThrow(/division by zero/);
    const { rows: left } = await t.db.withTenant(101, (tx) => tx.query<{ login: string; tenant: string }>(`select login, current_setting('svc.tenant_id') as tenant from staged`));
    expect(left).toEqual([{ login: 'hugo', tenant: '101' }]);
    expect(taken).toBeLessThanOrEqual(1);
  });

  it("a COPY FROM's data leaves right after its statement, without waiting for the server's CopyInResponse", async () => {
    await t.db.withoutTenant((tx) => tx.query('create temporary table if not exists early (n int)'));
    const order: string[] = [];
    const watch = (client: pg.PoolClient) => {
      const connection = (client as unknown as { connection: NodeJS.EventEmitter & { stream: { write: (...args: unknown[]) => boolean } } }).connection;
      const onResponse = () => order.push('CopyInResponse');
      // Before node-postgres's own listener, which hands the response to the query (and so sends what it held).
      connection.prependListener('copyInResponse', onResponse);
      const write = connection.stream.write;
      connection.stream.write = function (this: unknown, ...args: unknown[]) {
        // pg-copy-streams writes each CopyData message's type and length as a buffer of its own.
        if (Buffer.isBuffer(args[0]) && args[0].length === 5 && args[0][0] === 0x64) order.push('CopyData');
        return write.apply(this, args);
      };
      return () => {
        connection.off('copyInResponse', onResponse);
        connection.stream.write = write;
      };
    };
    let unwatch: (() => void) | undefined;
    const onAcquire = (client: pg.PoolClient) => {
      unwatch = watch(client);
    };
    t.db.app.once('acquire', onAcquire);
    try {
      expect(await t.db.withTenant(101, (tx) => tx.copyFrom!('copy early (n) from stdin', '1\n2\n', { before: ['truncate early'] }))).toBe(2);
    } finally {
      unwatch?.();
    }
    expect(order).toEqual(['CopyData', 'CopyInResponse']);
    // Sent early to a statement that failed before its COPY: ignored by the server, the connection usable after it.
    await expect(t.db.withTenant(101, (tx) => tx.copyFrom!('copy early (n) from stdin', '3\n', { before: ['select 1/0'] }))).rejects.toThrow(/division by zero/);
    await expect(t.db.withTenant(101, (tx) => tx.copyFrom!('copy no_such_table (n) from stdin', '3\n'))).rejects.toThrow(/no_such_table/);
    const { rows } = await t.db.withTenant(101, (tx) => tx.query('select n from early order by n'));
    expect(rows).toEqual([{ n: 1 }, { n: 2 }]);
  });

  it('a COPY given in pieces takes them one at a time, and no more once the server refused one', async () => {
    await t.db.withoutTenant((tx) => tx.query('create temporary table if not exists counted (n int)'));
    let taken = 0;
    function* pieces() {
      const ones = '1\n'.repeat(32 * 1024);
      for (let i = 0; i < 1000; i++) {
        taken++;
        yield i === 2 ? 'not a number\n' : ones;
      }
    }
    await expect(t.db.withTenant(101, (tx) => tx.copyFrom!('copy counted (n) from stdin', pieces()))).rejects.toThrow(/invalid input syntax for type integer/);
    // Refused at the third piece: the pieces after the refusal reached (64 MB in all) are never made.
    expect(taken).toBeLessThan(1000);
    // The pool's one connection is usable after it, and nothing of the refused COPY is left.
    taken = 0;
    function* fine() {
      for (let i = 0; i < 3; i++) {
        taken++;
        yield '1\n2\n';
      }
    }
    expect(await t.db.withTenant(101, (tx) => tx.copyFrom!('copy counted (n) from stdin', fine()))).toBe(6);
    expect(taken).toBe(3);
    const { rows } = await t.db.withoutTenant((tx) => tx.query('select count(*)::int as n from counted'));
    expect(rows).toEqual([{ n: 6 }]);
  });

  it('cross-tenant work opens its transaction with its first statement too', async () => {
    const same = await t.db.crossTenant('test', async (tx) => {
      const first = await tx.query<{ at: string }>('select now()::text as at');
      // The database's clock past that now(): a statement outside its transaction would read a later one.
      await until('the clock past the first statement', async () => (await t.owner.query('select clock_timestamp() > $1::timestamptz as later', [first.rows[0]!.at])).rows[0].later, { everyMs: 1 });
      const second = await tx.query<{ same: boolean }>('select now()::text = $1 as same', [first.rows[0]!.at]);
      return second.rows[0]!.same;
    });
    // now() is the transaction's start: the same in both statements only when the first one was in it.
    expect(same).toBe(true);
  });
});

describe('statements sent ahead of another in one message (Tx.queryAfter)', () => {
  it('runs them in order, with their own parameters (arrays among them), named or not, in one round trip with the opening', async () => {
    const answered = await t.db.withTenant(101, (tx) =>
      tx.queryAfter!<{ logins: string[] }>(
        [
          { text: 'insert into core.users (tenant_id, login) select 101, unnest($1::text[])', values: [['hana', 'ivan']] },
          { text: 'update core.users set login = login || $1 where login = any($2::text[])', values: ['!', ['ivan']], prepare: true },
        ],
        'select array_agg(login order by login) as logins from core.users where login like $1',
        ['%a%'],
      ),
    );
    // The second statement saw the first's row; the last saw both; only its result is answered.
    expect(answered.rows).toEqual([{ logins: ['ann', 'hana', 'ivan!'] }]);
    expect(answered.fields.map((f) => f.name)).toEqual(['logins']);
    // The statements with the opening (one round trip), then the commit.
    expect(roundTrips).toBe(2);

    // Inside an open transaction: one round trip too; the named statement is parsed once per connection and bound again.
    roundTrips = 0;
    const again = await t.db.withTenant(101, async (tx) => {
      await tx.query('select 1');
      return tx.queryAfter!<{ n: number }>(
        [{ text: 'update core.users set login = login || $1 where login = any($2::text[])', values: ['!', ['hana']], prepare: true }],
        `select count(*)::int as n from core.users where login like '%!'`,
      );
    });
    expect(again.rows).toEqual([{ n: 2 }]);
    expect(roundTrips).toBe(3);
    await t.owner.query(`delete from core.users where login in ('hana!', 'ivan!')`);
  });

  it('a failure of one fails the call, runs none after it, and the transaction undoes those before', async () => {
    for (const failing of [{ text: 'select 1/$1::int', values: [0] }, { text: 'select 1/$1::int', values: [0], prepare: true }]) {
      await expect(
        t.db.withTenant(101, (tx) =>
          tx.queryAfter!([{ text: `insert into core.users (tenant_id, login) values (101, $1)`, values: ['jack'] }, failing, { text: `insert into core.users (tenant_id, login) values (101, $1)`, values: ['kate'] }], 'select 1'),
        ),
      ).rejects.toThrow(/division by zero/);
      const { rows } = await t.owner.query(`select count(*)::int as n from core.users where login in ('jack', 'kate')`);
      expect(rows[0].n).toBe(0);
    }
    // The connection (the pool's one) is usable after it, its named statement parsed again where its Parse was undone.
    const result = await t.db.withTenant(101, (tx) => tx.queryAfter!<{ n: number }>([{ text: 'select 1/$1::int', values: [1], prepare: true }], 'select 2 as n'));
    expect(result.rows).toEqual([{ n: 2 }]);
  });
});

describe('a COPY and the statements after it in one message (Tx.copyThen)', () => {
  const copy = (data: string, before: string[] = ['truncate staged_logins']) => ({ sql: 'copy staged_logins (login) from stdin', data: [Buffer.from(data)], before });
  const fromStage = { text: 'insert into core.users (tenant_id, login) select $1, login from staged_logins', values: [101], prepare: true };
  const made = `select array_agg(login order by login) as logins from core.users where login like 'cp-%'`;

  beforeAll(async () => {
    await t.db.withoutTenant((tx) => tx.query('create temporary table if not exists staged_logins (login text); create temporary sequence if not exists after_copy'));
  });

  it('runs the COPY, then the statements after it, in one round trip with the opening', async () => {
    const answered = await t.db.withTenant(101, (tx) => tx.copyThen!<{ logins: string[] }>(copy('cp-lea\ncp-max\n'), [fromStage], made));
    expect(answered.rows).toEqual([{ logins: ['cp-lea', 'cp-max'] }]);
    // The COPY and everything with it (one round trip), then the commit.
    expect(roundTrips).toBe(2);
    // Inside an open transaction, its named statement already parsed: one round trip too.
    roundTrips = 0;
    const again = await t.db.withTenant(101, async (tx) => {
      await tx.query('select 1');
      return tx.copyThen!<{ logins: string[] }>(copy('cp-ned\n'), [fromStage], made);
    });
    expect(again.rows).toEqual([{ logins: ['cp-lea', 'cp-max', 'cp-ned'] }]);
    expect(roundTrips).toBe(3);
    await t.owner.query(`delete from core.users where login like 'cp-%'`);
  });

  it('sends the COPY data in the pieces given, each its own CopyData message, cut anywhere (in a line, in a character)', async () => {
    const bytes = Buffer.from('cp-oli\ncp-pia\ncp-zoé\n');
    const cuts = [0, 3, 10, bytes.length - 3, bytes.length - 2, bytes.length];
    const data = cuts.slice(1).map((end, k) => bytes.subarray(cuts[k], end));
    const answered = await t.db.withTenant(101, (tx) => tx.copyThen!<{ logins: string[] }>({ ...copy(''), data }, [fromStage], made));
    expect(answered.rows).toEqual([{ logins: ['cp-oli', 'cp-pia', 'cp-zoé'] }]);
    await t.owner.query(`delete from core.users where login like 'cp-%'`);
  });

  it('a failure before, in or after the COPY fails the call, runs nothing after it and leaves the connection usable', async () => {
    const counted = { text: `select nextval('after_copy')` };
    const failures: Array<[ReturnType<typeof copy>, RegExp]> = [
      [copy('cp-ona\n', ['select 1/0']), /division by zero/],
      [copy('cp-ona\ncp-pat\t\\x\n'), /extra data after last expected column/],
    ];
    for (const [failing, error] of failures) {
      await expect(t.db.withTenant(101, (tx) => tx.copyThen!(failing, [counted, fromStage], made))).rejects.toThrow(error);
    }
    // The statement after the COPY failing: its error (a key conflict keeps its code), the COPY's rows undone.
    await t.owner.query(`create unique index if not exists users_cp_login on core.users (login) where login like 'cp-%'`);
    await t.owner.query(`insert into core.users (tenant_id, login) values (101, 'cp-ona')`);
    await expect(t.db.withTenant(101, (tx) => tx.copyThen!(copy('cp-pat\ncp-ona\n'), [counted], fromStage.text, fromStage.values))).rejects.toMatchObject({ code: '23505' });
    const { rows } = await t.owner.query(`select count(*)::int as n from core.users where login like 'cp-%'`);
    expect(rows[0].n).toBe(1);
    // Nothing after a failing COPY (or a statement before it) ran: the sequence was taken once, by the call whose
    // last statement failed (it ran before that statement).
    const after = await t.db.withTenant(101, (tx) => tx.copyThen!<{ logins: string[]; taken: number }>(copy('cp-quin\n'), [fromStage], `${made.replace(' as logins', ' as logins, (select last_value from after_copy) as taken')}`));
    expect(after.rows).toEqual([{ logins: ['cp-ona', 'cp-quin'], taken: 1 }]);
    await t.owner.query(`drop index core.users_cp_login; delete from core.users where login like 'cp-%'`);
  });
});

describe("the COMMIT in the message of a unit's last statement (LastStatementOptions.commit)", () => {
  const copy = (data: string) => ({ sql: 'copy staged_logins (login) from stdin', data: [Buffer.from(data)], before: ['truncate staged_logins'] });
  const fromStage = { text: 'insert into core.users (tenant_id, login) select $1, login from staged_logins', values: [101], prepare: true };
  const made = `select array_agg(login order by login) as logins from core.users where login like 'cm-%'`;
  const stored = async () => (await t.owner.query<{ login: string }>(`select login from core.users where login like 'cm-%' order by login`)).rows.map((r) => r.login);
  /** A hook that writes in the transaction it is called for, as the request's audit entry does. */
  const writingHook = (): CommitHook & { calls: number } => ({
    calls: 0,
    async beforeCommit(tx) {
      this.calls++;
      await tx.query(`insert into core.users (tenant_id, login) values (101, 'cm-hook')`);
      return undefined;
    },
  });

  beforeAll(async () => {
    await t.db.withoutTenant((tx) => tx.query('create temporary table if not exists staged_logins (login text)'));
  });

  afterEach(async () => {
    await t.owner.query(`delete from core.users where login like 'cm-%'`);
  });

  it('a COPY, the statements after it and the COMMIT: one round trip, committed when the call answers', async () => {
    let seen: string[] = [];
    const answered = await t.db.withTenant(101, async (tx) => {
      const result = await tx.copyThen!<{ logins: string[] }>(copy('cm-ada\ncm-bo\n'), [fromStage], made, undefined, { commit: true });
      // Committed already: another session sees the rows before the unit of work has ended.
      seen = await stored();
      return result;
    });
    expect(answered.rows).toEqual([{ logins: ['cm-ada', 'cm-bo'] }]);
    expect(answered.fields.map((f) => f.name)).toEqual(['logins']);
    expect(seen).toEqual(['cm-ada', 'cm-bo']);
    expect(roundTrips).toBe(1);
  });

  it('inside an open transaction: the message commits what the statements before it wrote', async () => {
    const answered = await t.db.withTenant(101, async (tx) => {
      await tx.query(`insert into core.users (tenant_id, login) values (101, 'cm-cy')`);
      return tx.queryAfter!<{ n: number }>([{ text: 'insert into core.users (tenant_id, login) values (101, $1)', values: ['cm-di'] }], `select count(*)::int as n from core.users where login like 'cm-%'`, undefined, { commit: true });
    });
    expect(answered.rows).toEqual([{ n: 2 }]);
    expect(await stored()).toEqual(['cm-cy', 'cm-di']);
    expect(roundTrips).toBe(2);
  });

  it('a failure in the message fails the unit, skips the COMMIT, undoes everything and leaves the connection usable', async () => {
    await expect(
      t.db.withTenant(101, async (tx) => {
        await tx.query(`insert into core.users (tenant_id, login) values (101, 'cm-ed')`);
        await tx.queryAfter!([{ text: 'insert into core.users (tenant_id, login) values (101, $1)', values: ['cm-flo'] }], 'select 1/$1::int', [0], { commit: true });
      }),
    ).rejects.toThrow(/division by zero/);
    // A unit that swallows the message's failure fails all the same.
    await expect(
      t.db.withTenant(101, async (tx) => {
        await tx.queryAfter!([{ text: 'insert into core.users (tenant_id, login) values (101, $1)', values: ['cm-gus'] }], 'select 1/$1::int', [0], { commit: true }).catch(() => undefined);
        return 'swallowed';
      }),
    ).rejects.toThrow(/division by zero/);
    expect(await stored()).toEqual([]);
    // The one connection of the pool was left in no transaction, aborted or not: the next one writes, and only its own row.
    await t.db.withTenant(101, (tx) => tx.query(`insert into core.users (tenant_id, login) values (101, 'cm-lu')`));
    expect(await stored()).toEqual(['cm-lu']);
  });

  it('nothing can be sent after it', async () => {
    await expect(
      t.db.withTenant(101, async (tx) => {
        await tx.queryAfter!([], `insert into core.users (tenant_id, login) values (101, 'cm-hal')`, undefined, { commit: true });
        await tx.query(`insert into core.users (tenant_id, login) values (101, 'cm-ida')`);
      }),
    ).rejects.toThrow('the transaction was committed with its last statement: nothing can be sent after it');
    expect(await stored()).toEqual(['cm-hal']);
  });

  it('under a commit hook the transaction commits at the end of its unit, after the hook wrote in it; outside it, in the message', async () => {
    const hook = writingHook();
    await runWithCommitHook(hook, () =>
      t.db.withTenant(101, (tx) => tx.queryAfter!([], `insert into core.users (tenant_id, login) values (101, 'cm-jo')`, undefined, { commit: true })),
    );
    expect(hook.calls).toBe(1);
    expect(await stored()).toEqual(['cm-hook', 'cm-jo']);
    expect(roundTrips).toBe(3); // the statement with its opening, the hook's, the commit
    roundTrips = 0;
    await runWithCommitHook(hook, () =>
      outsideCommitHooks(() => t.db.withTenant(101, (tx) => tx.queryAfter!([], `insert into core.users (tenant_id, login) values (101, 'cm-kai')`, undefined, { commit: true }))),
    );
    expect(hook.calls).toBe(1);
    expect(roundTrips).toBe(1);
    expect(await stored()).toEqual(['cm-hook', 'cm-jo', 'cm-kai']);
  });
});

describe('reads without a transaction (Database.readWithTenant)', () => {
  it('a statement is one round trip, under the tenant, through either protocol', async () => {
    const extended = await t.db.readWithTenant(101, (tx) => tx.query<{ login: string }>('select login from core.users where login <> $1', ['nobody']));
    expect(logins(extended)).toEqual(['ann', 'bob']);
    expect(roundTrips).toBe(1);
    const simple = await t.db.readWithTenant(102, (tx) => tx.query<{ login: string }>('select login from core.users'));
    expect(logins(simple)).toEqual(['carl']);
    expect(simple.command).toBe('SELECT');
    expect(simple.fields.map((f) => f.name)).toEqual(['login']);
    expect(roundTrips).toBe(2);
  });

  it('every statement of the unit carries the tenant (each is its own implicit transaction)', async () => {
    const seen = await t.db.readWithTenant(101, async (tx) => {
      const first = await tx.query<{ tenant: string; ro: string }>(`select current_setting('svc.tenant_id') as tenant, current_setting('transaction_read_only') as ro`);
      const second = await tx.query<{ n: number }>('select count(*)::int as n from core.users where $1::int > 0', [1]);
      return [first.rows[0], second.rows[0]!.n];
    });
    expect(seen).toEqual([{ tenant: '101', ro: 'on' }, 2]);
    expect(roundTrips).toBe(2);
  });

  it('a write is refused by the server and nothing is written', async () => {
    await expect(t.db.readWithTenant(101, (tx) => tx.query('insert into core.users (tenant_id, login) values (101, $1)', ['gina']))).rejects.toThrow(
      /read-only transaction/,
    );
    await expect(
      t.db.readWithTenant(101, (tx) => tx.query(`with w as (insert into core.users (tenant_id, login) values (101, 'gina') returning login) select login from w`)),
    ).rejects.toThrow(/read-only transaction/);
    const { rows } = await t.owner.query(`select count(*)::int as n from core.users where login = 'gina'`);
    expect(rows[0].n).toBe(0);
  });

  it('leaves nothing on the pooled connection: no tenant, not read-only, usable after a failure', async () => {
    await expect(t.db.readWithTenant(101, (tx) => tx.query('select no_such_column from core.users where login = $1', ['ann']))).rejects.toThrow(/no_such_column/);
    await t.db.readWithTenant(102, (tx) => tx.query('select login from core.users'));
    const { rows } = await t.db.withoutTenant((tx) =>
      tx.query<{ tenant: string | null; ro: string }>(`select current_setting('svc.tenant_id', true) as tenant, current_setting('transaction_read_only') as ro`),
    );
    expect(rows[0]!.tenant ?? '').toBe('');
    expect(rows[0]!.ro).toBe('off');
    expect((await t.db.withoutTenant((tx) => tx.query('select login from core.users'))).rowCount).toBe(0);
    await t.db.withTenant(101, (tx) => tx.query(`insert into core.users (tenant_id, login) values (101, 'hank')`));
    await t.owner.query(`delete from core.users where login = 'hank'`);
  });

  it('refuses a missing or malformed tenant', async () => {
    for (const bad of [undefined, null, '', '-1', 'x', 1.5]) await expect(t.db.readWithTenant(bad as never, async () => 1)).rejects.toThrow(/tenant/i);
  });
});

describe("the statement's query object", () => {
  it('reaches node-postgres as text, values and callback: no config object copied per statement', async () => {
    const utils = pgUtils as unknown as { normalizeQueryConfig: (config: unknown, ...rest: unknown[]) => unknown };
    const original = utils.normalizeQueryConfig;
    const configs: unknown[] = [];
    utils.normalizeQueryConfig = (config: unknown, ...rest: unknown[]) => {
      configs.push(config);
      return original(config, ...rest);
    };
    try {
      await t.db.readWithTenant(101, async (tx) => {
        await tx.query('select login from core.users where login <> $1', ['nobody'], { prepare: true });
        await tx.query('select login from core.users');
      });
      await t.db.withTenant(101, (tx) => tx.query('select 1 as one'));
    } finally {
      utils.normalizeQueryConfig = original;
    }
    expect(configs.length).toBeGreaterThanOrEqual(3);
    expect(configs.filter((config) => typeof config !== 'string')).toEqual([]);
  });

  it("takes the statement's own name, protocol and type parsers", async () => {
    const types = { getTypeParser: (oid: number) => (oid === 23 ? (text: string) => `int:${text}` : (text: string) => text) } as pg.CustomTypesConfig;
    const answered = await t.db.readWithTenant(101, async (tx) => [
      (await tx.query<{ n: string }>('select $1::int as n', [5], { types, prepare: true })).rows,
      (await tx.query<{ n: string }>('select $1::int as n', [6], { types, prepare: true })).rows,
      (await tx.query<{ n: string }>('select 7::int as n', undefined, { types })).rows,
      (await tx.query<{ n: number }>('select 8::int as n')).rows,
    ]);
    expect(answered).toEqual([[{ n: 'int:5' }], [{ n: 'int:6' }], [{ n: 'int:7' }], [{ n: 8 }]]);
    // Two statements of a multi-statement text, each read with the parsers.
    const both = await t.db.withTenant(101, (tx) => tx.query('select 1::int as a; select 2::int as b', undefined, { types }));
    expect((both as unknown as Array<pg.QueryResult>).map((r) => r.rows)).toEqual([[{ a: 'int:1' }], [{ b: 'int:2' }]]);
  });
});

import { expect, it } from '@jest/globals';
import type { Database, Tx } from '../../src/db/database.js';
import { ConflictError, ValidationError } from '../../src/errors.js';
import { takeTenantTurn } from '../../src/manifests/tenant-cap.js';
import { deferred } from './deferred.js';
import { until } from './until.js';

/**
 * The cases every kind capped per tenant (src/manifests/tenant-cap.ts) is held to, on a real
 * database with tenants 601 and 602: a new one past `limit` is a 400 naming the limit; an update
 * (any case), another tenant and a delete make room as they should; concurrent applies never take
 * the last place twice. The limit is given written out, so the cases also read against a store
 * without it; `fill` stores most of the names at once (the first ten are applied).
 */
export function tenantCapCases(o: {
  /** The kind in the refusal's words (`workflow`, `process`) and its plural. */
  noun: string;
  plural: string;
  limit: number;
  db: () => Database;
  /** Applies `name` in `tenant`; `changed` applies it with another spec (an update). */
  apply: (tenant: number, name: string, changed?: boolean) => Promise<{ created: boolean; unchanged: boolean }>;
  count: (tenant: number) => Promise<number>;
  /** Where the kind is stored (`workflows.workflows`), for the deletes that make room. */
  table: string;
  timeoutMs?: number;
  /**
   * Stores `names` in `tenant` at once, as copies of the first one applied (for kinds whose apply
   * is slow, hundreds of times over): without it, every name is applied.
   */
  fill?: (tenant: number, names: string[]) => Promise<void>;
}): void {
  const { noun, plural, limit } = o;
  const prefix = noun[0]!;
  it(
    `refuses a new ${noun} past ${limit} per tenant with a 400 naming the limit; updates and other tenants go on`,
    async () => {
      const names = Array.from({ length: limit }, (_, i) => `${prefix}-${String(i).padStart(3, '0')}`);
      // Concurrent applies cannot overshoot (one apply at a time per tenant).
      await Promise.all(names.slice(0, 10).map((name) => o.apply(601, name)));
      if (o.fill) await o.fill(601, names.slice(10));
      else for (const name of names.slice(10)) await o.apply(601, name);
      expect(await o.count(601)).toBe(limit);

      const refused = o.apply(601, 'one-more');
      await expect(refused).rejects.toThrow(ValidationError);
      const err = (await refused.catch((e: unknown) => e)) as ValidationError;
      expect(err.field).toBe('metadata.name');
      expect(err.message).toBe(`this tenant has ${limit} ${plural}, the most a tenant may have (${limit}): delete one before applying a new ${noun} one-more (an existing name can still be updated)`);
      expect(err.render().status).toBe(400);
      expect(await o.count(601)).toBe(limit);

      // Re-applying an existing name (any case) is an update, not one more.
      expect(await o.apply(601, `${prefix.toUpperCase()}-000`, true)).toMatchObject({ name: `${prefix}-000`, created: false });
      // Another tenant has its own count.
      expect(await o.apply(602, 'one-more')).toMatchObject({ created: true });
      // After a delete there is room again.
      await o.db().withTenant(601, (tx) => tx.query(`delete from ${o.table} where name = '${prefix}-099'`));
      expect(await o.apply(601, 'one-more')).toMatchObject({ created: true });
    },
    o.timeoutMs,
  );

  it('does not let concurrent applies take the last place twice', async () => {
    await o.db().withTenant(601, (tx) => tx.query(`delete from ${o.table} where name = 'one-more'`));
    const outcomes = await Promise.allSettled([o.apply(601, 'race-a'), o.apply(601, 'race-b'), o.apply(601, 'race-c')]);
    expect(outcomes.filter((s) => s.status === 'fulfilled')).toHaveLength(1);
    expect(await o.count(601)).toBe(limit);
  });

  it(`answers one ${noun} applied several times at once, new, as created once and unchanged after`, async () => {
    // The tenant's turn is held while three applies of one new manifest read: each finds none stored
    // and waits for the turn. Those after the first must find it stored then and write nothing, as
    // an apply of the stored manifest does, not answer an update (`configured`) over the same manifest.
    const results = await whileTurnHeld(o.db(), 602, plural, [0, 1, 2].map(() => () => o.apply(602, 'twin')));
    expect(results.filter((r) => r.created)).toHaveLength(1);
    expect(results.filter((r) => !r.created)).toEqual(Array(2).fill(expect.objectContaining({ unchanged: true })));
  });
}

/**
 * The cases every kind created over HTTP and capped per tenant (takeLivePlace in
 * src/manifests/tenant-cap.ts: integrations, stored secrets) is held to, on a real database with
 * tenants 601 and 602: one more past `limit` is a 409 naming the limit; an update, another tenant
 * and a (soft) delete make room as they should; creates sent at once when one place is left never
 * take it twice. The first ten are created, the others stored at once by `fill` (copies of them).
 */
export function liveCapCases(o: {
  /** The kind in the refusal's words (`integrations`). */
  plural: string;
  limit: number;
  /** How the refusal ends (`delete one first`). */
  advice: string;
  create: (tenant: number, name: string) => Promise<unknown>;
  update: (tenant: number, name: string) => Promise<unknown>;
  remove: (tenant: number, name: string) => Promise<unknown>;
  count: (tenant: number) => Promise<number>;
  fill: (tenant: number, names: string[]) => Promise<void>;
}): void {
  const { plural, limit } = o;
  const refusal = `this tenant has ${limit} ${plural}, the most it may have (${limit}): ${o.advice}`;
  it(`refuses one more of ${limit} ${plural} per tenant with a 409 naming the limit; updates, other tenants and deletes go on`, async () => {
    const names = Array.from({ length: limit }, (_, i) => `n-${String(i).padStart(4, '0')}`);
    await Promise.all(names.slice(0, 10).map((name) => o.create(601, name)));
    await o.fill(601, names.slice(10));
    expect(await o.count(601)).toBe(limit);

    const err = await o.create(601, 'one-more').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as ConflictError).message).toBe(refusal);
    expect((err as ConflictError).render().status).toBe(409);
    expect(await o.count(601)).toBe(limit);

    // An update at the limit is not one more.
    await o.update(601, 'n-0000');
    // Another tenant has its own count.
    await o.create(602, 'one-more');
    // A deleted one no longer counts.
    await o.remove(601, 'n-0099');
    await o.create(601, 'one-more');
    expect(await o.count(601)).toBe(limit);
  });

  it('lets one of several creates sent at once take the last place', async () => {
    await o.remove(601, 'one-more');
    const outcomes = await Promise.allSettled(['race-a', 'race-b', 'race-c', 'race-d'].map((name) => o.create(601, name)));
    expect(outcomes.filter((s) => s.status === 'fulfilled')).toHaveLength(1);
    for (const s of outcomes) if (s.status === 'rejected') expect((s.reason as Error).message).toBe(refusal);
    expect(await o.count(601)).toBe(limit);
  });
}

/**
 * The deleted rows a tenant keeps of a kind deleted softly (takeLivePlace): a create keeps the
 * `kept` deleted most recently and purges the older ones, but for those `hold` gives history that
 * still names them (kept until it goes); another tenant's are untouched. The deleted rows are
 * copies of one created (`create`), stored at once and marked deleted one second apart, before any
 * the tenant has deleted already.
 */
export function deletedHistoryCases(o: {
  /** The kind in the test's words (`integrations`). */
  plural: string;
  kept: number;
  db: () => Database;
  /** Where the kind is stored (`hub.integrations`). */
  table: string;
  tenant: number;
  other: number;
  create: (tenant: number, name: string) => Promise<unknown>;
  remove: (tenant: number, name: string) => Promise<unknown>;
  /** Stores history that names the row `id` of `tenant` (a delivery, a send claim), if the kind has any. */
  hold?: (tx: Tx, tenant: number, id: number) => Promise<void>;
}): void {
  const { kept, tenant } = o;
  const deleted = async (t: number) =>
    (await o.db().withTenant(t, (tx) => tx.query<{ name: string }>(`select name from ${o.table} where deleted_at is not null order by deleted_at, id`))).rows.map((r) => r.name);
  it(`keeps the ${kept} ${o.plural} deleted most recently: a create purges older deleted ones${o.hold ? ', but for those whose history is kept' : ''}`, async () => {
    // A deleted one of the other tenant, older than all of them.
    await o.create(o.other, 'h-other');
    await o.db().withTenant(o.other, (tx) => tx.query(`update ${o.table} set deleted_at = now() - interval '1 day' where name = 'h-other'`));
    const otherBefore = await deleted(o.other);
    expect(otherBefore).toContain('h-other');

    // Two more than are kept, with those the tenant has deleted already (later than these).
    const before = (await deleted(tenant)).length;
    await o.create(tenant, 'h-0000');
    const names = Array.from({ length: kept + 2 - before }, (_, i) => `h-${String(i).padStart(4, '0')}`);
    await o.db().withTenant(tenant, async (tx) => {
      const { rows } = await tx.query<{ columns: string }>(
        `select string_agg(quote_ident(column_name), ', ') as columns from information_schema.columns
          where table_schema || '.' || table_name = $1 and column_name not in ('id', 'name') and is_identity = 'NO' and is_generated = 'NEVER'`,
        [o.table],
      );
      const columns = rows[0]!.columns;
      await tx.query(`insert into ${o.table} (name, ${columns}) select n, ${columns} from ${o.table}, unnest($1::text[]) as n where name = 'h-0000' and deleted_at is null`, [names.slice(1)]);
      // h-0000 deleted first, each next one a second later.
      await tx.query(`update ${o.table} set deleted_at = now() - make_interval(secs => 10000 - substr(name, 3)::int) where name = any($1::text[])`, [names]);
      if (o.hold) {
        const held = await tx.query<{ id: number }>(`select id from ${o.table} where name = 'h-0001'`);
        await o.hold(tx, tenant, Number(held.rows[0]!.id));
      }
    });
    expect(await deleted(tenant)).toHaveLength(kept + 2);

    await o.create(tenant, 'h-live');
    const after = await deleted(tenant);
    expect(after.filter((name) => name.startsWith('h-'))).toEqual(o.hold ? names.slice(1) : names.slice(2));
    expect(after).toHaveLength(kept + (o.hold ? 1 : 0));
    expect(await deleted(o.other)).toEqual(otherBefore);

    // Creates and deletes in a loop keep no more.
    for (let i = 0; i < 3; i++) {
      await o.remove(tenant, 'h-live');
      await o.create(tenant, 'h-live');
    }
    expect(await deleted(tenant)).toHaveLength(kept + (o.hold ? 1 : 0));
  }, 60_000);
}

/**
 * How many transactions of the database wait for a lock: an advisory one (a tenant's turn among
 * them), or with `anyLock` any lock (a row's, a table's; a transaction that waits for a row waits for
 * the holder's transaction id, which names no database: it is told by the locks it holds here).
 */
async function lockWaiters(tx: Tx, anyLock = false): Promise<number> {
  const { rows } = await tx.query<{ n: number }>(
    `select count(distinct w.pid)::int as n from pg_locks w
      where not w.granted and (w.locktype = 'advisory' or $1)
        and exists (select 1 from pg_locks d where d.pid = w.pid and d.database = (select oid from pg_database where datname = current_database()))`,
    [anyLock],
  );
  return rows[0]!.n;
}

/**
 * Runs `applies` at once while `tenant`'s turn for `plural` (takeTenantPlace) is held, and lets the
 * turn go once every one of them waits for it: each has read what it reads before its turn by then,
 * so the applies meet as concurrent ones do at their worst. `inOrder`: each apply starts once those
 * before it wait for the turn, so they take it in that order (PostgreSQL grants a lock to its
 * waiters first come, first served). Takes one connection of `db` beside theirs (two `inOrder`).
 */
export function whileTurnHeld<T>(db: Database, tenant: number, plural: string, applies: (() => Promise<T>)[], opts: { inOrder?: boolean } = {}): Promise<T[]> {
  return whileHeld(db, tenant, { what: "the tenant's turn", take: (tx) => takeTenantTurn(tx, plural) }, applies, opts);
}

/**
 * As whileTurnHeld, with the lock that `lock.take` takes in a transaction of `tenant` instead of the
 * tenant's turn (`lock table manifests.owners in share mode`: an owner record written waits), held
 * until every apply waits for a lock, whichever (`anyLock`: the later ones may wait for the row the
 * first one holds rather than for this lock).
 */
export async function whileHeld<T>(
  db: Database,
  tenant: number,
  lock: { what: string; take: (tx: Tx) => Promise<unknown>; anyLock?: boolean },
  applies: (() => Promise<T>)[],
  opts: { inOrder?: boolean } = {},
): Promise<T[]> {
  const waiters = (tx: Tx) => lockWaiters(tx, lock.anyLock);
  const taken = deferred();
  const holder = db.withTenant(tenant, async (tx) => {
    await lock.take(tx);
    taken.resolve();
    await until(`the ${applies.length} applies to wait (for ${lock.what})`, async () => (await waiters(tx)) === applies.length);
  });
  await taken.promise;
  const started: Promise<T>[] = [];
  for (const apply of applies) {
    if (opts.inOrder) await until(`${started.length} applies to wait (for ${lock.what})`, async () => (await db.withTenant(tenant, waiters)) === started.length);
    const result = apply();
    // Awaited below, with the others: one that fails while the next waits to start is not unhandled.
    result.catch(() => {});
    started.push(result);
  }
  const [, results] = await Promise.all([holder, Promise.all(started)]);
  return results;
}

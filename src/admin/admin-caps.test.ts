import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import type { Tx } from '../db/database.js';
import { ConflictError } from '../errors.js';
import type { Events } from './common.js';
import { archiveOrg, createOrg } from './orgs.js';
import { assignRole, createRole, grantOrg, removeRole, revokeOrg } from './roles.js';
import { setScopes } from './scopes.js';
import { createUser } from './users.js';

/**
 * Organisations, users, roles, role assignments, organisation grants and user scope grants of a tenant are bounded, on a real
 * database with tenants 601 and 602: none is ever deleted (archived or switched off, the row stays),
 * so every row counts; one more past the limit is a 409 naming it, nothing stored; switching on
 * again a row the tenant has is never refused; another tenant has its own count; creates sent at
 * once when one place is left never take it twice. The limits (docs/admin.md) are written out, so
 * the test also reads against a store without them; most places are filled by copying rows.
 */

let t: MigratedDatabase;
const events: Events = { emit: async () => undefined } as unknown as Events;

const refusal = (max: number, plural: string, advice: string, n = max) => `this tenant has ${n} ${plural}, the most it may have (${max}): ${advice}`;

async function refused(p: Promise<unknown>, message: string): Promise<void> {
  const err = await p.catch((e: unknown) => e);
  expect(err).toBeInstanceOf(ConflictError);
  expect((err as ConflictError).message).toBe(message);
  expect((err as ConflictError).render().status).toBe(409);
}

const count = async (tenant: number, table: string) => (await t.db.withTenant(tenant, (tx) => tx.query<{ n: number }>(`select count(*)::int as n from ${table}`))).rows[0]!.n;
const inTenant = <T>(tenant: number, fn: (tx: Tx) => Promise<T>) => t.db.withTenant(tenant, fn);

/** Which of several creates sent at once were stored, the others refused with `message`. */
async function race(creates: Array<() => Promise<unknown>>, message: string): Promise<number> {
  const outcomes = await Promise.allSettled(creates.map((c) => c()));
  for (const s of outcomes) if (s.status === 'rejected') expect((s.reason as Error).message).toBe(message);
  return outcomes.filter((s) => s.status === 'fulfilled').length;
}

beforeAll(async () => {
  t = await migratedDatabase({ 601: 'a', 602: 'b' });
});

afterAll(async () => {
  await t.close();
});

describe('the directory of a tenant is bounded', () => {
  it('organisations: 10,000, archived ones included', async () => {
    const LIMIT = 10_000;
    const message = refusal(LIMIT, 'organisations', 'archived ones count too (their rows and codes stay)');
    const first = await inTenant(601, (tx) => createOrg(tx, events, { code: 'o-00000', name: 'O' }));
    await inTenant(601, (tx) =>
      tx.query(`insert into core.orgs (tenant_id, code, name) select core.current_tenant(), 'o-' || lpad(n::text, 5, '0'), 'O' from generate_series(1, $1) n`, [LIMIT - 2]),
    );
    await inTenant(601, (tx) => archiveOrg(tx, events, first.id));
    expect(await race(['a', 'b', 'c'].map((c) => () => inTenant(601, (tx) => createOrg(tx, events, { code: `race-${c}`, name: 'R' }))), message)).toBe(1);
    expect(await count(601, 'core.orgs')).toBe(LIMIT);
    await refused(inTenant(601, (tx) => createOrg(tx, events, { code: 'one-more', name: 'O' })), message);
    expect(await count(601, 'core.orgs')).toBe(LIMIT);
    await inTenant(602, (tx) => createOrg(tx, events, { code: 'one-more', name: 'O' }));
  }, 60_000);

  it('roles: 1,000', async () => {
    const LIMIT = 1000;
    const message = refusal(LIMIT, 'roles', 'roles are kept once created: give users a role the tenant has');
    await inTenant(601, (tx) => tx.query(`insert into core.roles (tenant_id, name) select core.current_tenant(), 'r-' || n from generate_series(1, $1) n`, [LIMIT - 1]));
    expect(await race(['a', 'b', 'c'].map((c) => () => inTenant(601, (tx) => createRole(tx, { name: `race-${c}` }))), message)).toBe(1);
    await refused(inTenant(601, (tx) => createRole(tx, { name: 'one-more' })), message);
    expect(await count(601, 'core.roles')).toBe(LIMIT);
    await inTenant(602, (tx) => createRole(tx, { name: 'one-more' }));
  });

  it('role assignments: 100,000, removed ones included; one given again is not one more', async () => {
    const LIMIT = 100_000;
    const message = refusal(LIMIT, 'role assignments', 'a removed one counts too (its row stays) and can be given again');
    const users: number[] = [];
    for (const login of ['u-a', 'u-b', 'u-c', 'u-d']) users.push((await inTenant(601, (tx) => createUser(tx, { login, name: login }))).id);
    const role = await inTenant(601, async (tx) => (await tx.query<{ id: number }>("select id from core.roles where name = 'r-1'")).rows[0]!.id);
    await inTenant(601, (tx) => assignRole(tx, users[0]!, role));
    await inTenant(601, (tx) => removeRole(tx, users[0]!, role));
    // Filled with assignments of made-up users' rows: the rows are what count.
    await inTenant(601, async (tx) => {
      await tx.query(`insert into core.users (tenant_id, login, name) select core.current_tenant(), 'f-' || n, 'F' from generate_series(1, $1) n`, [LIMIT / 100]);
      await tx.query(
        `insert into core.user_roles (tenant_id, user_id, role_id)
         select core.current_tenant(), u.id, r.id from (select id from core.users where login like 'f-%') u cross join (select id from core.roles where name like 'r-%' order by id limit 100) r
          limit $1`,
        [LIMIT - 2],
      );
    });
    expect(await count(601, 'core.user_roles')).toBe(LIMIT - 1);
    expect(await race(users.slice(1).map((u) => () => inTenant(601, (tx) => assignRole(tx, u, role))), message)).toBe(1);
    const holding = (await inTenant(601, (tx) => tx.query<{ user_id: number }>('select user_id from core.user_roles where role_id = $1', [role]))).rows.map((r) => Number(r.user_id));
    await refused(inTenant(601, (tx) => assignRole(tx, users.find((u) => !holding.includes(u))!, role)), message);
    // The removed assignment, given again, switches its row on.
    await inTenant(601, (tx) => assignRole(tx, users[0]!, role));
    expect(await count(601, 'core.user_roles')).toBe(LIMIT);
  }, 60_000);

  it('organisation grants: 100,000, revoked ones included; one granted again is not one more', async () => {
    const LIMIT = 100_000;
    const message = refusal(LIMIT, 'organisation grants', 'a revoked one counts too (its row stays) and can be granted again');
    const role = await inTenant(601, async (tx) => (await tx.query<{ id: number }>("select id from core.roles where name = 'r-2'")).rows[0]!.id);
    const orgs = await inTenant(601, async (tx) => (await tx.query<{ id: number }>("select id from core.orgs where code like 'o-%' and active order by id limit 4")).rows.map((r) => r.id));
    await inTenant(601, (tx) => grantOrg(tx, role, orgs[0]!));
    await inTenant(601, (tx) => revokeOrg(tx, role, orgs[0]!));
    await inTenant(601, (tx) =>
      tx.query(
        `insert into core.role_orgs (tenant_id, role_id, org_id)
         select core.current_tenant(), r.id, o.id from (select id from core.roles where name like 'r-%' and name <> 'r-2' order by id limit 20) r
          cross join (select id from core.orgs order by id) o limit $1`,
        [LIMIT - 2],
      ),
    );
    expect(await count(601, 'core.role_orgs')).toBe(LIMIT - 1);
    expect(await race(orgs.slice(1).map((o) => () => inTenant(601, (tx) => grantOrg(tx, role, o))), message)).toBe(1);
    const left = (await inTenant(601, (tx) => tx.query<{ org_id: number }>('select org_id from core.role_orgs where role_id = $1', [role]))).rows.map((r) => Number(r.org_id));
    await refused(inTenant(601, (tx) => grantOrg(tx, role, orgs.find((o) => !left.includes(o))!)), message);
    await inTenant(601, (tx) => grantOrg(tx, role, orgs[0]!));
    expect(await count(601, 'core.role_orgs')).toBe(LIMIT);
  }, 60_000);

  it('users an administrator creates: 100,000, deactivated ones included', async () => {
    const LIMIT = 100_000;
    const message = refusal(LIMIT, 'users', 'deactivated ones count too (their rows and logins stay)');
    const have = await count(601, 'core.users');
    await inTenant(601, (tx) => tx.query(`insert into core.users (tenant_id, login, name, active) select core.current_tenant(), 'g-' || n, 'G', n % 2 = 0 from generate_series(1, $1) n`, [LIMIT - have - 1]));
    expect(await race(['a', 'b', 'c'].map((c) => () => inTenant(601, (tx) => createUser(tx, { login: `race-${c}`, name: 'R' }))), message)).toBe(1);
    await refused(inTenant(601, (tx) => createUser(tx, { login: 'one-more', name: 'O' })), message);
    expect(await count(601, 'core.users')).toBe(LIMIT);
    await inTenant(602, (tx) => createUser(tx, { login: 'one-more', name: 'O' }));
  }, 60_000);

  it('user scope grants: 100,000, revoked ones included; a list adding more than is left is refused whole', async () => {
    const LIMIT = 100_000;
    const message = refusal(LIMIT, 'user scope grants', 'a revoked one counts too (its row stays) and can be granted again');
    const [user] = (await inTenant(601, (tx) => tx.query<{ id: number }>("insert into core.users (tenant_id, login, name) values (core.current_tenant(), 'scoped', 'S') returning id"))).rows.map((r) => Number(r.id));
    expect(await inTenant(601, (tx) => setScopes(tx, user!, ['old']))).toEqual(['old']);
    expect(await inTenant(601, (tx) => setScopes(tx, user!, ['crm']))).toEqual(['crm']);
    await inTenant(601, (tx) =>
      tx.query(
        "insert into core.user_scopes (tenant_id, user_id, scope, active) select core.current_tenant(), $2, 's-' || k, false from generate_series(1, $1) k",
        [LIMIT - 3, user],
      ),
    );
    expect(await count(601, 'core.user_scopes')).toBe(LIMIT - 1);
    // Two new names where one place is left: refused, the list as it was.
    await refused(inTenant(601, (tx) => setScopes(tx, user!, ['crm', 'erp', 'hr'])), refusal(LIMIT, 'user scope grants', 'a revoked one counts too (its row stays) and can be granted again', LIMIT - 1));
    expect(await count(601, 'core.user_scopes')).toBe(LIMIT - 1);
    // Switching a revoked grant on again, and one new name, fit.
    expect(await inTenant(601, (tx) => setScopes(tx, user!, ['crm', 'old', 'erp']))).toEqual(['crm', 'erp', 'old']);
    expect(await count(601, 'core.user_scopes')).toBe(LIMIT);
    await refused(inTenant(601, (tx) => setScopes(tx, user!, ['hr'])), message);
    expect(await inTenant(601, (tx) => setScopes(tx, user!, []))).toEqual([]);
  }, 60_000);
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { until } from '../../test/harness/until.js';
import { migratedDatabase, } from '../../test/harness/database.js';
import type { Database } from '../db/database.js';
import { ValidationError } from '../errors.js';
import { loadCatalog } from '../events/catalog.js';
import { EventWriter } from '../events/outbox.js';
import { createOrg, updateOrg } from './orgs.js';
import { assignRole, createRole, grantOrg } from './roles.js';
import { isScopeBound, scopesOf, setScopes } from './scopes.js';
import { createUser } from './users.js';

/** The admin services straight over the database: isolation of the new tables, scopes, concurrent moves. */

const A = 201;
const B = 202;
let owner: pg.Client;
let db: Database;
const events = new EventWriter(loadCatalog());

beforeAll(async () => {
  ({ db, owner } = await migratedDatabase({ [A]: 'a', [B]: 'b' }, 4));
});

afterAll(async () => {
  await owner?.end();
  await db?.close();
});

/** One of everything in a tenant: user, role, org, assignment, grant, scope. */
async function seed(tenant: number, prefix: string): Promise<{ user: number; role: number; org: number }> {
  return db.withTenant(tenant, async (tx) => {
    const user = (await createUser(tx, { login: `${prefix}-user`, name: 'U' })).id;
    const role = (await createRole(tx, { name: `${prefix}-role` })).id;
    const org = (await createOrg(tx, events, { code: `${prefix}-org`, name: 'O' })).id;
    await assignRole(tx, user, role);
    await grantOrg(tx, role, org);
    await setScopes(tx, user, [`${prefix}-scope`]);
    return { user, role, org };
  });
}

describe('row-level security on the administration tables', () => {
  let a: { user: number; role: number; org: number };
  let b: { user: number; role: number; org: number };

  beforeAll(async () => {
    a = await seed(A, 'rls-a');
    b = await seed(B, 'rls-b');
  });

  it.each(['core.orgs', 'core.roles', 'core.user_roles', 'core.role_orgs', 'core.user_scopes'])('%s: a query without a tenant filter sees one tenant', async (table) => {
    for (const tenant of [A, B]) {
      const { rows } = await db.withTenant(tenant, (tx) => tx.query<{ tenant_id: number }>(`select distinct tenant_id from ${table}`));
      expect(rows).toEqual([{ tenant_id: tenant }]);
    }
    expect((await db.withoutTenant((tx) => tx.query(`select 1 from ${table}`))).rowCount).toBe(0);
  });

  it('the application role cannot write into another tenant', async () => {
    await expect(db.withTenant(A, (tx) => tx.query(`insert into core.roles (tenant_id, name) values (${B}, 'sneaky')`))).rejects.toThrow(/row-level security/);
    await expect(db.withTenant(A, (tx) => tx.query(`insert into core.orgs (tenant_id, code, name) values (${B}, 'sneaky', 'S')`))).rejects.toThrow(
      /row-level security/,
    );
  });

  it('links can only join rows of one tenant, even for the owner', async () => {
    await expect(owner.query('insert into core.user_roles (tenant_id, user_id, role_id) values ($1, $2, $3)', [A, a.user, b.role])).rejects.toThrow(/foreign key/);
    await expect(owner.query('insert into core.role_orgs (tenant_id, role_id, org_id) values ($1, $2, $3)', [A, a.role, b.org])).rejects.toThrow(/foreign key/);
    await expect(owner.query('update core.orgs set parent_id = $1 where id = $2', [b.org, a.org])).rejects.toThrow(/foreign key/);
    await expect(owner.query('insert into core.user_scopes (tenant_id, user_id, scope) values ($1, $2, $3)', [A, b.user, 'x'])).rejects.toThrow(/foreign key/);
  });

  it('scopesOf reads the caller tenant\'s user only', async () => {
    expect(await db.withTenant(A, (tx) => scopesOf(tx, a.user))).toEqual(['rls-a-scope']);
    expect(await db.withTenant(A, (tx) => scopesOf(tx, b.user))).toEqual([]);
    expect(await db.withTenant(A, (tx) => isScopeBound(tx, a.user))).toBe(true);
    expect(await db.withTenant(A, (tx) => isScopeBound(tx, b.user))).toBe(false);
  });
});

describe('scopesOf and setScopes', () => {
  it('only active scopes, sorted; an empty list unbinds', async () => {
    const user = await db.withTenant(A, async (tx) => (await createUser(tx, { login: 'scopes-user', name: 'S' })).id);
    expect(await db.withTenant(A, (tx) => scopesOf(tx, user))).toEqual([]);
    expect(await db.withTenant(A, (tx) => setScopes(tx, user, ['zeta', 'alpha', 'zeta']))).toEqual(['alpha', 'zeta']);
    expect(await db.withTenant(A, (tx) => setScopes(tx, user, ['beta']))).toEqual(['beta']);
    expect(await db.withTenant(A, (tx) => scopesOf(tx, user))).toEqual(['beta']);
    expect(await db.withTenant(A, (tx) => setScopes(tx, user, []))).toEqual([]);
    expect(await db.withTenant(A, (tx) => isScopeBound(tx, user))).toBe(false);
    const { rows } = await owner.query<{ n: number }>('select count(*)::int as n from core.user_scopes where user_id = $1', [user]);
    expect(rows[0]!.n).toBe(3);
  });
});

describe('concurrent moves', () => {
  it('two crossing moves cannot build a cycle: the second waits for the first and is refused', async () => {
    // x > x1 and y > y1; moving x under y1 and y under x1 at the same time would close x > y1... > x1 > x.
    const o = await db.withTenant(A, async (tx) => {
      const x = await createOrg(tx, events, { code: 'cross-x', name: 'X' });
      const y = await createOrg(tx, events, { code: 'cross-y', name: 'Y' });
      const x1 = await createOrg(tx, events, { code: 'cross-x1', name: 'X1', parentId: x.id });
      const y1 = await createOrg(tx, events, { code: 'cross-y1', name: 'Y1', parentId: y.id });
      return { x, y, x1, y1 };
    });
    let release!: () => void;
    const hold = new Promise<void>((resolve) => {
      release = resolve;
    });
    let firstMoved!: () => void;
    const moved = new Promise<void>((resolve) => {
      firstMoved = resolve;
    });
    // x under y1, then hold the transaction open while the crossing move runs.
    const first = db.withTenant(A, async (tx) => {
      await updateOrg(tx, events, o.x.id, { parentId: o.y1.id });
      firstMoved();
      await hold;
    });
    await moved;
    const second = db.withTenant(A, (tx) => updateOrg(tx, events, o.y.id, { parentId: o.x1.id }));
    // Marker: the second move is waiting on the first one's lock (not merely not started yet).
    await until('the second move to wait on a lock', async () => {
      const { rows } = await owner.query(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`);
      return rows[0].n > 0;
    });
    release();
    const [one, two] = await Promise.allSettled([first, second]);
    expect(one.status).toBe('fulfilled');
    expect(two.status).toBe('rejected');
    const err = (two as PromiseRejectedResult).reason as ValidationError;
    expect(err).toBeInstanceOf(ValidationError);
    expect(err.field).toBe('parentId');
    const { rows } = await owner.query<{ code: string; parent_id: number | null }>(
      `select code, parent_id from core.orgs where code in ('cross-x', 'cross-y') order by code`,
    );
    expect(rows).toEqual([
      { code: 'cross-x', parent_id: o.y1.id },
      { code: 'cross-y', parent_id: null },
    ]);
  });
});

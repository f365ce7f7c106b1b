import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { databasesOfThisFile, serverUrl } from '../../test/harness/database.js';
import { migrate } from './migrations.js';
import { roleUrl } from './roles.js';

/**
 * An owner that is no superuser: a role with CREATEROLE and BYPASSRLS owning the hub's database
 * (a managed PostgreSQL's administrator role, or one an administrator made for the hub), as
 * docs/operations.md allows. It makes the hub's roles and applies every migration.
 */

const hex = randomBytes(4).toString('hex');
const owner = `svc_owner_${hex}`;
const database = `t_owner_${hex}`;
const roles = { app: `svc_app_${hex}`, worker: `svc_worker_${hex}`, analytic: `svc_analytic_${hex}` };

async function asSuperuser<T>(run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: serverUrl() });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

afterAll(async () => {
  await asSuperuser(async (client) => {
    await client.query(`drop database if exists ${database} with (force)`);
    for (const role of [roles.app, roles.worker, roles.analytic, owner]) await client.query(`drop role if exists ${role}`);
  });
});

describe('an owner with CREATEROLE and BYPASSRLS, not a superuser', () => {
  it('makes the hub’s roles and applies every migration; the application role then serves a tenant', async () => {
    await asSuperuser(async (client) => {
      await client.query(`create role ${owner} login createrole bypassrls password 'owner-secret'`);
      await client.query(`create database ${database} owner ${owner}`);
      databasesOfThisFile.add(database);
    });
    const url = new URL(serverUrl());
    url.username = owner;
    url.password = 'owner-secret';
    url.pathname = `/${database}`;
    const ownerUrl = url.toString();
    await migrate(ownerUrl, roles);
    // A second start finds the roles made and changes nothing.
    await migrate(ownerUrl, roles);
    const app = new pg.Client({ connectionString: roleUrl(ownerUrl, roles.app) });
    await app.connect();
    try {
      const { rows } = await app.query<{ su: boolean; rls: boolean }>('select rolsuper as su, rolbypassrls as rls from pg_roles where rolname = current_user');
      expect(rows[0]).toEqual({ su: false, rls: false });
      const tenants = await app.query("select set_config('svc.tenant_id', '1', true), count(*)::int as n from core.tenants");
      expect(tenants.rows[0].n).toBeGreaterThanOrEqual(0);
    } finally {
      await app.end();
    }
  });
});

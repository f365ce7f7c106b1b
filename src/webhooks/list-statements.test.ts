import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { Database, Tx } from '../db/database.js';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { createIntegration } from './integrations.js';
import { IntegrationService } from './service.js';

/**
 * The deliveries lists are the API's dearest routes under load (docs/performance.md, "api"): each
 * statement a request sends wakes a PostgreSQL backend. An unbound caller's page, with the check that
 * the integration exists and the caller's scope access, is one statement; a scope-bound caller's
 * answer is still held to their grants (apiserver/routes/events/scope-bound-events.test.ts).
 */

const TENANT = 711;
let t: MigratedDatabase;
let integrationId: number;
let user: string;
let grantedUser: string;

/** A Database whose tenant reads count the statements they send. */
function counting(db: Database, sent: string[]): Database {
  const counted = Object.create(db) as Database;
  counted.readWithTenant = (tenant, fn) =>
    db.readWithTenant(tenant, (tx) => {
      const query = (text: string, ...rest: unknown[]) => {
        sent.push(text);
        return (tx.query as (...a: unknown[]) => unknown)(text, ...rest);
      };
      return fn({ ...tx, query: query as Tx['query'] });
    });
  return counted;
}

beforeAll(async () => {
  t = await migratedDatabase({ [TENANT]: 'lists' });
  integrationId = (
    await t.db.withTenant(TENANT, (tx) => createIntegration(tx, { name: 'hook', targetUrl: 'https://hooks.example.com/x', eventTypes: ['org.created'], authMode: 'NONE' }, { key: Buffer.alloc(32, 7) }))
  ).id;
  await t.owner.query("insert into hub.deliveries (tenant_id, integration_id, kind, event_type, body) select $1, $2, 'test', 'org.created', '{}' from generate_series(1, 3)", [TENANT, integrationId]);
  const users = await t.owner.query<{ id: string }>("insert into core.users (tenant_id, login) values ($1, 'plain'), ($1, 'bound') returning id", [TENANT]);
  [user, grantedUser] = users.rows.map((r) => String(r.id)) as [string, string];
  await t.owner.query("insert into core.user_scopes (tenant_id, user_id, scope) values ($1, $2, 'crm')", [TENANT, grantedUser]);
});

afterAll(async () => {
  await t.close();
});

describe('the deliveries lists', () => {
  const service = (sent: string[]) => new IntegrationService({ db: counting(t.db, sent), catalog: {} as never, worker: {} as never, rules: {} as never, leaseMs: 1000 });
  const page = { limit: 2 };

  it("an unbound caller's page of an integration's deliveries is one statement", async () => {
    const sent: string[] = [];
    const listed = await service(sent).deliveries(TENANT, { userId: user }, String(integrationId), page, {});
    expect(JSON.parse(listed.items.text)).toHaveLength(2);
    expect(listed.next).toBeDefined();
    expect(sent).toHaveLength(1);
  });

  it("an unbound caller's page of the tenant's deliveries is one statement", async () => {
    const sent: string[] = [];
    const listed = await service(sent).platformDeliveries(TENANT, { userId: user }, page, {});
    expect(JSON.parse(listed.items.text)).toHaveLength(2);
    expect(sent).toHaveLength(1);
  });

  it('a caller with no hub user is unbound: one statement', async () => {
    const sent: string[] = [];
    const listed = await service(sent).platformDeliveries(TENANT, undefined, page, {});
    expect(JSON.parse(listed.items.text)).toHaveLength(2);
    expect(sent).toHaveLength(1);
  });

  it("a scope-bound caller's lists still check what they may hold: the same pages, more statements", async () => {
    const sent: string[] = [];
    const [own, platform] = [
      await service(sent).deliveries(TENANT, { userId: grantedUser }, String(integrationId), page, {}),
      await service(sent).platformDeliveries(TENANT, { userId: grantedUser }, page, {}),
    ];
    // org.created reaches no scoped family: the bound caller holds the integration.
    expect(own.items.text).toBe((await service([]).deliveries(TENANT, { userId: user }, String(integrationId), page, {})).items.text);
    expect(platform.items.text).toBe((await service([]).platformDeliveries(TENANT, { userId: user }, page, {})).items.text);
    expect(sent.length).toBeGreaterThan(2);
  });
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { ConflictError } from '../errors.js';

/**
 * A CSV ingest names its table, and one into a table the tenant does not have makes it: the tables
 * of a tenant are bounded (1,000, docs/connector-runs.md; written out here so the test also reads
 * against a hub without the limit), as the other kinds a tenant creates are. Past it a new table is
 * a 409 with no run recorded; a table the tenant has is never refused; a delete makes room; ingests
 * into new tables sent at once when one place is left never take it twice. Most of the places are
 * filled as registrations of tables (connectors.ext_tables), what the limit counts.
 */

const LIMIT = 1000;
const T = 1;
const REFUSAL = `this tenant has ${LIMIT} tables, the most it may have (${LIMIT}): ingest into a table it has, or delete a connector or CSV source to drop the tables only it writes`;

let hub: TestHub;

const ingest = (connector: string, table: string) => hub.services.connectors.runs.ingestCsv(T, undefined, { connector, table, key: 'id', csv: 'id,name\n1,Ada\n', triggeredBy: 'test' });

const count = async () =>
  (await hub.services.db.withTenant(T, (tx) => tx.query<{ n: number }>('select count(distinct table_name)::int as n from connectors.ext_tables'))).rows[0]!.n;

const runs = async () => (await hub.services.db.withTenant(T, (tx) => tx.query<{ n: number }>('select count(*)::int as n from connectors.runs'))).rows[0]!.n;

beforeAll(async () => {
  hub = await startTestHub();
}, 60_000);

afterAll(async () => {
  await hub?.stop();
});

describe('the tables of a tenant, made by CSV ingests', () => {
  it(`refuses an ingest into a new table past ${LIMIT} tables with a 409 and no run; a table it has and a delete go on`, async () => {
    expect((await ingest('src', 'cap_0000')).status).toBe('Completed');
    const names = Array.from({ length: LIMIT - 2 }, (_, i) => `ext.cap_${String(i + 1).padStart(4, '0')}`);
    await hub.services.db.withTenant(T, (tx) =>
      tx.query('insert into connectors.ext_tables (tenant_id, connector_id, endpoint_uuid, table_name) select core.current_tenant(), gen_random_uuid(), gen_random_uuid(), n from unnest($1::text[]) n', [names]),
    );
    expect(await count()).toBe(LIMIT - 1);
    expect((await ingest('src', 'cap_0999')).status).toBe('Completed');
    expect(await count()).toBe(LIMIT);

    const before = await runs();
    const err = await ingest('src', 'one_more').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as ConflictError).message).toBe(REFUSAL);
    expect((err as ConflictError).render().status).toBe(409);
    expect(await runs()).toBe(before);
    expect(await count()).toBe(LIMIT);

    // A table the tenant has, under another source, is not one more.
    expect((await ingest('other', 'cap_0000')).status).toBe('Completed');
    // Deleting a source drops the tables only it writes (cap_0999): room again.
    await hub.services.connectors.manifests.remove(T, undefined, 'src');
    expect(await count()).toBe(LIMIT - 1);
    expect((await ingest('src', 'one_more')).status).toBe('Completed');
    expect(await count()).toBe(LIMIT);
  }, 60_000);

  it('lets one of several ingests into new tables sent at once take the last place', async () => {
    await hub.services.db.withTenant(T, (tx) => tx.query("delete from connectors.ext_tables where table_name = 'ext.cap_0500'"));
    const outcomes = await Promise.allSettled(['race_a', 'race_b', 'race_c', 'race_d'].map((table) => ingest(`race-${table.slice(-1)}`, table)));
    expect(outcomes.filter((s) => s.status === 'fulfilled')).toHaveLength(1);
    for (const s of outcomes) if (s.status === 'rejected') expect((s.reason as Error).message).toBe(REFUSAL);
    expect(await count()).toBe(LIMIT);
  }, 60_000);
});

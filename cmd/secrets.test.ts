import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import type { Database, Tx } from '../src/db/database.js';
import type { MasterKeys } from '../src/platform/secrets/crypto.js';
import { loadMasterKeys } from '../src/platform/secrets/master-key.js';
import { rekey } from '../src/platform/secrets/rekey.js';
import { SECRET_VALUES, SecretStore } from '../src/platform/secrets/store.js';
import { openIntegrationSecret } from '../src/webhooks/secret.js';
import { createTestDatabase } from '../test/harness/database.js';
import { holdAfter, outcome, untilEndedOrWaiting } from '../test/harness/held-transaction.js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { captureLogs, type LogCapture } from '../test/harness/log-capture.js';
import { parseSecretsArgs, SEALED_VALUES, secretsCommand } from './secrets.js';

/**
 * Rotation of the master key on a real PostgreSQL: values sealed under key A open in a hub
 * configured with B and previous A; `svc-hub secrets rekey` re-seals them under B (counted,
 * idempotent), after which B alone opens them; a value that opens under no key is counted, named
 * and makes the command exit 1; a tenant's rotation during a rekey keeps its new value, whichever
 * of the two takes the row first.
 */

const A = Buffer.alloc(32, 0xa1);
const B = Buffer.alloc(32, 0xb2);
const A_TEXT = A.toString('base64');
const B_TEXT = B.toString('hex');
const VALUES: Record<string, string> = { 'crm-token': 'crm-token-value-0001', 'erp.password': 'erp password ünïcode', s3: 'short' };
const INTEGRATION_SECRET = 'whsec-integration-secret-rotated-001';
const STARTUP_ERROR = 'svc.secret.master-key does not open the stored secrets';

let database: string;
let owner: pg.Client;
let other: number;
let integrationId: number;
const hubs: TestHub[] = [];
let logs: LogCapture;

async function hub(overrides: Record<string, string>): Promise<TestHub> {
  const started = await startTestHub({ 'svc.datasource.url': database, ...overrides });
  hubs.push(started);
  return started;
}

async function stop(h: TestHub): Promise<void> {
  hubs.splice(hubs.indexOf(h), 1);
  await h.stop();
}

/** Every stored value of every tenant as the keys open it (a fresh store: nothing cached). */
async function readAll(h: TestHub, keys: MasterKeys): Promise<Record<string, string | undefined>> {
  const store = new SecretStore(h.services.db, h.services.events, keys, { cacheTtlMs: 0 });
  const out: Record<string, string | undefined> = {};
  for (const [tenant, name] of [...Object.keys(VALUES).map((n) => [1, n] as const), [other, 'crm-token'] as const]) {
    out[`${tenant}/${name}`] = await store.resolveSecret(tenant, name);
  }
  const { rows } = await owner.query('select tenant_id, secret_iv, secret_tag, secret_ciphertext from hub.integrations where id = $1', [integrationId]);
  out.integration = openIntegrationSecret(keys, 1, integrationId, rows[0]);
  return out;
}

const EXPECTED = () => ({ ...Object.fromEntries(Object.entries(VALUES).map(([n, v]) => [`1/${n}`, v])), [`${other}/crm-token`]: 'other-tenant-crm-token', integration: INTEGRATION_SECRET });

async function command(h: TestHub, keys: Record<string, string>, argv = ['rekey']): Promise<{ code: number; lines: string[] }> {
  const lines: string[] = [];
  const code = await secretsCommand(h.config.with(keys), argv, (line) => lines.push(line));
  return { code, lines };
}

beforeAll(async () => {
  logs = captureLogs('info');
  database = await createTestDatabase();
  owner = new pg.Client({ connectionString: database });
  const first = await hub({ 'svc.secret.master-key': A_TEXT });
  await owner.connect();
  other = Number((await owner.query(`insert into core.tenants (code, name) values ('globex', 'Globex') returning id`)).rows[0].id);
  for (const [name, value] of Object.entries(VALUES)) await first.services.secrets.create(1, { name, value }, 'ada');
  await first.services.secrets.create(other, { name: 'crm-token', value: 'other-tenant-crm-token' }, 'bob');
  // A deleted secret holds no value: nothing to re-seal.
  await first.services.secrets.create(1, { name: 'gone', value: 'deleted-value-0001' }, 'ada');
  await first.services.secrets.remove(1, 'gone', 'ada');
  integrationId = (await first.services.integrations.create(1, undefined, { name: 'crm', targetUrl: 'https://hooks.example.com/crm', eventTypes: ['org.created'], secret: INTEGRATION_SECRET }, 'ada')).id;
  await stop(first);
}, 60_000);

afterAll(async () => {
  for (const h of [...hubs]) await h.stop();
  await owner?.end();
  logs.restore();
});

describe('svc-hub secrets rekey', () => {
  it('every table with a sealed value is walked', async () => {
    const { rows } = await owner.query<{ t: string }>(
      "select distinct table_schema || '.' || table_name as t from information_schema.columns where column_name like '%ciphertext' and table_schema not in ('pg_catalog', 'information_schema') order by 1",
    );
    expect(rows.map((r) => r.t)).toEqual(SEALED_VALUES.map((s) => s.table).sort());
  });

  it('a hub with B and previous A reads what A sealed, and says at start that a rekey is due; B alone reads none and says so', async () => {
    const before = logs.raw().length;
    const rotated = await hub({ 'svc.secret.master-key': B_TEXT, 'svc.secret.previous-master-keys': `${Buffer.alloc(32, 0xee).toString('base64url')}, ${A_TEXT}` });
    const started = logs.raw().slice(before);
    expect(started).not.toContain(STARTUP_ERROR);
    expect(started).toContain('run `svc-hub secrets rekey`');
    const keys = loadMasterKeys(rotated.config);
    expect(await readAll(rotated, keys)).toEqual(EXPECTED());
    // Through the hub's own store too.
    expect(await rotated.services.secrets.resolveSecret(1, 'secret:crm-token')).toBe(VALUES['crm-token']);
    await stop(rotated);

    const mark = logs.raw().length;
    const alone = await hub({ 'svc.secret.master-key': B_TEXT });
    expect(logs.raw().slice(mark)).toContain(STARTUP_ERROR);
    await expect(alone.services.secrets.resolveSecret(1, 'crm-token')).rejects.toThrow(/cannot be decrypted/);
    await stop(alone);
  }, 60_000);

  it('re-seals every value under B, in batches; again: nothing to do; then B alone reads them all and starts without a word', async () => {
    const rotated = await hub({ 'svc.secret.master-key': B_TEXT, 'svc.secret.previous-master-keys': A_TEXT });
    const keys = { 'svc.secret.master-key': B_TEXT, 'svc.secret.previous-master-keys': A_TEXT };
    // Four secrets and an integration secret, two per transaction.
    expect(await command(rotated, keys, ['rekey', '--batch', '2'])).toEqual({ code: 0, lines: ['re-sealed 5 values, 0 already under the current key, 0 could not be opened with any configured key'] });
    expect(await command(rotated, keys)).toEqual({ code: 0, lines: ['re-sealed 0 values, 5 already under the current key, 0 could not be opened with any configured key'] });
    // Only the bytes changed: no rotation recorded, no event.
    const { rows } = await owner.query("select count(*)::int as n from platform.secrets where rotated_at is not null");
    expect(rows[0].n).toBe(0);
    const events = await owner.query("select count(*)::int as n from events.outbox where type = 'platform.secret.updated'");
    expect(events.rows[0].n).toBe(0);
    await stop(rotated);

    const mark = logs.raw().length;
    const alone = await hub({ 'svc.secret.master-key': B_TEXT });
    const started = logs.raw().slice(mark);
    expect(started).not.toContain(STARTUP_ERROR);
    expect(started).not.toContain('svc-hub secrets rekey');
    expect(await readAll(alone, { current: B, previous: [] })).toEqual(EXPECTED());
    await stop(alone);
  }, 60_000);

  it('a value no configured key opens is counted, named and left as it is; the command exits 1', async () => {
    const rotated = await hub({ 'svc.secret.master-key': B_TEXT, 'svc.secret.previous-master-keys': A_TEXT });
    await rotated.services.secrets.create(1, { name: 'altered', value: 'altered-value-0001' }, 'ada');
    await owner.query("update platform.secrets set tag = decode(repeat('00', 16), 'hex') where name = 'altered' and deleted_at is null");
    const before = (await owner.query("select iv, tag, ciphertext from platform.secrets where name = 'altered' and deleted_at is null")).rows[0];
    const result = await command(rotated, { 'svc.secret.master-key': B_TEXT, 'svc.secret.previous-master-keys': A_TEXT });
    expect(result).toEqual({
      code: 1,
      lines: ['could not be opened: secret altered of tenant 1', 're-sealed 0 values, 5 already under the current key, 1 could not be opened with any configured key'],
    });
    expect((await owner.query("select iv, tag, ciphertext from platform.secrets where name = 'altered' and deleted_at is null")).rows[0]).toEqual(before);
    await rotated.services.secrets.remove(1, 'altered', 'ada');
    await stop(rotated);
  }, 60_000);

  describe('with a tenant rotating a value meanwhile', () => {
    let rotated: TestHub;
    const ring: MasterKeys = { current: B, previous: [A] };
    const underA = () => new SecretStore(rotated.services.db, rotated.services.events, A, { cacheTtlMs: 0 });
    const underBOnly = () => new SecretStore(rotated.services.db, rotated.services.events, B, { cacheTtlMs: 0 });

    beforeAll(async () => {
      rotated = await hub({ 'svc.secret.master-key': B_TEXT, 'svc.secret.previous-master-keys': A_TEXT });
    });
    afterAll(async () => {
      await stop(rotated);
    });

    it('the rekey holds the row first: the rotation waits, then its new value stands', async () => {
      await underA().create(1, { name: 'race-1', value: 'old-value-0001' }, 'ada');
      const hold = holdAfter(/^select id, tenant_id, name, /);
      const db = rotated.services.db;
      const wrapped: Pick<Database, 'crossTenant'> = { crossTenant: (job, fn) => db.crossTenant(job, (tx) => fn(hold.wrap(tx))) };
      const rekeyed = rekey(wrapped, ring, [SECRET_VALUES], { batch: 1000 });
      await hold.held;
      let ended = false;
      const rotation = outcome(rotated.services.secrets.rotate(1, 'race-1', { value: 'new-value-0001' }, 'ada')).finally(() => {
        ended = true;
      });
      await untilEndedOrWaiting(owner, () => ended, 'the rotation');
      hold.go();
      expect((await rekeyed).resealed).toBeGreaterThanOrEqual(1);
      expect(await rotation).toBe('committed');
      expect(await underBOnly().resolveSecret(1, 'race-1')).toBe('new-value-0001');
    }, 30_000);

    it('an integration\'s new secret, sent while the rekey holds its row, stands too', async () => {
      const sealedUnderA = await hub({ 'svc.secret.master-key': A_TEXT });
      const id = (await sealedUnderA.services.integrations.create(1, undefined, { name: 'race-hook', targetUrl: 'https://hooks.example.com/race', eventTypes: ['org.created'], secret: 'old-hook-secret-0001' }, 'ada')).id;
      await stop(sealedUnderA);
      const hold = holdAfter(/^select id, tenant_id, name, /);
      const db = rotated.services.db;
      const wrapped: Pick<Database, 'crossTenant'> = { crossTenant: (job, fn) => db.crossTenant(job, (tx) => fn(hold.wrap(tx))) };
      const rekeyed = rekey(wrapped, ring, SEALED_VALUES.filter((set) => set.table === 'hub.integrations'), { batch: 1000 });
      await hold.held;
      let ended = false;
      const change = outcome(rotated.services.integrations.update(1, undefined, String(id), { secret: 'new-hook-secret-0001' }, 'ada')).finally(() => {
        ended = true;
      });
      await untilEndedOrWaiting(owner, () => ended, 'the change');
      hold.go();
      expect((await rekeyed).resealed).toBeGreaterThanOrEqual(1);
      expect(await change).toBe('committed');
      const { rows } = await owner.query('select secret_iv, secret_tag, secret_ciphertext from hub.integrations where id = $1', [id]);
      expect(openIntegrationSecret(B, 1, id, rows[0])).toBe('new-hook-secret-0001');
    }, 30_000);

    it('the rotation holds the row first: the rekey waits, then finds the new value under the current key', async () => {
      await underA().create(1, { name: 'race-2', value: 'old-value-0002' }, 'ada');
      const hold = holdAfter(/update platform\.secrets/);
      const db = rotated.services.db;
      const wrapped = Object.assign(Object.create(db) as Database, {
        withTenant: <T>(tenant: number, fn: (tx: Tx) => Promise<T>) => db.withTenant(tenant, (tx) => fn(hold.wrap(tx))),
      });
      const tenantStore = new SecretStore(wrapped, rotated.services.events, ring, { cacheTtlMs: 0 });
      const rotation = outcome(tenantStore.rotate(1, 'race-2', { value: 'new-value-0002' }, 'ada'));
      await hold.held;
      let ended = false;
      const rekeyed = rekey(db, ring, [SECRET_VALUES], { batch: 1000 }).finally(() => {
        ended = true;
      });
      await untilEndedOrWaiting(owner, () => ended, 'the rekey');
      hold.go();
      await rekeyed;
      expect(await rotation).toBe('committed');
      expect(await underBOnly().resolveSecret(1, 'race-2')).toBe('new-value-0002');
    }, 30_000);
  });
});

describe('a stop', () => {
  it('ends the rekey after the batch in progress, with the counts so far; the command says so and exits 1', async () => {
    const h = await hub({ 'svc.secret.master-key': B_TEXT, 'svc.secret.previous-master-keys': A_TEXT });
    const controller = new AbortController();
    let batches = 0;
    const db = h.services.db;
    const wrapped: Pick<Database, 'crossTenant'> = {
      crossTenant: (job, fn) =>
        db.crossTenant(job, async (tx) => {
          const done = await fn(tx);
          batches++;
          controller.abort();
          return done;
        }),
    };
    const report = await rekey(wrapped, { current: B, previous: [A] }, SEALED_VALUES, { batch: 1, stop: controller.signal });
    expect(batches).toBe(1);
    expect(report.stopped).toBe(true);
    expect(report.resealed + report.current + report.unopened.length).toBe(1);

    // A signal that came before the command's database was set up interrupts that start (cmd/stop.ts):
    // no rekey begins, exit 1.
    const lines: string[] = [];
    expect(await secretsCommand(h.config, ['rekey'], (line) => lines.push(line), AbortSignal.abort())).toBe(1);
    expect(lines).toEqual([]);
    await stop(h);
  }, 30_000);
});

describe('arguments', () => {
  it('takes rekey and --batch N only', () => {
    expect(parseSecretsArgs(['rekey'])).toEqual({ batch: 100 });
    expect(parseSecretsArgs(['rekey', '--batch', '7'])).toEqual({ batch: 7 });
    expect(parseSecretsArgs([])).toBe('a command is required (rekey)');
    expect(parseSecretsArgs(['rotate'])).toBe("unknown command 'rotate'");
    expect(parseSecretsArgs(['rekey', '--batch'])).toBe('--batch needs a whole number from 1 to 10000');
    expect(parseSecretsArgs(['rekey', '--batch', '0'])).toBe('--batch needs a whole number from 1 to 10000');
    expect(parseSecretsArgs(['rekey', '--force'])).toBe("unexpected argument '--force'");
  });
});

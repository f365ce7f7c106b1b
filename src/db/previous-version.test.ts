import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type MigratedDatabase, migratedDatabase } from '../../test/harness/database.js';
import { deferred } from '../../test/harness/deferred.js';
import { untilEndedOrWaiting } from '../../test/harness/held-transaction.js';
import { until } from '../../test/harness/until.js';
import { readWatermark } from '../connectors/store.js';
import { storeResume } from '../connectors/resume.js';
import { activeRules, updateRule } from '../email/rules.js';
import type { Tx } from './database.js';
import { MANIFEST_KINDS } from '../manifests/kinds.js';
import { createManifestServices } from '../manifests/services.js';
import type { AdminServices } from '../admin/services.js';

/**
 * A rolling update: the pods of a new version apply its migrations while pods of the version before
 * still serve against the same database. The statements below are that earlier version's, copied as
 * text from git history (each names its commit and file), run as the hub's app role against the
 * schema every migration of this version has made: what they write must still mean what this
 * version reads.
 */

let m: MigratedDatabase;
beforeAll(async () => {
  m = await migratedDatabase({ 1: 'acme' });
});
afterAll(async () => {
  await m?.close();
});

describe('connectors: a stored position (V11) and the watermark writes of the version before it (V12)', () => {
  // 363dfb7b^ src/connectors/store.ts, setWatermark (reset-cursor, purge of the endpoint, a re-apply changing its key or table).
  const SET_WATERMARK_363DFB7B = 'update connectors.endpoints set watermark = $2, watermark_updated_at = now() where uuid = $1';
  // 363dfb7b^ src/connectors/store.ts, advanceWatermark (the run that completes).
  const ADVANCE_WATERMARK_363DFB7B = `update connectors.endpoints w set watermark = $2, watermark_updated_at = now()
      where w.uuid = $1 and w.watermark_updated_at is not distinct from $3::timestamptz and w.target_table = $4
        and exists (select 1 from connectors.connectors c cross join lateral jsonb_array_elements(c.spec -> 'endpoints') e
                     where c.id = w.connector_id and e ->> 'uuid' = w.uuid::text and e -> 'target' ->> 'unique_key' = $5)`;
  // 363dfb7b^ src/connectors/target/drop.ts, clearSharers (a delete or purge of rows of its table by another endpoint), its `others` being `uuid <> $2`.
  const CLEAR_SHARERS_363DFB7B = `update connectors.endpoints w set watermark = null, watermark_updated_at = now()
       from connectors.connectors c
      where c.id = w.connector_id and w.watermark is not null and w.uuid <> $2 and w.tenant_id = $3
        and (w.target_table = $1 or exists (select 1 from connectors.ext_tables t where t.endpoint_uuid = w.uuid and t.table_name = $1 and t.tenant_id = $3))
      returning c.name || '/' || w.endpoint_id as name`;

  const RESUME = JSON.stringify({ read: { position: { page: 5 }, shown: 'page 5' }, watermark: '2026-01-01', fingerprint: 'f' });
  let endpoint: string;
  beforeAll(async () => {
    const { rows } = await m.owner.query<{ uuid: string }>('select gen_random_uuid()::text as uuid');
    endpoint = rows[0]!.uuid;
    const spec = { endpoints: [{ id: 'contacts', uuid: endpoint, target: { table: 'contacts', unique_key: 'id' } }] };
    const { rows: connector } = await m.owner.query<{ id: string }>(
      `insert into connectors.connectors (tenant_id, name, connector_type, manifest, spec) values (1, 'crm', 'rest', '{}', $1) returning id`,
      [JSON.stringify(spec)],
    );
    await m.owner.query(
      `insert into connectors.endpoints (uuid, tenant_id, connector_id, endpoint_id, position, kind, method, path, pagination, target_table, sync_mode)
       values ($1, 1, $2, 'contacts', 0, 'rest', 'GET', '/contacts', 'page', 'contacts', 'incremental')`,
      [endpoint, connector[0]!.id],
    );
  });

  /** The endpoint as a run of this version cut by the page budget leaves it: watermark W0, a stored position. */
  async function midChain(): Promise<string> {
    await m.owner.query(
      `update connectors.endpoints set watermark = '2026-01-01', watermark_updated_at = now() - interval '1 hour', resume = $2, resume_shown = 'page 5', resume_run = gen_random_uuid() where uuid = $1`,
      [endpoint, RESUME],
    );
    const { rows } = await m.owner.query<{ at: string }>('select watermark_updated_at::text as at from connectors.endpoints where uuid = $1', [endpoint]);
    return rows[0]!.at;
  }

  const stored = async () =>
    (await m.owner.query<{ resume: string | null; resume_shown: string | null; resume_run: string | null }>('select resume, resume_shown, resume_run from connectors.endpoints where uuid = $1', [endpoint]))
      .rows[0]!;

  it('a reset, a completed run and a delete of rows of its table by the earlier version clear the position: the next run of this version starts from the first page', async () => {
    const writes: Array<[string, (at: string) => unknown[]]> = [
      ['reset-cursor', () => [endpoint, null]],
      ['a watermark set', () => [endpoint, '2026-02-01']],
    ];
    for (const [what, values] of writes) {
      const at = await midChain();
      await m.db.withTenant(1, (tx) => tx.query(SET_WATERMARK_363DFB7B, values(at)));
      // Was: the position kept, and this version's next run read on from page 5 with the watermark of the chain before (the reset not honoured).
      expect({ what, ...(await stored()) }).toEqual({ what, resume: null, resume_shown: null, resume_run: null });
      expect(await m.db.withTenant(1, (tx) => readWatermark(tx, endpoint))).not.toHaveProperty('resume');
    }
    const at = await midChain();
    const advanced = await m.db.withTenant(1, (tx) => tx.query(ADVANCE_WATERMARK_363DFB7B, [endpoint, '2026-03-01', at, 'contacts', 'id']));
    expect(advanced.rowCount).toBe(1);
    expect(await stored()).toEqual({ resume: null, resume_shown: null, resume_run: null });

    await midChain();
    const { rows: other } = await m.owner.query<{ uuid: string }>('select gen_random_uuid()::text as uuid');
    const cleared = await m.db.withTenant(1, (tx) => tx.query(CLEAR_SHARERS_363DFB7B, ['contacts', other[0]!.uuid, 1]));
    expect(cleared.rows).toEqual([{ name: 'crm/contacts' }]);
    expect(await stored()).toEqual({ resume: null, resume_shown: null, resume_run: null });
  });

  it('an apply through a pod of a version before V6 (the summary columns) fails, writing nothing, as docs/operations.md says', async () => {
    // 4904c95d^ src/connectors/store.ts, applyConnector's endpoint upsert.
    const UPSERT_ENDPOINT_4904C95D = `insert into connectors.endpoints (tenant_id, connector_id, endpoint_id, enabled, position)
       values (core.current_tenant(), $1, $2, $3, $4)
       on conflict (connector_id, endpoint_id) do update set enabled = excluded.enabled, position = excluded.position, updated_at = now()
       returning uuid`;
    const { rows } = await m.owner.query<{ id: string }>("select id from connectors.connectors where name = 'crm'");
    // A new endpoint, and one stored already (the row's own columns are checked before the conflict).
    for (const [endpointId, position] of [['deals', 1], ['contacts', 0]] as const) {
      await expect(m.db.withTenant(1, (tx) => tx.query(UPSERT_ENDPOINT_4904C95D, [rows[0]!.id, endpointId, false, position]))).rejects.toThrow(
        'null value in column "kind" of relation "endpoints" violates not-null constraint',
      );
    }
    expect((await m.owner.query('select endpoint_id, enabled from connectors.endpoints')).rows).toEqual([{ endpoint_id: 'contacts', enabled: true }]);
  });

  it('this version storing a position (no watermark written) keeps it', async () => {
    const at = await midChain();
    await m.owner.query('update connectors.endpoints set resume = null, resume_shown = null, resume_run = null where uuid = $1', [endpoint]);
    const { rows: run } = await m.owner.query<{ id: string }>('select gen_random_uuid()::text as id');
    const resume = { read: { position: { page: 7 }, shown: 'page 7' }, watermark: '2026-01-01', fingerprint: 'f' };
    const kept = await m.db.withTenant(1, (tx) => storeResume(tx, endpoint, { at }, { table: 'contacts', unique_key: 'id' }, resume as never, run[0]!.id));
    expect(kept).toBe(true);
    expect(await stored()).toEqual({ resume: expect.stringContaining('"page":7'), resume_shown: 'page 7', resume_run: run[0]!.id });
  });
});

describe('workflows: baseline_upto (V3) and the apply of the version before it (V4)', () => {
  // 75e9460f^ src/workflows/store.ts, the apply's upsert.
  const APPLY_75E9460F = `insert into workflows.workflows (tenant_id, name, entity, scope, state_column, manifest, spec, created_by, updated_by)
     values (core.current_tenant(), $1, $2, $3, $4, $5, $6, $7, $7)
     on conflict (tenant_id, name) do update
       set entity = excluded.entity, scope = excluded.scope, state_column = excluded.state_column,
           manifest = excluded.manifest, spec = excluded.spec, updated_by = excluded.updated_by, updated_at = now(),
           tracked_since = case when (workflows.entity, workflows.state_column) = (excluded.entity, excluded.state_column) then workflows.tracked_since else now() end,
           baseline_done = case when (workflows.entity, workflows.state_column) = (excluded.entity, excluded.state_column) then workflows.baseline_done else false end
     returning id, (xmax = 0) as created, tracked_since = now() as reset`;

  it('a re-apply by the earlier version watching another state column starts a new first pass without the old one\'s key; one watching the same keeps it', async () => {
    await m.owner.query(
      `insert into workflows.workflows (tenant_id, name, entity, state_column, manifest, spec, tracked_since, baseline_done, baseline_upto)
       values (1, 'deals', 'deal', 'stage', '{}', '{}', now() - interval '1 day', false, 'k500')`,
    );
    const row = async () =>
      (await m.owner.query<{ baseline_upto: string | null; moved: boolean }>(`select baseline_upto, tracked_since > now() - interval '1 hour' as moved from workflows.workflows where name = 'deals'`)).rows[0]!;
    const apply = (stateColumn: string) => m.db.withTenant(1, (tx) => tx.query(APPLY_75E9460F, ['deals', 'deal', null, stateColumn, '{}', '{}', 'test']));
    await apply('stage');
    expect(await row()).toEqual({ baseline_upto: 'k500', moved: false });
    await apply('status');
    // Was: 'k500' left, and this version's first pass dated the records up to it from when it saw them.
    expect(await row()).toEqual({ baseline_upto: null, moved: true });
  });
});

describe('email: active_since (V3) and the rule update of the version before it (V6)', () => {
  // b87a7b6d^ src/email/rules.ts, updateRule with { enabled } alone.
  const ENABLE_B87A7B6D = 'update email.rules set enabled = $2, updated_by = $3, updated_at = now() where id = $1 and deleted_at is null returning id, name, event_types as "eventTypes", recipient, subject, body, enabled';

  it('a rule enabled again by the earlier version becomes active at that write; one already enabled keeps its time', async () => {
    const { rows } = await m.owner.query<{ id: string }>(
      `insert into email.rules (tenant_id, name, event_types, recipient, subject, body, enabled, created_at, active_since)
       values (1, 'r', '{deal.*}', 'a@example.com', 's', 'b', false, now() - interval '1 day', now() - interval '1 day') returning id`,
    );
    const id = rows[0]!.id;
    const recent = async () =>
      (await m.owner.query<{ recent: boolean }>(`select active_since > now() - interval '1 hour' as recent from email.rules where id = $1`, [id])).rows[0]!.recent;
    await m.db.withTenant(1, (tx) => tx.query(ENABLE_B87A7B6D, [id, true, 'test']));
    // Was: active since the day before, so the events written while it was disabled were its own.
    expect(await recent()).toBe(true);
    await m.owner.query(`update email.rules set active_since = now() - interval '1 day' where id = $1`, [id]);
    await m.db.withTenant(1, (tx) => tx.query(ENABLE_B87A7B6D, [id, true, 'test']));
    expect(await recent()).toBe(false);
  });
});

describe('email: the rule enabling of the version before the consumer waited for rule writes (V7)', () => {
  // 9b589e47^ src/email/rules.ts, updateRule with { enabled: true } alone: no lock of the tenant's rule writes.
  const ENABLE_9B589E47 = `update email.rules set enabled = $2, active_since = case when enabled then active_since else clock_timestamp() end, updated_by = $3, updated_at = now()
      where id = $1 and deleted_at is null returning id, name, event_types as "eventTypes", recipient, subject, body, enabled`;

  it('an enabling by the earlier version is waited for by the consumer\'s read of the rules, which then has the rule, active from before the read', async () => {
    const { rows } = await m.owner.query<{ id: string }>(
      `insert into email.rules (tenant_id, name, event_types, recipient, subject, body, enabled) values (1, 'late', '{deal.*}', 'a@example.com', 's', 'b', false) returning id`,
    );
    const id = Number(rows[0]!.id);
    // The old pod's enabling: written, not yet committed.
    let commit!: () => void;
    const committed = new Promise<void>((resolve) => {
      commit = resolve;
    });
    let enabled!: () => void;
    const written = new Promise<void>((resolve) => {
      enabled = resolve;
    });
    const enabling = m.db.withTenant(1, async (tx) => {
      await tx.query(ENABLE_9B589E47, [id, true, 'old pod']);
      enabled();
      await committed;
    });
    await Promise.race([written, enabling]);
    // The consumer's read meanwhile (an event written after the enabling's time is served by it).
    let readDone = false;
    const reading = m.db.withTenant(1, (tx) => activeRules(tx, { awaitWrites: true })).finally(() => {
      readDone = true;
    });
    await untilEndedOrWaiting(m.owner, () => readDone, 'the consumer\'s read');
    // Was: the read did not wait, ran without the rule, and its readAt was after the rule's time.
    expect(readDone).toBe(false);
    commit();
    await enabling;
    const read = await reading;
    const rule = read.rules.find((r) => Number(r.id) === id);
    expect(rule).toBeDefined();
    expect(rule!.activeSince.getTime()).toBeLessThanOrEqual(read.readAt.getTime());
  });

  /**
   * 9b589e47^'s enabling has no lock of its own: its update locks the rule's row, and V7's row
   * trigger then takes the tenant's rule-writes lock; this version takes that lock before its update
   * (as every version since 9b589e47 does). This version's enabling of the same rule is paused
   * before its update (its lock taken) or after it, the earlier version's statement is sent and runs
   * until it ends or waits on a lock, then this version's goes on. Both must commit.
   */
  async function enableBoth(at: 'before update' | 'after update'): Promise<PromiseSettledResult<unknown>[]> {
    const { rows } = await m.owner.query<{ id: string }>(
      `insert into email.rules (tenant_id, name, event_types, recipient, subject, body, enabled) values (1, $1, '{deal.*}', 'a@example.com', 's', 'b', false) returning id`,
      [`both-${at}`],
    );
    const id = Number(rows[0]!.id);
    const [reached, resumed] = [deferred(), deferred()];
    const pausing = (tx: Tx): Tx => ({
      ...tx,
      query: (async (text: string, values?: unknown[]) => {
        const isUpdate = text.trimStart().startsWith('update email.rules');
        if (isUpdate && at === 'before update') {
          reached.resolve();
          await resumed.promise;
        }
        const result = await tx.query(text, values);
        if (isUpdate && at === 'after update') {
          reached.resolve();
          await resumed.promise;
        }
        return result;
      }) as Tx['query'],
    });
    const current = m.db.withTenant(1, (tx) => updateRule(pausing(tx), id, { enabled: true }, 'new pod'));
    await Promise.race([reached.promise, current]);
    let oldPid = 0;
    let oldStatementDone = false;
    const previous = m.db.withTenant(1, async (tx) => {
      oldPid = (await tx.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      await tx.query(ENABLE_9B589E47, [id, true, 'old pod']);
      oldStatementDone = true;
    });
    // The earlier version's statement has ended, or waits on a lock (this version's, or the row's).
    await until('the earlier version\'s statement to end or wait on a lock', async () => {
      if (oldStatementDone) return true;
      if (!oldPid) return false;
      const { rows: waiting } = await m.owner.query('select 1 from pg_stat_activity where pid = $1 and wait_event_type = $2', [oldPid, 'Lock']);
      return waiting.length > 0;
    }, { everyMs: 10 });
    resumed.resolve();
    const settled = await Promise.allSettled([current, previous]);
    const { rows: after } = await m.owner.query('select enabled from email.rules where id = $1', [id]);
    expect(after).toEqual([{ enabled: true }]);
    return settled;
  }

  it.each(['before update', 'after update'] as const)(
    'this version\'s enabling and the earlier version\'s of the same rule at once both commit (this version paused %s)',
    async (at) => {
      // Was (before update): "deadlock detected" for one of them, this version holding the rule-writes lock
      // and waiting for the row, the earlier version holding the row and waiting for the lock (in the V7
      // trigger). Now (V8) the earlier version's statement takes the lock before any row, as this version does.
      const settled = await enableBoth(at);
      expect(settled.map((s) => (s.status === 'rejected' ? String(s.reason) : s.status))).toEqual(['fulfilled', 'fulfilled']);
    },
  );
});

describe('manifests: the warnings of an object\'s last change (V3) and the applies of an operator of the version before (V4)', () => {
  // 6ac24d11^ src/processes/store.ts, applyProcess (an object changed by the earlier operator's apply).
  const APPLY_PROCESS_6AC24D11 = `insert into processes.processes (tenant_id, name, event, when_expr, decision, message, manifest, created_by, updated_by)
     values (core.current_tenant(), $1, $2, $3, $4, $5, $6, $7, $7)
     on conflict (tenant_id, name) do update
       set event = excluded.event, when_expr = excluded.when_expr, decision = excluded.decision, message = excluded.message,
           manifest = excluded.manifest, updated_by = excluded.updated_by, updated_at = now()
     returning (xmax = 0) as created`;
  // 6ac24d11^ src/manifests/services.ts, applyIfChanged: the owner record of a new generation, without the warnings.
  const RECORD_OWNER_6AC24D11 = `insert into manifests.owners (tenant_id, kind, name, namespace, resource, uid, generation)
             values (core.current_tenant(), $1, $2, $3, $4, $5, $6)
             on conflict (tenant_id, kind, name) do update set namespace = excluded.namespace, resource = excluded.resource, uid = excluded.uid,
               generation = case when manifests.owners.uid = excluded.uid then greatest(manifests.owners.generation, excluded.generation) else excluded.generation end,
               updated_at = now()`;

  it('a change the earlier operator applied forgets the warnings of the change before: this version\'s resync does not show them as that change\'s', async () => {
    const admin = { tenants: { byCode: async () => ({ id: 1, active: true }) } } as unknown as AdminServices;
    const manifests = createManifestServices({ db: m.db, admin });
    const kind = MANIFEST_KINDS.find((k) => k.kind === 'Process')!;
    const manifest = (message: string) => ({ apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name: 'late' }, spec: { event: 'deal.*', decision: 'decision.late', message } });
    const owner = (generation: number) => ({ namespace: 'ns', name: 'late', uid: 'uid-late', generation });
    const actor = 'operator';
    await manifests.applyIfChanged(kind, 1, 'late', manifest('one'), actor, owner(1));
    // The warnings this version recorded with that change (a Process has none of its own: as a connector's changed unique_key would have).
    await m.owner.query(`update manifests.owners set warnings = '{the change before}' where name = 'late'`);
    // The earlier operator applies generation 2.
    await m.db.withTenant(1, async (tx) => {
      await tx.query(APPLY_PROCESS_6AC24D11, ['late', 'deal.*', null, 'decision.late', 'two', JSON.stringify(manifest('two')), actor]);
      await tx.query(RECORD_OWNER_6AC24D11, ['Process', 'late', 'ns', 'late', 'uid-late', 2]);
    });
    const resync = await manifests.applyIfChanged(kind, 1, 'late', manifest('two'), actor, owner(2));
    // Was: ['the change before'], shown in the status as generation 2's.
    expect(resync).toMatchObject({ changed: false });
    expect(resync).not.toHaveProperty('changeWarnings');
    // A change this version applies records its own, after its write of the object.
    const changed = await manifests.applyIfChanged(kind, 1, 'late', manifest('three'), actor, owner(3));
    expect(changed).toMatchObject({ changed: true, changeWarnings: [] });
    expect((await m.owner.query(`select warnings from manifests.owners where name = 'late'`)).rows).toEqual([{ warnings: [] }]);
    expect(await manifests.applyIfChanged(kind, 1, 'late', manifest('three'), actor, owner(3))).toMatchObject({ changed: false, changeWarnings: [] });
  });
});

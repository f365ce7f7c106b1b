import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { type Hold, holdAfter, outcome, untilEndedOrWaiting } from '../../test/harness/held-transaction.js';
import { ownerClient } from '../../test/harness/api-client.js';
import { hubRunner, storedKeys } from '../../test/harness/connector-runner.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import type { Database } from '../db/database.js';
import type { ConnectorRunner, PageReader } from './runner.js';
import { windowText } from './schedule.js';
import { ConnectorScheduler } from './scheduler.js';
import { applyConnector, deleteConnector, loadConnectorById } from './store.js';
import type { ConnectorSpec, EndpointSpec } from './types.js';

/**
 * A connector run meeting what may happen at the same time on its connector, on the real
 * PostgreSQL, in a fixed interleaving: a re-apply of the connector while one of its runs waits for
 * its turn behind an earlier endpoint's run, and a CSV ingest naming a connector whose delete is
 * held uncommitted, and a trigger built from a spec read before a re-apply that changed its endpoints.
 */

let hub: TestHub;
let owner: pg.Client;

const runner = (reader: PageReader, db: Database = hub.services.db) => hubRunner(hub, { db, reader, chunkSize: 10 });

/** The hub's database, each of its tenant transactions held as `hold` says (the first statement matching its pattern). */
function heldDb(hold: Hold): Database {
  const db = hub.services.db;
  return Object.assign(Object.create(db) as Database, { withTenant: ((tenantId, fn) => db.withTenant(tenantId, (tx) => fn(hold.wrap(tx)))) as Database['withTenant'] });
}

type Endpoint = { id: string; table: string; enabled?: boolean };
function manifest(name: string, endpoints: Endpoint[], schedule?: string, window?: string) {
  const spec = {
    base_url: 'http://127.0.0.1:9',
    ...(schedule ? { schedule } : {}),
    ...(window ? { window } : {}),
    endpoints: endpoints.map((e) => ({
      id: e.id,
      ...(e.enabled === false ? { enabled: false } : {}),
      path: `/${e.id}`,
      incremental: { mode: 'watermark', param: 'since', watermark_path: '$.v' },
      target: { table: e.table, unique_key: '$.id' },
    })),
  };
  return { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name }, connector_type: 'rest-generic', spec };
}

async function applied(name: string, endpoints: Endpoint[], schedule?: string, window?: string): Promise<ConnectorSpec> {
  return (await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest(name, endpoints, schedule, window)))).connector;
}

/** The runs recorded of the connector, as `endpoint: status`. */
async function runsOf(connector: ConnectorSpec): Promise<string[]> {
  const { rows } = await owner.query<{ name: string }>("select endpoint_id || ': ' || status as name from connectors.runs where connector_id = $1 order by started_at, endpoint_id", [
    connector.id,
  ]);
  return rows.map((r) => r.name);
}

/** The runs recorded of the connector whose endpoint is not stored (a re-apply removed it). */
async function runsOfGoneEndpoints(connector: ConnectorSpec): Promise<string[]> {
  const { rows } = await owner.query<{ name: string }>(
    `select r.endpoint_id as name from connectors.runs r
      where r.connector_id = $1 and not exists (select 1 from connectors.endpoints w where w.uuid = r.endpoint_uuid) order by 1`,
    [connector.id],
  );
  return rows.map((r) => r.name);
}

async function watermarks(connector: ConnectorSpec): Promise<Record<string, string | null>> {
  const { rows } = await owner.query<{ endpoint_id: string; watermark: string | null }>('select endpoint_id, watermark from connectors.endpoints where connector_id = $1 order by 1', [
    connector.id,
  ]);
  return Object.fromEntries(rows.map((r) => [r.endpoint_id, r.watermark]));
}

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('a re-apply of the connector while a run of it waits for its turn', () => {
  it("that moves the waiting endpoint to another table leaves its watermark cleared: the run, writing the old table, does not set it", async () => {
    const before = [
      { id: 'first', table: 'ext.rl_first' },
      { id: 'second', table: 'ext.rl_old' },
    ];
    const connector = await applied('relay', before);
    // The second endpoint has read up to 5 into its table.
    const primed = await runner(pagesOf({ second: [{ id: 's1', v: 5 }] })).trigger(1, connector, { endpoint: 'second', triggeredBy: 'manual' });
    expect((await primed.done)[0]).toMatchObject({ status: 'Completed' });
    expect(await watermarks(connector)).toEqual({ first: null, second: '5' });

    // Both endpoints run, one after the other: the first's run is held reading, the second's is Running, queued behind it.
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let reading = () => {};
    const firstReading = new Promise<void>((resolve) => {
      reading = resolve;
    });
    const reader: PageReader = {
      async *read(_c, endpoint: EndpointSpec) {
        if (endpoint.id === 'first') {
          reading();
          await gate;
          yield { number: 1, items: [{ id: 'f1', v: 1 }] };
        } else yield { number: 1, items: [{ id: 's2', v: 9 }] };
      },
    };
    const triggered = await runner(reader).trigger(1, connector, { triggeredBy: 'manual' });
    await firstReading;

    // The second endpoint now writes ext.rl_new: apply clears its watermark, so that its next run reads everything into it.
    const reapplied = await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest('relay', [before[0]!, { id: 'second', table: 'ext.rl_new' }])));
    expect(reapplied.created).toBe(false);
    expect(await watermarks(connector)).toEqual({ first: null, second: null });

    release();
    const runs = await triggered.done;
    expect(runs.map((r) => r.status)).toEqual(['Completed', 'Completed']);
    // The queued run ran as triggered (the old table), and left the watermark as the apply did.
    expect(await storedKeys(owner, 'rl_old')).toEqual(['s1', 's2']);
    expect(await watermarks(connector)).toEqual({ first: '1', second: null });
  }, 30_000);
});

describe('a CSV ingest naming a connector being deleted', () => {
  it('waits for the delete, then writes its rows as for a connector that is not stored: none tagged with the deleted connector', async () => {
    const crm = await applied('crm', [{ id: 'people', table: 'ext.rl_people' }]);

    // The delete has removed the connector's row, uncommitted; the ingest finds the connector still there.
    const hold = holdAfter(/^delete from connectors\.connectors/);
    const removed = outcome(hub.services.db.withTenant(1, (tx) => deleteConnector(hold.wrap(tx), 'crm')), true);
    await hold.held;

    let ended = false;
    const ingested = outcome(hub.services.connectors.runs.ingestCsv(1, undefined, { connector: 'crm', table: 'rl_contacts', key: 'id', csv: 'id,name\nc1,Ada\n', triggeredBy: 'csv:test' }).then((run) => run.status), true).finally(() => {
      ended = true;
    });
    await untilEndedOrWaiting(owner, () => ended, 'the ingest');
    hold.go();

    expect(await removed).toBe('committed: true');
    expect(await ingested).toBe('committed: Completed');
    expect(await storedKeys(owner, 'rl_contacts')).toEqual(['c1']);
    const tagged = await owner.query('select external_id from ext_t1.rl_contacts where connector_id = $1', [crm.id]);
    expect(tagged.rows).toEqual([]);
    const registered = await owner.query('select table_name from connectors.ext_tables where connector_id = $1', [crm.id]);
    expect(registered.rows).toEqual([]);
  }, 30_000);
});

describe('a trigger built from a spec read before a re-apply that removes one of its endpoints', () => {
  const both = [
    { id: 'kept', table: 'ext.rg_kept' },
    { id: 'gone', table: 'ext.rg_gone' },
  ];
  const pages = pagesOf({ kept: [{ id: 'k1', v: 1 }], gone: [{ id: 'g1', v: 1 }] });

  it('after the re-apply has committed: a run of the removed endpoint named is a 404 saying so, of all endpoints a 409; nothing runs', async () => {
    const stale = await applied('rg-after', both);
    await applied('rg-after', [both[0]!]);

    const named = await outcome(runner(pages).trigger(1, stale, { endpoint: 'gone', triggeredBy: 'manual' }));
    expect(named).toBe('failed: connector rg-after has no endpoint gone: a re-apply of the connector removed it after this run was asked for (no run started)');
    const all = runner(pages).trigger(1, stale, { triggeredBy: 'manual' });
    await expect(all).rejects.toMatchObject({
      message: 'connector rg-after was re-applied while its runs were being started',
      hint: 'endpoint gone is no longer in its manifest (a re-apply removed it); no run was started: ask again to run its endpoints as applied now',
    });
    expect(await runsOf(stale)).toEqual([]);
  }, 30_000);

  it('after the re-apply has committed: the scheduler runs the endpoints still there and leaves the removed one out', async () => {
    const stale = await applied('rg-sched', both, '* * * * *');
    await applied('rg-sched', [both[0]!], '* * * * *');

    const scheduler = new ConnectorScheduler(hub.services.db, runner(pages), async () => stale);
    const fired = await scheduler.fire(1, stale.id);
    expect(fired.kind).toBe('started');
    if (fired.kind !== 'started') return;
    expect(fired.triggered.runs.map((r) => r.endpoint)).toEqual(['kept']);
    expect((await fired.triggered.done).map((r) => r.status)).toEqual(['Completed']);
    expect(await runsOf(stale)).toEqual(['kept: Completed']);
  }, 30_000);

  it('a re-apply sent while the trigger records its runs waits for it, then finds the run in flight and is a 409', async () => {
    const stale = await applied('rg-race1', both);

    // The trigger has recorded the run of the endpoint the re-apply removes, uncommitted.
    const hold = holdAfter(/^insert into connectors\.runs/);
    const triggered = outcome(runner(pages, heldDb(hold)).trigger(1, stale, { endpoint: 'gone', triggeredBy: 'manual' }).then((t) => t.done).then((runs) => runs.map((r) => r.status).join()), true);
    await hold.held;
    let ended = false;
    const reapplied = outcome(hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest('rg-race1', [both[0]!])).then(() => 'applied')), true).finally(() => {
      ended = true;
    });
    await untilEndedOrWaiting(owner, () => ended, 'the re-apply');
    hold.go();

    expect(await triggered).toBe('committed: Completed');
    expect(await reapplied).toBe('failed: connector rg-race1 has a run in flight');
    expect(await runsOfGoneEndpoints(stale)).toEqual([]);
    expect(await runsOf(stale)).toEqual(['gone: Completed']);
  }, 30_000);

  it('a trigger sent while the re-apply has removed the endpoint waits for it, then is a 404: no run of the removed endpoint', async () => {
    const stale = await applied('rg-race2', both);

    // The re-apply has deleted the endpoint's row, uncommitted; the trigger runs the spec read before.
    const hold = holdAfter(/^delete from connectors\.endpoints/);
    const reapplied = outcome(hub.services.db.withTenant(1, (tx) => applyConnector(hold.wrap(tx), manifest('rg-race2', [both[0]!])).then(() => 'applied')), true);
    await hold.held;
    let ended = false;
    const triggered = outcome(runner(pages).trigger(1, stale, { endpoint: 'gone', triggeredBy: 'manual' }).then((t) => t.done).then((runs) => runs.map((r) => r.status).join()), true).finally(() => {
      ended = true;
    });
    await untilEndedOrWaiting(owner, () => ended, 'the trigger');
    hold.go();

    expect(await reapplied).toBe('committed: applied');
    expect(await triggered).toBe('failed: connector rg-race2 has no endpoint gone: a re-apply of the connector removed it after this run was asked for (no run started)');
    expect(await runsOf(stale)).toEqual([]);
    // (ext.rg_gone holds the rows of the other connectors here.)
    const written = await owner.query('select external_id from ext_t1.rg_gone where connector_id = $1', [stale.id]);
    expect(written.rows).toEqual([]);
  }, 30_000);

  it('two triggers of the connector at once do not wait for each other', async () => {
    const connector = await applied('rg-twice', both);

    // The first trigger holds its lock on the connector's row; the second records and runs its run meanwhile.
    const hold = holdAfter(/^select spec from connectors\.connectors .* for share$/);
    const first = outcome(runner(pages, heldDb(hold)).trigger(1, connector, { endpoint: 'kept', triggeredBy: 'manual' }).then((t) => t.done).then((runs) => runs.map((r) => r.status).join()), true);
    await hold.held;
    const second = await outcome(runner(pages).trigger(1, connector, { endpoint: 'gone', triggeredBy: 'manual' }).then((t) => t.done).then((runs) => runs.map((r) => r.status).join()), true);
    expect(second).toBe('committed: Completed');
    hold.go();
    expect(await first).toBe('committed: Completed');
    expect((await runsOf(connector)).sort()).toEqual(['gone: Completed', 'kept: Completed']);
  }, 30_000);
});

describe('a trigger built from a spec read before a re-apply that disables, enables or adds endpoints', () => {
  // Read before the re-apply: `on` and `off` enabled, `later` disabled. Applied now: `on` enabled,
  // `off` disabled, `later` enabled, `added` new.
  const before: Endpoint[] = [
    { id: 'on', table: 'ext.re_on' },
    { id: 'off', table: 'ext.re_off' },
    { id: 'later', table: 'ext.re_later', enabled: false },
  ];
  const after: Endpoint[] = [
    { id: 'on', table: 'ext.re_on' },
    { id: 'off', table: 'ext.re_off', enabled: false },
    { id: 'later', table: 'ext.re_later' },
    { id: 'added', table: 'ext.re_added' },
  ];
  const pages = pagesOf({ on: [{ id: 'o1', v: 1 }], off: [{ id: 'x1', v: 1 }], later: [{ id: 'l1', v: 1 }], added: [{ id: 'a1', v: 1 }] });
  const status = (t: { done: Promise<Array<{ status: string }>> }) => t.done.then((runs) => runs.map((r) => r.status).join());

  it('after the re-apply has committed: the endpoint it disabled, named, is a 400 as for any disabled endpoint; nothing runs', async () => {
    const stale = await applied('re-named', before);
    await applied('re-named', after);

    const named = runner(pages).trigger(1, stale, { endpoint: 'off', triggeredBy: 'manual' });
    await expect(named).rejects.toMatchObject({ message: 'endpoint off is disabled', field: 'endpoint' });
    expect(await runsOf(stale)).toEqual([]);
  }, 30_000);

  it('after the re-apply has committed: the endpoint it enabled, named, runs', async () => {
    const stale = await applied('re-enabled', before);
    await applied('re-enabled', after);

    const named = await outcome(runner(pages).trigger(1, stale, { endpoint: 'later', triggeredBy: 'manual' }).then(status), true);
    expect(named).toBe('committed: Completed');
    expect(await runsOf(stale)).toEqual(['later: Completed']);
  }, 30_000);

  it('after the re-apply has committed: all enabled endpoints are those enabled now (manual and scheduled)', async () => {
    const stale = await applied('re-all', before, '* * * * *');
    await applied('re-all', after, '* * * * *');

    const manual = await runner(pages).trigger(1, stale, { triggeredBy: 'manual' });
    expect(manual.runs.map((r) => r.endpoint)).toEqual(['on', 'later', 'added']);
    expect(await status(manual)).toBe('Completed,Completed,Completed');

    const scheduler = new ConnectorScheduler(hub.services.db, runner(pages), async () => stale);
    const fired = await scheduler.fire(1, stale.id);
    expect(fired.kind).toBe('started');
    if (fired.kind !== 'started') return;
    expect(fired.triggered.runs.map((r) => r.endpoint)).toEqual(['on', 'later', 'added']);
    expect(await status(fired.triggered)).toBe('Completed,Completed,Completed');
    expect((await runsOf(stale)).filter((r) => r.startsWith('off'))).toEqual([]);
    expect(await storedKeys(owner, 're_off')).toEqual(['(no table)']);
  }, 30_000);

  it('a trigger sent while the re-apply is storing its spec waits for it, then runs the endpoints as re-applied', async () => {
    const stale = await applied('re-race', before);

    // The re-apply has stored its endpoints and spec, uncommitted; the trigger runs the spec read before.
    const hold = holdAfter(/^update connectors\.connectors set spec/);
    const reapplied = outcome(hub.services.db.withTenant(1, (tx) => applyConnector(hold.wrap(tx), manifest('re-race', after)).then(() => 'applied')), true);
    await hold.held;
    let ended = false;
    const triggered = outcome(runner(pages).trigger(1, stale, { triggeredBy: 'manual' }).then(status), true).finally(() => {
      ended = true;
    });
    await untilEndedOrWaiting(owner, () => ended, 'the trigger');
    hold.go();

    expect(await reapplied).toBe('committed: applied');
    expect(await triggered).toBe('committed: Completed,Completed,Completed');
    expect(await runsOf(stale)).toEqual(expect.arrayContaining(['on: Completed', 'later: Completed', 'added: Completed']));
    expect(await runsOf(stale)).toHaveLength(3);
  }, 30_000);
});

describe('a scheduled slot claimed before a re-apply that changes the schedule', () => {
  const endpoints = [{ id: 'items', table: 'ext.rs_items' }];
  const pages = pagesOf({ items: [{ id: 'i1', v: 1 }] });

  /**
   * A scheduler whose claim (on the connector as stored then) commits, then `between` runs (a re-apply, committed or
   * held), then the trigger records the runs. Its clock stands still at `now`, so the slot is this minute.
   */
  function scheduler(now: Date, between: () => Promise<void>) {
    const real = runner(pages);
    const staged = Object.assign(Object.create(real) as ConnectorRunner, {
      trigger: async (...args: Parameters<ConnectorRunner['trigger']>) => {
        await between();
        return real.trigger(...args);
      },
    });
    return new ConnectorScheduler(hub.services.db, staged, loadConnectorById, () => now);
  }

  const now = () => new Date(Math.floor(Date.now() / 60_000) * 60_000 + 30_000);
  const minuteOfDay = (at: Date) => at.getUTCHours() * 60 + at.getUTCMinutes();

  it('that removes the schedule: the slot is not run', async () => {
    const at = now();
    const connector = await applied('rs-gone', endpoints, '* * * * *');
    const fired = await scheduler(at, async () => {
      await applied('rs-gone', endpoints);
    }).fire(1, connector.id);
    expect(fired).toMatchObject({ kind: 'withdrawn', reason: expect.stringContaining('has no schedule now') });
    expect(await runsOf(connector)).toEqual([]);
  }, 30_000);

  it('that changes the cron to one without that slot: the slot is not run', async () => {
    const at = now();
    const other = `${(at.getUTCMinutes() + 30) % 60} * * * *`;
    const connector = await applied('rs-cron', endpoints, '* * * * *');
    const fired = await scheduler(at, async () => {
      await applied('rs-cron', endpoints, other);
    }).fire(1, connector.id);
    expect(fired).toMatchObject({ kind: 'withdrawn', reason: expect.stringContaining(`its schedule "${other}" has no slot at`) });
    expect(await runsOf(connector)).toEqual([]);
  }, 30_000);

  it('that moves the window away from the slot: the slot is not run', async () => {
    const at = now();
    const window = windowText({ start: (minuteOfDay(at) + 60) % 1440, end: (minuteOfDay(at) + 120) % 1440 });
    const connector = await applied('rs-window', endpoints, '* * * * *');
    const fired = await scheduler(at, async () => {
      await applied('rs-window', endpoints, '* * * * *', window);
    }).fire(1, connector.id);
    expect(fired).toMatchObject({ kind: 'withdrawn', reason: expect.stringContaining(`is outside its window ${window} now`) });
    expect(await runsOf(connector)).toEqual([]);
  }, 30_000);

  it('or a delete of the connector: the slot is not run, and that is no error', async () => {
    const connector = await applied('rs-deleted', endpoints, '* * * * *');
    const fired = await scheduler(now(), async () => {
      expect(await hub.services.db.withTenant(1, (tx) => deleteConnector(tx, 'rs-deleted'))).toBe(true);
    }).fire(1, connector.id);
    expect(fired).toMatchObject({ kind: 'withdrawn', reason: expect.stringMatching(/^connector rs-deleted was deleted after its slot \S+ was claimed: the slot is not run$/) });
    expect(await runsOf(connector)).toEqual([]);
  }, 30_000);

  it('that keeps a cron naming the slot: the slot runs, with the endpoints as re-applied', async () => {
    const at = now();
    const connector = await applied('rs-kept', endpoints, '* * * * *');
    const fired = await scheduler(at, async () => {
      await applied('rs-kept', [...endpoints, { id: 'more', table: 'ext.rs_more' }], `${at.getUTCMinutes()} * * * *`);
    }).fire(1, connector.id);
    expect(fired.kind).toBe('started');
    if (fired.kind !== 'started') return;
    expect(fired.triggered.runs.map((r) => r.endpoint)).toEqual(['items', 'more']);
    expect((await fired.triggered.done).map((r) => r.status)).toEqual(['Completed', 'Completed']);
  }, 30_000);

  it('that is storing its spec as the trigger locks the connector: the trigger waits for it, then does not run the slot', async () => {
    const at = now();
    const connector = await applied('rs-race', endpoints, '* * * * *');
    const hold = holdAfter(/^update connectors\.connectors set spec/);
    let reapplied: Promise<string> = Promise.resolve('not sent');
    let ended = false;
    const fired = scheduler(at, async () => {
      reapplied = outcome(hub.services.db.withTenant(1, (tx) => applyConnector(hold.wrap(tx), manifest('rs-race', endpoints)).then(() => 'applied')), true);
      await hold.held;
      // The trigger goes on to lock the connector's row, which the held re-apply has updated.
      void untilEndedOrWaiting(owner, () => ended, 'the trigger').then(() => hold.go());
    })
      .fire(1, connector.id)
      .finally(() => {
        ended = true;
      });
    expect(await fired).toMatchObject({ kind: 'withdrawn', reason: expect.stringContaining('has no schedule now') });
    expect(await reapplied).toBe('committed: applied');
    expect(await runsOf(connector)).toEqual([]);
  }, 30_000);
});

/** A reader answering each endpoint (by id) one page of the items given. */
function pagesOf(items: Record<string, unknown[]>): PageReader {
  return {
    async *read(_c, endpoint: EndpointSpec) {
      yield { number: 1, items: items[endpoint.id] ?? [] };
    },
  };
}

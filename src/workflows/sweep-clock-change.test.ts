import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { TEST_ROLES } from '../../test/harness/database.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { applySweptWorkflow } from '../../test/harness/workflow-fixture.js';
import { Database } from '../db/database.js';
import { roleUrl } from '../db/roles.js';
import { sweepWorkflows } from './sweep.js';

/**
 * A dormancy counted in days across a daylight-saving clock change, on a database whose time zone
 * has one (initdb writes the machine's zone into postgresql.conf: a hub on a machine set to
 * Europe/Paris gets it): the spell is dormant once it is `after` old, days of 24 hours, as in UTC.
 * Counted in the session's zone, `now() - interval 'N days'` is N calendar days of that zone, an
 * hour more or less than N × 24 h across the change: a spell was announced an hour late or an
 * hour early. The number of days is chosen for the day the test runs: the smallest that reaches
 * back across one clock change of Europe/Paris.
 */

const ZONE = 'Europe/Paris';
let hub: TestHub;
let owner: pg.Client;
let paris: Database;
let days: number;
/** Seconds by which N days of Europe/Paris back from now exceed N × 24 h (±3600). */
let drift: number;

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  const { rows } = await owner.query<{ n: number; drift: number }>(
    `select n, (extract(epoch from now() - ((now() at time zone $1) - make_interval(days => n)) at time zone $1) - n * 86400)::int as drift
       from generate_series(1, 400) as n order by (extract(epoch from now() - ((now() at time zone $1) - make_interval(days => n)) at time zone $1) - n * 86400) = 0, n limit 1`,
    [ZONE],
  );
  days = rows[0]!.n;
  drift = rows[0]!.drift;
  expect(Math.abs(drift)).toBe(3600);
  await applySweptWorkflow(hub, owner, { name: 'dst', records: 1, key: "'p1'", status: "'prospect'", states: ['prospect', 'active'], dormancy: { after: `${days}d`, states: ['prospect'] } });
  // The hub's pools over a database whose sessions are in Europe/Paris.
  const zoned = (role: string) => {
    const url = new URL(roleUrl(hub.ownerUrl, role));
    url.searchParams.set('options', `-c TimeZone=${ZONE}`);
    return url.toString();
  };
  paris = new Database({ appUrl: zoned(TEST_ROLES.app), workerUrl: zoned(TEST_ROLES.worker), analyticRole: TEST_ROLES.analytic, poolSize: 4 });
});

afterAll(async () => {
  await paris?.close();
  await owner?.end();
  await hub?.stop();
});

describe('a dormancy in days across a clock change', () => {
  it('comes due after N × 24 hours, whatever the database time zone', async () => {
    const { rows: zone } = await paris.withTenant(1, (tx) => tx.query<{ zone: string }>('select current_setting($1) as zone', ['TimeZone']));
    expect(zone[0]!.zone).toBe(ZONE);
    // The first pass starts the spell (not due: it dates from the apply, moments ago).
    expect(await sweepWorkflows(paris, hub.services.events, { batch: 100 })).toMatchObject({ started: 1, emitted: 0 });
    // The spell is half an hour on the side of N × 24 h where the zone's N days fall the other way:
    // past it when the zone's days are an hour longer (announced late before), short of it when an
    // hour shorter (announced early before).
    const ageSeconds = days * 86_400 + (drift > 0 ? 1_800 : -1_800);
    await owner.query(`update workflows.spells set since = now() - make_interval(secs => $1) where record_key = 'p1'`, [ageSeconds]);
    const swept = await sweepWorkflows(paris, hub.services.events, { batch: 100 });
    expect({ days, emitted: swept.emitted }).toEqual({ days, emitted: drift > 0 ? 1 : 0 });
  }, 30_000);
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { ownerClient } from '../../test/harness/api-client.js';
import { appliedConnector, hubRunner } from '../../test/harness/connector-runner.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { until } from '../../test/harness/until.js';
import type { ConnectorRunner, PageReader } from './runner.js';

/**
 * A run whose end PostgreSQL refuses for a value it holds (SQLSTATE class 22 or 23, which the same
 * statement meets again: no outage to wait out), on the real PostgreSQL. The refusal is staged by a
 * trigger on connectors.runs raising untranslatable_character (what a NUL in a JSON text raises) for
 * one run's Completed end only: the run must still end, Failed with a text quoting nothing of what
 * the refused statement held, and not stay Running until the interrupted-run sweep fails it as if
 * its process had died.
 */

let hub: TestHub;
let owner: pg.Client;

/** Two records at once; the end of the read once `open` is called. */
function gated(): { reader: PageReader; asked: () => boolean; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  let asked = false;
  return {
    reader: {
      async *read() {
        yield { number: 1, items: [{ id: 'a' }, { id: 'b' }] };
        asked = true;
        await opened;
      },
    },
    asked: () => asked,
    open,
  };
}

const runners: ConnectorRunner[] = [];
const runner = (reader: PageReader) => {
  const made = hubRunner(hub, { reader, chunkSize: 1 });
  runners.push(made);
  return made;
};

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
});

afterAll(async () => {
  for (const made of runners) await made.close();
  await owner?.query('drop trigger if exists refuse_end on connectors.runs').catch(() => undefined);
  await owner?.query('drop function if exists connectors.refuse_end()').catch(() => undefined);
  await owner?.end();
  await hub?.stop();
});

describe("a run's end refused for a value it holds", () => {
  it('ends Failed with a fixed text naming the SQLSTATE, its counts kept, its failed event sent, nothing of the value logged; the next run ends as usual', async () => {
    const connector = await appliedConnector(hub, 'end-refused', 'ext.end_refused');
    const logs = captureLogs('info');
    try {
      const gate = gated();
      const triggered = await runner(gate.reader).trigger(1, connector, { triggeredBy: 'manual' });
      const runId = triggered.runs[0]!.id;
      await until('page 1 read', async () => gate.asked());
      await owner.query(`create function connectors.refuse_end() returns trigger language plpgsql as $$
        begin
          raise exception using errcode = 'untranslatable_character', message = 'unsupported Unicode escape sequence', detail = 'the-refused-value-xyzzy';
        end $$`);
      await owner.query(`create trigger refuse_end before update on connectors.runs for each row when (new.status = 'Completed' and new.id = '${runId}') execute function connectors.refuse_end()`);
      gate.open();
      let timer: NodeJS.Timeout | undefined;
      const [ended] = await Promise.race([triggered.done, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('the run did not end within 20 s')), 20_000)))]).finally(() => clearTimeout(timer));
      expect(ended).toMatchObject({ id: runId, status: 'Failed', errorMessage: "the run's end could not be stored: 22P05 untranslatable_character", recordsIn: 2, recordsOut: 2 });
      const stored = await owner.query('select status, error_message, records_in, records_out, ended_at is not null as ended from connectors.runs where id = $1', [runId]);
      expect(stored.rows[0]).toEqual({ status: 'Failed', error_message: "the run's end could not be stored: 22P05 untranslatable_character", records_in: 2, records_out: 2, ended: true });
      const events = await owner.query<{ type: string; payload: unknown }>("select type, payload from events.outbox where payload ->> 'run_id' = $1 order by id", [runId]);
      expect(events.rows.map((r) => r.type)).toEqual(['connector.run.started', 'connector.run.failed']);
      expect(events.rows[1]!.payload).toMatchObject({ error_message: "the run's end could not be stored: 22P05 untranslatable_character", retryable: false });
      const told = logs.lines().filter((l) => l.runId === runId && l.level !== 'debug');
      expect(told.map((l) => l.msg)).toContain(`run ${runId} ended Completed but its end was refused (22P05 untranslatable_character); it ends Failed instead`);
      expect(logs.raw()).not.toContain('xyzzy');

      // The trigger refuses that run's end only: the next run of the endpoint ends Completed.
      const [next] = await (await runner({ async *read() { yield { number: 1, items: [{ id: 'c' }] }; } }).trigger(1, connector, { triggeredBy: 'manual' })).done;
      expect(next).toMatchObject({ status: 'Completed', recordsIn: 1, recordsOut: 1, errorMessage: null });
    } finally {
      logs.restore();
    }
  }, 60_000);
});

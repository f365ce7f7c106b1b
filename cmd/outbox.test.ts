import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import type { Config } from '../src/config/config.js';
import { testConfig } from '../test/harness/hub.js';
import { outboxCommand, parseOutboxArgs } from './outbox.js';

/**
 * `svc-hub outbox consumers | drop-consumer NAME` on a real PostgreSQL: the cursors listed the
 * furthest behind first with their lag, a cursor no hub runs dropped, one this version runs refused.
 */

let config: Config;
let owner: pg.Client;

async function command(argv: string[]): Promise<{ code: number; lines: string[] }> {
  const lines: string[] = [];
  const code = await outboxCommand(config, argv, (line) => lines.push(line));
  return { code, lines };
}

const cursors = async () => (await owner.query('select consumer from events.consumer_cursors order by consumer')).rows.map((r) => r.consumer);

beforeAll(async () => {
  config = await testConfig();
  // The first command migrates the fresh database (svc.migrate.on-start), as the other roles do.
  expect(await command(['consumers'])).toEqual({ code: 0, lines: ['no consumer cursors'] });
  owner = new pg.Client({ connectionString: config.string('svc.datasource.url') });
  await owner.connect();
  await owner.query(`insert into events.outbox (tenant_id, type, payload, created_at) select 1, 'org.updated', '{}', now() - interval '3 days 2 hours' from generate_series(1, 3)`);
  // 'hooks' at the newest event; 'legacy-export' (left by an older version) at the start.
  await owner.query(`insert into events.consumer_cursors (consumer, txid, last_id) select 'hooks', txid, id from events.outbox order by txid desc, id desc limit 1`);
  await owner.query(`insert into events.consumer_cursors (consumer, updated_at) values ('legacy-export', '2026-01-02T03:04:05Z')`);
});

afterAll(async () => {
  await owner.end();
});

describe('svc-hub outbox', () => {
  it('consumers: each cursor, the furthest behind first, with its position, lag, last advance and whether this hub runs it', async () => {
    const { code, lines } = await command(['consumers']);
    expect(code).toBe(0);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toBe('legacy-export  at 0/0  3 events behind, the oldest 3 d 2 h old  last advanced 2026-01-02T03:04:05.000Z  not run by this version of the hub');
    expect(lines[1]).toMatch(/^hooks {2}at \d+\/\d+ {2}up to date {2}last advanced \S+Z {2}run by this hub$/);
  });

  it('drop-consumer refuses a consumer this version runs, naming it, and says when there is nothing to drop', async () => {
    expect(await command(['drop-consumer', 'hooks'])).toEqual({
      code: 1,
      lines: ["refused: 'hooks' is a consumer this version of the hub runs (hooks, email, processes, webhooks); its cursor is not dropped"],
    });
    expect(await command(['drop-consumer', 'nobody'])).toEqual({ code: 1, lines: ["no consumer 'nobody' (svc-hub outbox consumers lists them): nothing dropped"] });
    expect(await cursors()).toEqual(['hooks', 'legacy-export']);
  });

  it('drop-consumer removes a cursor no hub runs and prints what it did', async () => {
    expect(await command(['drop-consumer', 'legacy-export'])).toEqual({
      code: 0,
      lines: ["dropped consumer 'legacy-export' (it was at 0/0): the purge no longer keeps events for it"],
    });
    expect(await cursors()).toEqual(['hooks']);
  });

  it('drop-consumer keeps a cursor that advanced in the last 15 minutes (a hub may still run it) unless --force', async () => {
    await owner.query(`insert into events.consumer_cursors (consumer, updated_at) values ('older-hub-export', now() - interval '1 minute')`);
    const refused = await command(['drop-consumer', 'older-hub-export']);
    expect(refused.code).toBe(1);
    expect(refused.lines).toHaveLength(1);
    expect(refused.lines[0]).toMatch(
      /^refused: 'older-hub-export' advanced at \S+Z, in the last 15 minutes: a hub may still run it, and without its cursor it would start again at the outbox's head; stop that hub first, or pass --force$/,
    );
    expect(await cursors()).toContain('older-hub-export');
    // Quiet for longer than that: dropped without --force.
    await owner.query(`update events.consumer_cursors set updated_at = now() - interval '16 minutes' where consumer = 'older-hub-export'`);
    expect((await command(['drop-consumer', 'older-hub-export'])).code).toBe(0);
    await owner.query(`insert into events.consumer_cursors (consumer) values ('older-hub-export')`);
    expect(await command(['drop-consumer', '--force', 'older-hub-export'])).toEqual({
      code: 0,
      lines: ["dropped consumer 'older-hub-export' (it was at 0/0): the purge no longer keeps events for it"],
    });
    expect(await cursors()).not.toContain('older-hub-export');
  });

  it('refuses malformed arguments', () => {
    expect(parseOutboxArgs([])).toBe('a command is required (consumers, drop-consumer)');
    expect(parseOutboxArgs(['list'])).toBe("unknown command 'list'");
    expect(parseOutboxArgs(['drop-consumer'])).toBe('drop-consumer needs the NAME of a consumer');
    expect(parseOutboxArgs(['drop-consumer', 'a', 'b'])).toBe("unexpected argument 'b'");
    expect(parseOutboxArgs(['consumers', '--all'])).toBe("unexpected argument '--all'");
    expect(parseOutboxArgs(['drop-consumer', 'a'])).toEqual({ command: 'drop-consumer', name: 'a', force: false });
    expect(parseOutboxArgs(['drop-consumer', 'a', '--force'])).toEqual({ command: 'drop-consumer', name: 'a', force: true });
    expect(parseOutboxArgs(['drop-consumer', '--forse', 'a'])).toBe("unknown option '--forse'");
  });
});

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { packageRoot } from '../package-root.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { svcRunner } from '../../test/harness/svc-cli.js';

/** `svc apply` of a Process, `svc processes ls|get`, `svc inbox ls [--unacked]|ack` against a real hub (dev bypass). */

let hub: TestHub;
let dir: string;
let config: string;

const svc = svcRunner(() => ({ env: { SVC_CLI_CONFIG: config } }));

beforeAll(async () => {
  hub = await startTestHub();
  dir = mkdtempSync(join(tmpdir(), 'svc-cli-processes-'));
  config = join(dir, 'config.json');
  expect((await svc(['login', '--url', hub.url, '--dev-tenant', '1'])).code).toBe(0);
});

afterAll(async () => {
  await hub?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('processes and the inbox', () => {
  it('applies examples/process-big-runs.yaml, lists and shows it', async () => {
    const file = join(packageRoot(), 'examples', 'process-big-runs.yaml');
    expect(await svc(['apply', '-f', file])).toEqual({ code: 0, out: 'process/big-runs created\n', err: '' });
    // Again: the hub stores that very manifest and writes nothing; a changed one is configured.
    expect((await svc(['apply', '-f', file])).out).toBe('process/big-runs unchanged\n');
    const changed = 'apiVersion: apps.svc.io/v1\nkind: Process\nmetadata: {name: other-runs}\nspec: {event: connector.run.*, decision: decision.other}\n';
    expect((await svc(['apply', '-f', '-'], { stdin: changed })).out).toBe('process/other-runs created\n');
    expect((await svc(['apply', '-f', '-'], { stdin: changed.replace('decision.other', 'decision.changed') })).out).toBe('process/other-runs configured\n');
    expect(JSON.parse((await svc(['apply', '-f', '-', '--json'], { stdin: changed.replace('decision.other', 'decision.changed') })).out)).toEqual({ name: 'other-runs', unchanged: true, warnings: [] });
    const ls = await svc(['processes', 'ls']);
    const [header, row] = ls.out.trimEnd().split('\n');
    expect(header).toMatch(/^NAME\s+EVENT\s+WHEN\s+DECISION\s+UPDATED$/);
    expect(row).toMatch(/^big-runs\s+connector\.run\.\*\s+.*decision\.big-run\s/);
    const get = await svc(['processes', 'get', 'big-runs']);
    expect(get.out).toContain('decision: decision.big-run');
    expect(get.out).toContain('Manifest:');
    expect((await svc(['processes', 'get', 'nope'])).err).toBe('error: process nope not found (HTTP 404)\n');
    const bad = await svc(['apply', '-f', '-'], { stdin: 'apiVersion: apps.svc.io/v1\nkind: Process\nmetadata: {name: bad}\nspec: {event: a.b, when: "1 +", decision: decision.x}\n' });
    expect(bad.code).toBe(1);
    expect(bad.err).toContain('spec.when');
  });

  it('lists the inbox (all, --unacked) and acknowledges a decision', async () => {
    expect((await svc(['inbox', 'ls'])).out).toBe('No decisions.\n');
    await hub.services.db.withTenant(1, (tx) => hub.services.events.emit(tx, 'decision.big-run', { process: 'big-runs', message: 'Run r1 wrote 2000 rows', sourceEventId: 1, sourceType: 'connector.run.completed' }));
    const ls = await svc(['inbox', 'ls', '--unacked']);
    const [header, row] = ls.out.trimEnd().split('\n');
    expect(header).toMatch(/^ID\s+TYPE\s+MESSAGE\s+CREATED\s+ACKED\s+BY$/);
    expect(row).toMatch(/^\d+\s+decision\.big-run\s+Run r1 wrote 2000 rows\s/);
    const id = row!.split(/\s+/)[0]!;
    expect(await svc(['inbox', 'ack', id])).toMatchObject({ code: 0, out: expect.stringMatching(new RegExp(`^decision ${id} acknowledged by dev at `)) });
    expect((await svc(['inbox', 'ls', '--unacked'])).out).toBe('No unacknowledged decisions.\n');
    expect(JSON.parse((await svc(['inbox', 'ls', '--json'])).out)).toMatchObject([{ id: Number(id), ackedBy: 'dev' }]);
    expect((await svc(['inbox', 'ack', '999999'])).err).toBe('error: decision not found (HTTP 404)\n');
  });
});

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { stringify } from 'yaml';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { svcRunner } from '../../test/harness/svc-cli.js';

/** `svc apply` of a Workflow, `svc workflows ls|get|rm` against a real hub (dev bypass). */

let hub: TestHub;
let dir: string;
let env: Record<string, string>;

const svc = svcRunner(() => ({ env }));

const ENTITY = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name: 'partner' },
  spec: {
    scope: 'crm',
    key: 'partner_id',
    columns: [
      { name: 'partner_id', type: 'text' },
      { name: 'status', type: 'text' },
    ],
    sources: [{ table: 'ext.partners', key: 'external_id', columns: { partner_id: 'external_id', status: '$.status' } }],
  },
};

const WORKFLOW = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Workflow',
  metadata: { name: 'Partner-Status' },
  spec: {
    entity: 'partner',
    stateColumn: 'status',
    states: ['prospect', 'active', 'closed'],
    transitions: [{ from: 'prospect', to: 'active' }, { from: 'active', to: 'closed' }],
    dormancy: { after: '30d', states: ['prospect', 'active'] },
  },
};

beforeAll(async () => {
  hub = await startTestHub();
  dir = mkdtempSync(join(tmpdir(), 'svc-workflows-cli-'));
  env = { SVC_CLI_CONFIG: join(dir, 'config.json') };
  expect((await svc(['login', '--url', hub.url, '--dev-tenant', '1'])).code).toBe(0);
}, 60_000);

afterAll(async () => {
  await hub?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('svc and workflows', () => {
  it('applies an Entity then a Workflow from one file; again: unchanged; a refusal names the document and the field', async () => {
    const file = join(dir, 'lifecycle.yaml');
    writeFileSync(file, `${stringify(ENTITY)}---\n${stringify(WORKFLOW)}`);
    // The entity's table does not exist yet: a warning for it.
    expect(await svc(['apply', '-f', file])).toMatchObject({ code: 0, out: 'entity/partner created\nworkflow/partner-status created\n' });
    expect(await svc(['apply', '-f', file])).toMatchObject({ code: 0, out: 'entity/partner unchanged\nworkflow/partner-status unchanged\n' });
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, stringify({ ...WORKFLOW, spec: { ...WORKFLOW.spec, dormancy: { after: 'soon' } } }));
    const refused = await svc(['apply', '-f', bad]);
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/^error: .*bad\.yaml: .*spec\.dormancy\.after.*\(HTTP 400\)\n$/);
  });

  it('workflows ls, get, rm', async () => {
    // The entity and the workflow as the case before applies them (then stored: no change).
    writeFileSync(join(dir, 'listed.yaml'), `${stringify(ENTITY)}---\n${stringify(WORKFLOW)}`);
    expect(await svc(['apply', '-f', join(dir, 'listed.yaml')])).toMatchObject({ code: 0 });
    const ls = await svc(['workflows', 'ls']);
    expect(ls.code).toBe(0);
    const [header, row] = ls.out.trimEnd().split('\n');
    expect(header).toMatch(/^NAME\s+ENTITY\s+SCOPE\s+STATE COLUMN\s+STATES\s+DORMANT AFTER$/);
    expect(row!.split(/\s{2,}/)).toEqual(['partner-status', 'partner', 'crm', 'status', 'prospect,active,closed', '30d']);
    expect(JSON.parse((await svc(['workflows', 'ls', '--json'])).out)).toEqual([expect.objectContaining({ name: 'partner-status', entity: 'partner' })]);

    const get = await svc(['workflows', 'get', 'PARTNER-STATUS']);
    expect(get.code).toBe(0);
    expect(get.out).toContain('name: partner-status\n');
    expect(get.out).toContain('dormantAfter: 30d\n');
    expect(get.out).toMatch(/Transitions:\n {2}FROM\s+TO\n {2}prospect\s+active\n {2}active\s+closed\n/);
    expect(get.out).toMatch(/Manifest:\n {2}apiVersion: apps\.svc\.io\/v1\n/);
    expect(JSON.parse((await svc(['workflows', 'get', 'partner-status', '--json'])).out)).toMatchObject({ name: 'partner-status', manifest: { kind: 'Workflow' } });

    expect(await svc(['workflows', 'rm', 'Partner-Status'])).toMatchObject({ code: 0, out: 'workflow/partner-status deleted\n' });
    expect((await svc(['workflows', 'get', 'partner-status'])).code).toBe(1);
    expect(await svc(['workflows', 'ls'])).toMatchObject({ code: 0, out: 'No workflows.\n' });
  });

  it('a directory is applied Connectors first, then Entities, then the rest, whatever its files are named', async () => {
    const folder = join(dir, 'account');
    mkdirSync(folder);
    const entity = { ...ENTITY, metadata: { name: 'account' } };
    const workflow = { ...WORKFLOW, metadata: { name: 'account-status' }, spec: { ...WORKFLOW.spec, entity: 'account' } };
    // by name, the Workflow comes first: sent first, the hub refused it (no Entity account yet), and the rest with it
    writeFileSync(join(folder, 'account-status.yaml'), stringify(workflow));
    writeFileSync(join(folder, 'account.yaml'), stringify(entity));
    expect(await svc(['apply', '-f', folder])).toMatchObject({ code: 0, out: 'entity/account created\nworkflow/account-status created\n' });
    const again = await svc(['apply', '-f', folder, '--json']);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.out)).toEqual([expect.objectContaining({ name: 'account' }), expect.objectContaining({ name: 'account-status' })]);
    expect((await svc(['workflows', 'rm', 'account-status'])).code).toBe(0);
  });

  it('a refusal after documents were applied: --json prints their answers, the error says how many were not sent (exit 1)', async () => {
    const file = join(dir, 'partial.yaml');
    const entity = { ...ENTITY, metadata: { name: 'ledger' } };
    const bad = { ...WORKFLOW, metadata: { name: 'ledger-status' }, spec: { ...WORKFLOW.spec, entity: 'ledger', stateColumn: 'nope' } };
    const later = { ...WORKFLOW, metadata: { name: 'ledger-later' }, spec: { ...WORKFLOW.spec, entity: 'ledger' } };
    writeFileSync(file, `${stringify(entity)}---\n${stringify(bad)}---\n${stringify(later)}`);
    const json = await svc(['apply', '-f', file, '--json']);
    expect(json.code).toBe(1);
    // the Entity was applied: a script reads so on stdout, as it would have read it had the rest been applied
    expect(JSON.parse(json.out)).toEqual([expect.objectContaining({ name: 'ledger' })]);
    expect(json.err).toMatch(/^(warning: .*\n)*error: .*partial\.yaml#2: .*spec\.stateColumn.*; 1 later document was not sent \(HTTP 400\)\n$/);
    const people = await svc(['apply', '-f', file]);
    expect(people).toMatchObject({ code: 1, out: 'entity/ledger unchanged\n' });
    expect(people.err).toContain('; 1 later document was not sent (HTTP 400)\n');
    expect((await svc(['workflows', 'get', 'ledger-later'])).code).toBe(1);

    // --continue: the refusal is said and the rest sent (kubectl's way); exit 1 at the end, naming the refused document
    const going = await svc(['apply', '-f', file, '--continue']);
    expect(going).toMatchObject({ code: 1, out: 'entity/ledger unchanged\nworkflow/ledger-later created\n' });
    expect(going.err).toMatch(new RegExp(`^(warning: .*\\n)*error: .*partial\\.yaml#2: .*spec\\.stateColumn.*\\(HTTP 400\\)\\n(warning: .*\\n)*error: 1 of 3 documents was refused \\(${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}#2\\); the other 2 were applied\\n$`));
    expect(going.err).not.toContain('later document');
    expect((await svc(['workflows', 'get', 'ledger-later'])).code).toBe(0);
    const goingJson = await svc(['apply', '-f', file, '--continue', '--json']);
    expect(goingJson.code).toBe(1);
    // the answers of the documents applied: an array, as for any two or more documents
    expect(JSON.parse(goingJson.out)).toEqual([expect.objectContaining({ name: 'ledger' }), expect.objectContaining({ name: 'ledger-later' })]);
    // one document: its answer, an object
    writeFileSync(file, stringify(later));
    expect(JSON.parse((await svc(['apply', '-f', file, '--json'])).out)).toEqual(expect.objectContaining({ name: 'ledger-later', warnings: [] }));
    expect((await svc(['workflows', 'rm', 'ledger-later'])).code).toBe(0);
  });
});

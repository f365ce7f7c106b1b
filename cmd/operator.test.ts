import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { stringify } from 'yaml';
import { Config } from '../src/config/config.js';
import { MANIFEST_KINDS } from '../src/manifests/kinds.js';
import { createTestDatabase } from '../test/harness/database.js';
import { KubeApiStandIn } from '../test/harness/kube-api.js';
import { loadRunJobTemplate, type OperatorProcess, operatorLeaseName, startOperator } from './operator.js';
import { until } from '../test/harness/until.js';

/**
 * `svc-hub operator` as a process would run it (startOperator), against a SCRIPTED KUBERNETES API
 * STAND-IN (test/harness/kube-api.ts): two replicas on one database, one reconciles at a time
 * (here on the PostgreSQL backend of the leader port; operator/lease.test.ts covers the Lease), the
 * other takes over when it stops.
 */

const CONNECTOR = MANIFEST_KINDS.find((k) => k.kind === 'Connector')!;
let api: KubeApiStandIn;
let dir: string;
let ownerUrl: string;
const operators: OperatorProcess[] = [];

const config = (overrides: Record<string, string | number | boolean> = {}) =>
  Config.load({
    env: {},
    overrides: {
      'svc.datasource.url': ownerUrl,
      'svc.http.port': 0,
      'svc.log.level': 'silent',
      'svc.leader.backend': 'postgres',
      'svc.leader.check-every': '200ms',
      'svc.operator.backoff-base': '50ms',
      'svc.operator.run-job-template': join(dir, 'pod-template.yaml'),
      ...overrides,
    },
  });

const connector = (name: string, schedule?: string) => ({
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name, namespace: 'ns', labels: { 'svc.io/tenant': 'default' } },
  connector_type: 'rest-generic',
  spec: {
    base_url: 'http://demo-source:8099',
    ...(schedule ? { schedule } : {}),
    endpoints: [{ id: 'e', path: '/open/partners', target: { table: `ext.${name.replace(/-/g, '_')}`, unique_key: '$.id' } }],
  },
});
type Conditions = Array<{ type: string; status: string }>;
const ready = (name: string) => (api.get('connectors.svc.io/v1', 'connectors', 'ns', name)?.status?.conditions as Conditions | undefined)?.find((c) => c.type === 'Ready');

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-operator-'));
  writeFileSync(join(dir, 'pod-template.yaml'), stringify({ spec: { restartPolicy: 'Never', containers: [{ name: 'run', image: 'svc-hub:test' }] } }));
  ownerUrl = await createTestDatabase();
  api = await new KubeApiStandIn([{ group: CONNECTOR.group, version: CONNECTOR.version, plural: CONNECTOR.plural, kind: CONNECTOR.kind, namespaced: true, statusSubresource: true }]).start();
});

afterAll(async () => {
  for (const o of operators) await o.stop();
  await api?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('svc-hub operator', () => {
  it('names its Lease after the dispatchers’ one', () => {
    expect(operatorLeaseName('svc-hub-dispatch')).toBe('svc-hub-operator');
    expect(operatorLeaseName('prod-svc-hub-dispatch')).toBe('prod-svc-hub-operator');
    expect(operatorLeaseName('custom')).toBe('custom-operator');
  });

  it('refuses a run pod template without a container image, and reads a missing one as none', () => {
    writeFileSync(join(dir, 'bad.yaml'), 'spec: {containers: [{name: run}]}\n');
    expect(() => loadRunJobTemplate(join(dir, 'bad.yaml'))).toThrow(/spec\.containers\[0\]\.image/);
    expect(loadRunJobTemplate(join(dir, 'absent.yaml'))).toBeUndefined();
  });

  it('two replicas: one reconciles, the other takes over when it stops', async () => {
    const first = await startOperator(await config(), { kube: { server: api.url, token: 'replica-1' }, env: {} });
    operators.push(first);
    const second = await startOperator(await config(), { kube: { server: api.url, token: 'replica-2' }, env: {} });
    operators.push(second);
    expect(first.leadership.isLeader()).toBe(true);
    expect(second.leadership.isLeader()).toBe(false);
    // Health and metrics only.
    expect((await fetch(`${first.hub.url}/q/health/live`)).status).toBe(200);
    expect((await fetch(`${first.hub.url}/api/connectors`)).status).toBe(404);

    api.apply('connectors', connector('first', '0 * * * *'));
    await until('first Ready', () => ready('first')?.status === 'True');
    await until('its CronJob', () => api.get('batch/v1', 'cronjobs', 'ns', 'connector-first'));
    expect(api.requests.filter((r) => r.token === 'replica-2')).toEqual([]);

    await first.stop();
    await until('the second to lead', () => second.leadership.isLeader());
    api.apply('connectors', connector('second'));
    await until('second Ready', () => ready('second')?.status === 'True');
    const writers = new Set(api.requests.filter((r) => r.method !== 'GET' && r.path.includes('/connectors/second')).map((r) => r.token));
    expect([...writers]).toEqual(['replica-2']);
    const job = api.get('batch/v1', 'cronjobs', 'ns', 'connector-first') as unknown as { spec: { jobTemplate: { spec: { template: { spec: { containers: Array<{ image: string; args: string[] }> } } } } } };
    expect(job.spec.jobTemplate.spec.template.spec.containers[0]).toMatchObject({ image: 'svc-hub:test', args: ['run', 'connector', 'first', '--tenant', 'default', '--scheduled'] });
  });
});

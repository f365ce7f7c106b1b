import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { leaderElector } from '../../cmd/leader.js';
import { loadRunJobTemplate, operatorInstance } from '../../cmd/operator.js';
import { createConnectorServices } from '../connectors/services.js';
import { egressPolicy } from '../egress/config.js';
import { createExportServices } from '../exports/services.js';
import { embeddingFromConfig } from '../retrieval/embedding/from-config.js';
import { Config } from './config.js';

// Values checked as the hub starts (the services' factories, the leader election and the operator of
// cmd/), not as the configuration is read: refused in the form every configuration error has,
// `<property> (<its environment variable>): <what is wrong>`, which svc-hub prints after `svc-hub: configuration error: `.

const dir = mkdtempSync(join(tmpdir(), 'svc-start-checks-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
function refusal(make: () => unknown): string {
  try {
    make();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('not refused');
}

describe('a value refused as the hub starts names its environment variable', () => {
  it('svc.connectors.run-stale-after not above the heartbeat', () => {
    const config = Config.load({ env: { SVC_CONNECTORS_RUN_STALE_AFTER: '1s' } });
    expect(refusal(() => createConnectorServices({ config } as never))).toBe(
      'svc.connectors.run-stale-after (SVC_CONNECTORS_RUN_STALE_AFTER): must be longer than svc.connectors.heartbeat-every, or live runs would be failed as interrupted',
    );
  });

  it('svc.export.run-stale-after not above the heartbeat', () => {
    const config = Config.load({ env: { SVC_EXPORT_RUN_STALE_AFTER: '1s' } });
    expect(refusal(() => createExportServices({ config } as never))).toBe(
      'svc.export.run-stale-after (SVC_EXPORT_RUN_STALE_AFTER): must be longer than svc.export.heartbeat-every, or live runs would be failed as interrupted',
    );
  });

  it('svc.embedding.base-url missing for the openai provider', () => {
    const config = Config.load({ env: { SVC_EMBEDDING_PROVIDER: 'openai' } });
    expect(refusal(() => embeddingFromConfig(config, egressPolicy(config)))).toBe(
      'svc.embedding.base-url (SVC_EMBEDDING_BASE_URL): required when svc.embedding.provider is openai',
    );
  });

  it('svc.egress.allow with an entry that is no CIDR, address or host name', () => {
    // Was: 'svc.egress.allow: 10.0.0.0/99 is not a CIDR', the variable not named.
    expect(refusal(() => egressPolicy(Config.load({ env: { SVC_EGRESS_ALLOW: '10.0.0.0/8, 10.0.0.0/99' } })))).toBe('svc.egress.allow (SVC_EGRESS_ALLOW): 10.0.0.0/99 is not a CIDR');
    expect(refusal(() => egressPolicy(Config.load({ env: { SVC_EGRESS_ALLOW: 'hooks..internal' } })))).toBe(
      'svc.egress.allow (SVC_EGRESS_ALLOW): hooks..internal is neither a CIDR, an address nor a host name (hooks.internal, *.corp.example)',
    );
  });

  it('svc.leader.lease-name that Kubernetes would refuse as a Lease name', () => {
    const kubernetes = Config.load({ env: { SVC_LEADER_BACKEND: 'kubernetes', SVC_LEADER_LEASE_NAME: 'Bad_Name' } });
    expect(refusal(() => leaderElector(kubernetes, 'postgres://unused', { env: { POD_NAMESPACE: 'svc-system' } }))).toBe(
      "svc.leader.lease-name (SVC_LEADER_LEASE_NAME): 'Bad_Name' is not a valid Lease name (lower-case letters, digits, '-' and '.', at most 253 characters)",
    );
  });

  it('svc.leader.backend kubernetes without POD_NAMESPACE', () => {
    const kubernetes = Config.load({ env: { SVC_LEADER_BACKEND: 'kubernetes' } });
    expect(refusal(() => leaderElector(kubernetes, 'postgres://unused', { env: {} }))).toBe(
      'svc.leader.backend (SVC_LEADER_BACKEND): leader election through a Kubernetes Lease needs POD_NAMESPACE (the downward API `metadata.namespace`, as the Helm chart sets it)',
    );
  });

  it('svc.operator.run-job-template that is not YAML, or no pod template with an image', () => {
    const notYaml = join(dir, 'not-yaml.yaml');
    writeFileSync(notYaml, 'spec: {containers: [\n');
    expect(refusal(() => loadRunJobTemplate(notYaml)).startsWith(`svc.operator.run-job-template (SVC_OPERATOR_RUN_JOB_TEMPLATE): ${notYaml} is not YAML: `)).toBe(true);
    const imageless = join(dir, 'imageless.yaml');
    writeFileSync(imageless, 'spec: {containers: [{name: run}]}\n');
    expect(refusal(() => loadRunJobTemplate(imageless))).toBe(
      `svc.operator.run-job-template (SVC_OPERATOR_RUN_JOB_TEMPLATE): ${imageless} is not a pod template with a container and its image (spec.containers[0].image)`,
    );
  });

  it('svc.operator.instance that is no label value', () => {
    expect(refusal(() => operatorInstance(Config.load({ env: { SVC_OPERATOR_INSTANCE: 'not/a-label' } })))).toBe(
      "svc.operator.instance (SVC_OPERATOR_INSTANCE): 'not/a-label' is not a label value (at most 63 letters, digits, '-', '_' and '.', beginning and ending with a letter or digit)",
    );
  });
});

import { describe, expect, it } from '@jest/globals';
import { createConnectorServices } from '../connectors/services.js';
import { egressPolicy } from '../egress/config.js';
import { createExportServices } from '../exports/services.js';
import { embeddingFromConfig } from '../retrieval/embedding/from-config.js';
import { Config } from './config.js';

// Values checked as the hub starts (the services' factories), not as the configuration is read:
// refused in the form every configuration error has, `<property> (<its environment variable>): <what is wrong>`.
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
});

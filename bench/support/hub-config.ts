import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Config } from '../../src/config/config.js';

/**
 * The configuration every benchmark runs its hub with: the bench's embedded PostgreSQL, a data
 * directory under the bench's temp folder, a fresh master key, a free port, warnings only, and the
 * defaults for everything else unless `overrides` says otherwise.
 */
export function benchConfig(databaseUrl: string, dir: string, overrides: Record<string, string | number | boolean> = {}): Config {
  return Config.load({
    env: {},
    overrides: {
      'svc.datasource.url': databaseUrl,
      'svc.data-dir': join(dir, 'hub'),
      'svc.secret.master-key': randomBytes(32).toString('hex'),
      'svc.http.port': 0,
      'svc.log.level': 'warn',
      ...overrides,
    },
  });
}

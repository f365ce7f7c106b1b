import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { ConfigError } from '../../../src/config/config.js';
import { UnsealError } from '../../../src/platform/secrets/crypto.js';
import { createTestDatabase } from '../../../test/harness/database.js';
import { startTestHub } from '../../../test/harness/hub.js';

/** The master key at start: a malformed one stops the hub; without one, dev generates and reuses a key file. */

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const dev = { 'X-Tenant-ID': '1', 'Content-Type': 'application/json' };

describe('svc.secret.master-key at start', () => {
  it('a malformed key stops the start with a message naming the property, not the value', async () => {
    const bad = 'bWFzdGVyLWtleS10aGF0LW11c3QtbmV2ZXItYmUtbG9nZ2Vk'; // 36 bytes
    const failure = await startTestHub({ 'svc.secret.master-key': bad }).catch((err: Error) => err);
    expect(failure).toBeInstanceOf(ConfigError);
    expect((failure as ConfigError).property).toBe('svc.secret.master-key');
    expect((failure as Error).message).toContain('svc.secret.master-key (SVC_SECRET_MASTER_KEY): not a valid key');
    expect((failure as Error).message).not.toContain(bad);
  });

  it('dev without a key: generated once into <data-dir>/master.key, reused by the next start over the same data', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'svc-secrets-'));
    dirs.push(dataDir);
    const database = await createTestDatabase();
    const first = await startTestHub({ 'svc.datasource.url': database, 'svc.data-dir': dataDir });
    let keyText: string;
    try {
      const res = await fetch(`${first.url}/api/platform/secrets`, { method: 'POST', headers: dev, body: JSON.stringify({ name: 'kept', value: 'survives-a-restart' }) });
      expect(res.status).toBe(201);
      const path = join(dataDir, 'master.key');
      expect(statSync(path).mode & 0o777).toBe(0o600);
      keyText = readFileSync(path, 'utf8');
    } finally {
      await first.stop();
    }

    const second = await startTestHub({ 'svc.datasource.url': database, 'svc.data-dir': dataDir });
    try {
      expect(readFileSync(join(dataDir, 'master.key'), 'utf8')).toBe(keyText);
      expect(await second.services.secrets.resolveSecret(1, 'secret:kept')).toBe('survives-a-restart');
    } finally {
      await second.stop();
    }

    // Another key cannot open what the first one sealed.
    const third = await startTestHub({ 'svc.datasource.url': database, 'svc.secret.master-key': 'f'.repeat(64) });
    try {
      await expect(third.services.secrets.resolveSecret(1, 'secret:kept')).rejects.toThrow(UnsealError);
    } finally {
      await third.stop();
    }
  });
});

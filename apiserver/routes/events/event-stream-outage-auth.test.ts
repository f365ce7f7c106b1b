import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { type EmbeddedDatabase, freePort, startEmbedded } from '../../../src/db/embedded.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';
import { directoryCacheExpired } from '../../../test/harness/directory-cache.js';
import { DATABASE_UNREACHABLE } from './event-stream.js';

/**
 * The live stream's answer to a database outage, with real tokens: past the 10 s cache of the
 * tenant's and user's state, only the database being unreachable is told to reconnect; a token
 * that is refused, or lacks the route's role, keeps its 401 or 403.
 */

const dir = mkdtempSync(join(tmpdir(), 'svc-stream-auth-'));
chmodSync(dir, 0o755);
let server: EmbeddedDatabase | undefined;
let hub: TestHub | undefined;
let issuer: TestIssuer | undefined;

afterAll(async () => {
  await hub?.stop().catch(() => undefined);
  await server?.stop();
  await issuer?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the event stream while the database is away, with OIDC tokens', () => {
  it('a caller with the role: 200 and reconnect; without it: 403; a forged or expired token: 401', async () => {
    issuer = await startIssuer();
    const port = await freePort();
    server = await startEmbedded({ dataDir: join(dir, 'data'), database: 'svc', port });
    hub = await startTestHub({
      'svc.datasource.url': server.url,
      'svc.profile': 'prod',
      'svc.oidc.issuer': issuer.issuer,
      'svc.secret.master-key': randomBytes(32).toString('hex'),
      'svc.http.host': '127.0.0.1',
    });
    const running = hub;
    const mint = (roles: string[], options = {}) => issuer!.mint({ realm_access: { roles }, tenant_id: 1 }, { subject: 'stream-reader', ...options });
    const get = async (token: string) => {
      const res = await fetch(`${running.url}/api/platform/events/stream?lastEventId=1`, { headers: { authorization: `Bearer ${token}` } });
      return { status: res.status, type: res.headers.get('content-type'), body: await res.text() };
    };
    const reader = await mint(['svc_integrator']);
    const roleless = await mint(['svc_viewer']);
    // With the database: the reader is served (its stream is left open; fetch's text() would wait), the other refused.
    const open = new AbortController();
    expect((await fetch(`${running.url}/api/platform/events/stream`, { headers: { authorization: `Bearer ${reader}` }, signal: open.signal })).status).toBe(200);
    open.abort();
    const refused = await get(roleless);
    expect([refused.status, refused.body]).toEqual([403, 'missing role svc_integrator']);

    await server.stop();
    // Past the cache (10 s, not configurable): authentication needs the database.
    await directoryCacheExpired(running.services.directory);
    expect(await get(reader)).toEqual({ status: 200, type: 'text/event-stream; charset=utf-8', body: DATABASE_UNREACHABLE });
    // Another tenant's token, one whose tenant may not even exist: the same answer.
    expect(await get(await issuer.mint({ realm_access: { roles: ['svc_integrator'] }, tenant_id: 98765 }, { subject: 'someone' }))).toEqual({ status: 200, type: 'text/event-stream; charset=utf-8', body: DATABASE_UNREACHABLE });
    const without = await get(roleless);
    expect([without.status, without.body]).toEqual([403, 'missing role svc_integrator']);
    expect((await get(await mint(['svc_integrator'], { rogue: true }))).status).toBe(401);
    expect((await get(await mint(['svc_integrator'], { expiresIn: -60 }))).status).toBe(401);
  }, 90_000);
});

import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { startIssuer, type TestIssuer } from '../../../test/harness/tokens.js';

/**
 * The role gates of the connector paths with real tokens (CONTRACTS.md section 4): these paths are
 * not under /api/platform, so a missing role is the body-less 403 and a missing token a JSON 401.
 */

let issuer: TestIssuer;
let hub: TestHub;

beforeAll(async () => {
  issuer = await startIssuer();
  hub = await startTestHub({ 'svc.oidc.issuer': issuer.issuer, 'svc.oidc.jwks-uri': issuer.jwksUri });
});

afterAll(async () => {
  await hub?.stop();
  await issuer?.close();
});

const INTEGRATOR = ['svc_integrator'];
const ADMIN = ['svc_admin'];
const BOTH = ['svc_integrator', 'svc_admin'];

async function call(method: string, path: string, roles: string[] | null, body?: unknown) {
  const headers: Record<string, string> = {};
  if (roles) headers.Authorization = `Bearer ${await issuer.mint({ realm_access: { roles }, tenant_id: 1, preferred_username: 'ada', sub: 'ada-1' })}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`${hub.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, text: await res.text(), contentType: res.headers.get('content-type') };
}

const manifest = (name: string) => ({
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name },
  connector_type: 'rest-generic',
  scopes: ['crm'],
  spec: { base_url: 'http://localhost:8099', endpoints: [{ id: 'rows', path: '/open/partners', target: { table: 'ext.partners', unique_key: '$.id' } }] },
});

const EMPTY_403 = { status: 403, text: '', contentType: null };

describe('role gates', () => {
  beforeAll(async () => {
    expect((await call('POST', '/api/connectors/apply', BOTH, manifest('gated'))).status).toBe(201);
  });

  // method, path, a gate that passes, a role set that is refused, body. Every row has all five:
  // it.each hands a test function with more parameters than the row a `done` callback.
  const paths: Array<[string, string, string[], string[], unknown]> = [
    ['POST', '/api/connectors/apply', BOTH, INTEGRATOR, manifest('gated')],
    ['POST', '/api/connectors/validate', INTEGRATOR, ADMIN, manifest('gated')],
    ['GET', '/api/connectors', INTEGRATOR, ADMIN, undefined],
    ['GET', '/api/connectors/gated', INTEGRATOR, ADMIN, undefined],
    ['POST', '/api/connectors/gated/endpoints/rows/reset-cursor', INTEGRATOR, ADMIN, undefined],
    ['POST', '/api/connectors/gated/endpoints/rows/purge', BOTH, INTEGRATOR, undefined],
    ['DELETE', '/api/connectors/gated', BOTH, INTEGRATOR, undefined],
  ];

  it.each(paths)('%s %s: refused with an empty 403 without the role, 401 without a token', async (method, path, _ok, refused, body) => {
    expect(await call(method, path, refused, body)).toEqual(EMPTY_403);
    expect(await call(method, path, ['svc_user'], body)).toEqual(EMPTY_403);
    const anonymous = await call(method, path, null, body);
    expect(anonymous.status).toBe(401);
    expect(JSON.parse(anonymous.text)).toEqual({ error: 'authentication required' });
  });

  it('apply and delete need svc_admin as well as svc_integrator', async () => {
    expect(await call('POST', '/api/connectors/apply', ADMIN, manifest('gated'))).toEqual(EMPTY_403);
    expect(await call('DELETE', '/api/connectors/gated', ADMIN)).toEqual(EMPTY_403);
    expect(await call('POST', '/api/connectors/gated/endpoints/rows/purge', ADMIN)).toEqual(EMPTY_403);
  });

  it.each(paths)('%s %s: passes with its roles', async (method, path, ok, _refused, body) => {
    const r = await call(method, path, ok, body);
    expect(r.status).toBe(method === 'DELETE' || path.includes('/endpoints/') ? 204 : 200);
  });
});

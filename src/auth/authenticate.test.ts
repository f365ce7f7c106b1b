import { describe, expect, it } from '@jest/globals';
import type { JWTPayload } from 'jose';
import { captureLogs } from '../../test/harness/log-capture.js';
import { AuthenticationRequired, ForbiddenWithReason, ValidationError } from '../errors.js';
import { Authenticator } from './authenticate.js';
import type { Directory, HubUser, TokenIdentity } from './directory.js';
import { ROLES } from './principal.js';
import { TokenRejected, type TokenVerifier } from './verifier.js';

/** The Authenticator's claim handling with a fake verifier and directory (no network, no database). */

interface Fakes {
  auth: Authenticator;
  identities: TokenIdentity[];
  tenantsChecked: number[];
  verified: string[];
}

function fakes(claims: JWTPayload | Error, options: { devBypass?: boolean; tenantClaim?: string } = {}): Fakes {
  const identities: TokenIdentity[] = [];
  const tenantsChecked: number[] = [];
  const verified: string[] = [];
  const verifier = {
    async verify(token: string) {
      verified.push(token);
      if (claims instanceof Error) throw claims;
      return { iss: 'https://idp.example.com', sub: 'subject-1', exp: EXP, ...claims };
    },
  } as unknown as TokenVerifier;
  const directory = {
    async requireActiveTenant(id: number) {
      tenantsChecked.push(id);
      if (id === 404) throw new ForbiddenWithReason(`unknown tenant ${id}`);
      return { id, code: `t${id}`, active: true };
    },
    async userFor(identity: TokenIdentity): Promise<HubUser> {
      identities.push(identity);
      return { id: identity.userId ?? 42, tenantId: identity.tenantId, login: identity.login ?? identity.subject, locked: false, active: true };
    },
  } as unknown as Directory;
  const auth = new Authenticator({ devBypass: options.devBypass ?? false, tenantClaim: options.tenantClaim ?? 'tenant_id', verifier, directory });
  return { auth, identities, tenantsChecked, verified };
}

const bearer = { authorization: 'Bearer header.payload.signature' };
/** The `exp` every fake token carries (the verifier requires one). */
const EXP = 2_000_000_000;

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (err: unknown) => err,
  );
}

describe('Authenticator with tokens', () => {
  it('no Authorization header: undefined, the verifier is not called', async () => {
    const f = fakes({});
    await expect(f.auth.authenticate({}, false, [])).resolves.toBeUndefined();
    await expect(f.auth.authenticate({ authorization: '' }, true, [])).resolves.toBeUndefined();
    expect(f.verified).toEqual([]);
  });

  it('a non-bearer header: AuthenticationRequired rendered per path', async () => {
    const f = fakes({});
    const platform = (await rejection(f.auth.authenticate({ authorization: 'Basic abc' }, true, []))) as AuthenticationRequired;
    expect(platform).toBeInstanceOf(AuthenticationRequired);
    expect(platform.render()).toEqual({ status: 401, headers: { 'WWW-Authenticate': 'Bearer' }, body: { text: 'authentication required' } });
    const other = (await rejection(f.auth.authenticate({ authorization: 'Basic abc' }, false, []))) as AuthenticationRequired;
    expect(other.render()).toEqual({ status: 401, headers: { 'WWW-Authenticate': 'Bearer' }, body: { json: { error: 'authentication required' } } });
    expect(f.verified).toEqual([]);
  });

  it('passes the bearer token to the verifier', async () => {
    const f = fakes({ tenant_id: 2 });
    await f.auth.authenticate({ authorization: 'Bearer  abc.def.ghi ' }, false, []);
    expect(f.verified).toEqual(['abc.def.ghi']);
  });

  it('a token the verifier rejects: AuthenticationRequired', async () => {
    const f = fakes(new TokenRejected('ERR_JWT_EXPIRED: "exp" claim timestamp check failed'));
    expect(await rejection(f.auth.authenticate(bearer, true, []))).toBeInstanceOf(AuthenticationRequired);
  });

  it('any other verifier failure is not disguised as a 401', async () => {
    const f = fakes(new TypeError('fetch failed'));
    expect(await rejection(f.auth.authenticate(bearer, true, []))).toBeInstanceOf(TypeError);
  });

  it('builds the principal from the claims', async () => {
    const f = fakes({ tenant_id: 2, realm_access: { roles: ['svc_user', 'svc_admin'] }, preferred_username: 'ann', name: 'Ann', email: 'ann@example.com' });
    const p = await f.auth.authenticate(bearer, false, []);
    expect(p).toEqual({
      via: 'token', issuer: 'https://idp.example.com', subject: 'subject-1', roles: new Set(['svc_user', 'svc_admin']),
      homeTenantId: 2, tenantId: 2, impersonating: false, userId: '42', login: 'ann',
      // exp plus the 5 s of clock tolerance: when the verifier starts refusing the token.
      validUntil: (EXP + 5) * 1000,
    });
    expect(f.identities).toEqual([
      { tenantId: 2, issuer: 'https://idp.example.com', subject: 'subject-1', userId: undefined, login: 'ann', name: 'Ann', email: 'ann@example.com' },
    ]);
    expect(f.tenantsChecked).toEqual([2]);
  });

  it('roles come from realm_access.roles only, strings only', async () => {
    const f = fakes({ tenant_id: 2, realm_access: { roles: ['svc_user', 7, null, { role: 'svc_admin' }] }, roles: ['svc_admin'], scope: 'svc_admin' });
    expect([...(await f.auth.authenticate(bearer, false, []))!.roles]).toEqual(['svc_user']);
  });

  it('the tenant claim name is configurable', async () => {
    const f = fakes({ org: '7', tenant_id: 2 }, { tenantClaim: 'org' });
    expect(await f.auth.authenticate(bearer, false, [])).toMatchObject({ homeTenantId: 7, tenantId: 7 });
  });

  it('no tenant claim: no tenant, the user lives in the system tenant 0', async () => {
    const f = fakes({});
    expect(await f.auth.authenticate(bearer, false, [])).toMatchObject({ homeTenantId: undefined, tenantId: undefined });
    expect(f.identities[0]).toMatchObject({ tenantId: 0 });
    expect(f.tenantsChecked).toEqual([]);
  });

  it('an unknown tenant is refused by the directory', async () => {
    const err = await rejection(fakes({ tenant_id: 404 }).auth.authenticate(bearer, false, []));
    expect(err).toBeInstanceOf(ForbiddenWithReason);
    expect((err as Error).message).toBe('unknown tenant 404');
  });

  it('impersonation switches the tenant, keeps the roles and provisions the user in the home tenant', async () => {
    const f = fakes({ tenant_id: 2, acting_as_tenant: 3, realm_access: { roles: ['svc_superadmin'] } });
    expect(await f.auth.authenticate(bearer, false, [])).toMatchObject({ homeTenantId: 2, tenantId: 3, impersonating: true, roles: new Set(['svc_superadmin']) });
    expect(f.tenantsChecked.sort()).toEqual([2, 3]);
    expect(f.identities[0]).toMatchObject({ tenantId: 2 });
  });

  it('impersonation without svc_superadmin is refused before anything is looked up', async () => {
    const f = fakes({ tenant_id: 2, acting_as_tenant: 3, realm_access: { roles: [...ROLES].filter((r) => r !== 'svc_superadmin') } });
    const err = await rejection(f.auth.authenticate(bearer, true, []));
    expect(err).toBeInstanceOf(ForbiddenWithReason);
    expect((err as ForbiddenWithReason).render()).toEqual({ status: 403, body: { json: { error: 'svc_superadmin required to impersonate a tenant' } } });
    expect(f.tenantsChecked).toEqual([]);
    expect(f.identities).toEqual([]);
  });

  it.each([['globex'], [''], [false], [true], [[3]], [{ id: 3 }], [-1], [1.5]])('an acting_as_tenant %p that is not a tenant id: AuthenticationRequired (an invalid token), with or without svc_superadmin', async (value) => {
    for (const roles of [['svc_superadmin'], ['svc_user']]) {
      const f = fakes({ tenant_id: 2, acting_as_tenant: value, realm_access: { roles } });
      const err = await rejection(f.auth.authenticate(bearer, false, []));
      expect(err).toBeInstanceOf(AuthenticationRequired);
      expect((err as AuthenticationRequired).reason).toBe('claim acting_as_tenant is not a tenant id');
      expect(f.identities).toEqual([]);
    }
  });

  it('acting_as_tenant null is no claim', async () => {
    expect(await fakes({ tenant_id: 2, acting_as_tenant: null }).auth.authenticate(bearer, false, [])).toMatchObject({ tenantId: 2, impersonating: false });
  });

  it.each([['acme'], [''], [-1], [1.5], [true], [false], [[2]], [{ id: 2 }]])('a tenant claim %p that is not a tenant id: AuthenticationRequired', async (value) => {
    const f = fakes({ tenant_id: value });
    expect(await rejection(f.auth.authenticate(bearer, true, []))).toBeInstanceOf(AuthenticationRequired);
    expect(f.identities).toEqual([]);
  });

  it('claim user_id names the hub user (number or numeric string)', async () => {
    for (const value of [17, '17']) {
      const f = fakes({ tenant_id: 2, user_id: value });
      expect(await f.auth.authenticate(bearer, false, [])).toMatchObject({ userId: '17' });
      expect(f.identities[0]).toMatchObject({ userId: 17, tenantId: 2 });
    }
  });

  it.each([['abc'], [''], [-1], [1.5], [true], [false], [[5]], [{ id: 5 }]])('a user_id claim %p that is not a user id: AuthenticationRequired', async (value) => {
    const f = fakes({ tenant_id: 2, user_id: value });
    expect(await rejection(f.auth.authenticate(bearer, false, []))).toBeInstanceOf(AuthenticationRequired);
    expect(f.identities).toEqual([]);
  });

  it.each([
    [{ tenant_id: 'acme' }, 'claim tenant_id is not a tenant id'],
    [{ tenant_id: 0 }, 'claim tenant_id names the system tenant'],
    [{ tenant_id: 2, acting_as_tenant: [3] }, 'claim acting_as_tenant is not a tenant id'],
    [{ tenant_id: 2, acting_as_tenant: '0', realm_access: { roles: ['svc_superadmin'] } }, 'claim acting_as_tenant names the system tenant'],
    [{ tenant_id: 2, sub: ['ann'] as unknown as string }, 'claim sub is not a string'],
    [{ tenant_id: 2, sub: '' }, 'token has no subject'],
    [{ tenant_id: 2, user_id: 'ann' }, 'claim user_id is not a user id'],
  ])('a verified token refused for its claims (%p) is a 401 whose reason the log names, as a token the verifier refuses', async (claims, reason) => {
    const logs = captureLogs('info');
    try {
      const err = await rejection(fakes(claims).auth.authenticate(bearer, false, []));
      expect(err).toBeInstanceOf(AuthenticationRequired);
      expect((err as AuthenticationRequired).reason).toBe(reason);
      expect(logs.lines()).toEqual([expect.objectContaining({ level: 'info', msg: 'bearer token refused', reason })]);
    } finally {
      logs.restore();
    }
  });

  it('a token without a subject: AuthenticationRequired', async () => {
    expect(await rejection(fakes({ tenant_id: 2, sub: '' }).auth.authenticate(bearer, false, []))).toBeInstanceOf(AuthenticationRequired);
  });
});

describe('Authenticator with the dev bypass', () => {
  it('ignores any token and grants every role', async () => {
    const f = fakes({}, { devBypass: true });
    const p = await f.auth.authenticate({ authorization: 'Bearer whatever', 'x-tenant-id': '2', 'x-user-id': 'alice' }, true, []);
    expect(p).toEqual({
      via: 'dev-bypass', subject: 'alice', roles: new Set(ROLES), homeTenantId: 2, tenantId: 2, impersonating: false, userId: 'alice', login: 'alice',
    });
    expect(f.verified).toEqual([]);
  });

  it('X-Impersonate-Tenant switches the tenant', async () => {
    const f = fakes({}, { devBypass: true });
    expect(await f.auth.authenticate({ 'x-tenant-id': '2', 'x-impersonate-tenant': '3' }, false, [])).toMatchObject({ homeTenantId: 2, tenantId: 3, impersonating: true });
    expect(f.tenantsChecked.sort()).toEqual([2, 3]);
  });

  it('a non-numeric tenant header: 400 naming the header', async () => {
    const f = fakes({}, { devBypass: true });
    const err = (await rejection(f.auth.authenticate({ 'x-tenant-id': 'acme' }, false, []))) as ValidationError;
    expect(err).toBeInstanceOf(ValidationError);
    expect(err.render().status).toBe(400);
    expect(err.field).toBe('X-Tenant-ID');
    expect(err.message).toBe('X-Tenant-ID must be a numeric tenant id');
  });
});

describe("a remembered token's claims", () => {
  it('are checked against the input limits once: the frozen object the verifier shares is not walked again', async () => {
    let walked = 0;
    const claims = Object.freeze(
      Object.defineProperty({ iss: 'https://idp.example.com', sub: 'subject-1', exp: EXP, tenant_id: 7 } as JWTPayload, 'team', {
        enumerable: true,
        get: () => {
          walked += 1;
          return 'crm';
        },
      }),
    );
    const verifier = { verify: async () => claims } as unknown as TokenVerifier;
    const { auth } = fakes({});
    const shared = new Authenticator({ devBypass: false, tenantClaim: 'tenant_id', verifier, directory: (auth as unknown as { options: { directory: Directory } }).options.directory });
    expect((await shared.authenticate(bearer, false, []))?.tenantId).toBe(7);
    const once = walked;
    expect(once).toBeGreaterThan(0);
    expect((await shared.authenticate(bearer, false, []))?.tenantId).toBe(7);
    expect(walked).toBe(once);
  });

  it('that may still change are checked on every call', async () => {
    const claims: JWTPayload = { iss: 'https://idp.example.com', sub: 'subject-1', exp: EXP, tenant_id: 7 };
    const verifier = { verify: async () => claims } as unknown as TokenVerifier;
    const { auth } = fakes({});
    const shared = new Authenticator({ devBypass: false, tenantClaim: 'tenant_id', verifier, directory: (auth as unknown as { options: { directory: Directory } }).options.directory });
    expect((await shared.authenticate(bearer, false, []))?.tenantId).toBe(7);
    claims.team = 'a\u0000b';
    await expect(shared.authenticate(bearer, false, [])).rejects.toBeInstanceOf(ValidationError);
  });
});

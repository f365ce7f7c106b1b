import { describe, expect, it } from '@jest/globals';
import { actor, describeGate, hasRole, OPERATOR_ACTOR, ROLES, satisfies, type Principal, type RoleGate } from './principal.js';

function principal(...roles: string[]): Principal {
  return { via: 'token', roles: new Set(roles), impersonating: false };
}

describe('ROLES', () => {
  it('are exactly the four roles of spec 1', () => {
    expect([...ROLES]).toEqual(['svc_user', 'svc_admin', 'svc_integrator', 'svc_superadmin']);
  });
});

describe('hasRole', () => {
  it('matches literally', () => {
    expect(hasRole(principal('svc_admin'), 'svc_admin')).toBe(true);
    expect(hasRole(principal('svc_admin'), 'SVC_ADMIN')).toBe(false);
    expect(hasRole(principal('svc_admin'), 'svc_admin ')).toBe(false);
    expect(hasRole(principal('svc_superadmin'), 'svc_admin')).toBe(false);
  });
});

describe('satisfies', () => {
  const combined: RoleGate = ['svc_integrator', ['svc_admin', 'svc_superadmin']];

  it('an empty gate holds for anyone authenticated', () => {
    expect(satisfies(principal(), [])).toBe(true);
  });

  it('a single role holds only with that role', () => {
    for (const role of ROLES) {
      for (const held of ROLES) {
        expect(satisfies(principal(held), [role])).toBe(held === role);
      }
    }
  });

  it('no role implies another', () => {
    expect(satisfies(principal('svc_superadmin'), ['svc_admin'])).toBe(false);
    expect(satisfies(principal('svc_superadmin'), ['svc_user'])).toBe(false);
    expect(satisfies(principal('svc_admin'), ['svc_user'])).toBe(false);
    expect(satisfies(principal('svc_superadmin', 'svc_admin', 'svc_user'), ['svc_integrator'])).toBe(false);
  });

  it('every top-level entry must hold', () => {
    expect(satisfies(principal('svc_user', 'svc_admin'), ['svc_user', 'svc_admin'])).toBe(true);
    expect(satisfies(principal('svc_user'), ['svc_user', 'svc_admin'])).toBe(false);
    expect(satisfies(principal('svc_admin'), ['svc_user', 'svc_admin'])).toBe(false);
  });

  it('a nested list holds when any of its roles does', () => {
    expect(satisfies(principal('svc_integrator', 'svc_admin'), combined)).toBe(true);
    expect(satisfies(principal('svc_integrator', 'svc_superadmin'), combined)).toBe(true);
    expect(satisfies(principal('svc_integrator', 'svc_admin', 'svc_superadmin'), combined)).toBe(true);
    expect(satisfies(principal('svc_integrator'), combined)).toBe(false);
    expect(satisfies(principal('svc_integrator', 'svc_user'), combined)).toBe(false);
    expect(satisfies(principal('svc_admin', 'svc_superadmin'), combined)).toBe(false);
  });

  it('an empty nested list never holds', () => {
    expect(satisfies(principal(...ROLES), [[]])).toBe(false);
  });

  it('roles outside the four grant nothing', () => {
    expect(satisfies(principal('admin', 'superadmin', 'SVC_USER'), ['svc_user'])).toBe(false);
    expect(satisfies(principal('svc_user', 'offline_access'), ['svc_user'])).toBe(true);
  });
});

describe('describeGate', () => {
  it('reads the gate for the OpenAPI document', () => {
    expect(describeGate(['svc_user'])).toBe('svc_user');
    expect(describeGate(['svc_integrator', ['svc_admin', 'svc_superadmin']])).toBe('svc_integrator and (svc_admin or svc_superadmin)');
    expect(describeGate([])).toBe('');
  });
});

describe('actor', () => {
  const caller = (fields: Partial<Principal>): Principal => ({ via: 'token', roles: new Set(), impersonating: false, ...fields });

  it('is the login, else the user id or subject', () => {
    expect(actor(caller({ login: 'ann', userId: '7', subject: 'sub-ann' }))).toBe('ann');
    expect(actor(caller({ userId: '7', subject: 'sub-ann' }))).toBe('7');
    expect(actor(caller({ subject: 'sub-ann' }))).toBe('sub-ann');
    expect(actor(undefined)).toBe('unknown');
  });

  it("is never the operator's own actor: a caller of that login is recorded with its subject appended", () => {
    expect(OPERATOR_ACTOR).toBe('operator');
    expect(actor(caller({ login: 'operator', userId: '7', subject: 'sub-op' }))).toBe('operator#sub-op');
    expect(actor(caller({ via: 'dev-bypass', login: 'operator', userId: 'operator', subject: 'operator' }))).toBe('operator#operator');
    expect(actor(caller({ login: 'operators', subject: 's' }))).toBe('operators');
  });
});

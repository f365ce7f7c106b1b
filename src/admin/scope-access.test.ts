import { describe, expect, it } from '@jest/globals';
import { ForbiddenWithReason, ScopeNotGranted } from '../errors.js';
import { hubUserId, noUserRecord, resolveScope, type ScopeAccess } from './scope-access.js';

/** The scope rules of the read surface, without a database (the stored side: apiserver/routes/platform/default-scope.test.ts). */

const unbound = (defaultScope = ''): ScopeAccess => ({ bound: false, granted: [], defaultScope });
const bound = (defaultScope = ''): ScopeAccess => ({ bound: true, granted: ['crm', 'sales'], defaultScope });

function refusal(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}

describe('resolveScope, an unbound caller', () => {
  it.each([[undefined], [''], ['   '], ['all']])('%p without a default: no specific scope, every scope allowed', (requested) => {
    expect(resolveScope(requested, unbound())).toEqual({});
  });

  it('a named scope is read as named (trimmed)', () => {
    expect(resolveScope('crm', unbound())).toEqual({ scope: 'crm' });
    expect(resolveScope(' crm ', unbound())).toEqual({ scope: 'crm' });
  });

  it('blank or absent falls back to the default scope', () => {
    expect(resolveScope(undefined, unbound('hr'))).toEqual({ scope: 'hr' });
    expect(resolveScope('  ', unbound('hr'))).toEqual({ scope: 'hr' });
  });

  it('all and a named scope override the default', () => {
    expect(resolveScope('all', unbound('hr'))).toEqual({});
    expect(resolveScope('crm', unbound('hr'))).toEqual({ scope: 'crm' });
  });

  it('a default of all is no specific scope', () => {
    expect(resolveScope(undefined, unbound('all'))).toEqual({});
  });

  it('useDefault false (search): blank means no tag filter, the default is not used', () => {
    expect(resolveScope(undefined, unbound('hr'), { useDefault: false })).toEqual({});
    expect(resolveScope('crm', unbound('hr'), { useDefault: false })).toEqual({ scope: 'crm' });
  });
});

describe('resolveScope, a scope-bound caller', () => {
  it.each([[undefined], [''], ['all']])('%p without a default: the granted set', (requested) => {
    expect(resolveScope(requested, bound())).toEqual({ allowed: ['crm', 'sales'] });
  });

  it('a granted scope is read, within the granted set', () => {
    expect(resolveScope('sales', bound())).toEqual({ scope: 'sales', allowed: ['crm', 'sales'] });
  });

  it('a scope outside the grants: 403 scope not granted', () => {
    const err = refusal(() => resolveScope('hr', bound()));
    expect(err).toBeInstanceOf(ScopeNotGranted);
    expect(err).toBeInstanceOf(ForbiddenWithReason);
    expect((err as ScopeNotGranted).render()).toEqual({ status: 403, body: { json: { error: 'scope not granted' } } });
  });

  it('the check is exact: case and prefixes are other scopes', () => {
    expect(refusal(() => resolveScope('CRM', bound()))).toBeInstanceOf(ScopeNotGranted);
    expect(refusal(() => resolveScope('cr', bound()))).toBeInstanceOf(ScopeNotGranted);
  });

  it('blank falls back to a granted default', () => {
    expect(resolveScope(undefined, bound('crm'))).toEqual({ scope: 'crm', allowed: ['crm', 'sales'] });
  });

  it('a default no longer granted is refused like a named one', () => {
    expect(refusal(() => resolveScope('', bound('hr')))).toBeInstanceOf(ScopeNotGranted);
    // Naming a granted scope or all still works.
    expect(resolveScope('all', bound('hr'))).toEqual({ allowed: ['crm', 'sales'] });
  });

  it('the granted set handed back is a copy', () => {
    const access = bound();
    resolveScope(undefined, access).allowed!.push('hr');
    expect(access.granted).toEqual(['crm', 'sales']);
  });
});

describe('hubUserId and noUserRecord', () => {
  it.each([
    ['17', 17],
    [' 17 ', 17],
    [undefined, undefined],
    ['', undefined],
    ['alice', undefined],
    ['0', undefined],
    ['-3', undefined],
    ['1.5', undefined],
    ['99999999999999999999', undefined],
  ])('%p -> %p', (userId, id) => {
    expect(hubUserId({ userId })).toBe(id);
  });

  it('names the id the call gave, or says there was none', () => {
    expect(noUserRecord({ userId: '42' }).render()).toEqual({ status: 404, body: { json: { error: 'no user record on this hub for user_id 42' } } });
    expect(noUserRecord({ userId: undefined }).message).toBe('no user record on this hub for user_id (none)');
  });
});

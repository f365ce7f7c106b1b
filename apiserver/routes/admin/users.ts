import type { Principal } from '../../../src/auth/principal.js';
import { ConflictError } from '../../../src/errors.js';
import { route, type RouteDecl } from '../../route.js';
import { created, errors, noContent, scopesBody, scopesRecord, tenantParams, tenantRefusals, userRecord } from './admin-schemas.js';
import { scopeRefusals } from '../schemas.js';

/**
 * Hub users of the caller's tenant (svc_admin), under row-level security. The hub stores no
 * passwords (a `password` field is refused as unknown). Locking, unlocking and deactivating drop
 * the authentication cache, so the user's very next call is refused or let through.
 */

const USER = { id: 'User id' };
const UID = { uid: 'User id' };
const optional = { type: ['string', 'null'], maxLength: 2000 } as const;
const email = { type: ['string', 'null'], format: 'email', maxLength: 320 } as const;

/**
 * A caller may not lock or deactivate their own account (acting as their own tenant): deactivation
 * is final and a locked caller cannot unlock themselves, so the tenant's only administrator would
 * shut themselves out. Another svc_admin of the tenant can.
 */
function refuseSelf(principal: Principal | undefined, id: number, what: string): void {
  if (principal && !principal.impersonating && principal.userId === String(id)) {
    throw new ConflictError(`you cannot ${what} your own account; another svc_admin of the tenant can`);
  }
}

export const userRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants/{tid}/users', operationId: 'listUsers', summary: 'Active users', tags: ['Users'],
    auth: ['svc_admin'],
    params: tenantParams(),
    responses: { 200: { description: 'Active users, by id', schema: { type: 'array', items: userRecord } }, ...tenantRefusals },
    handler: ({ services, principal }) => services.admin.users.list(principal?.tenantId),
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/users/{id}', operationId: 'getUser', summary: 'One user', tags: ['Users'],
    auth: ['svc_admin'],
    description: 'A deactivated user still answers, with `active: false`. Scopes: GET …/users/{id}/scopes.',
    params: tenantParams(USER),
    responses: { 200: { description: 'The user', schema: userRecord }, ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant' }), ...tenantRefusals },
    handler: ({ services, principal, params }) => services.admin.users.get(principal?.tenantId, params.id),
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/users', operationId: 'createUser', summary: 'Create a user', tags: ['Users'],
    auth: ['svc_admin'],
    description:
      '`login` is unique in the tenant (deactivated users keep theirs). No password: the user signs in at the identity provider, and a token ' +
      'reaches this user through its `user_id` claim.',
    params: tenantParams(),
    body: {
      type: 'object', required: ['login', 'name'], additionalProperties: false,
      properties: { login: { type: 'string', minLength: 1, maxLength: 200 }, name: { type: 'string', minLength: 1, maxLength: 200 }, email, description: optional },
    },
    responses: {
      201: { description: 'The new user', schema: userRecord },
      ...errors({ 400: 'Invalid body (`field` names it)', 409: 'The login is taken in the tenant; or the tenant has 100,000 users, deactivated ones included (`this tenant has 100000 users, the most it may have (100000): …`)' }),
      ...tenantRefusals,
    },
    handler: async ({ services, principal, body, ctx }) => created(ctx, await services.admin.users.create(principal?.tenantId, body)),
  }),
  route({
    method: 'PUT', path: '/api/tenants/{tid}/users/{id}', operationId: 'updateUser', summary: 'Update a user\'s profile, or lock the account', tags: ['Users'],
    auth: ['svc_admin'],
    description:
      'Only the fields present are applied; null clears `email` or `description`. `locked: true` locks the account: the user\'s next call ' +
      'is refused with 403 `account locked`. `locked: false` is refused: unlock with POST …/unlock.',
    params: tenantParams(USER),
    body: {
      type: 'object', additionalProperties: false, minProperties: 1,
      properties: { name: { type: 'string', minLength: 1, maxLength: 200 }, email, description: optional, locked: { type: 'boolean' } },
    },
    responses: {
      200: { description: 'The updated user', schema: userRecord },
      ...errors({ 400: 'Invalid body (`field` names it)', 404: 'Unknown, or of another tenant', 409: 'The user is deactivated, or `locked: true` names the caller\'s own account' }),
      ...tenantRefusals,
    },
    handler: ({ services, principal, params, body }) => {
      if (body.locked === true) refuseSelf(principal, params.id, 'lock');
      return services.admin.users.update(principal?.tenantId, params.id, body);
    },
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/users/{id}/unlock', operationId: 'unlockUser', summary: 'Unlock a locked account', tags: ['Users'],
    auth: ['svc_admin'],
    description: 'The user\'s next call is let through again. Unlocking an unlocked account changes nothing.',
    params: tenantParams(USER),
    responses: {
      200: { description: 'The user', schema: userRecord },
      ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant', 409: 'The user is deactivated' }),
      ...tenantRefusals,
    },
    handler: ({ services, principal, params }) => services.admin.users.unlock(principal?.tenantId, params.id),
  }),
  route({
    method: 'DELETE', path: '/api/tenants/{tid}/users/{id}', operationId: 'deactivateUser', summary: 'Deactivate a user (soft delete)', tags: ['Users'],
    auth: ['svc_admin'],
    description: 'Sets `active: false`; the row stays. The user\'s next call is refused with 403 `account inactive`. Repeating it changes nothing. The caller\'s own account is a 409 (deactivation is final).',
    params: tenantParams(USER),
    responses: { 204: { description: 'Deactivated' }, ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant', 409: 'The caller\'s own account' }), ...tenantRefusals },
    handler: async ({ services, principal, params, ctx }) => {
      refuseSelf(principal, params.id, 'deactivate');
      await services.admin.users.deactivate(principal?.tenantId, params.id);
      return noContent(ctx);
    },
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/users/{uid}/scopes', operationId: 'getUserScopes', summary: 'The scopes a user is bound to', tags: ['Users'],
    auth: ['svc_admin'],
    params: tenantParams(UID),
    responses: { 200: { description: 'The stored scopes', schema: scopesRecord }, ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant' }), ...tenantRefusals },
    handler: ({ services, principal, params }) =>
      services.admin.users.scopes(principal?.tenantId, params.uid).then((scopes) => ({ scopes })),
  }),
  route({
    method: 'PUT', path: '/api/tenants/{tid}/users/{uid}/scopes', operationId: 'setUserScopes', summary: 'Replace the scopes a user is bound to', tags: ['Users'],
    auth: ['svc_admin'],
    description:
      'A user with a non-empty list is scope-bound: outside those scopes the retrieval API answers 403 `scope not granted`. An empty list ' +
      'unbinds the user. Answers the stored list (deduplicated, sorted). A caller who is scope-bound themself sets only a non-empty list of scopes they hold, ' +
      'on a user whose stored list is non-empty and within them (their own included): 403 `scope not granted` otherwise.',
    params: tenantParams(UID),
    body: scopesBody,
    responses: {
      200: { description: 'The stored scopes', schema: scopesRecord },
      ...errors({ 400: 'Invalid body (`field` names the scope)', 404: 'Unknown, or of another tenant', 409: 'The user is deactivated; or the list names scopes the user never had, more than the tenant\'s 100,000 user scope grants (revoked ones included) leave room for (`this tenant has N user scope grants, the most it may have (100000): …`), nothing changed' }),
      ...scopeRefusals(false, 'every scope of the list and of the user\'s stored list, neither empty'),
    },
    handler: ({ services, principal, params, body }) =>
      services.admin.users.setScopes(principal?.tenantId, principal, params.uid, body.scopes).then((scopes) => ({ scopes })),
  }),
];

import { scopesOf, setScopes } from '../../../src/admin/scopes.js';
import { createUser, deactivateUser, getUser, listUsers, unlockUser, updateUser, type UserInput, type UserPatch } from '../../../src/admin/users.js';
import { route, type RouteDecl } from '../../route.js';
import { created, errors, inTenant, noContent, scopesBody, scopesRecord, tenantParams, tenantRefusals, userRecord } from './admin-schemas.js';

/**
 * Hub users of the caller's tenant (svc_admin), under row-level security. The hub stores no
 * passwords (a `password` field is refused as unknown). Locking, unlocking and deactivating drop
 * the authentication cache, so the user's very next call is refused or let through.
 */

const USER = { id: 'User id' };
const UID = { uid: 'User id' };
const optional = { type: ['string', 'null'], maxLength: 2000 };
const email = { type: ['string', 'null'], format: 'email', maxLength: 320 };

export const userRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants/{tid}/users', operationId: 'listUsers', summary: 'Active users', tags: ['Users'],
    auth: ['svc_admin'],
    params: tenantParams(),
    responses: { 200: { description: 'Active users, by id', schema: { type: 'array', items: userRecord } }, ...tenantRefusals },
    handler: ({ services, principal }) => inTenant(services, principal, listUsers),
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/users/{id}', operationId: 'getUser', summary: 'One user', tags: ['Users'],
    auth: ['svc_admin'],
    description: 'A deactivated user still answers, with `active: false`. Scopes: GET …/users/{id}/scopes.',
    params: tenantParams(USER),
    responses: { 200: { description: 'The user', schema: userRecord }, ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant' }), ...tenantRefusals },
    handler: ({ services, principal, params }) => inTenant(services, principal, (tx) => getUser(tx, Number(params.id))),
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
      ...errors({ 400: 'Invalid body (`field` names it)', 409: 'The login is taken in the tenant' }),
      ...tenantRefusals,
    },
    handler: async ({ services, principal, body, ctx }) => created(ctx, await inTenant(services, principal, (tx) => createUser(tx, body as UserInput))),
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
      ...errors({ 400: 'Invalid body (`field` names it)', 404: 'Unknown, or of another tenant', 409: 'The user is deactivated' }),
      ...tenantRefusals,
    },
    handler: async ({ services, principal, params, body }) => {
      const { user, lockChanged } = await inTenant(services, principal, (tx) => updateUser(tx, Number(params.id), body as UserPatch));
      if (lockChanged) services.directory.invalidate();
      return user;
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
    handler: async ({ services, principal, params }) => {
      const { user, changed } = await inTenant(services, principal, (tx) => unlockUser(tx, Number(params.id)));
      if (changed) services.directory.invalidate();
      return user;
    },
  }),
  route({
    method: 'DELETE', path: '/api/tenants/{tid}/users/{id}', operationId: 'deactivateUser', summary: 'Deactivate a user (soft delete)', tags: ['Users'],
    auth: ['svc_admin'],
    description: 'Sets `active: false`; the row stays. The user\'s next call is refused with 403 `account inactive`. Repeating it changes nothing.',
    params: tenantParams(USER),
    responses: { 204: { description: 'Deactivated' }, ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant' }), ...tenantRefusals },
    handler: async ({ services, principal, params, ctx }) => {
      const changed = await inTenant(services, principal, (tx) => deactivateUser(tx, Number(params.id)));
      if (changed) services.directory.invalidate();
      return noContent(ctx);
    },
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/users/{uid}/scopes', operationId: 'getUserScopes', summary: 'The scopes a user is bound to', tags: ['Users'],
    auth: ['svc_admin'],
    params: tenantParams(UID),
    responses: { 200: { description: 'The stored scopes', schema: scopesRecord }, ...errors({ 400: 'Invalid id', 404: 'Unknown, or of another tenant' }), ...tenantRefusals },
    handler: ({ services, principal, params }) =>
      inTenant(services, principal, async (tx) => {
        await getUser(tx, Number(params.uid));
        return { scopes: await scopesOf(tx, Number(params.uid)) };
      }),
  }),
  route({
    method: 'PUT', path: '/api/tenants/{tid}/users/{uid}/scopes', operationId: 'setUserScopes', summary: 'Replace the scopes a user is bound to', tags: ['Users'],
    auth: ['svc_admin'],
    description:
      'A user with a non-empty list is scope-bound: outside those scopes the retrieval API answers 403 `scope not granted`. An empty list ' +
      'unbinds the user. Answers the stored list (deduplicated, sorted).',
    params: tenantParams(UID),
    body: scopesBody,
    responses: {
      200: { description: 'The stored scopes', schema: scopesRecord },
      ...errors({ 400: 'Invalid body (`field` names the scope)', 404: 'Unknown, or of another tenant', 409: 'The user is deactivated' }),
      ...tenantRefusals,
    },
    handler: ({ services, principal, params, body }) =>
      inTenant(services, principal, async (tx) => ({ scopes: await setScopes(tx, Number(params.uid), (body as { scopes: string[] }).scopes) })),
  }),
];

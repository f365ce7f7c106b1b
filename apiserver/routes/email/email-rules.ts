import { actor } from '../../../src/auth/principal.js';
import { DEFAULT_SUBJECT, MAX_RECIPIENTS, } from '../../../src/email/rules.js';
import { PLACEHOLDERS } from '../../../src/email/templates.js';
import { SUBSCRIPTION_SCOPES } from '../../../src/events/scoped-families.js';
import { type JsonSchema, route, type RouteDecl } from '../../route.js';
import { created, errors, noContent, tenantParams, tenantRefusals } from '../admin/admin-schemas.js';
import { scopeRefusals } from '../schemas.js';

/**
 * E-mail rules of the caller's tenant (svc_admin; CONTRACTS.md section 4): events matching a rule's
 * patterns go to its recipients through its templates, one message per event, best effort. Under
 * row-level security: another tenant's rule is a 404 like an unknown one. Semantics in docs/email.md.
 */

const RULE = { id: 'E-mail rule id' };
const placeholders = PLACEHOLDERS.map((p) => `\`{{${p}}}\``).join(', ');

const fields = {
  name: { type: 'string', minLength: 1, maxLength: 200, description: 'Unique among the tenant\'s rules that are not deleted' },
  eventTypes: {
    type: 'array', minItems: 1, maxItems: 100,
    items: { type: 'string', minLength: 1, maxLength: 200 },
    description: 'Exact event types (`org.created`) or `prefix.*` patterns (`connector.run.*`); a bare `*` is refused; duplicates collapse',
  },
  recipient: {
    type: 'string', minLength: 1, maxLength: 2000,
    description: `One e-mail address or a comma-separated list of up to ${MAX_RECIPIENTS} (plain addresses, no display names); stored as \`a@x.org, b@y.org\``,
  },
  subject: { type: 'string', minLength: 1, maxLength: 998, description: `Template of the subject line; placeholders ${placeholders}` },
  body: { type: 'string', minLength: 1, maxLength: 20000, description: `Template of the plain-text body; placeholders as for \`subject\`` },
  enabled: { type: 'boolean' },
} as const;

const emailRuleRecord: JsonSchema = {
  type: 'object',
  required: ['id', 'name', 'eventTypes', 'recipient', 'subject', 'body', 'enabled'],
  properties: {
    id: { type: 'integer' }, name: { type: 'string' }, eventTypes: { type: 'array', items: { type: 'string' } },
    recipient: { type: 'string' }, subject: { type: 'string' }, body: { type: 'string' }, enabled: { type: 'boolean' },
  },
};

const invalid =
  'Invalid body (`field` names it): a blank name or one holding a control character, a malformed pattern or a bare `*`, an empty `eventTypes`, an address that is not one, ' +
  'an unknown placeholder or an unclosed `{{` in a template';

const subscriptionRefusals = scopeRefusals(false, SUBSCRIPTION_SCOPES);

export const emailRuleRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/tenants/{tid}/email-rules', operationId: 'listEmailRules', summary: 'E-mail rules of the tenant', tags: ['E-mail rules'],
    auth: ['svc_admin'],
    description: 'By id; deleted rules are left out, and so, for a scope-bound caller, are the rules they may not hold (docs/email.md).',
    params: tenantParams(),
    responses: { 200: { description: 'Rules', schema: { type: 'array', items: emailRuleRecord } }, ...tenantRefusals },
    handler: ({ services, principal }) => services.email.rules.list(principal?.tenantId, principal),
  }),
  route({
    method: 'POST', path: '/api/tenants/{tid}/email-rules', operationId: 'createEmailRule', summary: 'Create an e-mail rule', tags: ['E-mail rules'],
    auth: ['svc_admin'],
    description:
      'From now on every event of the tenant whose type matches one of `eventTypes` is sent, one message per event, to `recipient` with ' +
      '`subject` and `body` rendered from the event (not retroactive; best effort: a failed send is logged and skipped). ' +
      `\`subject\` defaults to \`${DEFAULT_SUBJECT}\`, \`body\` to a summary with the payload as JSON, \`enabled\` to true. ` +
      'Without mail settings (`svc.mail.host`) messages are only logged as mocked.',
    params: tenantParams(),
    body: { type: 'object', required: ['name', 'eventTypes', 'recipient'], additionalProperties: false, properties: fields },
    responses: {
      201: { description: 'The new rule', schema: emailRuleRecord },
      ...errors({ 400: invalid, 409: 'A rule of that name exists in the tenant' }),
      ...subscriptionRefusals,
    },
    handler: async ({ services, principal, body, ctx }) =>
      created(ctx, await services.email.rules.create(principal?.tenantId, principal, body, actor(principal))),
  }),
  route({
    method: 'GET', path: '/api/tenants/{tid}/email-rules/{id}', operationId: 'getEmailRule', summary: 'One e-mail rule', tags: ['E-mail rules'],
    auth: ['svc_admin'],
    params: tenantParams(RULE),
    responses: { 200: { description: 'The rule', schema: emailRuleRecord }, ...errors({ 400: 'Invalid id', 404: 'Unknown, deleted, or of another tenant' }), ...subscriptionRefusals },
    handler: ({ services, principal, params }) => services.email.rules.get(principal?.tenantId, principal, params.id),
  }),
  route({
    method: 'PUT', path: '/api/tenants/{tid}/email-rules/{id}', operationId: 'updateEmailRule', summary: 'Update an e-mail rule', tags: ['E-mail rules'],
    auth: ['svc_admin'],
    description: 'Only the fields present are applied, each checked as on create. Takes effect for the next event the consumer reads (events written before the update may still go out under the rule as it was for up to a second).',
    params: tenantParams(RULE),
    body: { type: 'object', additionalProperties: false, minProperties: 1, properties: fields },
    responses: {
      200: { description: 'The updated rule', schema: emailRuleRecord },
      ...errors({ 400: invalid, 404: 'Unknown, deleted, or of another tenant', 409: 'Another rule of the tenant has that name' }),
      ...subscriptionRefusals,
    },
    handler: ({ services, principal, params, body }) =>
      services.email.rules.update(principal?.tenantId, principal, params.id, body, actor(principal)),
  }),
  route({
    method: 'DELETE', path: '/api/tenants/{tid}/email-rules/{id}', operationId: 'deleteEmailRule', summary: 'Delete an e-mail rule (soft delete)', tags: ['E-mail rules'],
    auth: ['svc_admin'],
    description: 'No message goes out for it from the next event on. The row is kept as history; the rule leaves the list and answers 404 from then on, and its name can be used again.',
    params: tenantParams(RULE),
    responses: { 204: { description: 'Deleted' }, ...errors({ 400: 'Invalid id', 404: 'Unknown, already deleted, or of another tenant' }), ...subscriptionRefusals },
    handler: async ({ services, principal, params, ctx }) => {
      await services.email.rules.remove(principal?.tenantId, principal, params.id, actor(principal));
      return noContent(ctx);
    },
  }),
];

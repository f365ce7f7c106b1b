import { callerTenant } from '../../../src/auth/principal.js';
import { ValidationError } from '../../../src/errors.js';
import { paging } from '../../paging.js';
import { route, type RouteDecl } from '../../route.js';
import { refusals } from '../schemas.js';

/** The tenant's own audit trail (docs/operations.md, "Audit"): svc_admin of the tenant. */

const entrySchema = {
  type: 'object',
  required: ['at', 'actor', 'action', 'target', 'outcome', 'status', 'requestId', 'homeTenantId', 'impersonating'],
  properties: {
    at: { type: 'string', format: 'date-time' },
    actor: { type: 'string', description: 'who called: the token\'s login (or subject), under the dev bypass `X-User-ID` or `dev`' },
    action: { type: 'string', description: '`METHOD /declared/path`' },
    target: { type: 'string', description: 'the path called' },
    outcome: { enum: ['success', 'failure'] },
    status: { type: ['integer', 'null'], description: 'the HTTP status the caller got; null for an entry whose process stopped before the call answered' },
    requestId: { type: ['string', 'null'] },
    homeTenantId: { type: ['integer', 'null'], description: 'the tenant the caller belongs to (null for a caller of no tenant)' },
    impersonating: { type: 'boolean', description: 'the caller acted as this tenant from another one (`acting_as_tenant`)' },
  },
};

const instant = (description: string) => ({ type: 'string', format: 'date-time', maxLength: 64, description }) as const;

const AUDIT = paging({
  name: 'audit', key: ['instant', 'id'], defaultLimit: 50,
  filters: {
    actor: { type: 'string', maxLength: 1000, description: 'Only this actor\'s entries (exactly as `actor` shows it)' },
    action: { type: 'string', maxLength: 1000, description: 'Only this action (exactly, e.g. `DELETE /api/platform/dlq/{id}`)' },
    outcome: { enum: ['success', 'failure'], description: 'Only entries with this outcome' },
    since: instant('Only entries at or after this instant (ISO 8601 with its zone: `2026-12-01T00:00:00Z`); anything else is a 400 naming `since`'),
    until: instant('Only entries before this instant (ISO 8601 with its zone); anything else is a 400 naming `until`'),
  },
});

/** A `since` or `until` the schema let through (RFC 3339) that is still no instant (a leap second `23:59:60`): a 400 naming it. */
function instantOf(name: string, text: string | undefined): Date | undefined {
  if (text === undefined) return undefined;
  const date = new Date(text);
  if (Number.isNaN(date.getTime())) throw new ValidationError(`${name} must be a date-time`, name, 'an ISO 8601 instant with its zone, e.g. 2026-12-01T00:00:00Z');
  return date;
}

export const auditRoutes: RouteDecl[] = [
  route({
    method: 'GET', path: '/api/platform/audit', operationId: 'listAudit', summary: 'The tenant\'s audit trail, newest first', tags: ['Audit'],
    auth: ['svc_integrator', 'svc_admin'],
    // Not declared `audit: 'egress'`: an entry per read would grow the trail with its own reading.
    description:
      'Every mutating call and every data-egress read made as the caller\'s tenant (docs/operations.md, "Audit"), impersonating calls included ' +
      '(`impersonating: true`, `homeTenantId` the caller\'s own tenant); an impersonating caller\'s entries are in the tenant it acted as, not in its own. ' +
      'Newest first by the instant recorded, then by entry. Paged: with more entries after the page, a `Link` header (rel="next") names the next page (`before`). ' +
      'Reading the trail is not itself recorded.',
    query: AUDIT.query,
    responses: { 200: AUDIT.ok('Audit entries', entrySchema), ...refusals(true) },
    handler: async ({ services, principal, query, ctx }) => {
      const filter = {
        actor: query.actor, action: query.action, outcome: query.outcome,
        since: instantOf('since', query.since), until: instantOf('until', query.until),
      };
      return AUDIT.answer(ctx, query, await services.auditTrail.list(callerTenant(principal), AUDIT.asked(query), filter));
    },
  }),
];

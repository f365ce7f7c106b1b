import type { RouteDecl } from '../../route.js';
import { orgRoutes } from './orgs.js';
import { roleRoutes } from './roles.js';
import { tenantRoutes } from './tenants.js';
import { userRoutes } from './users.js';

/** Tenancy administration: tenants (svc_superadmin), organisations, users, roles and scopes (svc_admin). See docs/admin.md. */
export const adminRoutes: RouteDecl[] = [...tenantRoutes, ...orgRoutes, ...userRoutes, ...roleRoutes];

/** Tenancy administration: tenants, organisations, users, roles and scopes (framework-free services). */
export * from './common.js';
export * from './orgs.js';
export * from './roles.js';
export * from './scopes.js';
export * from './tenants.js';
export * from './users.js';

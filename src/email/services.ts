import type { Database, TenantId } from '../db/database.js';
import { createRule, deleteRule, type EmailRule, type EmailRuleInput, type EmailRulePatch, getRule, listRules, updateRule } from './rules.js';

/** E-mail rules of a tenant; every method opens its own transaction in the tenant it is given. */
export interface EmailServices {
  rules: {
    list(tenantId: TenantId | undefined): Promise<EmailRule[]>;
    get(tenantId: TenantId | undefined, id: number): Promise<EmailRule>;
    create(tenantId: TenantId | undefined, input: EmailRuleInput, by?: string): Promise<EmailRule>;
    update(tenantId: TenantId | undefined, id: number, patch: EmailRulePatch, by?: string): Promise<EmailRule>;
    remove(tenantId: TenantId | undefined, id: number, by?: string): Promise<void>;
  };
}

export function createEmailServices(deps: { db: Database }): EmailServices {
  const { db } = deps;
  return {
    rules: {
      list: (t) => db.withTenant(t, listRules),
      get: (t, id) => db.withTenant(t, (tx) => getRule(tx, id)),
      create: (t, input, by) => db.withTenant(t, (tx) => createRule(tx, input, by)),
      update: (t, id, patch, by) => db.withTenant(t, (tx) => updateRule(tx, id, patch, by)),
      remove: (t, id, by) => db.withTenant(t, (tx) => deleteRule(tx, id, by)),
    },
  };
}

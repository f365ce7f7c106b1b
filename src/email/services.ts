import { type Caller, scopeAccess } from '../admin/scope-access.js';
import type { Database, TenantId } from '../db/database.js';
import { heldSubscriptions, requireSubscriptions } from '../events/scoped-families.js';
import { createRule, deleteRule, type EmailRule, type EmailRuleInput, type EmailRulePatch, getRule, listRules, updateRule } from './rules.js';

/**
 * E-mail rules of a tenant; every method opens its own transaction in the tenant it is given. A
 * scope-bound caller (docs/admin.md, "Scopes") reaches only rules they may hold
 * (src/events/scoped-families.ts): another is a 403 `scope not granted`, and the list leaves it out.
 */
export interface EmailServices {
  rules: {
    list(tenantId: TenantId | undefined, caller: Caller): Promise<EmailRule[]>;
    get(tenantId: TenantId | undefined, caller: Caller, id: number): Promise<EmailRule>;
    /** Checked after the insert, in its transaction (a refusal rolls it back). */
    create(tenantId: TenantId | undefined, caller: Caller, input: EmailRuleInput, by?: string): Promise<EmailRule>;
    /** The rule as stored and as updated must both be the caller's to hold. */
    update(tenantId: TenantId | undefined, caller: Caller, id: number, patch: EmailRulePatch, by?: string): Promise<EmailRule>;
    remove(tenantId: TenantId | undefined, caller: Caller, id: number, by?: string): Promise<void>;
  };
}

export function createEmailServices(deps: { db: Database }): EmailServices {
  const { db } = deps;
  return {
    rules: {
      list: (t, caller) =>
        db.withTenant(t, async (tx) => {
          const [all, access] = [await listRules(tx), await scopeAccess(tx, caller)];
          const held = await heldSubscriptions(tx, access, all.map((r) => r.eventTypes));
          return all.filter((r) => held(r.eventTypes));
        }),
      get: (t, caller, id) =>
        db.withTenant(t, async (tx) => {
          const rule = await getRule(tx, id);
          await requireSubscriptions(tx, await scopeAccess(tx, caller), rule.eventTypes);
          return rule;
        }),
      create: (t, caller, input, by) =>
        db.withTenant(t, async (tx) => {
          const rule = await createRule(tx, input, by);
          await requireSubscriptions(tx, await scopeAccess(tx, caller), rule.eventTypes);
          return rule;
        }),
      update: (t, caller, id, patch, by) =>
        db.withTenant(t, async (tx) => {
          const access = await scopeAccess(tx, caller);
          if (access.bound) await requireSubscriptions(tx, access, (await getRule(tx, id)).eventTypes);
          const rule = await updateRule(tx, id, patch, by);
          await requireSubscriptions(tx, access, rule.eventTypes);
          return rule;
        }),
      remove: (t, caller, id, by) =>
        db.withTenant(t, async (tx) => {
          const access = await scopeAccess(tx, caller);
          if (access.bound) await requireSubscriptions(tx, access, (await getRule(tx, id)).eventTypes);
          await deleteRule(tx, id, by);
        }),
    },
  };
}

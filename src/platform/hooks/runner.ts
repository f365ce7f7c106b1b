import type { Database } from '../../db/database.js';
import type { HookDecl } from '../../events/catalog.js';
import { matchesSubscription } from '../../events/topics.js';
import { loggableMessage } from '../../observability/database-errors.js';
import { logger } from '../../observability/logger.js';

/**
 * Hooks (spec 1 "Hook"): declared by modules (`hooks:` in src/events/modules/*.yaml), each naming a
 * `target` handler registered in code, the event types it reacts to (exact or `prefix.*`), a
 * priority (lower runs first) and whether it is enabled by default. A tenant may override the
 * enabled flag; overrides are read through a per-tenant cache with a time to live
 * (`svc.hooks.cache-ttl`, 60 s), so a change made by another process is honoured within the TTL.
 */

/** What a hook handler is given. */
export interface HookEvent {
  tenantId: number;
  type: string;
  payload: Record<string, unknown>;
  /** The outbox event id, when the event came from the outbox. */
  id?: number;
}

type HookHandler = (event: HookEvent, hook: HookDecl) => Promise<void> | void;

/** A hook as a tenant sees it: the declaration with the tenant's effective enabled flag. */
type HookView = HookDecl;

interface HookOutcome {
  id: string;
  target: string;
  /** `ran`, `failed` (the handler threw), `disabled` (skipped), `no-handler` (target not registered). */
  status: 'ran' | 'failed' | 'disabled' | 'no-handler';
  error?: string;
}

interface HookDeclarations {
  hooks(): HookDecl[];
}

interface HookRunnerOptions {
  /** Time to live of a tenant's cached overrides, in milliseconds. */
  ttlMs: number;
  now?: () => number;
}

type Overrides = Map<string, boolean>;

export class HookRunner {
  private readonly declared: HookDecl[];
  private readonly byId = new Map<string, HookDecl>();
  private readonly handlers = new Map<string, HookHandler>();
  private readonly cache = new Map<number, { expires: number; overrides: Promise<Overrides> }>();
  private readonly now: () => number;

  constructor(
    declarations: HookDeclarations,
    private readonly db: Database,
    private readonly options: HookRunnerOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.declared = [...declarations.hooks()].sort((a, b) => a.priority - b.priority || a.id.localeCompare(b.id));
    for (const hook of this.declared) {
      const other = this.byId.get(hook.id);
      if (other) throw new Error(`hook ${hook.id} is declared twice (modules ${other.module} and ${hook.module})`);
      this.byId.set(hook.id, hook);
    }
  }

  /** Registers the code behind a `target`; a target has one handler. */
  register(target: string, handler: HookHandler): void {
    if (this.handlers.has(target)) throw new Error(`hook target ${target} already has a handler`);
    this.handlers.set(target, handler);
  }

  /** Declared hooks whose target has no handler (worth a warning once every area has registered). */
  unhandled(): HookDecl[] {
    return this.declared.filter((h) => !this.handlers.has(h.target));
  }

  find(id: string): HookDecl | undefined {
    return this.byId.get(id);
  }

  /** Every declared hook in run order, with the tenant's effective enabled flag. */
  async list(tenantId: number): Promise<HookView[]> {
    const overrides = await this.overrides(tenantId);
    return this.declared.map((h) => view(h, overrides));
  }

  /**
   * Records the tenant's override: `enabled` sets it, undefined flips the effective flag. Returns the
   * hook's new effective state. The caller has checked the hook exists and may act for the tenant.
   * This process sees the change at once; others within the cache TTL.
   */
  async toggle(tenantId: number, hookId: string, enabled: boolean | undefined, by: string): Promise<HookView> {
    const hook = this.byId.get(hookId);
    if (!hook) throw new Error(`hook ${hookId} is not declared`);
    const { rows } = await this.db.withTenant(tenantId, (tx) =>
      tx.query<{ enabled: boolean }>(
        `insert into platform.hook_overrides (tenant_id, hook_id, enabled, updated_by)
         values ($1, $2, coalesce($3::boolean, not $4::boolean), $5)
         on conflict (tenant_id, hook_id) do update
           set enabled = coalesce($3::boolean, not platform.hook_overrides.enabled), updated_by = excluded.updated_by, updated_at = now()
         returning enabled`,
        [tenantId, hookId, enabled ?? null, hook.enabled, by],
      ),
    );
    this.invalidate(tenantId);
    const now = rows[0]!.enabled;
    logger().info({ hook: hookId, hookTenant: tenantId, enabled: now, by }, `hook ${hookId} ${now ? 'enabled' : 'disabled'} for tenant ${tenantId}`);
    return view(hook, new Map([[hookId, now]]));
  }

  /**
   * Runs the hooks matching an event type (exact or `prefix.*`), enabled for the event's tenant, in
   * priority order, one after the other. A failing handler is logged and does not stop the others.
   */
  async run(event: HookEvent): Promise<HookOutcome[]> {
    const matching = this.declared.filter((h) => h.events.some((pattern) => matchesSubscription(pattern, event.type)));
    if (!matching.length) return [];
    const overrides = await this.overrides(event.tenantId);
    const outcomes: HookOutcome[] = [];
    for (const hook of matching) {
      if (!effective(hook, overrides)) {
        outcomes.push({ id: hook.id, target: hook.target, status: 'disabled' });
        continue;
      }
      const handler = this.handlers.get(hook.target);
      if (!handler) {
        logger().warn({ hook: hook.id, target: hook.target, eventType: event.type }, `hook ${hook.id}: no handler registered for target ${hook.target}; skipped`);
        outcomes.push({ id: hook.id, target: hook.target, status: 'no-handler' });
        continue;
      }
      try {
        await handler(event, hook);
        outcomes.push({ id: hook.id, target: hook.target, status: 'ran' });
      } catch (err) {
        const message = (err as Error)?.message ?? String(err);
        logger().error({ hook: hook.id, target: hook.target, eventType: event.type, eventId: event.id, err }, `hook ${hook.id} failed: ${loggableMessage(err)}`);
        outcomes.push({ id: hook.id, target: hook.target, status: 'failed', error: message });
      }
    }
    return outcomes;
  }

  /** Whether any hook is declared at all (none: no event can make one run). */
  hasHooks(): boolean {
    return this.declared.length > 0;
  }

  /** Forget cached overrides of one tenant (or of all). */
  invalidate(tenantId?: number): void {
    if (tenantId === undefined) this.cache.clear();
    else this.cache.delete(tenantId);
  }

  private overrides(tenantId: number): Promise<Overrides> {
    const cached = this.cache.get(tenantId);
    if (cached && cached.expires > this.now()) return cached.overrides;
    const loading = this.db
      .withTenant(tenantId, (tx) => tx.query<{ hook_id: string; enabled: boolean }>('select hook_id, enabled from platform.hook_overrides'))
      .then(({ rows }) => new Map(rows.map((r) => [r.hook_id, r.enabled])));
    const entry = { expires: this.now() + this.options.ttlMs, overrides: loading };
    this.cache.set(tenantId, entry);
    // A failed read is not cached.
    loading.catch(() => {
      if (this.cache.get(tenantId) === entry) this.cache.delete(tenantId);
    });
    return loading;
  }
}

function effective(hook: HookDecl, overrides: Overrides): boolean {
  return overrides.get(hook.id) ?? hook.enabled;
}

function view(hook: HookDecl, overrides: Overrides): HookView {
  return { id: hook.id, module: hook.module, target: hook.target, events: [...hook.events], priority: hook.priority, enabled: effective(hook, overrides) };
}

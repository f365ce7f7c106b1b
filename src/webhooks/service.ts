import { randomUUID } from 'node:crypto';
import { type Caller, type ScopeAccess, scopeAccess } from '../admin/scope-access.js';
import type { Database, Tx } from '../db/database.js';
import type { JsonText } from '../db/json-text.js';
import type { Page, PageRequest } from '../db/keyset.js';
import { NotFoundError, ScopeNotGranted, ValidationError } from '../errors.js';
import { type Catalog, type CatalogEntry, isDecision } from '../events/catalog.js';
import { heldSubscriptions, requireSubscriptions } from '../events/scoped-families.js';
import {
  createIntegration,
  deleteIntegration,
  getIntegration,
  type IntegrationRules,
  listIntegrations,
  liveIntegration,
  parseId,
  updateIntegration,
} from './integrations.js';
import { getDelivery, listForIntegration, listForTenant, RELEASE_LEASES_SQL, recordById, storable } from './journal.js';
import type { AttemptRecord, DeliveryRecord, Integration, IntegrationInput, IntegrationPatch, TestResult } from './model.js';
import type { DeliveryWorker } from './worker.js';

/**
 * The integration hub as the API sees it: integrations, their journal, replays and the test
 * operation, each in the caller's tenant (row-level security), plus the worker that sends replays
 * and tests from the process that serves the call. A scope-bound caller (docs/admin.md, "Scopes")
 * reaches only integrations they may hold (src/events/scoped-families.ts): another is a 403
 * `scope not granted`, and lists leave it (and its deliveries) out.
 */

interface IntegrationServiceOptions {
  db: Database;
  catalog: Catalog;
  worker: DeliveryWorker;
  rules: IntegrationRules;
  leaseMs: number;
}

interface ListQuery {
  failedOnly?: boolean;
  integrationId?: number;
}

/** A sample payload from a catalog declaration: every declared field with a value of its type. */
function samplePayload(entry: CatalogEntry): Record<string, unknown> {
  const sample: Record<string, unknown> = {};
  for (const [field, type] of Object.entries(entry.payload)) {
    sample[field] = type === 'long' ? 1 : type === 'boolean' ? true : type === 'map' ? {} : `sample-${field}`;
  }
  return sample;
}

export class IntegrationService {
  constructor(private readonly o: IntegrationServiceOptions) {}

  list(tenantId: number, caller: Caller): Promise<Integration[]> {
    return this.o.db.readWithTenant(tenantId, async (tx) => {
      const [all, access] = [await listIntegrations(tx), await scopeAccess(tx, caller)];
      const held = await heldSubscriptions(tx, access, all.map((i) => i.eventTypes));
      return all.filter((i) => held(i.eventTypes));
    });
  }

  get(tenantId: number, caller: Caller, id: string): Promise<Integration> {
    return this.o.db.readWithTenant(tenantId, async (tx) => {
      const integration = await getIntegration(tx, id);
      await requireSubscriptions(tx, await scopeAccess(tx, caller), integration.eventTypes);
      return integration;
    });
  }

  /** Checked after the insert, in its transaction (a refusal rolls it back). */
  create(tenantId: number, caller: Caller, input: IntegrationInput, by?: string): Promise<Integration> {
    return this.o.db.withTenant(tenantId, async (tx) => {
      const created = await createIntegration(tx, input, this.o.rules, by);
      await requireSubscriptions(tx, await scopeAccess(tx, caller), created.eventTypes);
      return created;
    });
  }

  // After a change commits, first attempts queued in this process read the integration again
  // before sending (worker.ts, `Claim`), so a disabled or deleted integration sends nothing more.

  /** The integration as stored and as updated must both be the caller's to hold. */
  async update(tenantId: number, caller: Caller, id: string, patch: IntegrationPatch, by?: string): Promise<Integration> {
    try {
      return await this.o.db.withTenant(tenantId, async (tx) => {
        const access = await this.heldLive(tx, caller, id);
        const updated = await updateIntegration(tx, id, patch, this.o.rules, by);
        await requireSubscriptions(tx, access, updated.eventTypes);
        return updated;
      });
    } finally {
      this.o.worker.integrationChanged();
    }
  }

  async remove(tenantId: number, caller: Caller, id: string, by?: string): Promise<void> {
    try {
      await this.o.db.withTenant(tenantId, async (tx) => {
        await this.heldLive(tx, caller, id);
        await deleteIntegration(tx, id, by);
      });
    } finally {
      this.o.worker.integrationChanged();
    }
  }

  /** A page of one integration's deliveries (deleted integrations keep theirs), newest first, as the answer's JSON text. */
  deliveries(tenantId: number, caller: Caller, integrationId: string, page: PageRequest, query: ListQuery): Promise<Page<JsonText>> {
    return this.o.db.readWithTenant(tenantId, async (tx) => {
      // The caller's access comes with the page (one statement); a scope-bound caller's page is answered only once they may hold the integration.
      const { page: listed, access } = await listForIntegration(tx, integrationId, page, { failedOnly: query.failedOnly ?? false, caller });
      if (access.bound) await requireSubscriptions(tx, access, (await getIntegration(tx, integrationId)).eventTypes);
      return listed;
    });
  }

  delivery(tenantId: number, caller: Caller, integrationId: string, deliveryId: string): Promise<DeliveryRecord & { attemptLog: AttemptRecord[] }> {
    return this.o.db.readWithTenant(tenantId, async (tx) => {
      const integration = await getIntegration(tx, integrationId);
      await requireSubscriptions(tx, await scopeAccess(tx, caller), integration.eventTypes);
      return getDelivery(tx, deliveryId, integration.id);
    });
  }

  /**
   * A page of the tenant's deliveries across integrations, failures first, as the answer's JSON text.
   * A scope-bound caller's leaves out those of integrations (deleted ones too) they may not hold, and
   * filtering by one is a 403.
   */
  platformDeliveries(tenantId: number, caller: Caller, page: PageRequest, query: ListQuery): Promise<Page<JsonText>> {
    return this.o.db.readWithTenant(tenantId, async (tx) => {
      const options = { failedOnly: query.failedOnly ?? false, integrationId: query.integrationId, caller };
      // The caller's access comes with the page (one statement): an unbound caller's page is the answer.
      const { page: listed, access } = await listForTenant(tx, page, options);
      if (!access.bound) return listed;
      // A scope-bound caller's is read again without the integrations they may not hold.
      const { rows } = await tx.query<{ id: number; event_types: string[] }>('select id, event_types from hub.integrations');
      const held = await heldSubscriptions(tx, access, rows.map((r) => r.event_types));
      const excluded = rows.filter((r) => !held(r.event_types)).map((r) => r.id);
      if (query.integrationId !== undefined && excluded.includes(query.integrationId)) throw new ScopeNotGranted();
      return (await listForTenant(tx, page, { ...options, excluded })).page;
    });
  }

  /** The caller's scope access, after a 403 when they are scope-bound and may not hold the live integration `id` (404 when there is none). */
  private async heldLive(tx: Tx, caller: Caller, id: string): Promise<ScopeAccess> {
    const access = await scopeAccess(tx, caller);
    if (access.bound) await requireSubscriptions(tx, access, (await liveIntegration(tx, id)).eventTypes);
    return access;
  }

  /**
   * Replays a delivery: a new entry with the original body, event type and event id, sent at once
   * (the answer does not wait for it; its outcome shows in the journal). 404 when the delivery is
   * unknown, of another tenant, not of the integration named, or its integration is deleted.
   */
  async replay(tenantId: number, caller: Caller, deliveryId: string, integrationId?: string): Promise<DeliveryRecord> {
    const token = randomUUID();
    const created = await this.o.db.withTenant(tenantId, async (tx) => {
      const id = parseId(deliveryId);
      const through = integrationId === undefined ? undefined : parseId(integrationId);
      // One answer for unknown, another tenant's and another integration's: existence is not confirmed.
      if (id === undefined || (integrationId !== undefined && through === undefined)) throw new NotFoundError('delivery not found');
      const { rows } = await tx.query<{ integration_id: number; deleted: boolean; event_types: string[] }>(
        `select d.integration_id, i.deleted_at is not null as deleted, i.event_types
           from hub.deliveries d join hub.integrations i on i.id = d.integration_id
          where d.id = $1`,
        [id],
      );
      const original = rows[0];
      if (!original || (through !== undefined && original.integration_id !== through)) throw new NotFoundError('delivery not found');
      if (original.deleted) throw new NotFoundError('the delivery\'s integration was deleted');
      await requireSubscriptions(tx, await scopeAccess(tx, caller), original.event_types);
      const inserted = await tx.query<{ id: number }>(
        `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, replay_of, lease_until, lease_token)
         select tenant_id, integration_id, 'replay', event_id, event_type, body, id, now() + make_interval(secs => $2::double precision / 1000), $3
           from hub.deliveries where id = $1
         returning id`,
        [id, this.o.leaseMs, token],
      );
      const newId = inserted.rows[0]!.id;
      return { record: await recordById(tx, newId), integrationId: original.integration_id };
    });
    if (!this.o.worker.submit({ tenantId, integrationId: created.integrationId }, created.record.id, token)) {
      // Not queued (its integration's queue full, the process stopping): its lease is given back, so the
      // next retry sweep sends it, instead of the sweep after the lease ran out.
      await this.o.db.withTenant(tenantId, (tx) => tx.query(RELEASE_LEASES_SQL, [[created.record.id], token]));
    }
    return created.record;
  }

  /**
   * The test operation: a real POST of a sample payload synthesised from the catalog declaration
   * of `eventType`, without `X-Svc-Event-Id`, recorded in the history; answers its outcome.
   */
  async test(tenantId: number, caller: Caller, integrationId: string, eventType: string): Promise<TestResult> {
    const token = randomUUID();
    const deliveryId = await this.o.db.withTenant(tenantId, async (tx) => {
      const integration = await liveIntegration(tx, integrationId);
      await requireSubscriptions(tx, await scopeAccess(tx, caller), integration.eventTypes);
      const entry = isDecision(eventType) ? undefined : this.o.catalog.get(eventType);
      if (!entry) throw new ValidationError(`Unknown event type: ${eventType}`, 'eventType');
      const { rows } = await tx.query<{ id: number }>(
        `insert into hub.deliveries (tenant_id, integration_id, kind, event_id, event_type, body, lease_until, lease_token)
         values ($1, $2, 'test', null, $3, $4, now() + make_interval(secs => $5::double precision / 1000), $6)
         returning id`,
        [tenantId, integration.id, eventType, JSON.stringify(samplePayload(entry)), this.o.leaseMs, token],
      );
      return rows[0]!.id;
    });
    const result = await this.o.worker.attempt(deliveryId, token);
    if (result.kind !== 'attempted') throw new NotFoundError(`integration ${integrationId} not found`);
    const { outcome } = result;
    // The response body as its delivery records it (a NUL character as U+FFFD), so the answer and the history agree.
    return { ok: outcome.ok, httpStatus: outcome.httpStatus, responseBody: storable(outcome.responseBody), error: outcome.error, durationMs: outcome.durationMs };
  }
}

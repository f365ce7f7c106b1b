import type { Tx } from '../db/database.js';
import type { EgressPolicy } from '../egress/policy.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import type { SubscriberCheck } from '../events/subscribers.js';
import { takeLivePlace } from '../manifests/tenant-cap.js';
import { CLOSED_REASON, type Integration, type IntegrationInput, type IntegrationPatch } from './model.js';
import { openIntegrationSecret, sealIntegrationSecret } from './secret.js';
import type { Keys } from '../platform/secrets/crypto.js';
import { BEARER_SECRET_RULE, normalizeEventTypes, normalizeTargetUrl, unsendableBearerSecret } from './validation.js';
import { labelName } from '../validation/names.js';
import { isUniqueViolation } from '../validation/database-refusals.js';

/**
 * Integrations (spec 1 "Integration"; the Integration state table). Run in `Database.withTenant`:
 * row-level security keeps each tenant to its own rows, so another tenant's id is a 404 like an
 * unknown one. A delete is soft: the row answers the single lookup (with `deletedAt`) and keeps its
 * delivery history, leaves the list, stops every send at once and closes its open deliveries.
 */

export interface IntegrationRules {
  /** The master keys: the current one seals secrets, previous ones still open them. */
  key: Keys;
  /** The outbound address policy: target URLs it refuses without resolving a name are refused at once (default: none). */
  egress?: EgressPolicy;
}

type Row = {
  id: number;
  name: string;
  target_url: string;
  platform: Integration['platform'];
  auth_mode: Integration['authMode'];
  has_secret: boolean;
  event_types: string[];
  enabled: boolean;
  standard_webhooks: boolean;
  created_at: Date;
  updated_at: Date;
  deleted_at: Date | null;
};

const COLUMNS =
  'id, name, target_url, platform, auth_mode, secret_ciphertext is not null as has_secret, event_types, enabled, standard_webhooks, created_at, updated_at, deleted_at';

function record(row: Row): Integration {
  return {
    id: row.id,
    name: row.name,
    targetUrl: row.target_url,
    platform: row.platform,
    authMode: row.auth_mode,
    hasSecret: row.has_secret,
    eventTypes: row.event_types,
    enabled: row.enabled,
    standardWebhooks: row.standard_webhooks,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
    deletedAt: row.deleted_at ? row.deleted_at.toISOString() : null,
  };
}

/**
 * Integrations (not deleted) one tenant may have: every event an integration subscribes to writes a
 * delivery for it, and delivery capacity is shared by all tenants; creating one more is a 409.
 */
export const MAX_INTEGRATIONS_PER_TENANT = 100;

function tenantOf(tx: Tx): number {
  if (tx.tenantId === undefined) throw new Error('integrations need a tenant transaction (Database.withTenant)');
  return tx.tenantId;
}

/** A path id: digits only; anything else is an id that never existed. */
/** The 404 of an integration the caller's tenant does not have (unknown, another tenant's, or a malformed id). */
export function integrationNotFound(id: string | number): NotFoundError {
  return new NotFoundError(`integration ${id} not found`);
}

export function parseId(text: string | number | undefined): number | undefined {
  const s = String(text ?? '');
  if (!/^\d{1,15}$/.test(s)) return undefined;
  const id = Number(s);
  return id > 0 ? id : undefined;
}

function uniqueName(err: unknown, name: string): never {
  if (isUniqueViolation(err, 'integrations_live_name')) throw new ConflictError(`an integration named '${name}' already exists`, 'name');
  throw err;
}

/**
 * A secret that counts: a non-blank string (null and blank are ignored, spec 1 PUT). One written
 * `whsec_…` must be that prefix and canonical standard base64 of at least one byte, as the Standard
 * Webhooks libraries decode it: a lenient reading (stray characters, URL-safe letters, a newline)
 * would sign with another key than the receiver's verifier derives. In `BEARER` mode it must be
 * sendable in the Authorization header (unsendableBearerSecret).
 */
function presentSecret(secret: string | null | undefined, authMode: Integration['authMode']): string | undefined {
  if (typeof secret !== 'string' || secret.trim() === '') return undefined;
  const unsendable = authMode === 'BEARER' ? unsendableBearerSecret(secret) : undefined;
  if (unsendable) throw new ValidationError(`secret: ${BEARER_SECRET_RULE}; it holds ${unsendable}`, 'secret', 'use the token exactly as issued, without a trailing line break');
  if (secret.startsWith('whsec_')) {
    const encoded = secret.slice('whsec_'.length);
    const key = Buffer.from(encoded, 'base64');
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded) || encoded.length % 4 !== 0 || key.length === 0 || key.toString('base64') !== encoded) {
      throw new ValidationError(
        'secret: a secret written whsec_… must be whsec_ followed by standard base64 (A-Z a-z 0-9 + /, = padding) of at least one byte',
        'secret',
        'the Standard Webhooks libraries decode it so: use the secret they generate, or one without the whsec_ prefix (used as its UTF-8 bytes)',
      );
    }
  }
  return secret;
}

export async function listIntegrations(tx: Tx): Promise<Integration[]> {
  const { rows } = await tx.query<Row>(`select ${COLUMNS} from hub.integrations where deleted_at is null order by id`);
  return rows.map(record);
}

/** Deleted integrations answer too (with `deletedAt`); 404 only for an id that never existed in the tenant. */
export async function getIntegration(tx: Tx, id: string | number): Promise<Integration> {
  const parsed = parseId(id);
  if (parsed === undefined) throw integrationNotFound(id);
  const { rows } = await tx.query<Row>(`select ${COLUMNS} from hub.integrations where id = $1`, [parsed]);
  if (!rows[0]) throw integrationNotFound(id);
  return record(rows[0]);
}

/** The integration unless it is unknown or deleted (404 either way): what update, delete, test and replay act on. */
export async function liveIntegration(tx: Tx, id: string | number, lock = false): Promise<Integration> {
  const parsed = parseId(id);
  if (parsed === undefined) throw integrationNotFound(id);
  const { rows } = await tx.query<Row>(`select ${COLUMNS} from hub.integrations where id = $1 and deleted_at is null${lock ? ' for update' : ''}`, [parsed]);
  if (!rows[0]) throw integrationNotFound(id);
  return record(rows[0]);
}

/** 400 naming the field for an invalid input; 409 when the name is taken or the tenant has MAX_INTEGRATIONS_PER_TENANT. */
export async function createIntegration(tx: Tx, input: IntegrationInput, rules: IntegrationRules, by?: string): Promise<Integration> {
  const tenantId = tenantOf(tx);
  const name = labelName(input.name);
  const targetUrl = normalizeTargetUrl(input.targetUrl, rules.egress);
  const eventTypes = normalizeEventTypes(input.eventTypes);
  const secret = presentSecret(input.secret, input.authMode ?? 'HMAC');
  await takeLivePlace(tx, {
    table: 'hub.integrations',
    plural: 'integrations',
    max: MAX_INTEGRATIONS_PER_TENANT,
    advice: 'delete one first, or subscribe an integration to more event types',
    // A deleted integration's delivery history stays readable until the journal's purge.
    heldBy: 'exists (select 1 from hub.deliveries d where d.integration_id = t.id)',
  });
  let id: number;
  try {
    const { rows } = await tx.query<{ id: number }>(
      `insert into hub.integrations (tenant_id, name, target_url, platform, auth_mode, event_types, enabled, standard_webhooks, created_by, updated_by)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9) returning id`,
      [tenantId, name, targetUrl, input.platform ?? 'generic', input.authMode ?? 'HMAC', eventTypes, input.enabled ?? true, input.standardWebhooks ?? false, by ?? null],
    );
    id = rows[0]!.id;
  } catch (err) {
    uniqueName(err, name);
  }
  if (secret !== undefined) await storeSecret(tx, tenantId, id, secret, rules.key);
  return getIntegration(tx, id);
}

/**
 * Applies the fields present; a null or blank secret is ignored, any other replaces the stored one
 * (rotation). Enabling a disabled integration makes it active from now on (not retroactive).
 */
export async function updateIntegration(tx: Tx, id: string | number, patch: IntegrationPatch, rules: IntegrationRules, by?: string): Promise<Integration> {
  const tenantId = tenantOf(tx);
  const current = await liveIntegration(tx, id, true);
  const sets: string[] = [];
  const values: unknown[] = [current.id];
  const set = (column: string, value: unknown) => {
    values.push(value);
    sets.push(`${column} = $${values.length}`);
  };
  let name = current.name;
  if (patch.name !== undefined) {
    name = labelName(patch.name);
    set('name', name);
  }
  if (patch.targetUrl !== undefined) set('target_url', normalizeTargetUrl(patch.targetUrl, rules.egress));
  if (patch.eventTypes !== undefined) set('event_types', normalizeEventTypes(patch.eventTypes));
  if (patch.platform !== undefined) set('platform', patch.platform);
  if (patch.authMode !== undefined) set('auth_mode', patch.authMode);
  if (patch.standardWebhooks !== undefined) set('standard_webhooks', patch.standardWebhooks);
  if (patch.enabled !== undefined) {
    set('enabled', patch.enabled);
    // The update's own time, not its transaction's start: events committed while it waited are older.
    if (patch.enabled && !current.enabled) sets.push('active_since = clock_timestamp()');
  }
  const secret = presentSecret(patch.secret, patch.authMode ?? current.authMode);
  if (secret === undefined && patch.authMode === 'BEARER' && current.authMode !== 'BEARER') await storedSecretSendable(tx, tenantId, current.id, rules.key);
  if (sets.length > 0 || secret !== undefined) {
    values.push(by ?? null);
    sets.push(`updated_by = $${values.length}`, 'updated_at = now()');
    try {
      await tx.query(`update hub.integrations set ${sets.join(', ')} where id = $1`, values);
    } catch (err) {
      uniqueName(err, name);
    }
  }
  if (secret !== undefined) await storeSecret(tx, tenantId, current.id, secret, rules.key);
  return getIntegration(tx, current.id);
}

/** Soft delete: sends stop, open deliveries close with the spec's reason, history stays. 404 when unknown or already deleted. */
export async function deleteIntegration(tx: Tx, id: string | number, by?: string): Promise<void> {
  const current = await liveIntegration(tx, id, true);
  await tx.query('update hub.integrations set deleted_at = now(), updated_at = now(), updated_by = $2 where id = $1', [current.id, by ?? null]);
  await tx.query(
    `update hub.deliveries set closed_reason = $2
      where integration_id = $1 and not succeeded and closed_reason is null`,
    [current.id, CLOSED_REASON],
  );
}

/**
 * Switching to `BEARER` without a new secret: the stored one (set for HMAC, where any text keys the
 * signature) must be sendable in the Authorization header, or the 400 names `authMode`. A secret that
 * does not open (another master key) is left to the deliveries, which record that fault.
 */
async function storedSecretSendable(tx: Tx, tenantId: number, id: number, key: Keys): Promise<void> {
  const { rows } = await tx.query<{ secret_iv: Buffer | null; secret_tag: Buffer | null; secret_ciphertext: Buffer | null }>(
    'select secret_iv, secret_tag, secret_ciphertext from hub.integrations where id = $1',
    [id],
  );
  let stored: string | undefined;
  try {
    stored = rows[0] ? openIntegrationSecret(key, tenantId, id, rows[0]) : undefined;
  } catch {
    return;
  }
  const unsendable = stored === undefined ? undefined : unsendableBearerSecret(stored);
  if (unsendable) throw new ValidationError(`authMode: the stored secret holds ${unsendable}, and ${BEARER_SECRET_RULE}`, 'authMode', 'send a new secret along with authMode BEARER');
}

async function storeSecret(tx: Tx, tenantId: number, id: number, secret: string, key: Keys): Promise<void> {
  const sealed = sealIntegrationSecret(key, tenantId, id, secret);
  await tx.query('update hub.integrations set secret_iv = $2, secret_tag = $3, secret_ciphertext = $4 where id = $1', [id, sealed.iv, sealed.tag, sealed.ciphertext]);
}

/** SQL: an `event_types` array (alias `i`) matches the type in parameter `$n` (exact, or `prefix.*`). */
export function matchesSql(typeParam: string, alias = 'i'): string {
  return `exists (select 1 from unnest(${alias}.event_types) p where p = ${typeParam} or (right(p, 2) = '.*' and starts_with(${typeParam}, left(p, -1))))`;
}

/**
 * For the subscriber registry (src/events/subscribers.ts): an active integration of the
 * transaction's tenant matching the type counts as a subscriber, so `data.row.changed` is written
 * when an integration listens to it.
 */
export const integrationSubscriber: SubscriberCheck = async (tx, type) => {
  const { rows } = await tx.query<{ found: boolean }>(
    `select exists (
       select 1 from hub.integrations i
        where i.enabled and i.deleted_at is null and ($2::bigint is null or i.tenant_id = $2) and ${matchesSql('$1::text')}
     ) as found`,
    [type, tx.tenantId ?? null],
  );
  return rows[0]?.found ?? false;
};

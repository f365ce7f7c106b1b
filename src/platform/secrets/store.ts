import type { Database, Tx } from '../../db/database.js';
import { ConflictError, NotFoundError } from '../../errors.js';
import type { EventWriter } from '../../events/outbox.js';
import { takeLivePlace } from '../../manifests/tenant-cap.js';
import { logger, registerOperationSecret } from '../../observability/logger.js';
import { type Keys, type Sealed, seal, UnsealError, unseal, unsealWith } from './crypto.js';
import type { SealedValues } from './rekey.js';

/**
 * The connector credential store (spec 1 "Secret"): per tenant, values sealed at rest (crypto.ts),
 * reads return metadata only, every change emits its `platform.secret.*` event in the same
 * transaction. `resolveSecret` is how connectors obtain a value: it decrypts, keeps the value in
 * memory for `cacheTtlMs`, and emits `platform.secret.read` only when it had to go to storage.
 */

/** What reads return: never the value. */
export interface SecretMetadata {
  name: string;
  description: string | null;
  createdAt: string;
  updatedAt: string;
  rotatedAt: string | null;
}

export interface CreateSecret {
  name: string;
  value: string;
  description?: string | null;
}

export interface RotateSecret {
  value: string;
  /** Absent: unchanged; null: cleared. */
  description?: string | null;
}

/** Names: letters, digits, `_`, `.`, `-`; no `:` so `secret:NAME` is unambiguous. */
export const SECRET_NAME_PATTERN = '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$';
export const SECRET_REF_PREFIX = 'secret:';

/**
 * Values at least this long are also registered with the logger's scrubber for the request or job
 * that holds them (defence in depth for code that logs a URL or an upstream error carrying a
 * credential), never for other tenants' lines; shorter ones would blank out ordinary words.
 */
const SCRUB_MIN_LENGTH = 12;

/** Stored secrets (not deleted) one tenant may have: the database is shared; creating one more is a 409. */
export const MAX_SECRETS_PER_TENANT = 1_000;

export interface SecretStoreOptions {
  cacheTtlMs: number;
  now?: () => number;
}

type Row = { name: string; description: string | null; created_at: Date; updated_at: Date; rotated_at: Date | null };

const METADATA = 'name, description, created_at, updated_at, rotated_at';

function metadata(row: Row): SecretMetadata {
  return {
    name: row.name,
    description: row.description,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
    rotatedAt: row.rotated_at ? row.rotated_at.toISOString() : null,
  };
}

export class SecretStore {
  private readonly cache = new Map<string, { value: string; expires: number }>();
  /** Bumped by every change of a name, so a read that raced with a rotation does not cache the old value. */
  private readonly generations = new Map<string, number>();
  private epoch = 0;
  private readonly now: () => number;

  constructor(
    private readonly db: Database,
    private readonly events: EventWriter,
    /** The current master key seals; it and the previous ones open. */
    private readonly key: Keys,
    private readonly options: SecretStoreOptions,
  ) {
    this.now = options.now ?? Date.now;
  }

  async list(tenantId: number): Promise<SecretMetadata[]> {
    const { rows } = await this.db.withTenant(tenantId, (tx) =>
      tx.query<Row>(`select ${METADATA} from platform.secrets where deleted_at is null order by name`),
    );
    return rows.map(metadata);
  }

  async get(tenantId: number, name: string): Promise<SecretMetadata> {
    const { rows } = await this.db.withTenant(tenantId, (tx) =>
      tx.query<Row>(`select ${METADATA} from platform.secrets where name = $1 and deleted_at is null`, [name]),
    );
    if (!rows[0]) throw notFound(name);
    return metadata(rows[0]);
  }

  /** 409 when a secret of that name exists or the tenant has MAX_SECRETS_PER_TENANT (deleted ones do not count). */
  async create(tenantId: number, input: CreateSecret, by: string): Promise<SecretMetadata> {
    const sealed = seal(this.key, tenantId, input.name, input.value);
    const created = await this.db.withTenant(tenantId, async (tx) => {
      await takeLivePlace(tx, { table: 'platform.secrets', plural: 'stored secrets', max: MAX_SECRETS_PER_TENANT, advice: 'delete one first' });
      const { rows } = await tx.query<Row>(
        `insert into platform.secrets (tenant_id, name, description, iv, tag, ciphertext, created_by, updated_by)
         values ($1, $2, $3, $4, $5, $6, $7, $7)
         on conflict (tenant_id, name) where deleted_at is null do nothing
         returning ${METADATA}`,
        [tenantId, input.name, input.description ?? null, sealed.iv, sealed.tag, sealed.ciphertext, by],
      );
      if (!rows[0]) throw new ConflictError(`secret ${input.name} already exists`, 'name');
      await this.events.emit(tx, 'platform.secret.created', { name: input.name, by, at: rows[0].created_at.toISOString() });
      return metadata(rows[0]);
    });
    this.invalidate(tenantId, input.name);
    scrub(input.value);
    logger().info({ secretName: input.name, by }, 'secret created');
    return created;
  }

  /** Replaces the value (and the description when given); sets rotatedAt. 404 when unknown. */
  async rotate(tenantId: number, name: string, input: RotateSecret, by: string): Promise<SecretMetadata> {
    const sealed = seal(this.key, tenantId, name, input.value);
    const describe = input.description !== undefined;
    const rotated = await this.db.withTenant(tenantId, async (tx) => {
      const before = await tx.query<{ id: number; rotated_at: Date | null }>(
        'select id, rotated_at from platform.secrets where name = $1 and deleted_at is null for update',
        [name],
      );
      const row = before.rows[0];
      if (!row) throw notFound(name);
      const { rows } = await tx.query<Row>(
        `update platform.secrets
            set iv = $2, tag = $3, ciphertext = $4, updated_by = $5, updated_at = now(), rotated_at = now(),
                description = case when $6 then $7 else description end
          where id = $1
          returning ${METADATA}`,
        [row.id, sealed.iv, sealed.tag, sealed.ciphertext, by, describe, input.description ?? null],
      );
      const after = rows[0]!;
      await this.events.emit(tx, 'platform.secret.updated', {
        name,
        by,
        at: after.rotated_at!.toISOString(),
        previousRotatedAt: row.rotated_at ? row.rotated_at.toISOString() : '',
      });
      return metadata(after);
    });
    this.invalidate(tenantId, name);
    scrub(input.value);
    logger().info({ secretName: name, by }, 'secret rotated');
    return rotated;
  }

  /** Soft delete: the row stays with its metadata, its ciphertext is erased. 404 when unknown. */
  async remove(tenantId: number, name: string, by: string): Promise<void> {
    await this.db.withTenant(tenantId, async (tx) => {
      const { rows } = await tx.query<{ deleted_at: Date }>(
        `update platform.secrets
            set deleted_at = now(), updated_at = now(), updated_by = $2, iv = null, tag = null, ciphertext = null
          where name = $1 and deleted_at is null
          returning deleted_at`,
        [name, by],
      );
      if (!rows[0]) throw notFound(name);
      await this.events.emit(tx, 'platform.secret.deleted', { name, by, at: rows[0].deleted_at.toISOString() });
    });
    this.invalidate(tenantId, name);
    logger().info({ secretName: name, by }, 'secret deleted');
  }

  /**
   * The value behind `secret:NAME` (or a bare NAME) in a tenant, or undefined when no such secret
   * exists. Served from memory while fresh; a read from storage emits `platform.secret.read` with
   * `by` (who asked: a connector, a job).
   */
  async resolveSecret(tenantId: number, ref: string, by = 'system'): Promise<string | undefined> {
    const name = parseRef(ref);
    if (name === undefined) return undefined;
    const key = cacheKey(tenantId, name);
    const cached = this.cache.get(key);
    if (cached && cached.expires > this.now()) {
      // Scrubbed from this unit of work's lines, which the read that filled the cache was not.
      scrub(cached.value);
      return cached.value;
    }
    if (cached) this.cache.delete(key);
    const generation = this.generations.get(key) ?? 0;
    const epoch = this.epoch;
    const value = await this.db.withTenant(tenantId, async (tx) => {
      const sealed = await readSealed(tx, name);
      if (!sealed) return undefined;
      const opened = unseal(this.key, tenantId, name, sealed);
      await this.events.emit(tx, 'platform.secret.read', { name, by, at: new Date(this.now()).toISOString() });
      return opened;
    });
    if (value === undefined) return undefined;
    scrub(value);
    if (this.epoch === epoch && (this.generations.get(key) ?? 0) === generation && this.options.cacheTtlMs > 0) {
      this.cache.set(key, { value, expires: this.now() + this.options.cacheTtlMs });
    }
    return value;
  }

  /**
   * Which of the hub's keys opens the stored secrets, tried on the newest one (across tenants):
   * `current`, `previous` (one of svc.secret.previous-master-keys: a rotation not re-sealed yet),
   * `none`, or undefined when none is stored. A hub started with another key than the one they
   * were sealed with reads none of them; said once at start rather than at every use.
   */
  async newestSealedUnder(): Promise<'current' | 'previous' | 'none' | undefined> {
    const { rows } = await this.db.crossTenantQuery<Sealed & { tenant_id: string; name: string }>(
      'secret-key-check',
      'select tenant_id, name, iv, tag, ciphertext from platform.secrets where deleted_at is null order by created_at desc limit 1',
    );
    const row = rows[0];
    if (!row) return undefined;
    try {
      return unsealWith(this.key, Number(row.tenant_id), row.name, row).current ? 'current' : 'previous';
    } catch (err) {
      if (err instanceof UnsealError) return 'none';
      throw err;
    }
  }

  /** Forget a cached value (after a rotation or a delete, or everything). */
  invalidate(tenantId?: number, name?: string): void {
    if (tenantId === undefined || name === undefined) {
      this.cache.clear();
      this.epoch++;
      return;
    }
    const key = cacheKey(tenantId, name);
    this.cache.delete(key);
    this.generations.set(key, (this.generations.get(key) ?? 0) + 1);
  }
}

/** The secret store's values for `svc-hub secrets rekey` (rekey.ts); deleted secrets hold none. */
export const SECRET_VALUES: SealedValues = {
  kind: 'secret',
  table: 'platform.secrets',
  columns: { iv: 'iv', tag: 'tag', ciphertext: 'ciphertext' },
  aadName: (row) => row.name,
};

/** `secret:NAME` or `NAME` -> NAME; undefined when it cannot name a secret. */
export function parseRef(ref: string): string | undefined {
  const name = ref.startsWith(SECRET_REF_PREFIX) ? ref.slice(SECRET_REF_PREFIX.length) : ref;
  return new RegExp(SECRET_NAME_PATTERN).test(name) ? name : undefined;
}

async function readSealed(tx: Tx, name: string): Promise<Sealed | undefined> {
  const { rows } = await tx.query<Sealed>('select iv, tag, ciphertext from platform.secrets where name = $1 and deleted_at is null', [name]);
  return rows[0];
}

function cacheKey(tenantId: number, name: string): string {
  return `${tenantId}\u0000${name}`;
}

function notFound(name: string): NotFoundError {
  return new NotFoundError(`secret ${name} not found`);
}

function scrub(value: string): void {
  if (value.length >= SCRUB_MIN_LENGTH) registerOperationSecret(value);
}

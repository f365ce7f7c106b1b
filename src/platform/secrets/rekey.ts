import type { Database, Tx } from '../../db/database.js';
import { type MasterKeys, seal, UnsealError, unsealWith } from './crypto.js';

/**
 * `svc-hub secrets rekey`: every value sealed under the master key (the secret store's secrets,
 * integration secrets, whatever an area declares as SealedValues) re-sealed under the current key,
 * so that a previous key can leave svc.secret.previous-master-keys. Batches of rows, each in a
 * transaction of its own as the worker role, the rows locked (`for no key update`) from their read
 * to their write: a tenant's rotation of one of them either commits before the batch reads it (the
 * batch then reads the new value, already under the current key) or waits for the batch's commit
 * and then writes its own value over the re-sealed one; its new value is never lost. Re-sealing
 * changes the stored bytes only: the value, its metadata (updatedAt, rotatedAt) and the events are
 * left as they are. Idempotent: a value the current key opens is counted and left alone.
 */

/** One table of sealed values: `id`, `tenant_id` and `name` columns beside the three sealed ones. */
export interface SealedValues {
  /** What the report calls one: `secret`, `integration secret`. */
  readonly kind: string;
  /** Schema-qualified. */
  readonly table: string;
  /** Its IV, tag and ciphertext columns (null in a row that holds no value). */
  readonly columns: { readonly iv: string; readonly tag: string; readonly ciphertext: string };
  /** The name bound as additional authenticated data (crypto.ts `aad`) of a row. */
  aadName(row: { id: number; name: string }): string;
}

/** A value that opens under no configured key: named, never shown. */
export interface Unopened {
  kind: string;
  tenantId: number;
  name: string;
}

export interface RekeyReport {
  /** Re-sealed under the current key (they opened under a previous one). */
  resealed: number;
  /** Already under the current key. */
  current: number;
  /** Opened by no configured key (another key, or altered bytes): left as they are. */
  unopened: Unopened[];
  /** A stop (a signal) came before every value was visited. */
  stopped: boolean;
}

export interface RekeyOptions {
  /** Rows per transaction (default REKEY_BATCH). */
  batch?: number;
  /** Checked between batches: the batch in progress commits, the next is not started. */
  stop?: AbortSignal;
}

export const REKEY_BATCH = 100;

type Row = { id: string; tenant_id: string; name: string; iv: Buffer; tag: Buffer; ciphertext: Buffer };

export async function rekey(db: Pick<Database, 'crossTenant'>, keys: MasterKeys, sets: readonly SealedValues[], options: RekeyOptions = {}): Promise<RekeyReport> {
  const batch = options.batch ?? REKEY_BATCH;
  const report: RekeyReport = { resealed: 0, current: 0, unopened: [], stopped: false };
  for (const set of sets) {
    let after = '0';
    for (;;) {
      if (options.stop?.aborted) return { ...report, stopped: true };
      const done = await db.crossTenant('secrets-rekey', (tx) => rekeyBatch(tx, keys, set, after, batch));
      report.resealed += done.resealed;
      report.current += done.current;
      report.unopened.push(...done.unopened);
      if (done.last === undefined) break;
      after = done.last;
    }
  }
  return report;
}

/** The rows of `set` after id `after` (at most `batch`), locked, re-sealed where a previous key opened them. */
async function rekeyBatch(tx: Tx, keys: MasterKeys, set: SealedValues, after: string, batch: number): Promise<Omit<RekeyReport, 'stopped'> & { last?: string }> {
  const { iv, tag, ciphertext } = set.columns;
  const { rows } = await tx.query<Row>(
    `select id, tenant_id, name, ${iv} as iv, ${tag} as tag, ${ciphertext} as ciphertext from ${set.table}
      where ${ciphertext} is not null and id > $1
      order by id limit $2
      for no key update`,
    [after, batch],
  );
  const out: Omit<RekeyReport, 'stopped'> & { last?: string } = { resealed: 0, current: 0, unopened: [], last: rows.at(-1)?.id };
  for (const row of rows) {
    const tenantId = Number(row.tenant_id);
    const name = set.aadName({ id: Number(row.id), name: row.name });
    let opened: ReturnType<typeof unsealWith>;
    try {
      opened = unsealWith(keys, tenantId, name, row);
    } catch (err) {
      if (!(err instanceof UnsealError)) throw err;
      out.unopened.push({ kind: set.kind, tenantId, name: row.name });
      continue;
    }
    if (opened.current) {
      out.current++;
      continue;
    }
    const sealed = seal(keys, tenantId, name, opened.value);
    await tx.query(`update ${set.table} set ${iv} = $2, ${tag} = $3, ${ciphertext} = $4 where id = $1`, [row.id, sealed.iv, sealed.tag, sealed.ciphertext]);
    out.resealed++;
  }
  return out;
}

import pg from 'pg';
import { tableRegclassSql, tenantTableSql } from '../connectors/target/ddl.js';
import type { Database, Tx } from '../db/database.js';
import { EntityDefinitionError, typedEntityRelation } from '../entities/relation.js';
import { entitiesOfScope } from '../entities/store.js';
import type { EntityDef } from '../entities/types.js';
import { HubError, type Rendered } from '../errors.js';
import { cancelledOnAbort } from './analytic/run.js';
import { pieceEnd } from '../validation/input-limits.js';
import type { CardColumn, CardRelation, SchemaCard } from './analytic/schema-card.js';

/**
 * 503 `{error, hint}`: the discovery ran past its timeout, all its statements together (`doing` says
 * what it was at: a column's values over a whole table, most often); nothing was stored, the scope
 * keeps its previous card.
 */
export class DiscoveryTimedOut extends HubError {
  constructor(
    readonly doing: string,
    readonly timeoutMs: number,
  ) {
    super(`discovery stopped: it took longer than ${timeoutMs} ms in all, the time a whole discovery may take (${doing})`);
    this.name = 'DiscoveryTimedOut';
  }
  render(): Rendered {
    return {
      status: 503,
      body: { json: { error: this.message, hint: 'a discovery, all its statements together, is held to svc.analytic.statement-timeout: raise it, or rediscover when the database is less busy; the scope keeps its previous card' } },
    };
  }
}

/**
 * 503 `{error, hint}`: the discovery did not start. It takes a turn among the analytic queries
 * (AnalyticGate: `svc.analytic.concurrency`, `svc.analytic.concurrency-per-tenant`), since it holds
 * a connection for up to the statement timeout as they do, and none came within `waitMs`.
 */
export class DiscoveryNotStarted extends HubError {
  constructor(readonly waitMs: number) {
    super(
      `discovery not started: the hub is already running as many analytic queries and discoveries as it allows (svc.analytic.concurrency, svc.analytic.concurrency-per-tenant) and none finished within ${waitMs} ms`,
    );
    this.name = 'DiscoveryNotStarted';
  }
  render(): Rendered {
    return { status: 503, body: { json: { error: this.message, hint: 'rediscover again in a moment; the scope keeps its previous card' } } };
  }
}

/**
 * 404 `{error, hint}`: no connector or entity of the tenant declares the scope (a typo, most often,
 * or the scope of a connector or entity deleted since). A rediscover stores nothing (a card the scope
 * had stays as it was), where an empty card stored under the name would stand for a scope that does
 * not exist; an analytic question and GET schema read no card (loadCard): one stored before
 * would answer for a scope nothing declares, listing tables no longer the scope's. `kept` says what
 * becomes of that card, in the hint.
 */
export class ScopeNotDeclared extends HubError {
  constructor(
    readonly scope: string,
    readonly kept = 'nothing was stored',
  ) {
    super(`no connector or entity of the tenant declares scope '${scope}'`);
    this.name = 'ScopeNotDeclared';
  }
  render(): Rendered {
    return {
      status: 404,
      body: { json: { error: this.message, hint: `a connector's scopes and an entity's spec.scope declare the tenant's scopes (GET /api/connectors and GET /api/entities list them: svc connectors ls, svc entities ls); ${this.kept}` } },
    };
  }
}

/** Whether a connector (`scopes`) or an entity (`spec.scope`) of the tenant declares `scope`; in the tenant's transaction. */
async function declared(tx: Tx, scope: string): Promise<boolean> {
  const { rows } = await tx.query<{ yes: boolean }>(
    `select exists (select 1 from connectors.connectors where $1 = any(scopes))
         or exists (select 1 from entities.entities where scopes @> array[$1]::text[]) as yes`,
    [scope],
  );
  return rows[0]?.yes === true;
}

/**
 * The asking client went away (`signal`, whileClientWaits): the discovery sends no further statement,
 * and the one running is cancelled in PostgreSQL (`pg_cancel_backend` of its backend from another
 * connection of `db`'s application pool), so its connection comes back at once, not at the timeout.
 * The discovery then rejects with the signal's reason, and nothing is stored.
 */
export interface DiscoveryStop {
  db: Database;
  signal: AbortSignal;
}

/**
 * `tx` with every statement held to what remains of `timeoutMs` from now: each is preceded by a
 * statement timeout of the time left (a setting of the transaction, so it ends with it), none is sent
 * once none is left, and one cut by that timeout (57014) is a DiscoveryTimedOut naming what the
 * discovery was at (`doing()`). A timeout per statement alone let a scope of many columns hold its
 * connection for as many timeouts. With `stop`, a statement is sent only while its client waits and
 * is cancelled when it goes (DiscoveryStop).
 */
function withinTotal(tx: Tx, timeoutMs: number, doing: () => string, stop?: DiscoveryStop): Tx {
  const deadline = performance.now() + timeoutMs;
  return {
    tenantId: tx.tenantId,
    async query(text, values, options) {
      stop?.signal.throwIfAborted();
      const left = Math.floor(deadline - performance.now());
      if (left < 1) throw new DiscoveryTimedOut(doing(), timeoutMs);
      try {
        // The backend's pid in the same round trip: what a cancel names.
        const { rows } = await tx.query<{ pid: number }>(`select set_config('statement_timeout', $1, true), pg_backend_pid() as pid`, [`${left}ms`]);
        if (!stop) return await tx.query(text, values, options);
        return await cancelledOnAbort(stop.db, rows[0]!.pid, left, stop.signal, () => tx.query(text, values, options));
      } catch (err) {
        if (stop?.signal.aborted) throw stop.signal.reason;
        if ((err as { code?: string }).code === '57014') throw new DiscoveryTimedOut(doing(), timeoutMs);
        throw err;
      }
    },
  };
}

/** Columns every ext table has that say nothing about the data (or hold it as a whole). */
const HIDDEN = new Set(['id', 'tenant_id', 'row_hash', 'data', 'connector_id', 'endpoint_id']);
/**
 * A text column with at most this many distinct values, each seen twice on average, declares them
 * as its value domain (a categorical column: country, status), not a column of free text or keys.
 */
const MAX_DOMAIN = 20;
const TEXT_TYPES = new Set(['text', 'character varying']);
/**
 * The longest example a card holds, in characters; a longer value is cut, ending in `…`. The card is
 * served as is and is sent to the model at every analytic question: three whole values of
 * a column of long texts (descriptions, notes, documents) made it megabytes, past a model's context.
 * Declared domains (`values`) are never cut: the value guard holds literals to them exactly.
 */
export const MAX_EXAMPLE_CHARS = 200;

function example(value: string): string {
  if (value.length <= MAX_EXAMPLE_CHARS) return value;
  // Never half of a pair: the card is jsonb, which refuses a lone surrogate.
  return `${value.slice(0, pieceEnd(value, 0, MAX_EXAMPLE_CHARS - 1))}…`;
}

export interface StoredCard {
  card: SchemaCard;
  sourceType: string;
  enriched: boolean;
  updatedAt: Date;
}

/**
 * The stored schema card of a scope, or undefined; a ScopeNotDeclared (404) when no connector or
 * entity of the tenant declares the scope any more, whatever is stored: the card (kept, not deleted)
 * answers again once something declares the scope again.
 */
export async function loadCard(tx: Tx, scope: string): Promise<StoredCard | undefined> {
  if (!(await declared(tx, scope))) {
    throw new ScopeNotDeclared(scope, 'a card stored for it is kept, unread, until a connector or entity declares the scope again (a rediscover then brings it up to date)');
  }
  const { rows } = await tx.query<{ card: SchemaCard; source_type: string; enriched: boolean; updated_at: Date }>(
    'select card, source_type, enriched, updated_at from retrieval.schema_cards where tenant_id = core.current_tenant() and scope = $1',
    [scope],
  );
  const r = rows[0];
  return r && { card: r.card, sourceType: r.source_type, enriched: r.enriched, updatedAt: r.updated_at };
}

/** The schema of an entity's relation on a card: `entity.<name>` (computed when a query runs, src/entities/relation.ts). */
const ENTITY_SCHEMA = 'entity';

/**
 * Discovers the schema card of a scope from the ext tables its connectors write: every column
 * but the bookkeeping ones and the raw payload, with up to three example values, and, for a text
 * column of at most 20 distinct values each seen twice on average, those values as its declared domain (what analytic chat's
 * value guard holds literals to). Then one relation `entity.<name>` per entity declaring the scope
 * whose sources the database serves now: its canonical columns with their declared types, labels,
 * descriptions, examples and values (the declared domain). Stored as the scope's card (source type
 * `entity` when it holds an entity, else `discovered`). A scope no connector or entity of the tenant
 * declares is a ScopeNotDeclared (404), nothing stored. With `timeoutMs` (`svc.analytic.statement-timeout`),
 * the discovery's statements from here on are held to it all together (withinTotal), and one still
 * running when it is up is a DiscoveryTimedOut (503), not a connection held for as long as the
 * group-bys over large tables take. With `stop` too, a client that goes away stops it at once,
 * its running statement cancelled in PostgreSQL (DiscoveryStop).
 */
export async function discoverCard(
  given: Tx,
  scope: string,
  timeoutMs?: number,
  stop?: DiscoveryStop,
): Promise<{ scope: string; tableCount: number; columnCount: number; enriched: boolean; sourceType: string }> {
  const tenantId = given.tenantId!;
  let doing = "reading the scope's tables";
  const tx = timeoutMs === undefined ? given : withinTotal(given, Math.max(1, Math.floor(timeoutMs)), () => doing, stop);
  if (!(await declared(tx, scope))) throw new ScopeNotDeclared(scope);
  const { rows: tables } = await tx.query<{ table_name: string }>(
    `select distinct e.table_name from connectors.ext_tables e join connectors.connectors c on c.id = e.connector_id
      where $1 = any(c.scopes) order by 1`,
    [scope],
  );
  const relations: CardRelation[] = [];
  for (const { table_name } of tables) {
    let sql: string;
    try {
      sql = tenantTableSql(tenantId, table_name);
    } catch {
      continue;
    }
    const { rows: columns } = await tx.query<{ name: string; type: string }>(
      `select a.attname as name, format_type(a.atttypid, a.atttypmod) as type from pg_attribute a
        where a.attrelid = ${tableRegclassSql('$1')} and a.attnum > 0 and not a.attisdropped order by a.attnum`,
      [sql],
    );
    if (columns.length === 0) continue;
    const card: CardColumn[] = [];
    for (const c of columns.filter((c) => !HIDDEN.has(c.name))) {
      const col = pg.escapeIdentifier(c.name);
      doing = `reading the values of column ${c.name} of ${table_name}`;
      const { rows: values } = await tx.query<{ v: string; n: number }>(
        `select ${col}::text as v, count(*)::int as n from ${sql} where ${col} is not null group by 1 order by count(*) desc, 1 limit ${MAX_DOMAIN + 1}`,
      );
      const seen = values.reduce((sum, r) => sum + r.n, 0);
      const column: CardColumn = { name: c.name, type: c.type, examples: values.slice(0, 3).map((r) => example(r.v)) };
      if (c.name === 'external_id') column.description = 'the row\'s key at the source';
      const categorical = values.length > 0 && values.length <= MAX_DOMAIN && seen >= 2 * values.length;
      if (TEXT_TYPES.has(c.type) && c.name !== 'external_id' && categorical) column.values = values.map((r) => r.v).sort();
      card.push(column);
    }
    relations.push({ name: table_name, columns: card });
    doing = "reading the scope's tables";
  }
  doing = "reading the scope's entities";
  // An entity with a source not ingested yet is left off: the next discovery adds it.
  const { readable } = await entitiesOfCard(tx, scope);
  for (const entity of readable) {
    relations.push({
      name: `${ENTITY_SCHEMA}.${entity.name}`,
      entity: entity.name,
      columns: entity.columns.map((c) => {
        const column: CardColumn = { name: c.name, type: c.type };
        if (c.label !== undefined) column.label = c.label;
        if (c.description !== undefined) column.description = c.description;
        if (c.examples !== undefined) column.examples = c.examples;
        if (c.values !== undefined) column.values = c.values;
        return column;
      }),
    });
  }
  const sourceType = readable.length > 0 ? 'entity' : 'discovered';
  const stored: SchemaCard = { scope, relations };
  doing = 'storing the card';
  await tx.query(
    `insert into retrieval.schema_cards (tenant_id, scope, source_type, enriched, card) values (core.current_tenant(), $1, $2, false, $3)
     on conflict (tenant_id, scope) do update set source_type = excluded.source_type, enriched = excluded.enriched, card = excluded.card, updated_at = now()`,
    [scope, sourceType, JSON.stringify(stored)],
  );
  return { scope, tableCount: relations.length, columnCount: relations.reduce((n, r) => n + r.columns.length, 0), enriched: false, sourceType };
}

/**
 * The entities declaring the scope that a discovery puts on its card now (`readable`: their sources
 * and mapped columns exist), and why each other one is left off (`leftOff`: `source table ext.t of
 * entity e does not exist`, the EntityDefinitionError's message).
 */
export async function entitiesOfCard(tx: Tx, scope: string): Promise<{ readable: EntityDef[]; leftOff: string[] }> {
  const readable: EntityDef[] = [];
  const leftOff: string[] = [];
  for (const entity of await entitiesOfScope(tx, scope)) {
    try {
      await typedEntityRelation(tx, entity);
      readable.push(entity);
    } catch (err) {
      if (!(err instanceof EntityDefinitionError)) throw err;
      leftOff.push(err.message);
    }
  }
  return { readable, leftOff };
}

/** End of the scope's last completed run (analytic `dataAsOf`), or undefined when it has none. */
export async function dataAsOf(tx: Tx, scope: string): Promise<string | undefined> {
  const { rows } = await tx.query<{ at: Date | null }>(
    `select max(r.ended_at) as at from connectors.runs r join connectors.connectors c on c.id = r.connector_id
      where r.status = 'Completed' and $1 = any(c.scopes)`,
    [scope],
  );
  return rows[0]?.at?.toISOString();
}

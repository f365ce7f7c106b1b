import { createHash } from 'node:crypto';
import pg from 'pg';
import { activeTenant } from '../db/active-tenant.js';
import type { Database, Tx } from '../db/database.js';
import { EntityDefinitionError, entityRelation } from '../entities/relation.js';
import { loadEntity } from '../entities/store.js';
import type { EventWriter } from '../events/outbox.js';
import { logger } from '../observability/logger.js';
import { loggableMessage } from '../observability/database-errors.js';
import { durationInterval } from './duration.js';
import type { WorkflowSpec } from './types.js';

/**
 * The dormancy sweep (docs/workflows.md, "Dormancy"), run on `svc.workflow.sweep.every` by the
 * leader. For each workflow of every active tenant it reads the entity's fused rows (key and state column)
 * in key order through one cursor (one read of the relation per pass, in a transaction of its own;
 * a pass cut by the tenants' turns, see sweepWorkflows, reads the rest from the next key),
 * `svc.workflow.sweep.batch` rows at a time; they are written WRITE_ROWS (1,000) at most per
 * transaction, each in the tenant (row-level security), which for the key range its records cover does this
 * (a part with nothing to do, found by one read per fetch beside the cursor, opens no transaction: see fetchWork):
 *
 * - a record seen in a state it had no spell in gets a new spell (`since`: now, or the workflow's
 *   `tracked_since` during the first complete pass after the entity or state column was set, for a
 *   new record beyond `baseline_upto`, how far a first pass stopped before its end had gone);
 * - a spell whose record the range no longer holds (or holds without a state) ends;
 * - a spell in one of `dormancy.states` older than `dormancy.after` and not yet notified is marked
 *   notified, and its `decision.dormant.<workflow>` is emitted in that same transaction: once per
 *   spell whichever process sweeps (the marking is a conditional update under the row's lock).
 *
 * A record whose key is longer than MAX_KEY_BYTES is not tracked (no spell, no decision): the
 * spells are indexed by key, and PostgreSQL refuses a btree entry of more than 2,704 bytes, which
 * would fail every batch holding such a key and so the whole workflow, at every tick. Such records
 * are counted, and said once per workflow and pass in one warning.
 */

export interface SweepResult {
  workflows: number;
  records: number;
  started: number;
  ended: number;
  emitted: number;
  /** Records with a state not tracked because their key is longer than MAX_KEY_BYTES. */
  skipped: number;
}

/**
 * The longest record key (bytes of UTF-8) the sweep tracks. An entry of the spells' indexes is the
 * workflow's id (16 bytes), the key and a few bytes of header, and may not exceed 2,704 bytes; 2,000
 * leaves room whatever PostgreSQL's alignment and headers.
 */
export const MAX_KEY_BYTES = 2000;

/**
 * The most records one write transaction of the sweep covers, whatever `svc.workflow.sweep.batch`
 * (the records read at a time). A write transaction holds a transaction id from its first statement
 * (the workflow row's share lock) to its commit, and every outbox consumer of every tenant reads
 * only below the oldest running transaction id: 5,000 records in one transaction held them back
 * 1.5–2.1 s under load, at every batch of every pass.
 */
export const WRITE_ROWS = 1_000;

const tooLong = (key: string) => key.length > MAX_KEY_BYTES / 4 && Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES;

interface WorkflowRow {
  id: string;
  tenant_id: number;
  name: string;
  spec: WorkflowSpec;
  tracked_since: Date;
  /** `tracked_since` to the microsecond (a Date keeps milliseconds), as PostgreSQL writes it. */
  tracked: string;
  baseline_done: boolean;
}

const ident = (name: string) => pg.escapeIdentifier(name);

/**
 * Why each workflow's entity could not be read at its last pass (by `tenant:name`): the skip is
 * logged at info when the reason first appears or changes, and again when the entity can be read,
 * not at every tick.
 */
const unreadable = new Map<string, string>();
const UNREADABLE_MAX = 10_000;

/**
 * The records of one tenant's turn in a tick, by default (`svc.workflow.sweep.turn`): ten fetches of
 * the default `svc.workflow.sweep.batch`.
 */
export const TURN_RECORDS = 100_000;

/** A pass over one workflow's entity, begun and not ended: where it goes on, and what it has done. */
interface Pass {
  w: WorkflowRow;
  /** The last key it has written (its next slice reads the keys after it); null before its first. */
  after: string | null;
  result: Omit<SweepResult, 'workflows'>;
  firstSkipped?: string;
  /** A second pass of the workflow in this tick (its `every` passed during another tenant's backlog). */
  again: boolean;
}

/** One tenant's part of a tick: its workflows not yet swept in it (by name), its pass under way, and when each pass of its began. */
interface TenantTurns {
  pending: WorkflowRow[];
  current?: Pass;
  began: Map<string, { w: WorkflowRow; at: number }>;
}

/**
 * One tick over every active tenant's workflows. The tenants take turns (by id, round after round
 * until every workflow the tick listed is swept): a turn sweeps the tenant's workflows, one after
 * another, until it has read `turn` records (at least one fetch); a pass that is not at its end then
 * stops after the fetch in hand, when another tenant has something to sweep, and goes on from the next
 * key at the tenant's next turn. So one tenant's backlog (many workflows, large entities, a first
 * pass announcing every record) delays another's sweep by at most a turn per round, not by all of
 * it. While the tick goes on, a workflow whose last pass began `every` ago or more (the clock's
 * period) is swept again at its tenant's turn, so that a tenant is swept at its pace however long
 * another's backlog keeps the tick (once per turn at most, and only while a pass of the ones the
 * tick listed is still to do: the tick ends with those). `going`, asked before each workflow and each fetch,
 * says whether the tick may go on (the process still leads and is not stopping): once it answers
 * false the tick ends after the fetch in hand, leaving the rest to the next tick (of the new leader).
 */
export async function sweepWorkflows(
  db: Database,
  events: EventWriter,
  opts: { batch: number; turn?: number; every?: number; going?: () => boolean },
): Promise<SweepResult> {
  const going = opts.going ?? (() => true);
  const turn = opts.turn ?? TURN_RECORDS;
  const every = opts.every ?? Number.POSITIVE_INFINITY;
  if (!Number.isSafeInteger(turn) || turn < 1) throw new Error(`svc.workflow.sweep.turn must be a positive integer, not ${turn}`);
  const total: SweepResult = { workflows: 0, records: 0, started: 0, ended: 0, emitted: 0, skipped: 0 };
  // A deactivated tenant's workflows are not swept: no spell changes, no decision (docs/workflows.md).
  // The hub sees none of its records while it is deactivated: a first pass not complete yet ends
  // here (as for an entity that cannot be read), so records found after a reactivation start their
  // spells when the sweep sees them. Dated from the apply, every record there after a deactivation
  // of months (created during it or not) was announced dormant at the first tick after it.
  // (Nothing to update, the usual case, takes no transaction id.) Should it fail, the tick goes on: the next one does it.
  await db
    .crossTenantQuery('workflow-sweep', `update workflows.workflows w set baseline_done = true where not w.baseline_done and not ${activeTenant('w.tenant_id')}`)
    .catch((err: unknown) => logger().warn({ err: loggableMessage(err) }, 'workflow sweep: the first passes of deactivated tenants could not be ended; the next tick tries again'));
  const { rows } = await db.crossTenantQuery<WorkflowRow>(
    'workflow-sweep',
    `select w.id, w.tenant_id, w.name, w.spec, w.tracked_since, w.tracked_since::text as tracked, w.baseline_done from workflows.workflows w
      where ${activeTenant('w.tenant_id')}
      order by w.tenant_id, w.name`,
  );
  const tenants: TenantTurns[] = [];
  for (const w of rows) {
    if (tenants.at(-1)?.pending[0]?.tenant_id !== w.tenant_id) tenants.push({ pending: [], began: new Map() });
    tenants.at(-1)!.pending.push(w);
  }
  // The passes the tick listed still to do (pending or under way): the tick ends with them.
  const listedLeft = () => tenants.some((t) => t.pending.length > 0 || (t.current && !t.current.again));
  // A workflow of `t` to sweep again now: the one whose last pass began longest ago, `every` ago or
  // more, and not during this turn (`since`).
  const again = (t: TenantTurns, since: number) => {
    if (!listedLeft()) return undefined;
    let oldest: { w: WorkflowRow; at: number } | undefined;
    for (const b of t.began.values()) if (b.at < since && Date.now() - b.at >= every && (!oldest || b.at < oldest.at)) oldest = b;
    return oldest?.w;
  };
  const waiting = (t: TenantTurns) => tenants.some((o) => o !== t && (o.pending.length > 0 || o.current !== undefined || again(o, Date.now() + 1) !== undefined));

  while (tenants.some((t) => t.pending.length > 0 || t.current)) {
    for (const t of tenants) {
      const turnBegan = Date.now();
      let left = turn;
      while (left > 0 && going()) {
        if (!t.current) {
          const next = t.pending.shift();
          const w = next ?? again(t, turnBegan);
          if (!w) break;
          t.began.set(w.id, { w, at: Date.now() });
          t.current = { w, after: null, result: { records: 0, started: 0, ended: 0, emitted: 0, skipped: 0 }, again: next === undefined };
        }
        const pass = t.current;
        const before = pass.result.records;
        let state: 'done' | 'halted' | 'more' | 'gone';
        try {
          state = await sweepSlice(db, events, pass, opts.batch, () => pass.result.records - before >= left && waiting(t), going);
        } catch (err) {
          // One workflow's trouble (a source table dropped mid-pass) does not stop the others.
          logger().warn({ err: loggableMessage(err), tenantId: pass.w.tenant_id, workflow: pass.w.name }, 'workflow sweep failed for one workflow');
          state = 'gone';
        }
        left -= Math.max(1, pass.result.records - before);
        if (state === 'more') break;
        t.current = undefined;
        if (state === 'gone') continue;
        // Deleted, re-applied on another entity or state column, or its tenant deactivated: not swept
        // again in this tick with the workflow it listed (the next tick lists it as it is then).
        if (state === 'halted') t.began.delete(pass.w.id);
        total.workflows++;
        total.records += pass.result.records;
        total.started += pass.result.started;
        total.ended += pass.result.ended;
        total.emitted += pass.result.emitted;
        total.skipped += pass.result.skipped;
      }
      if (!going()) return total;
    }
  }
  return total;
}

/**
 * A slice of a pass over one workflow's entity: from the key after `pass.after`, until the entity's
 * end ('done'; 'halted' when the workflow was deleted, re-applied on another entity or state column, or
 * its tenant deactivated meanwhile) or, once a fetch is written and `yieldNow` says so, after that
 * fetch ('more', the pass goes on from there at its next slice); 'gone' when its entity cannot be
 * read now or another pass has it.
 */
async function sweepSlice(db: Database, events: EventWriter, pass: Pass, batch: number, yieldNow: () => boolean, going: () => boolean): Promise<'done' | 'halted' | 'more' | 'gone'> {
  const { w, result } = pass;
  const readable = await db.withTenant(w.tenant_id, async (tx): Promise<{ relation: string } | { problem: string }> => {
    const found = await readableEntity(tx, w, pass.after ?? undefined);
    // An entity that cannot be read has no record the hub can see: the first pass after the apply
    // is over, having found none. Records that appear later (a source table written after the
    // apply) start their spells when the sweep sees them, not at the apply: dated from the apply,
    // they were announced dormant at their first sighting. (Not after a re-apply that changed the
    // entity or the state column since the tick read the workflow: that one's first pass is its own.)
    if ('problem' in found && !w.baseline_done) {
      await tx.query('update workflows.workflows set baseline_done = true where id = $1 and tracked_since = $2::timestamptz and not baseline_done', [w.id, w.tracked]);
    }
    return found;
  });
  const key = `${w.tenant_id}:${w.name}`;
  if ('problem' in readable) {
    if (unreadable.get(key) !== readable.problem) {
      if (unreadable.size >= UNREADABLE_MAX) unreadable.clear();
      unreadable.set(key, readable.problem);
      logger().info({ tenantId: w.tenant_id, workflow: w.name, reason: readable.problem }, `workflow ${w.name} is not swept until its entity can be read: ${readable.problem}`);
    }
    return 'gone';
  }
  if (unreadable.delete(key)) logger().info({ tenantId: w.tenant_id, workflow: w.name }, `workflow ${w.name}: its entity can be read again; swept from now on`);
  const { relation } = readable;
  if (!Number.isSafeInteger(batch) || batch < 1) throw new Error(`svc.workflow.sweep.batch must be a positive integer, not ${batch}`);
  // A slice after the first reads from the key after the last one written (its own cursor, see
  // sweepWorkflows): the relation is bounded in each of its sources (entityRelation's `after`).
  const read = `select _entity_id as k, ${ident(w.spec.stateColumn)} as s from (${relation}) r order by _entity_id`;
  const interval = w.spec.dormancy ? durationInterval(w.spec.dormancy.after) : undefined;

  // One read of the fused relation per slice (a pass not cut by turns is one slice): a cursor in a transaction of its own, fetched a batch
  // at a time while each batch is written in its own short transaction. (Keyset pages, each its own
  // `where _entity_id > $last … limit`, cost the whole FULL JOIN per page over several sources.)
  const swept = await db.withTenant(w.tenant_id, async (reader) => {
    // One pass per workflow at a time, whichever process sweeps: another pass under way (a second
    // replica's, a leader change's overlap) has this workflow, and this one leaves it out. Two passes
    // at once wrote the same spells side by side and deadlocked (their last batches each held the
    // workflow's row shared and waited for the other's to mark the baseline done; a batch's upserts
    // met the other's marking of due spells), failing one pass per workflow with `deadlock detected`.
    // The lock goes with the reader's transaction, which takes no transaction id.
    const { rows: turn } = await reader.query<{ mine: boolean }>('select pg_try_advisory_xact_lock(hashtextextended($1, 0)) as mine', [`svc-hub:workflow-sweep:${w.id}`]);
    if (!turn[0]?.mine) return false;
    await reader.query(`declare sweep no scroll cursor for ${read}`);
    // fetchWork's reads, the rest of this transaction, read their ranges of the spells through the
    // spells' primary key in key order, which is the order their digests need: a bitmap scan (which
    // PostgreSQL picks while the spells' statistics are too few, as after a first pass) loses the
    // order, and each range was then sorted again. The cursor's plan is made already.
    await reader.query('set local enable_bitmapscan = off');
    let prev: string | null = pass.after;
    let wroteAll = false;
    let halted = false;
    let more = false;
    for (;;) {
      // Leadership lost or the process stopping: the pass ends here (a first pass is completed by a later one).
      if (!going()) break;
      const { rows } = await reader.query<{ k: string; s: string | null }>(`fetch forward ${batch} from sweep`);
      // The records read are written WRITE_ROWS at a time, each part in its own transaction (the
      // last part of the last read runs to the end of the keys): see WRITE_ROWS.
      const end = rows.length < batch;
      const parts: Part[] = [];
      for (let from = 0, after = prev; from === 0 || from < rows.length; from += WRITE_ROWS) {
        const records = rows.slice(from, from + WRITE_ROWS);
        const last: string | null = end && from + WRITE_ROWS >= rows.length ? null : records[records.length - 1]!.k;
        const stated = records.filter((r) => r.s !== null && r.s !== '');
        // A key too long for the spells' indexes would fail this part, and so the pass, at every tick.
        parts.push({ records, prev: after, last, stated, seen: stated.filter((r) => !tooLong(r.k)) });
        after = last;
      }
      // Most parts of most ticks have nothing to write: the fetch's parts are asked about first, in
      // one read on the reader's connection (no transaction id), and a write transaction is opened
      // only for a part that has something to write, and runs only the statements it needs. After
      // a fetch whose every part wrote something, the next is written whole without asking (changes
      // come in numbers: it most likely has some in every part too), until a part writes nothing.
      const work = wroteAll ? parts.map(() => EVERYTHING) : await partsWork(reader, w, parts, interval);
      if (work === 'stop') {
        halted = true;
        break;
      }
      let stop = false;
      wroteAll = true;
      for (const [i, { records, last, stated, seen }] of parts.entries()) {
        const todo = work[i]!;
        const before = result.started + result.ended + result.emitted;
        if (todo.spells || todo.due || todo.baseline) {
          stop = await db.withTenant(w.tenant_id, async (tx) => {
            // The workflow as it is now, locked against a re-apply until this part commits; none
            // when its tenant was deactivated since the tick began (its background work stops from
            // the next batch, docs/admin.md).
            const { rows: current } = await tx.query<{ tracked_since: Date; baseline_done: boolean; baseline_upto: string | null; since: Date; spec: WorkflowSpec }>(
              `select tracked_since, baseline_done, baseline_upto, case when baseline_done then now() else tracked_since end as since, spec from workflows.workflows where id = $1 and ${activeTenant('tenant_id')} for share`,
              [w.id],
            );
            const now = current[0];
            if (!now || changedSince(now, w)) {
              halted = true;
              return true;
            }
            const started = todo.spells ? await batchSpells(tx, w, prev, last, seen, now.since, now.baseline_done ? null : now.baseline_upto, result) : 0;
            // Announced by the dormancy as stored now: a re-apply since the tick read the workflows
            // (another `after`, other states, none) keeps the spells, and its dormancy decides, not the tick's copy.
            const stored = { ...w, spec: now.spec };
            const dueAfter = now.spec.dormancy ? durationInterval(now.spec.dormancy.after) : undefined;
            // A spell started now may be due at once (the first pass dates its spells from the apply).
            if (dueAfter && (todo.due || started > 0)) await emitDue(tx, events, stored, prev, last, dueAfter, result);
            if (last === null && !now.baseline_done) await tx.query('update workflows.workflows set baseline_done = true where id = $1', [w.id]);
            // How far the first pass has gone, for a pass that completes it if this one stops before its end.
            else if (!now.baseline_done) {
              await tx.query('update workflows.workflows set baseline_upto = $2 where id = $1 and (baseline_upto is null or baseline_upto < $2)', [w.id, last]);
            }
            return false;
          });
        }
        if (stop) break;
        if (result.started + result.ended + result.emitted === before) wroteAll = false;
        if (seen.length < stated.length) {
          result.skipped += stated.length - seen.length;
          pass.firstSkipped ??= stated.find((r) => tooLong(r.k))!.k;
        }
        result.records += records.length;
        stop = last === null;
        prev = last;
      }
      if (stop) break;
      // Its turn is over and another tenant waits: the pass goes on from here at its next slice.
      if (yieldNow()) {
        more = true;
        break;
      }
    }
    await reader.query('close sweep');
    return { halted, more, after: prev };
  });
  if (!swept) {
    logger().debug({ tenantId: w.tenant_id, workflow: w.name }, `workflow ${w.name} is being swept by another pass: left to it`);
    return 'gone';
  }
  if (swept.more) {
    pass.after = swept.after;
    return 'more';
  }
  // Stopped by its tenant's deactivation (or by a delete or a re-apply, which this leaves alone): a
  // first pass under way ends, as at a tick that finds the tenant deactivated (sweepWorkflows).
  if (swept.halted) {
    await db.withTenant(w.tenant_id, (tx) =>
      tx.query(`update workflows.workflows set baseline_done = true where id = $1 and tracked_since = $2::timestamptz and not baseline_done and not ${activeTenant('tenant_id')}`, [w.id, w.tracked]),
    );
  }
  const firstSkipped = pass.firstSkipped;
  if (firstSkipped !== undefined) {
    logger().warn(
      { tenantId: w.tenant_id, workflow: w.name, skipped: result.skipped },
      `workflow ${w.name}: ${result.skipped} record(s) of entity ${w.spec.entity} not tracked, their key longer than ${MAX_KEY_BYTES} bytes (the first begins ${JSON.stringify(firstSkipped.slice(0, 40))})`,
    );
  }
  return swept.halted ? 'halted' : 'done';
}

/** The workflow's entity as a relation to read, or why it cannot be read now. */
async function readableEntity(tx: Tx, w: WorkflowRow, after?: string): Promise<{ relation: string } | { problem: string }> {
  const entity = await loadEntity(tx, w.spec.entity);
  if (!entity) return { problem: `entity ${w.spec.entity} does not exist` };
  if (!entity.columns.some((c) => c.name === w.spec.stateColumn)) return { problem: `entity ${w.spec.entity} has no column ${w.spec.stateColumn}` };
  try {
    return { relation: await entityRelation(tx, entity, { after }) };
  } catch (err) {
    if (err instanceof EntityDefinitionError) return { problem: err.message };
    throw err;
  }
}

/** What a part written without asking does: all of it, as the write transaction finds it. */
const EVERYTHING = { spells: true, due: true, baseline: true } as const;

/** A part of a fetch: its records, the key range (prev, last] they cover (to the end when `last` is null), those with a state, and those tracked. */
interface Part {
  records: Array<{ k: string; s: string | null }>;
  prev: string | null;
  last: string | null;
  stated: Array<{ k: string; s: string | null }>;
  seen: Array<{ k: string; s: string | null }>;
}

/** Deleted, or its entity or state column changed since the pass began: the pass stops, the next tick starts afresh. */
const changedSince = (now: { tracked_since: Date }, w: WorkflowRow) => now.tracked_since.getTime() !== w.tracked_since.getTime();

/**
 * The most parts asked about in one statement: a fetch of `svc.workflow.sweep.batch` records (10,000
 * by default: 10 parts) is asked about in one, a larger fetch in several, so that no statement grows
 * with the setting (its plan, its parameters).
 */
export const ASK_PARTS = 10;

/** What each part of a fetch has to write (fetchWork), ASK_PARTS parts per statement; 'stop' as fetchWork says. */
async function partsWork(reader: Tx, w: WorkflowRow, parts: Part[], interval: string | undefined): Promise<'stop' | Array<{ spells: boolean; due: boolean; baseline: boolean }>> {
  const work: Array<{ spells: boolean; due: boolean; baseline: boolean }> = [];
  for (let from = 0; from < parts.length; from += ASK_PARTS) {
    const some = await fetchWork(reader, w, parts.slice(from, from + ASK_PARTS), interval);
    if (some === 'stop') return 'stop';
    work.push(...some);
  }
  return work;
}

/**
 * What each of some parts of a fetch has to write, in one read on the reader's connection: READ COMMITTED,
 * so it sees what is committed now (not the cursor's snapshot), and a read takes no transaction id.
 * 'stop' when the workflow was deleted or re-applied on another entity or state column, or its
 * tenant deactivated. Otherwise,
 * for each part, `spells` when its range's spells are not exactly its records `seen` in their
 * states (a spell to start, change or end), `due` when one of its spells is due (at the statement's
 * time, which precedes the write transaction's `now()`), `baseline` for the last part of the first
 * complete pass (the baseline to mark done) and for a part of a first pass beyond its `baseline_upto`
 * (how far it has gone, to record). Only the pass itself writes the workflow's spells (one
 * pass at a time), each part only its own range, and a re-apply that drops them stops it, so what
 * the read found holds in each part's write transaction; a spell that comes due in between is
 * announced at the next tick.
 */
async function fetchWork(reader: Tx, w: WorkflowRow, parts: Part[], interval: string | undefined): Promise<'stop' | Array<{ spells: boolean; due: boolean; baseline: boolean }>> {
  // The spells and the records of a part are compared as one digest each rather than sending the
  // records (two arrays of 1,000: a quiet tick cost a fifth less): SHA-256 of the keys' array and
  // the states' array, in key order, in PostgreSQL's binary array form (`array_send`: each element
  // preceded by its length in bytes), which a range's spells give in one pass of their index
  // without building a text per row. Digests that differ for another reason (another order or
  // encoding) would only cost a write transaction that finds nothing to do. One subquery per part,
  // each on its own key range of the index, in one statement: one round trip for the fetch.
  const values: unknown[] = [w.id, w.spec.dormancy?.states ?? null, interval ?? null];
  const param = (value: unknown) => `$${values.push(value)}`;
  const ranges = parts.map(({ prev, last, seen }) => {
    const upTo = last === null ? undefined : param(last);
    const bounds = [prev === null ? '' : ` and s.record_key > ${param(prev)}::text`, upTo === undefined ? '' : ` and s.record_key <= ${upTo}::text`].join('');
    // During a first pass, a part beyond how far it has gone records its reach even with nothing else
    // to write (its records without a state), so that a pass completing it knows it went by them.
    const reach = upTo === undefined ? '' : ` + case when not w.baseline_done and (w.baseline_upto is null or w.baseline_upto < ${upTo}::text) then 4 else 0 end`;
    return `(select case when sha256(coalesce(array_send(array_agg(s.record_key order by s.record_key)) || array_send(array_agg(s.state order by s.record_key)), '')) = ${param(arraysDigest(seen))} then 0 else 1 end
                    + case when bool_or(s.notified_at is null and s.state = any($2::text[]) and s.since <= ${dueBefore('statement_timestamp()')}) then 2 else 0 end
               from workflows.spells s where s.workflow_id = $1${bounds})${reach}`;
  });
  // Each part's answer is a scalar subquery (1: its spells differ, 2: one is due; 4: the first pass's reach to record), planned on its
  // own: as joined subqueries, ten of them cost PostgreSQL ~7 ms of planning, more than their reads.
  const text = `select w.tracked_since, w.baseline_done, array[${ranges.join(',\n              ')}]::int[] as work
       from workflows.workflows w where w.id = $1 and ${activeTenant('w.tenant_id')}`;
  const { rows } = await reader.query<{ tracked_since: Date; baseline_done: boolean; work: number[] }>(text, values);
  const now = rows[0];
  if (!now || changedSince(now, w)) return 'stop';
  return parts.map((part, i) => ({ spells: (now.work[i]! & 1) !== 0, due: (now.work[i]! & 2) !== 0, baseline: (part.last === null && !now.baseline_done) || (now.work[i]! & 4) !== 0 }));
}

/** PostgreSQL's binary form of a one-dimensional text[] without nulls (`array_send`): its header, then each element's length in bytes and its UTF-8 bytes. */
const ARRAY_HEADER = 20;
const TEXT_OID = 25;

/**
 * SHA-256 of `array_send` of the records' keys, then of their states (empty input for no record),
 * as fetchWork's statement computes it over a range's spells.
 */
function arraysDigest(seen: Array<{ k: string; s: string | null }>): Buffer {
  const hash = createHash('sha256');
  if (!seen.length) return hash.digest();
  // Room for the longest UTF-8 form (three bytes per UTF-16 unit): no byte length counted apart.
  let room = 2 * ARRAY_HEADER;
  for (const r of seen) room += 8 + 3 * (r.k.length + r.s!.length);
  const out = Buffer.allocUnsafe(room);
  let at = 0;
  for (const which of ['k', 's'] as const) {
    at = out.writeInt32BE(1, at); // dimensions
    at = out.writeInt32BE(0, at); // no nulls
    at = out.writeInt32BE(TEXT_OID, at);
    at = out.writeInt32BE(seen.length, at);
    at = out.writeInt32BE(1, at); // lower bound
    for (const r of seen) {
      const bytes = out.write(r[which]!, at + 4, 'utf8');
      out[at] = bytes >>> 24;
      out[at + 1] = (bytes >>> 16) & 0xff;
      out[at + 2] = (bytes >>> 8) & 0xff;
      out[at + 3] = bytes & 0xff;
      at += 4 + bytes;
    }
  }
  return hash.update(out.subarray(0, at)).digest();
}

/**
 * Spells of the key range (prev, last] (to the end when `last` is null) from the records seen there; the spells started.
 * `since` dates a new record's spell; during a first pass, `upto` is how far an earlier one stopped
 * before its end had gone: a record new at or before it starts its spell now.
 */
async function batchSpells(
  tx: Tx,
  w: WorkflowRow,
  prev: string | null,
  last: string | null,
  seen: Array<{ k: string; s: string | null }>,
  since: Date,
  upto: string | null,
  result: { started: number; ended: number },
): Promise<number> {
  const keys = seen.map((r) => r.k);
  const ended = await tx.query(
    `delete from workflows.spells s
      where s.workflow_id = $1 and ($2::text is null or s.record_key > $2) and ($3::text is null or s.record_key <= $3)
        and not exists (select 1 from unnest($4::text[]) as b(k) where b.k = s.record_key)`,
    [w.id, prev, last, keys],
  );
  result.ended += ended.rowCount ?? 0;
  if (!seen.length) return 0;
  // A new record, or another state: a new spell (not yet notified). The records whose spell holds
  // (most of them, most ticks) are left out before the insert: a conflicting insert costs an index
  // insertion attempt per row, a lookup much less. A record whose spell is replaced was seen in
  // another state since the workflow was tracked (a reset drops every spell): its new state starts
  // now, even during a first pass that dates from the apply what it finds (one that went on from an
  // earlier pass stopped before its end).
  const started = await tx.query(
    `insert into workflows.spells (tenant_id, workflow_id, record_key, state, since)
     select core.current_tenant(), $1, b.k, b.s, case when b.k <= $7::text then now() else $4::timestamptz end from unnest($2::text[], $3::text[]) as b(k, s)
      where not exists (select 1 from workflows.spells h where h.workflow_id = $1 and ($5::text is null or h.record_key > $5) and ($6::text is null or h.record_key <= $6) and h.record_key = b.k and h.state = b.s)
     on conflict (workflow_id, record_key) do update set state = excluded.state, since = now(), notified_at = null
       where spells.state is distinct from excluded.state`,
    [w.id, keys, seen.map((r) => r.s), since, prev, last, upto],
  );
  result.started += started.rowCount ?? 0;
  return started.rowCount ?? 0;
}

/**
 * SQL of the instant before which a spell that started is due, `at` less `$3` (the dormancy's
 * interval), counted in UTC: in the session's time zone (the database's, which initdb takes from the
 * machine) a day across a daylight-saving clock change is 23 or 25 hours, and a spell came due an
 * hour early or late. In UTC a day is 24 hours and a month a calendar month of UTC.
 */
const dueBefore = (at: string) => `((${at} at time zone 'UTC') - $3::interval) at time zone 'UTC'`;

/** Marks the range's due spells notified and emits their decisions, in the caller's transaction. */
async function emitDue(tx: Tx, events: EventWriter, w: WorkflowRow, prev: string | null, last: string | null, interval: string, result: { emitted: number }): Promise<void> {
  const dormancy = w.spec.dormancy!;
  const { rows } = await tx.query<{ record_key: string; state: string; since: Date }>(
    `update workflows.spells set notified_at = now()
      where workflow_id = $1 and notified_at is null and state = any($2::text[]) and since <= ${dueBefore('now()')}
        and ($4::text is null or record_key > $4) and ($5::text is null or record_key <= $5)
      returning record_key, state, since`,
    [w.id, dormancy.states, interval, prev, last],
  );
  // In key order, one statement for the batch.
  rows.sort((a, b) => (a.record_key < b.record_key ? -1 : a.record_key > b.record_key ? 1 : 0));
  await events.emitAll(
    tx,
    `decision.dormant.${w.name}`,
    rows.map((r) => ({ workflow: w.name, entity: w.spec.entity, scope: w.spec.scope, key: r.record_key, state: r.state, since: r.since.toISOString(), after: dormancy.after })),
  );
  result.emitted += rows.length;
}

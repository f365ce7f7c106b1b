import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { takeKeptPlaces } from '../manifests/tenant-cap.js';
import { assignments, type Events, isUniqueViolation, ORG_CODE, optionalText, requireText, type Tx } from './common.js';

/**
 * Organisations: a tree per tenant in core.orgs, under row-level security (run these in
 * `Database.withTenant`; an organisation of another tenant is simply not there). Archiving is soft
 * and keeps the row; structural changes (create under a parent, move, archive) are serialised per
 * tenant so two concurrent moves can never build a cycle.
 *
 * Events, in the caller's transaction: `org.created {orgId, tenantId, name}`, `org.updated
 * {orgId, tenantId}` on any change, `org.moved {orgId, tenantId, newParentId}` when the parent
 * changes (newParentId 0 when moved to the top level: ids start at 1, and the payload type is a
 * long, so consumers never meet a null), `org.archived {id, code}`.
 */

export interface Org {
  id: number;
  tenantId: number;
  code: string;
  name: string;
  description: string | null;
  parentId: number | null;
  active: boolean;
  createdAt: Date;
  updatedAt: Date;
}

export interface OrgNode extends Org {
  /** Active children, by code; empty at the depth limit. */
  children: OrgNode[];
  /** True when the node has active children that the depth limit left out. */
  truncated: boolean;
}

export interface OrgInput {
  code: string;
  name: string;
  description?: string | null;
  parentId?: number | null;
}

export interface OrgPatch {
  name?: string;
  description?: string | null;
  /** null moves the organisation to the top level. */
  parentId?: number | null;
}

/** The newParentId of `org.moved` for a move to the top level. */
const ROOT_PARENT_ID = 0;

/**
 * Organisations one tenant may have, archived ones included (an archived organisation's row and
 * code stay): the database is shared, so the count is bounded, well past a company's tree.
 */
export const MAX_ORGS_PER_TENANT = 10_000;

export const DEFAULT_TREE_DEPTH = 3;
export const MAX_TREE_DEPTH = 10;

const COLUMNS =
  'id, tenant_id as "tenantId", code, name, description, parent_id as "parentId", active, created_at as "createdAt", updated_at as "updatedAt"';

function tenantOf(tx: Tx): number {
  if (tx.tenantId === undefined) throw new Error('organisations need a tenant transaction (Database.withTenant)');
  return tx.tenantId;
}

/** Serialises structural changes of one tenant's tree until the transaction ends. */
async function lockTree(tx: Tx): Promise<void> {
  await tx.query(`select pg_advisory_xact_lock(hashtextextended('svc-hub:org-tree:' || $1::text, 0))`, [tenantOf(tx)]);
}

/** Active organisations of the tenant, by id. */
export async function listOrgs(tx: Tx): Promise<Org[]> {
  const { rows } = await tx.query<Org>(`select ${COLUMNS} from core.orgs where active order by id`);
  return rows;
}

/** One organisation, archived ones included; 404 when unknown or of another tenant. */
export async function getOrg(tx: Tx, id: number, lock = false): Promise<Org> {
  const { rows } = await tx.query<Org>(`select ${COLUMNS} from core.orgs where id = $1${lock ? ' for update' : ''}`, [id]);
  if (!rows[0]) throw new NotFoundError(`organisation ${id} not found`);
  return rows[0];
}

/** The parent named by a body must be an active organisation of the tenant (400 naming parentId). */
async function requireParent(tx: Tx, parentId: number): Promise<Org> {
  const { rows } = await tx.query<Org>(`select ${COLUMNS} from core.orgs where id = $1 and active`, [parentId]);
  if (!rows[0]) throw new ValidationError(`parentId ${parentId} is not an active organisation of this tenant`, 'parentId');
  return rows[0];
}

export async function createOrg(tx: Tx, events: Events, input: OrgInput): Promise<Org> {
  const tenantId = tenantOf(tx);
  if (!ORG_CODE.test(input.code)) {
    throw new ValidationError('code must be 1 to 100 letters, digits, dots, underscores or dashes, starting with a letter or digit', 'code');
  }
  requireText(input.name, 'name');
  await takeKeptPlaces(tx, { table: 'core.orgs', plural: 'organisations', max: MAX_ORGS_PER_TENANT, advice: 'archived ones count too (their rows and codes stay)' });
  const parentId = input.parentId ?? null;
  if (parentId !== null) {
    await lockTree(tx);
    await requireParent(tx, parentId);
  }
  let org: Org;
  try {
    const { rows } = await tx.query<Org>(
      `insert into core.orgs (tenant_id, code, name, description, parent_id) values ($1, $2, $3, $4, $5) returning ${COLUMNS}`,
      [tenantId, input.code, input.name, optionalText(input.description) ?? null, parentId],
    );
    org = rows[0]!;
  } catch (err) {
    if (isUniqueViolation(err, 'orgs_tenant_id_code_key')) throw new ConflictError(`organisation code ${input.code} is already taken`, 'code');
    throw err;
  }
  await events.emit(tx, 'org.created', { orgId: org.id, tenantId, name: org.name });
  return org;
}

/**
 * Present fields only. A change emits `org.updated`; a change of parent also `org.moved`. A patch
 * that changes nothing writes nothing and emits nothing. A move under the organisation itself or
 * one of its descendants is refused (400 naming parentId); an archived organisation cannot be
 * changed (409).
 */
export async function updateOrg(tx: Tx, events: Events, id: number, patch: OrgPatch): Promise<Org> {
  const tenantId = tenantOf(tx);
  const moving = patch.parentId !== undefined;
  if (moving) await lockTree(tx);
  const current = await getOrg(tx, id, true);
  if (!current.active) throw new ConflictError(`organisation ${id} is archived`);
  if (patch.name !== undefined) requireText(patch.name, 'name');
  const description = optionalText(patch.description);
  const newParent = patch.parentId;
  const moved = newParent !== undefined && newParent !== current.parentId;
  if (moved && newParent !== null) {
    if (newParent === id) throw new ValidationError('parentId: an organisation cannot be its own parent', 'parentId');
    await requireParent(tx, newParent);
    if (await isAncestorOrSelf(tx, id, newParent)) {
      throw new ValidationError(`parentId ${newParent} is below organisation ${id}: the move would make it its own ancestor`, 'parentId');
    }
  }
  const changes = {
    name: patch.name !== undefined && patch.name !== current.name ? patch.name : undefined,
    description: description !== undefined && description !== current.description ? description : undefined,
    parentId: moved ? newParent : undefined,
  };
  const set = assignments(changes, { name: 'name', description: 'description', parentId: 'parent_id' }, 2);
  if (!set.sql.length) return current;
  const { rows } = await tx.query<Org>(`update core.orgs set ${set.sql.join(', ')}, updated_at = now() where id = $1 returning ${COLUMNS}`, [id, ...set.values]);
  const org = rows[0]!;
  await events.emit(tx, 'org.updated', { orgId: id, tenantId });
  if (moved) await events.emit(tx, 'org.moved', { orgId: id, tenantId, newParentId: org.parentId ?? ROOT_PARENT_ID });
  return org;
}

/** Whether `ancestor` is `node` or lies on the path from `node` up to the top. */
async function isAncestorOrSelf(tx: Tx, ancestor: number, node: number): Promise<boolean> {
  const { rows } = await tx.query<{ found: boolean }>(
    `with recursive up (id, parent_id) as (
       select id, parent_id from core.orgs where id = $1
       union
       select o.id, o.parent_id from core.orgs o join up on o.id = up.parent_id
     )
     select exists (select 1 from up where id = $2) as found`,
    [node, ancestor],
  );
  return rows[0]!.found;
}

/**
 * Soft delete: `active = false`, the row stays, `org.archived` is emitted. Archiving an archived
 * organisation changes nothing and emits nothing. An organisation with active children is refused
 * (409): move or archive them first, so no active organisation hangs under an archived one.
 */
export async function archiveOrg(tx: Tx, events: Events, id: number): Promise<void> {
  await lockTree(tx);
  const current = await getOrg(tx, id, true);
  if (!current.active) return;
  const { rows } = await tx.query<{ n: number }>('select count(*)::int as n from core.orgs where parent_id = $1 and active', [id]);
  if (rows[0]!.n > 0) throw new ConflictError(`organisation ${id} has ${rows[0]!.n} active child organisation(s): move or archive them first`);
  await tx.query('update core.orgs set active = false, updated_at = now() where id = $1', [id]);
  await events.emit(tx, 'org.archived', { id, code: current.code });
}

/**
 * The active tree: from `root` (404 when it is not an active organisation of the tenant) or from
 * every top-level organisation, `depth` levels deep (1 = the starting nodes only). Always a list
 * (one node when a root is given); children by code.
 */
export async function orgTree(tx: Tx, options: { root?: number; depth?: number } = {}): Promise<OrgNode[]> {
  const depth = options.depth ?? DEFAULT_TREE_DEPTH;
  if (!Number.isInteger(depth) || depth < 1 || depth > MAX_TREE_DEPTH) throw new ValidationError(`depth must be between 1 and ${MAX_TREE_DEPTH}`, 'depth');
  const root = options.root ?? null;
  if (root !== null) {
    const { rowCount } = await tx.query('select 1 from core.orgs where id = $1 and active', [root]);
    if (!rowCount) throw new NotFoundError(`organisation ${root} not found`);
  }
  const { rows } = await tx.query<Org & { level: number; hasChildren: boolean }>(
    `with recursive t as (
       select o.id, 1 as level from core.orgs o
        where o.active and (case when $1::bigint is null then o.parent_id is null else o.id = $1::bigint end)
       union all
       select c.id, t.level + 1 from core.orgs c join t on c.parent_id = t.id
        where c.active and t.level < $2
     )
     select ${COLUMNS.split(', ').map((c) => `o.${c}`).join(', ')}, t.level,
            exists (select 1 from core.orgs g where g.parent_id = o.id and g.active) as "hasChildren"
       from t join core.orgs o on o.id = t.id
      order by t.level, o.code, o.id`,
    [root, depth],
  );
  const nodes = new Map<number, OrgNode>();
  const top: OrgNode[] = [];
  for (const { level, hasChildren, ...org } of rows) {
    const node: OrgNode = { ...org, children: [], truncated: level === depth && hasChildren };
    nodes.set(org.id, node);
    const parent = level === 1 ? undefined : nodes.get(org.parentId!);
    (parent ? parent.children : top).push(node);
  }
  return top;
}

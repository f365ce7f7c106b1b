import pg from 'pg';

/** A small HTTP client and database helpers for the tenancy administration suites (apiserver/admin-*.test.ts). */

export interface Reply {
  status: number;
  text: string;
  headers: Headers;
  /** The parsed JSON body (undefined when the body is empty). */
  body: unknown;
}

export interface Client {
  get(path: string): Promise<Reply>;
  post(path: string, body?: unknown): Promise<Reply>;
  put(path: string, body?: unknown): Promise<Reply>;
  del(path: string): Promise<Reply>;
}

export function client(base: string, headers: Record<string, string>): Client {
  const call = async (method: string, path: string, body?: unknown): Promise<Reply> => {
    const h: Record<string, string> = { ...headers };
    if (body !== undefined) h['content-type'] = 'application/json';
    const res = await fetch(`${base}${path}`, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, text, headers: res.headers, body: text && res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : undefined };
  };
  return {
    get: (path) => call('GET', path),
    post: (path, body) => call('POST', path, body),
    put: (path, body) => call('PUT', path, body),
    del: (path) => call('DELETE', path),
  };
}

/** A dev-bypass caller of one tenant (every role active). */
export function devClient(base: string, tenantId: number): Client {
  return client(base, { 'X-Tenant-ID': String(tenantId) });
}

/** A bearer-token caller. */
export function tokenClient(base: string, token: string): Client {
  return client(base, { authorization: `Bearer ${token}` });
}

/** Status, body text and content type: compare with EMPTY_403 for the body-less 403 of a role gate or a foreign `{tid}`. */
export function shape(r: Reply): { status: number; text: string; contentType: string | null } {
  return { status: r.status, text: r.text, contentType: r.headers.get('content-type') };
}
export const EMPTY_403 = { status: 403, text: '', contentType: null };

/** An ISO-8601 UTC timestamp as JSON renders a Date. */
export const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

export async function ownerClient(ownerUrl: string): Promise<pg.Client> {
  const owner = new pg.Client({ connectionString: ownerUrl });
  await owner.connect();
  return owner;
}

export interface StoredEvent {
  type: string;
  tenantId: number;
  payload: Record<string, unknown>;
}

/** The newest outbox id (a mark to read the events written after it). */
export async function outboxMark(owner: pg.Client): Promise<number> {
  const { rows } = await owner.query<{ id: string | null }>('select max(id) as id from events.outbox');
  return Number(rows[0]?.id ?? 0);
}

/** Events written after a mark, in order. */
export async function eventsSince(owner: pg.Client, mark: number): Promise<StoredEvent[]> {
  const { rows } = await owner.query<{ type: string; tenant_id: string; payload: Record<string, unknown> }>(
    'select type, tenant_id, payload from events.outbox where id > $1 order by id',
    [mark],
  );
  return rows.map((r) => ({ type: r.type, tenantId: Number(r.tenant_id), payload: r.payload }));
}

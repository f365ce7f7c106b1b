import { apiStatus } from '../kube/kube-config.js';
import { logger } from '../src/observability/logger.js';

/**
 * Every list the operator makes is read in pages, as client-go's informers read theirs: at most
 * `limit` items a request (500 by default, client-go's page size), following `metadata.continue`
 * until the server gives none, so that no list is one response holding a whole kind of a large
 * cluster. The pages of one list are one snapshot (the server reads them all at the first page's
 * resourceVersion), so they add up to the list as it was at that resourceVersion, from which an
 * informer then watches.
 *
 * A continue token the server no longer honours (410 Expired: etcd compacted its revision, after
 * some five minutes) starts the list again from its first page, as client-go does when its
 * reflector lists anew; after `LIST_RESTARTS` such restarts in a row the list fails (the informer
 * retries it after its restart delay, the orphan sweep at the next resync).
 */

/** Items asked for per list request (client-go's informers page by 500 too). */
export const LIST_PAGE_SIZE = 500;

/** How many times one list starts again from its first page after its continue token expired, before it fails. */
export const LIST_RESTARTS = 3;

/**
 * A page of a list as @kubernetes/client-node hands it over: the token is `metadata.continue` in
 * the JSON of an untyped list (custom objects), `metadata._continue` in a typed one (V1ListMeta
 * renames the field).
 */
export interface ListPage<T> {
  apiVersion?: string;
  kind?: string;
  metadata?: { resourceVersion?: string; continue?: string; _continue?: string };
  items?: T[];
}

/** A whole list: what makeInformer's list function answers (it reads `items` and `metadata.resourceVersion`). */
export interface WholeList<T> {
  apiVersion?: string;
  kind?: string;
  metadata: { resourceVersion?: string };
  items: T[];
}

/** A list call with the page parameters of @kubernetes/client-node (`limit`, `_continue`). */
export type PageCall<T> = (page: { limit: number; _continue?: string }) => Promise<ListPage<T>>;

/** Whether a failed request was refused because its continue token expired (410 Expired; Gone as client-go's reflector takes it too). */
export function continueExpired(err: unknown): boolean {
  if (apiStatus(err) !== 410) return false;
  const reason = statusReason(err);
  return reason === undefined || reason === 'Expired' || reason === 'Gone';
}

/** The `reason` of the Status a failed request answered, if it can be read. */
function statusReason(err: unknown): string | undefined {
  let body = (err as { body?: unknown }).body;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body);
    } catch {
      return undefined;
    }
  }
  const reason = body && typeof body === 'object' ? (body as { reason?: unknown }).reason : undefined;
  return typeof reason === 'string' ? reason : undefined;
}

/**
 * Every item of a list, read `limit` at a time: the items of all its pages, with the last page's
 * resourceVersion (every page of one list carries the same one, that of its snapshot). `what`
 * names the list in logs and errors.
 */
export async function listAll<T>(what: string, call: PageCall<T>, limit: number = LIST_PAGE_SIZE): Promise<WholeList<T>> {
  if (!Number.isInteger(limit) || limit < 1) throw new Error(`the page size of a list must be a positive integer, not ${limit}`);
  for (let restarts = 0; ; restarts++) {
    const items: T[] = [];
    let page: ListPage<T> | undefined;
    let next: string | undefined;
    let pages = 0;
    try {
      do {
        page = await call({ limit, ...(next ? { _continue: next } : {}) });
        pages++;
        items.push(...(page.items ?? []));
        next = page.metadata?.continue || page.metadata?._continue || undefined;
      } while (next);
    } catch (err) {
      // Only a later page's token expires (a first page carries none); anything else is the caller's to handle.
      if (!(next && continueExpired(err))) throw err;
      if (restarts >= LIST_RESTARTS) {
        throw new Error(`cannot list ${what}: its continue token expired (410 Expired) ${restarts + 1} times in a row, each time after ${pages} page(s) of ${limit}; the list is given up for now`);
      }
      logger().warn(`the continue token of the list of ${what} expired after ${pages} page(s) of ${limit} (410 Expired): listing again from the first page`);
      continue;
    }
    return { apiVersion: page?.apiVersion, kind: page?.kind, metadata: { resourceVersion: page?.metadata?.resourceVersion }, items };
  }
}

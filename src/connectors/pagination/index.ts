import type { EndpointSpec, Pagination } from '../types.js';
import { bodyLinkPagination } from './body-link.js';
import { cursorPagination } from './cursor.js';
import { customPagination } from './custom.js';
import { linkHeaderPagination } from './link-header.js';
import { nonePagination } from './none.js';
import { offsetPagination } from './offset.js';
import { pagePagination } from './page.js';
import { relayPagination } from './relay.js';
import { soapPagination } from './soap.js';
import type { PaginationStrategy } from './types.js';

export type { PageResponse, PaginationStrategy, Position, ResumePoint } from './types.js';
export { parseLinkHeader } from './link-header.js';

/** A fresh strategy for one read of an endpoint. */
export function createStrategy(p: Pagination, soap?: EndpointSpec['soap']): PaginationStrategy {
  switch (p.kind) {
    case 'none':
      return nonePagination(p);
    case 'page':
      return pagePagination(p);
    case 'offset':
      return offsetPagination(p);
    case 'cursor':
      return cursorPagination(p);
    case 'link-header':
      return linkHeaderPagination(p);
    case 'body-link':
      return bodyLinkPagination(p);
    case 'relay':
      return relayPagination(p);
    case 'custom':
      return customPagination(p);
    case 'soap':
      return soapPagination(p, soap?.stop);
    default: {
      const never: never = p;
      throw new Error(`unknown pagination kind ${(never as { kind: string }).kind}`);
    }
  }
}

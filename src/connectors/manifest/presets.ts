import type { Pagination } from '../types.js';

/**
 * The eleven pagination presets (spec 3 "Pagination"): `pagination: {kind: <preset>}` expands at
 * apply time to one of the strategies, and fields given beside the preset override its values
 * (`{kind: spring, size: 200}`). The stored connector only ever holds the expansion.
 *
 * The first three are spec 3's expansions verbatim; the others follow the framework each is named
 * for (docs/connectors.md has the table).
 */
export const PRESETS = {
  /** Spring Data `Page<T>`: `?page=0&size=50`, rows in `content`, `totalPages`. */
  spring: { kind: 'page', page_param: 'page', size_param: 'size', start_page: 0, size: 50, total_pages_path: '$.totalPages', response_path: '$.content' },
  /** Stripe list objects: `?starting_after=<last id>`, `has_more`, rows in `data`. */
  stripe: { kind: 'cursor', cursor_param: 'starting_after', cursor_path: '$.data[-1:].id', has_more_path: '$.has_more', response_path: '$.data' },
  /** Django REST framework, any paginator publishing a whole `next` URL: rows in `results`. */
  drf: { kind: 'body-link', link_path: '$.next', response_path: '$.results' },
  /** DRF `LimitOffsetPagination`: `?limit=50&offset=0`, rows in `results`, `count`. */
  'drf-limit-offset': { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, start_offset: 0, response_path: '$.results', total_path: '$.count' },
  /** Django Ninja `LimitOffsetPagination`: `?limit=50&offset=0`, rows in `items`, `count`. */
  ninja: { kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, start_offset: 0, response_path: '$.items', total_path: '$.count' },
  /** Laravel `paginate()`: `?page=1&per_page=50`, rows in `data`, `last_page`, `total`. */
  laravel: { kind: 'page', page_param: 'page', size_param: 'per_page', start_page: 1, size: 50, total_pages_path: '$.last_page', response_path: '$.data', total_path: '$.total' },
  /** GitHub REST: RFC 5988 `Link` header, rel `next`; the body is the row array. */
  github: { kind: 'link-header', response_path: '$' },
  /** JSON:API: `links.next` is the next URL, rows in `data`. */
  jsonapi: { kind: 'body-link', link_path: '$.links.next', response_path: '$.data' },
  /** HAL (Spring HATEOAS and others): `_links.next.href`, rows in the one relation of `_embedded`. */
  hal: { kind: 'body-link', link_path: '$._links.next.href', response_path: '$._embedded.*' },
  /** OData v4 (and Microsoft Graph): `@odata.nextLink`, rows in `value`. */
  odata: { kind: 'body-link', link_path: "$['@odata.nextLink']", response_path: '$.value' },
  /** GraphQL Relay connection as the one root field of `data`: cursor variable `$after`, `pageInfo`, the nodes of `edges`. */
  'graphql-relay': {
    kind: 'relay',
    cursor_binding: 'variable',
    cursor_var: 'after',
    cursor_path: '$.data.*.pageInfo.endCursor',
    has_more_path: '$.data.*.pageInfo.hasNextPage',
    response_path: '$.data.*.edges[*].node',
  },
} as const satisfies Record<string, Pagination>;

type PresetName = keyof typeof PRESETS;

export const PRESET_NAMES = Object.keys(PRESETS) as PresetName[];

export function isPreset(kind: unknown): kind is PresetName {
  return typeof kind === 'string' && Object.hasOwn(PRESETS, kind);
}

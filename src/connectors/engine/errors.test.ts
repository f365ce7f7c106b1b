import { describe, expect, it } from '@jest/globals';
import {
  CancelledError,
  CredentialError,
  DeclaredTotalMismatchError,
  EngineError,
  GraphQLErrorsError,
  GraphQLMalformedError,
  PageCapError,
  PaginationError,
  StalePositionError,
  TemplateError,
  UnreadableResponseError,
  UpstreamHttpError,
  UpstreamNetworkError,
} from './errors.js';

/** Each code's class name, run status, retryability, message and fields, as the run ledger records them. */
const cases: Array<[Error, Record<string, unknown>]> = [
  [
    new UpstreamHttpError(503, 'busy\n now'),
    { name: 'UpstreamHttpError', code: 'upstream_http', runStatus: 'Failed', retryable: true, transient: true, status: 503, message: 'upstream returned HTTP 503 (transient) — refusing to ingest its body as data: busy now' },
  ],
  [
    new UpstreamHttpError(404, 'gone'),
    { name: 'UpstreamHttpError', code: 'upstream_http', runStatus: 'Failed', retryable: false, transient: false, status: 404, message: 'upstream returned HTTP 404 (permanent) — refusing to ingest its body as data: gone' },
  ],
  [
    new UpstreamHttpError(302, 'moved', 'https://other.example/p?sig=x'),
    {
      name: 'UpstreamHttpError', code: 'upstream_http', runStatus: 'Failed', retryable: false, transient: false, status: 302,
      message: 'upstream answered HTTP 302, a redirect to https://other.example/p…; redirects are not followed (point spec.base_url or the endpoint path at the address it names) — its body is not ingested as data: moved',
    },
  ],
  ...[
    ['http://user:pass@evil.example/x?token=abc#f', 'http://***@evil.example/x…'],
    ['//u:p@evil.example/x', '//***@evil.example/x'],
    ['http://evil%40x:secret@evil.example/x', 'http://***@evil.example/x'],
    ['https:\\\\u:p@evil.example/x', 'https:\\\\***@evil.example/x'],
    ['https://evil.example/a@b', 'https://evil.example/a@b'],
    [' http://u:secret@evil.example/x', 'http://***@evil.example/x'],
    ['http:u:secret@evil.example/x', 'http://***@evil.example/x'],
    ['http:/\t/u:secret@evil.example/x', 'http://***@evil.example/x'],
  ].map(([location, shown]): [Error, Record<string, unknown>] => [
    new UpstreamHttpError(307, '', location),
    {
      name: 'UpstreamHttpError', code: 'upstream_http', runStatus: 'Failed', retryable: false, transient: false, status: 307,
      message: `upstream answered HTTP 307, a redirect to ${shown}; redirects are not followed (point spec.base_url or the endpoint path at the address it names) — its body is not ingested as data: `,
    },
  ]),
  [
    new UpstreamNetworkError(3, Object.assign(new Error('connect failed'), { code: 'ECONNREFUSED' })),
    { name: 'UpstreamNetworkError', code: 'upstream_network', runStatus: 'Failed', retryable: true, message: 'upstream could not be reached after 3 attempt(s): ECONNREFUSED: connect failed' },
  ],
  [new UnreadableResponseError('not JSON'), { name: 'UnreadableResponseError', code: 'unreadable_response', runStatus: 'Failed', retryable: false, message: 'not JSON' }],
  [
    new DeclaredTotalMismatchError(10, 9),
    {
      name: 'DeclaredTotalMismatchError', code: 'declared_total_mismatch', runStatus: 'Failed', retryable: false, declared: 10, returned: 9,
      message: 'the source declared 10 rows but this run returned 9 — refusing to report a partial extract as a complete one',
    },
  ],
  [new GraphQLErrorsError(2, 'boom'), { name: 'GraphQLErrorsError', code: 'graphql_errors', runStatus: 'Failed', retryable: false, message: 'GraphQL response carried 2 error(s); first: boom' }],
  [
    new GraphQLMalformedError('{"data":null}'),
    { name: 'GraphQLMalformedError', code: 'graphql_malformed', runStatus: 'Failed', retryable: false, message: 'GraphQL response has no errors and null/absent data (malformed envelope): {"data":null}' },
  ],
  [
    new PageCapError(10000),
    {
      name: 'PageCapError', code: 'page_cap', runStatus: 'Partial', retryable: false, maxPages: 10000,
      message: 'the 10,000-page budget of one run was reached while the source still had pages; the rows of those pages were read, the rest were not',
    },
  ],
  [
    new StalePositionError(410, 'cursor abc', 4),
    {
      name: 'StalePositionError', code: 'stale_position', runStatus: 'Partial', retryable: false, status: 410,
      message: 'the source answered HTTP 410 for cursor abc: it no longer has the records past that position; the run stopped after 4 page(s) read',
    },
  ],
  [
    new CredentialError('TOKEN', 'auth.token_env'),
    {
      name: 'CredentialError', code: 'credential_unresolved', runStatus: 'Failed', retryable: false, credential: 'TOKEN', field: 'auth.token_env',
      message: "credential TOKEN did not resolve (auth.token_env): the tenant has no stored secret of that name (the hub's environment is read only for names allowed by svc.credentials.env-allow)",
    },
  ],
  [
    // A secret: name is read from the tenant's store alone: no word of the environment.
    new CredentialError('secret:TOKEN', 'auth.token_env'),
    {
      name: 'CredentialError', code: 'credential_unresolved', runStatus: 'Failed', retryable: false, credential: 'secret:TOKEN', field: 'auth.token_env',
      message: 'credential secret:TOKEN did not resolve (auth.token_env): the tenant has no stored secret TOKEN',
    },
  ],
  [
    new TemplateError('HOST', 'spec.base_url'),
    {
      name: 'TemplateError', code: 'template_unresolved', runStatus: 'Failed', retryable: false, variable: 'HOST',
      message: "template {{env:HOST}} in spec.base_url did not resolve: the tenant has no stored secret HOST (the hub's environment is read only for names allowed by svc.credentials.env-allow)",
    },
  ],
  [new PaginationError('stuck'), { name: 'PaginationError', code: 'pagination', runStatus: 'Failed', retryable: false, message: 'stuck' }],
  [new CancelledError(), { name: 'CancelledError', code: 'cancelled', runStatus: 'Cancelled', retryable: false, message: 'cancelled on request' }],
  [new CancelledError('stopped'), { name: 'CancelledError', code: 'cancelled', runStatus: 'Cancelled', retryable: false, message: 'stopped' }],
];

describe('engine errors', () => {
  it.each(cases)('%s', (error, expected) => {
    expect(error).toBeInstanceOf(EngineError);
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject(expected);
    expect(String(error)).toBe(`${expected.name}: ${expected.message}`);
  });

  it('each constructor is its own class: instanceof tells them apart', () => {
    expect(new PageCapError(1)).toBeInstanceOf(PageCapError);
    expect(new PageCapError(1)).not.toBeInstanceOf(StalePositionError);
    expect(CancelledError.name).toBe('CancelledError');
  });

  it('a network failure keeps its cause', () => {
    const cause = new Error('reset');
    expect(new UpstreamNetworkError(1, cause).cause).toBe(cause);
  });
});

import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { stringify as toYaml } from 'yaml';
import { PAGED_LISTS } from '../../apiserver/paging.js';
import type { JsonSchema, RouteDecl } from '../../apiserver/route.js';
import { MAX_JSON_BODY_BYTES, unstorableText } from '../../src/validation/input-limits.js';

/**
 * Generators of requests for one route declaration: values derived from its JSON Schemas (so many
 * requests get past validation into the handler and the database), mixed with junk that must never
 * make the hub answer 500: NUL characters, unpaired surrogates, deep nesting, huge numbers, wrong
 * types and media types, YAML where manifests are taken, and hostile headers.
 */

export interface FuzzRequest {
  method: string;
  /** Path and query string, percent-encoded. */
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
  /**
   * Set when the body cannot be read as its Content-Type declares (a charset the hub does not know,
   * an empty one, bytes invalid in it): what a route that reads the body must answer with its 400.
   */
  unreadable?: Unreadable;
  /**
   * The query parameters the route does not declare, in the order sent (as the hub decodes them, where
   * they can be decoded): the router must refuse the request, never answer it as if they were not given.
   */
  undeclared?: string[];
}

/** Why a body cannot be read, and where: the 400 the router must answer names it. */
export interface Unreadable {
  /** The 400's `error`, as a pattern. */
  error: RegExp;
  /** For invalid bytes: the offset they were put at (the 400 names an offset from there to its last byte). */
  at?: number;
}

type Schema = JsonSchema & Record<string, unknown>;

/** `arbitrary` one time in `odds`, undefined otherwise. */
function rarely<T>(arbitrary: fc.Arbitrary<T>, odds: number): fc.Arbitrary<T | undefined> {
  return fc.oneof({ weight: odds - 1, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary });
}

/** Strings that have broken parsers, casts and SQL before. */
const NASTY_STRINGS = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\ud800',
  'x\udc00y',
  '\ufffd',
  '%00',
  '..',
  '../../etc/passwd',
  '-1',
  '0',
  '1',
  '2',
  '9223372036854775807',
  '9223372036854775808',
  '99999999999999999999999999999',
  '-99999999999999999999',
  '1e309',
  '1.5',
  'NaN',
  'Infinity',
  'true',
  'null',
  '00000000-0000-0000-0000-000000000000',
  'ffffffff-ffff-ffff-ffff-ffffffffffff',
  "'; drop table core.tenants; --",
  '{{env:SVC_SECRET_MASTER_KEY}}',
  '$.id',
  'ext.x',
  '*',
  '\u202e\u0301',
  '😀',
  // Keys that name an object's prototype or its methods (a merge or a lookup by name may reach them).
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  'hasOwnProperty',
  // Numbers spelt as a parser may or may not take them, and at the edges of 32- and 64-bit integers.
  '-0',
  '0.0',
  '+1',
  ' 1',
  '1 ',
  '0x10',
  '1e3',
  '2147483648',
  '-2147483649',
  '4294967296',
  '-9223372036854775809',
  // Dates a parser may take or not: a day that does not exist, past JavaScript's range, year 0, an offset past
  // ±24 h, a leap second, PostgreSQL's special words.
  '2024-02-30',
  '+275760-09-14T00:00:00Z',
  '0000-01-01T00:00:00Z',
  '2024-01-01T00:00:00+25:00',
  '2016-12-31T23:59:60Z',
  'infinity',
  'epoch',
  'allballs',
];

export const nastyString = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...NASTY_STRINGS) },
  { weight: 2, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 3000 }).map((n) => 'x'.repeat(n)) },
);

const HUGE_NUMBERS = [1e308, -1e308, 2 ** 53 + 2, -(2 ** 63), 2 ** 64, 1.5, -0, 0.1, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER];

/** Any JSON value, with NULs, surrogates and huge numbers among its leaves. */
export const junkJson: fc.Arbitrary<unknown> = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    nastyString,
    fc.constantFrom(...HUGE_NUMBERS),
    fc.integer(),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(nastyString, tie('value'), { maxKeys: 4 }),
  ),
})).value;

/** A value of the schema's shape (often valid), sometimes with junk in one place. */
export function fromSchema(schema: Schema | undefined, depth = 0): fc.Arbitrary<unknown> {
  if (!schema || depth > 6) return junkJson;
  const valid = shaped(schema, depth);
  return fc.oneof({ weight: 19, arbitrary: valid }, { weight: 1, arbitrary: junkJson });
}

function shaped(schema: Schema, depth: number): fc.Arbitrary<unknown> {
  if (Array.isArray(schema.enum) && schema.enum.length) return fc.constantFrom(...(schema.enum as unknown[]));
  if ('const' in schema) return fc.constant(schema.const);
  const alternatives = (schema.anyOf ?? schema.oneOf) as Schema[] | undefined;
  if (alternatives?.length) return fc.oneof(...alternatives.map((s) => fromSchema(s, depth + 1)));
  const type = Array.isArray(schema.type) ? (schema.type as string[]) : schema.type ? [schema.type as string] : ['object'];
  return fc.oneof(...type.map((t) => typed(t, schema, depth)));
}

function typed(type: string, schema: Schema, depth: number): fc.Arbitrary<unknown> {
  const min = typeof schema.minimum === 'number' ? schema.minimum : undefined;
  const max = typeof schema.maximum === 'number' ? schema.maximum : undefined;
  switch (type) {
    case 'string': {
      if (schema.format === 'uuid') return fc.uuid();
      if (schema.format === 'email') return fc.emailAddress();
      if (schema.format === 'uri') return loopbackUrl;
      if (typeof schema.pattern === 'string') {
        try {
          return fc.stringMatching(new RegExp(schema.pattern)).filter((s) => s.length <= ((schema.maxLength as number | undefined) ?? 1000));
        } catch {
          return nastyString;
        }
      }
      const minLength = (schema.minLength as number | undefined) ?? 0;
      const maxLength = Math.min((schema.maxLength as number | undefined) ?? 40, 200);
      return fc.oneof(fc.string({ minLength, maxLength: Math.max(minLength, maxLength) }), nastyString, loopbackUrl);
    }
    case 'integer':
      return fc.oneof(fc.integer({ min: Math.max(min ?? -1000, Number.MIN_SAFE_INTEGER), max: Math.min(max ?? 100_000, Number.MAX_SAFE_INTEGER) }), fc.constantFrom(...HUGE_NUMBERS));
    case 'number':
      return fc.oneof(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom(...HUGE_NUMBERS));
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array':
      return fc.array(fromSchema(schema.items as Schema | undefined, depth + 1), { maxLength: Math.min((schema.maxItems as number | undefined) ?? 4, 4) });
    default: {
      const properties = (schema.properties ?? {}) as Record<string, Schema>;
      const required = new Set((schema.required as string[] | undefined) ?? []);
      const record: Record<string, fc.Arbitrary<unknown>> = {};
      for (const [key, sub] of Object.entries(properties)) record[key] = fromSchema(sub, depth + 1);
      const keys = Object.keys(record);
      const base = fc.record(record, { requiredKeys: keys.filter((k) => required.has(k)) });
      return schema.additionalProperties === false ? base : fc.tuple(base, fc.dictionary(nastyString, junkJson, { maxKeys: 2 })).map(([a, b]) => ({ ...b, ...a }));
    }
  }
}

/** URLs that stay on this machine (the hub's outbound calls are refused off loopback by the harness anyway). */
export const loopbackUrl = fc.constantFrom('http://127.0.0.1:9/', 'http://127.0.0.1:1/hook', 'https://127.0.0.1:9/x', 'http://[::1]:9/', 'http://localhost:9/', 'ftp://127.0.0.1/', 'http://example.invalid/');

/** `valid` nine times in ten, a nasty string otherwise. */
const mostly = <T>(valid: fc.Arbitrary<T>) => fc.oneof({ weight: 9, arbitrary: valid as fc.Arbitrary<T | string> }, { weight: 1, arbitrary: nastyString });

/** A connector manifest that is close to valid, with generated names and values in it. */
const manifest = fc
  .record({
    name: mostly(fc.stringMatching(/^[a-z][a-z0-9-]{0,20}[a-z0-9]$/)),
    table: mostly(fc.stringMatching(/^[a-z][a-z0-9_]{0,20}$/).map((t) => `ext.fuzz_${t}`)),
    endpoint: mostly(fc.stringMatching(/^[a-z][a-z0-9]{0,10}$/)),
    path: mostly(fc.constantFrom('/items', '/x?y=1')),
    promoteType: fc.constantFrom('text', 'bigint', 'numeric', 'boolean', 'timestamptz', 'text', 'nope'),
    promoteName: mostly(fc.stringMatching(/^[a-z][a-z0-9_]{0,10}$/).map((n) => `c_${n}`)),
    extra: rarely(junkJson, 4),
    schedule: rarely(mostly(fc.constant('*/5 * * * *')), 2),
  })
  .map((m) => ({
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name: m.name },
    connector_type: 'rest-generic',
    scopes: ['fuzz'],
    spec: {
      base_url: 'http://127.0.0.1:9',
      ...(m.schedule === undefined ? {} : { schedule: m.schedule }),
      ...(m.extra === undefined ? {} : { defaults: m.extra }),
      endpoints: [{ id: m.endpoint, path: m.path, target: { kind: 'hybrid', table: m.table, unique_key: '$.id', promote: [{ name: m.promoteName, path: '$.v', type: m.promoteType }] } }],
    },
  }));

const nested = (depth: number, leaf: string) => `${'{"a":'.repeat(depth)}${leaf}${'}'.repeat(depth)}`;

/** Bodies as text with a media type: JSON from the schema, junk JSON, deep nesting, YAML, wrong types. */
export function bodyArbitrary(decl: RouteDecl): fc.Arbitrary<{ type: string; text: string }> {
  const yamlRoute = (decl.bodyTypes ?? []).some((t) => t.includes('yaml'));
  const csvRoute = (decl.bodyTypes ?? []).includes('text/csv');
  const shapedValue = yamlRoute ? fc.oneof({ weight: 4, arbitrary: manifest }, { weight: 1, arbitrary: fromSchema(decl.body as Schema | undefined) }) : fromSchema(decl.body as Schema | undefined);
  const options: Array<fc.WeightedArbitrary<{ type: string; text: string }>> = [
    { weight: 6, arbitrary: shapedValue.map((v) => ({ type: 'application/json', text: JSON.stringify(v) ?? 'null' })) },
    { weight: 2, arbitrary: junkJson.map((v) => ({ type: 'application/json', text: JSON.stringify(v) ?? 'null' })) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(63, 64, 65, 200, 100_000).map((d) => ({ type: 'application/json', text: nested(d, '"\\u0000"') })),
    },
    { weight: 1, arbitrary: fc.constantFrom(65, 5000).map((d) => ({ type: 'application/json', text: '['.repeat(d) + ']'.repeat(d) })) },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(
          '{"a": 1e999999}',
          '{"n": 123456789012345678901234567890}',
          '{"a":',
          '\u0000',
          '"\\ud800"',
          '[]',
          'null',
          '{"__proto__": {"x": 1}}',
          '{"a":"\\u0000"}',
          '',
          ' \r\n',
          '{"a":1,"a":2}',
          '{"constructor": {"prototype": {"x": 1}}}',
          '{"__proto__": null, "toString": 1, "hasOwnProperty": "x"}',
          `[${'{"a":'.repeat(63)}1${'}'.repeat(63)}]`,
          `${'['.repeat(64)}${']'.repeat(64)}`,
        )
        .map((text) => ({ type: 'application/json', text })),
    },
    // A body of the route's shape with its first key given twice (the first time as junk), or a prototype's name among its keys.
    { weight: 1, arbitrary: fc.tuple(shapedValue, junkJson, fc.constantFrom('__proto__', 'constructor', 'prototype')).map(([v, junk, name]) => ({ type: 'application/json', text: twiceOrPrototype(v, junk, name) })) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.constantFrom('text/plain', 'application/yaml', 'application/xml', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', '', 'APPLICATION/JSON', 'application/merge-patch+json', 'application/json-patch+json', 'text/json', 'application/*', '*/*', 'application/json;;', 'application/json; charset'),
          fc.oneof(nastyString, shapedValue.map((v) => JSON.stringify(v) ?? 'null')),
        )
        .map(([type, text]) => ({ type, text })),
    },
  ];
  if (yamlRoute) {
    options.push(
      { weight: 4, arbitrary: shapedValue.map((v) => ({ type: 'application/yaml', text: safeYaml(v) })) },
      {
        weight: 2,
        arbitrary: fc
          .constantFrom(
            'a: "\\0"',
            'metadata: {name: "a\\0b"}',
            `${'['.repeat(70)}${']'.repeat(70)}`,
            `${'- '.repeat(70)}x`,
            'a: &a [*a]',
            'a: &a x\nb: [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]',
            'x: !!binary AAAA',
            '? [a, b]\n: c',
            '!!js/function "x"',
            'a: 1e999999',
            'spec:\n  endpoints: [{id: "\\ud800"}]',
            '---\na: 1\n---\nb: 2',
          )
          .map((text) => ({ type: 'application/yaml', text })),
      },
    );
  }
  if (csvRoute) {
    options.push({
      weight: 6,
      arbitrary: fc
        .array(fc.array(fc.oneof(fc.string({ maxLength: 8 }), nastyString), { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 5 })
        .map((rows) => ({ type: 'text/csv', text: ['id,name', ...rows.map((r) => r.join(','))].join('\r\n') })),
    });
  }
  return fc.oneof(...options);
}

/** The value's JSON with its first key written twice, the first time with junk; or `name` as an extra key when it has none. */
function twiceOrPrototype(value: unknown, junk: unknown, name: string): string {
  const text = JSON.stringify(value) ?? 'null';
  const first = value !== null && typeof value === 'object' && !Array.isArray(value) ? Object.keys(value)[0] : undefined;
  const inner = text.startsWith('{') && text !== '{}' ? `,${text.slice(1)}` : '}';
  return `{${JSON.stringify(first ?? name)}:${JSON.stringify(junk) ?? 'null'}${inner}`;
}

function safeYaml(value: unknown): string {
  try {
    return toYaml(value);
  } catch {
    return 'x: 1';
  }
}

/**
 * Header values as bytes no client should send (Node's client sends a header's text as latin-1): half a
 * surrogate pair and an overlong NUL in UTF-8, a lone continuation byte, DEL.
 */
const RAW_HEADER_JUNK = ['\xed\xa0\x80', '1\xc0\x80', '\x80', '1\x7f', '\xff\xfe'];

/** Header values Node's HTTP client can send (no control characters but tab). */
const headerSafe = (s: string) => s.replace(/[^\t\x20-\x7e\x80-\xff]/g, '?');

export const headersArbitrary = fc
  .record({
    tenant: fc.oneof({ weight: 30, arbitrary: fc.constant('1') }, { weight: 1, arbitrary: fc.constantFrom('0', '2', '-1', 'abc', '99999999999999999999', ' 1', '1.0', '', ...RAW_HEADER_JUNK) }, { weight: 1, arbitrary: nastyString }),
    impersonate: rarely(fc.oneof(fc.constantFrom('1', '2', '0', '9999999999'), nastyString), 20),
    user: rarely(fc.oneof(fc.constantFrom('1', '42', 'alice', '-1', '99999999999999999999', ...RAW_HEADER_JUNK), nastyString), 6),
    authorization: rarely(fc.oneof(fc.constantFrom('Bearer ', 'Bearer a.b.c', 'Basic YTpi', 'Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.'), nastyString), 6),
    lastEventId: rarely(fc.oneof(fc.constantFrom('0', '1', '-1', '18446744073709551616', '9223372036854775807', '9007199254740992', '1e3', '1.5', '0x1', 'abc', ...RAW_HEADER_JUNK), nastyString), 3),
    requestId: rarely(nastyString, 10),
  })
  .map((h) => {
    const out: Record<string, string> = {};
    if (h.tenant !== '') out['X-Tenant-ID'] = headerSafe(h.tenant);
    if (h.impersonate !== undefined) out['X-Impersonate-Tenant'] = headerSafe(h.impersonate);
    if (h.user !== undefined) out['X-User-ID'] = headerSafe(h.user);
    if (h.authorization !== undefined) out.Authorization = headerSafe(h.authorization);
    if (h.lastEventId !== undefined) out['Last-Event-ID'] = headerSafe(h.lastEventId);
    if (h.requestId !== undefined) out['X-Request-Id'] = headerSafe(h.requestId);
    return out;
  });

/** Percent-encoding that also carries half a surrogate pair (as its bytes, which decode to U+FFFD). */
function enc(text: string): string {
  try {
    return encodeURIComponent(text);
  } catch {
    return `${encodeURIComponent(text.replace(/[\ud800-\udfff]/g, '\ufffd'))}%ED%A0%80`;
  }
}

/** A path parameter as it appears in the URL (percent-encoded). */
function paramArbitrary(name: string, schema: Schema | undefined): fc.Arbitrary<string> {
  const fromDecl = schema ? shaped(schema, 0).map((v) => (typeof v === 'string' ? v : JSON.stringify(v) ?? '')) : fc.constant('');
  // Names and ids that exist (the test seeds a connector `fuzz` with endpoint `items`; POSTs create ids 1, 2, …).
  const usual = name === 'tid' ? fc.constant('1') : fc.oneof(fc.integer({ min: 1, max: 5 }).map(String), fc.uuid(), fc.constantFrom('fuzz', 'items', 'fuzz-secret'), fc.stringMatching(/^[a-z][a-z0-9-]{0,12}$/));
  return fc.oneof({ weight: name === 'tid' ? 10 : 4, arbitrary: usual }, { weight: 2, arbitrary: fromDecl }, { weight: 2, arbitrary: nastyString }).map((v) => (v === '' ? 'x' : enc(v)));
}

const RAW_PATH_JUNK = ['%', '%zz', '%E0%A4%A', '%C0%AF', '%ED%A0%80', '%00'];

/** A query string, and the parameters in it the route does not declare. */
interface FuzzQuery {
  text: string;
  undeclared: string[];
}

/**
 * A name a route does not declare: a near miss of one it does (another case, a letter dropped or
 * doubled, a plural), a plain name, or any text the database can store; never a declared name.
 */
export function undeclaredNameArbitrary(schema: Schema | undefined): fc.Arbitrary<string> {
  const properties = (schema?.properties ?? {}) as Record<string, Schema>;
  const names = Object.keys(properties);
  const near = names.length
    ? fc.tuple(fc.constantFrom(...names), fc.constantFrom('upper', 'capital', 'drop', 'double', 'plural'), fc.nat()).map(([name, how, at]) => {
        const i = at % name.length;
        if (how === 'upper') return name.toUpperCase();
        if (how === 'capital') return `${name[0]!.toUpperCase()}${name.slice(1)}`;
        if (how === 'drop') return `${name.slice(0, i)}${name.slice(i + 1)}`;
        if (how === 'double') return `${name.slice(0, i)}${name[i]}${name.slice(i)}`;
        return `${name}s`;
      })
    : fc.constantFrom('limit', 'before', 'format', 'tenantId');
  const plain = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_.-]{0,20}$/);
  // Text PostgreSQL can store (a NUL or half a surrogate pair is refused as such first: input-limits.test.ts).
  const any = fc.string({ maxLength: 20 }).filter((t) => unstorableText(t) === undefined);
  return fc.oneof({ weight: 3, arbitrary: near }, { weight: 2, arbitrary: plain }, { weight: 1, arbitrary: any }).filter((name) => !Object.hasOwn(properties, name));
}

/** Values of one part of a list's sort key: at its edges, of another part's kind, or junk. */
const keyPart = fc.oneof(
  fc.constantFrom(
    '0001-01-01T00:00:00.000000Z', '9999-12-31T23:59:59.999999Z', '2026-02-29T00:00:00.000000Z', '1970-01-01T00:00:00.000000Z', '2024-02-29T12:00:00.000000Z',
    '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '1', '9223372036854775807', '9223372036854775808', 'true', 'false',
  ),
  fc.uuid(),
  fc.date({ min: new Date('0001-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59Z'), noInvalidDate: true }).map((d) => d.toISOString().replace('Z', '123Z')),
  fc.bigInt({ min: 1n, max: 9223372036854775807n }).map(String),
  nastyString,
  junkJson,
);

/**
 * A `before` cursor as the hub writes them (the base64url of `[list, ...key]`), forged: for any paged list
 * (this route's or another's), its key parts at their edges, of the wrong kind or junk, too few or too many.
 * Built when asked for: the lists are those of the route modules loaded by then.
 */
const forgedCursor = () =>
  fc.tuple(fc.constantFrom(...PAGED_LISTS), fc.array(keyPart, { minLength: 0, maxLength: 3 }), fc.boolean()).map(([list, parts, exact]) => {
    const key = exact ? list.key.map((_, i) => parts[i] ?? '1') : parts;
    return Buffer.from(JSON.stringify([list.name, ...key])).toString('base64url');
  });

/** Query strings: the declared parameters (often valid), repeated keys, undeclared and junk keys and values. */
function queryArbitrary(schema: Schema | undefined): fc.Arbitrary<FuzzQuery> {
  const properties = (schema?.properties ?? {}) as Record<string, Schema>;
  const declared = Object.entries(properties).map(([key, sub]) =>
    rarely(fc.array((key === 'before' ? fc.oneof(forgedCursor(), fromSchema(sub)) : fromSchema(sub)).map((v) => (typeof v === 'string' ? v : JSON.stringify(v) ?? '')), { minLength: 1, maxLength: 2 }), 2).map((values) => (values ?? []).map((v) => `${enc(key)}=${enc(v)}`)),
  );
  const undeclaredNames = rarely(fc.array(fc.tuple(undeclaredNameArbitrary(schema), nastyString), { minLength: 1, maxLength: 2 }), 8).map((u) => u ?? []);
  const junk = rarely(fc.array(fc.tuple(nastyString, nastyString), { minLength: 1, maxLength: 2 }), 8).map((j) => j ?? []);
  const raw = rarely(fc.constantFrom(...RAW_PATH_JUNK).map((j) => `x=${j}`), 12);
  return fc.tuple(fc.tuple(...declared, fc.constant([] as string[])), undeclaredNames, junk, raw).map(([parts, named, extra, r]) => {
    const pairs = [...named, ...extra];
    const all = [...parts.flat(), ...pairs.map(([k, v]) => `${enc(k)}=${enc(v)}`), ...(r ? [r] : [])];
    const undeclared = [...pairs.map(([k]) => k), ...(r ? ['x'] : [])].filter((k) => !Object.hasOwn(properties, k));
    return { text: all.length ? `?${all.join('&')}` : '', undeclared };
  });
}

/**
 * A charset parameter a client may send, and how it puts text into bytes. `decoded`: the name the
 * hub's 400 gives it (the WHATWG encoding's), undefined for charsets it must refuse outright.
 */
interface CharsetSpelling {
  param: string;
  encode: (text: string) => Buffer;
  /** The encoding's name in the router's 400 for bytes invalid in it. */
  name?: string;
  /** Byte sequences invalid in the encoding wherever they stand (between whole characters). */
  invalid?: number[][];
  /** The router's 400 for the charset itself (unknown, empty). */
  refused?: RegExp;
}

const UTF8_INVALID = [[0xff], [0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82, 0x41], [0xf4, 0x90, 0x80, 0x80], [0xfe, 0xfe]];
const utf8 = (param: string): CharsetSpelling => ({ param, encode: (text) => Buffer.from(text, 'utf8'), name: 'UTF-8', invalid: UTF8_INVALID });
/** windows-1252 (what iso-8859-1, latin1 and us-ascii name in the Encoding Standard) decodes every byte. */
const singleByte = (param: string): CharsetSpelling => ({ param, encode: (text) => Buffer.from(text, 'latin1') });

export const CHARSET_SPELLINGS: CharsetSpelling[] = [
  utf8('utf-8'),
  utf8('UTF-8'),
  utf8('Utf-8'),
  utf8('"utf-8"'),
  utf8('"UTF-8"'),
  utf8('utf8'),
  singleByte('iso-8859-1'),
  singleByte('ISO-8859-1'),
  singleByte('latin1'),
  singleByte('us-ascii'),
  // An unpaired surrogate, as bytes: a low half with no high half before it.
  { param: 'utf-16le', encode: (text) => Buffer.from(text, 'utf16le'), name: 'utf-16le', invalid: [[0x00, 0xdc], [0x41, 0xdf]] },
  { param: 'x-nope', encode: (text) => Buffer.from(text, 'utf8'), refused: /^body declares charset x-nope, which the hub cannot decode$/ },
  { param: '', encode: (text) => Buffer.from(text, 'utf8'), refused: /^body declares an empty charset\b/ },
  { param: '""', encode: (text) => Buffer.from(text, 'utf8'), refused: /^body declares an empty charset\b/ },
  { param: 'utf-8; charset=latin1', encode: (text) => Buffer.from(text, 'utf8'), refused: /^body declares 2 charsets \(utf-8, latin1\)$/ },
];

/** The Content-Type with the charset parameter spelt as given (`charset=` alone for the empty one). */
const withCharset = (type: string, param: string) => `${type || 'application/json'}; charset=${param}`;

/** Text as the charset's bytes, with the unpaired surrogates a UTF-16 encoding would carry as such made whole first. */
const wholeText = (text: string) => text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');

/** Where an invalid sequence may go: between whole characters of the charset (UTF-16's are two bytes). */
function boundaries(text: string, spelling: CharsetSpelling): number[] {
  const out = [0];
  let at = 0;
  for (const ch of text) {
    at += spelling.encode(ch).length;
    out.push(at);
  }
  return out;
}

/**
 * A body sent with a charset parameter: its text in that charset's bytes, sometimes with a sequence
 * invalid in it put between two characters. `unreadable` says what the router must answer.
 */
export function charsetBody(body: fc.Arbitrary<{ type: string; text: string }>): fc.Arbitrary<{ type: string; bytes: Buffer; unreadable?: Unreadable }> {
  return fc.tuple(body, fc.constantFrom(...CHARSET_SPELLINGS), fc.boolean(), fc.nat(), fc.nat()).map(([b, spelling, corrupt, where, which]) => {
    const type = withCharset(b.type, spelling.param);
    const text = wholeText(b.text);
    const bytes = spelling.encode(text);
    if (spelling.refused) return { type, bytes, unreadable: { error: spelling.refused } };
    if (!corrupt || !spelling.invalid) return { type, bytes };
    const cuts = boundaries(text, spelling);
    const at = cuts[where % cuts.length]!;
    const bad = Buffer.from(spelling.invalid[which % spelling.invalid.length]!);
    const name = spelling.name!.replace(/[-]/g, '\\-');
    return { type, bytes: Buffer.concat([bytes.subarray(0, at), bad, bytes.subarray(at)]), unreadable: { error: new RegExp(`^body is not valid ${name}: an invalid byte sequence at byte offset \\d+$`), at } };
  });
}

/** Bytes that are not UTF-8, in a body that declares no charset (so UTF-8). */
function undeclaredInvalid(body: fc.Arbitrary<{ type: string; text: string }>): fc.Arbitrary<{ type: string; bytes: Buffer; unreadable?: Unreadable }> {
  const spelling = utf8('utf-8');
  return fc.tuple(body, fc.nat(), fc.constantFrom(...UTF8_INVALID)).map(([b, where, bad]) => {
    const cuts = boundaries(b.text, spelling);
    const at = cuts[where % cuts.length]!;
    const bytes = Buffer.from(b.text, 'utf8');
    return { type: b.type, bytes: Buffer.concat([bytes.subarray(0, at), Buffer.from(bad), bytes.subarray(at)]), unreadable: { error: /^body is not valid UTF-8: an invalid byte sequence at byte offset \d+$/, at } };
  });
}

const ALIAS_BOMB = ['a: &a [x, x, x, x, x, x, x, x, x]', ...Array.from({ length: 8 }, (_, i) => `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(9).fill(`*${String.fromCharCode(97 + i)}`).join(', ')}]`)].join('\n');

/** Text that is not JSON, or not YAML (a credential on the line in error among it, an alias bomb). */
const MALFORMED = {
  JSON: ['{"a":', '{"a" 1}', '[1,]', '{"token": ghp_0123456789abcdefghijklmnopqrstuvwxyz}'],
  YAML: ['a: [\n', 'spec:\n  token: "ghp_0123456789abcdefghijklmnopqrstuvwxyz\n', 'spec:\n  token: ghp_0123456789abcdefghijklmnopqrstuvwxyz: x: y\n', `${ALIAS_BOMB}\n`],
} as const;

/**
 * Text of a type the route reads that is not JSON (or YAML) at all: the router's 400 names the body and
 * says why on one line, never quoting the text around the error (which may hold a credential).
 */
function malformedBodies(types: readonly string[]): Array<{ type: string; bytes: Buffer; unreadable: Unreadable }> {
  return types.flatMap((type) => {
    const kind = /yaml/.test(type) ? 'YAML' : /json/.test(type) ? 'JSON' : undefined;
    return kind ? MALFORMED[kind].map((text) => ({ type, bytes: Buffer.from(text), unreadable: { error: new RegExp(`^body is not valid ${kind}: [^\\n]+$`) } })) : [];
  });
}

/**
 * Bodies that cannot be read as declared: an unknown or empty charset, bytes invalid in the charset
 * declared (UTF-8 when none is), or text that is not JSON or YAML. A route that reads a body answers
 * each with a 400 naming it.
 */
export function unreadableBodyArbitrary(decl: RouteDecl): fc.Arbitrary<{ type: string; bytes: Buffer; unreadable: Unreadable }> {
  const types = decl.bodyTypes ?? ['application/json'];
  const text = bodyArbitrary(decl).filter((b) => types.includes(b.type));
  const malformed = malformedBodies(types);
  const undecodable = fc.oneof(charsetBody(text), undeclaredInvalid(text)).filter((b): b is { type: string; bytes: Buffer; unreadable: Unreadable } => b.unreadable !== undefined);
  return malformed.length ? fc.oneof({ weight: 4, arbitrary: undecodable }, { weight: 1, arbitrary: fc.constantFrom(...malformed) }) : undecodable;
}

/** A Content-Encoding and what it does to the body: compressed as it says, or not (`refused`: the hub cannot read it). */
interface Encoding {
  name: string;
  encode: (bytes: Buffer) => Buffer;
  refused?: boolean;
}

const CONTENT_ENCODINGS: Encoding[] = [
  { name: 'gzip', encode: (b) => gzipSync(b) },
  { name: 'deflate', encode: (b) => deflateSync(b) },
  { name: 'br', encode: (b) => brotliCompressSync(b) },
  { name: 'identity', encode: (b) => b },
  { name: 'gzip', encode: (b) => b, refused: true },
  { name: 'br', encode: (b) => b, refused: true },
  { name: 'gzip', encode: (b) => gzipSync(b).subarray(0, 12), refused: true },
  // A content-coding's name in any case (RFC 9110).
  { name: 'GZIP', encode: (b) => gzipSync(b) },
  { name: 'Deflate', encode: (b) => deflateSync(b) },
  { name: 'BR', encode: (b) => brotliCompressSync(b) },
  { name: 'gzip, gzip', encode: (b) => gzipSync(gzipSync(b)), refused: true },
  { name: 'compress', encode: (b) => b, refused: true },
  { name: '', encode: (b) => b },
];

const OVER_JSON_LIMIT = Buffer.from(`{"a":"${'x'.repeat(MAX_JSON_BODY_BYTES)}"}`);

/** Every request this route may receive, valid or not. */
export function requestArbitrary(decl: RouteDecl): fc.Arbitrary<FuzzRequest> {
  const names = [...decl.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);
  const paramSchemas = ((decl.params as Schema | undefined)?.properties ?? {}) as Record<string, Schema>;
  const params = fc.tuple(...names.map((n) => paramArbitrary(n, paramSchemas[n])), fc.constant(''));
  const rawJunk = rarely(fc.constantFrom(...RAW_PATH_JUNK), 15);
  const wantsBody = decl.body !== undefined || ['POST', 'PUT', 'PATCH'].includes(decl.method);
  // Most bodies as UTF-8 without a charset parameter; some with one (any spelling, known or not, and
  // bytes invalid in it), some with bytes that are not UTF-8.
  const plain = bodyArbitrary(decl).map((b) => ({ type: b.type, bytes: Buffer.from(b.text, 'utf8') }) as { type: string; bytes: Buffer; unreadable?: Unreadable });
  const sent = fc.oneof(
    { weight: 12, arbitrary: plain },
    { weight: 4, arbitrary: charsetBody(bodyArbitrary(decl)) },
    { weight: 2, arbitrary: undeclaredInvalid(bodyArbitrary(decl)) },
    // Just past the most a JSON body may hold (refused for its length: 413). Not through the charsets: their
    // generators walk a body character by character.
    { weight: 1, arbitrary: fc.constant({ type: 'application/json', bytes: OVER_JSON_LIMIT } as { type: string; bytes: Buffer; unreadable?: Unreadable }) },
  );
  const body = wantsBody ? fc.oneof({ weight: 9, arbitrary: sent }, { weight: 1, arbitrary: fc.constant(undefined) }) : fc.constant(undefined);
  return fc.record({ params, rawJunk, query: queryArbitrary(decl.query as Schema | undefined), headers: headersArbitrary, body, encoding: rarely(fc.constantFrom(...CONTENT_ENCODINGS), 10) }).map(({ params: values, rawJunk: junk, query, headers, body: b, encoding }) => {
    let i = 0;
    let path = decl.path.replace(/\{(\w+)\}/g, () => values[i++]!);
    if (junk && names.length) path = path.replace(/\/[^/]*$/, `/${junk}`);
    const out: FuzzRequest = { method: decl.method, path: `${path}${query.text}`, headers: { ...headers } };
    if (query.undeclared.length) out.undeclared = query.undeclared;
    if (b) {
      out.body = b.bytes;
      if (b.type) out.headers['Content-Type'] = b.type;
      if (b.unreadable) out.unreadable = b.unreadable;
      if (encoding) {
        out.headers['Content-Encoding'] = encoding.name;
        out.body = encoding.encode(b.bytes);
        // Bytes that do not inflate, or in an encoding the hub does not take, are not the body declared.
        if (encoding.refused) out.unreadable = undefined;
      }
    }
    return out;
  });
}

/** A value its schema takes, for a path or query parameter: the tenant 1, a number, one of an enum, or a name. */
function plainValue(name: string, schema: Schema | undefined): string {
  if (name === 'tid') return '1';
  if (Array.isArray(schema?.enum) && schema.enum.length) return String(schema.enum[0]);
  if (schema?.format === 'uuid') return '00000000-0000-4000-8000-000000000001';
  if (schema?.type === 'integer' || schema?.type === 'number') return String(Math.max(1, typeof schema.minimum === 'number' ? schema.minimum : 1));
  if (schema?.type === 'boolean') return 'true';
  return 'fuzz';
}

/**
 * A request the route's gate and parameter checks let through (the dev bypass's tenant 1, path
 * parameters and required query parameters their schemas take), with no body yet: what a route
 * then answers depends on its body alone.
 */
export function plainRequest(decl: RouteDecl): FuzzRequest {
  const paramSchemas = ((decl.params as Schema | undefined)?.properties ?? {}) as Record<string, Schema>;
  const path = decl.path.replace(/\{(\w+)\}/g, (_, name: string) => enc(plainValue(name, paramSchemas[name])));
  const query = (decl.query as Schema | undefined) ?? {};
  const properties = (query.properties ?? {}) as Record<string, Schema>;
  const required = ((query.required as string[] | undefined) ?? []).map((name) => `${enc(name)}=${enc(plainValue(name, properties[name]))}`);
  return { method: decl.method, path: `${path}${required.length ? `?${required.join('&')}` : ''}`, headers: { 'X-Tenant-ID': '1' } };
}

/** What a fuzzed bearer token says (minted by the test issuer): roles, tenant, identity, and how it is signed. */
export interface TokenSpec {
  claims: Record<string, unknown>;
  subject: string;
  expiresIn: number;
  rogue: boolean;
}

const ROLE_NAMES = ['svc_user', 'svc_admin', 'svc_integrator', 'svc_superadmin'];

export const tokenArbitrary: fc.Arbitrary<TokenSpec> = fc
  .record({
    roles: fc.oneof({ weight: 6, arbitrary: fc.subarray(ROLE_NAMES) }, { weight: 1, arbitrary: junkJson }),
    tenant: fc.oneof({ weight: 6, arbitrary: fc.constantFrom(1, '1', 2) }, { weight: 1, arbitrary: fc.constantFrom(0, -1, 1.5, '99999999999999999999', 2 ** 63, null, [1], {}, 'abc', '') }, { weight: 1, arbitrary: nastyString }),
    acting: rarely(fc.oneof(fc.constantFrom(1, 2, 0, 9999999999, '1', [2]), nastyString), 8),
    userId: rarely(fc.oneof(fc.constantFrom(1, 2, 0, -1, '7', 2 ** 60, 'x'), nastyString), 6),
    name: rarely(nastyString, 4),
    email: rarely(fc.oneof(fc.emailAddress(), nastyString), 4),
    login: rarely(nastyString, 4),
    subject: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('fuzz-1', 'fuzz-2') }, { weight: 1, arbitrary: nastyString.filter((s) => s !== '') }),
    expired: rarely(fc.constant(true), 8).map((e) => e === true),
    rogue: rarely(fc.constant(true), 10),
  })
  .map((t) => {
    const claims: Record<string, unknown> = { realm_access: { roles: t.roles }, tenant_id: t.tenant };
    if (t.acting !== undefined) claims.acting_as_tenant = t.acting;
    if (t.userId !== undefined) claims.user_id = t.userId;
    if (t.name !== undefined) claims.name = t.name;
    if (t.email !== undefined) claims.email = t.email;
    if (t.login !== undefined) claims.preferred_username = t.login;
    return { claims, subject: t.subject, expiresIn: t.expired ? -60 : 300, rogue: t.rogue === true };
  });

import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { parseStandardCron } from '../../../test/harness/kube-cron.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { EgressPolicy } from '../../egress/policy.js';
import { PROMOTE_TYPES, TRANSFORMS } from '../types.js';
import { PRESET_NAMES } from './presets.js';
import { connectorManifestSchema } from './schema.js';
import { type CheckOptions, checkManifest, cronProblem, parseRateLimit, REFUSALS } from './validate.js';

type Json = Record<string, unknown>;

const endpoint = (over: Json = {}): Json => ({ id: 'partners', path: '/open/partners', target: { table: 'ext.partners', unique_key: '$.id' }, ...over });

function manifest(spec: Json = {}, top: Json = {}): Json {
  return {
    apiVersion: 'connectors.svc.io/v1',
    kind: 'Connector',
    metadata: { name: 'demo' },
    connector_type: 'rest-generic',
    scopes: ['crm'],
    spec: { base_url: 'http://localhost:8099', endpoints: [endpoint()], ...spec },
    ...top,
  };
}

const withEndpoint = (over: Json) => manifest({ endpoints: [endpoint(over)] });
const gqlQuery = 'query Partners($after: String) { partners(first: 100, after: $after) { edges { node { id } } pageInfo { endCursor hasNextPage } } }';

/** The errors of a manifest, as `{field: message}`. */
function errorsOf(m: unknown, options: CheckOptions = {}): Record<string, string> {
  return Object.fromEntries(checkManifest(m, options).errors.map((e) => [e.field, e.message]));
}

function valid(m: unknown, options: CheckOptions = {}) {
  const result = checkManifest(m, options);
  expect(result.errors).toEqual([]);
  return { connector: result.connector!, warnings: result.warnings };
}

const firstEndpoint = (m: unknown) => valid(m).connector.endpoints[0]!;

describe('inline credentials', () => {
  const auth = (a: Json) => manifest({ auth: a });
  it('token_value is refused outside the dev profile, naming the field, with or without token_env', () => {
    expect(errorsOf(auth({ kind: 'bearer', token_value: 'tok-inline' }))).toEqual({ 'spec.auth.token_value': REFUSALS.inlineToken });
    expect(errorsOf(auth({ kind: 'bearer', token_env: 'TOK', token_value: 'tok-inline' }))).toEqual({ 'spec.auth.token_value': REFUSALS.inlineToken });
  });
  it('a literal credential header is refused outside the dev profile; value_env, templates and other headers pass', () => {
    const headers = (h: Json[]) => manifest({ headers: h });
    expect(errorsOf(headers([{ name: 'X-Api-Version', value: '2' }, { name: 'Authorization', value: 'Bearer abc' }]))).toEqual({ 'spec.headers[1].value': REFUSALS.inlineHeaderCredential });
    expect(errorsOf(headers([{ name: 'X-API-Key', value: 'k-1' }]))).toEqual({ 'spec.headers[0].value': REFUSALS.inlineHeaderCredential });
    expect(errorsOf(headers([{ name: 'Authorization', value: 'Bearer {{env:TOKEN}}' }, { name: 'X-Auth-Token', value_env: 'TOKEN' }]))).toEqual({});
    expect(errorsOf(headers([{ name: 'Authorization', value: 'Bearer abc' }]), { inlineCredentials: true })).toEqual({});
  });
  it('a header the HTTP client writes itself (Host, framing, the connection) is refused naming it, whatever its case or value source; Connection: close passes', () => {
    const headers = (h: Json[]) => manifest({ headers: h });
    for (const name of ['Host', 'content-length', 'Transfer-Encoding', 'EXPECT', 'TE', 'Trailer', 'Keep-Alive', 'Upgrade', 'Proxy-Connection', 'Connection']) {
      const errors = errorsOf(headers([{ name: 'X-Api-Version', value: '2' }, { name, value: 'x' }]));
      expect(Object.keys(errors)).toEqual(['spec.headers[1].name']);
      expect(errors['spec.headers[1].name']).toMatch(new RegExp(`^header ${name} is written by the hub's HTTP client \\(.+\\): remove it from spec.headers$`));
      expect(Object.keys(errorsOf(headers([{ name, value_env: 'HDR' }])))).toEqual(['spec.headers[0].name']);
    }
    expect(errorsOf(headers([{ name: 'Host', value: 'admin.internal' }]))).toEqual({ 'spec.headers[0].name': "header Host is written by the hub's HTTP client (the URL names the site): remove it from spec.headers" });
    expect(errorsOf(headers([{ name: 'Connection', value: 'keep-alive' }]))).toEqual({ 'spec.headers[0].name': "header Connection is written by the hub's HTTP client (only Connection: close may be declared): remove it from spec.headers" });
    expect(errorsOf(headers([{ name: 'Connection', value: 'Close' }, { name: 'X-Host', value: 'a' }, { name: 'Content-Type', value: 'application/json' }]))).toEqual({});
  });
  it('a credential stated in an endpoint path\'s query is refused outside the dev profile, naming the parameter; other parameters pass', () => {
    const paths = (...list: string[]) => manifest({ endpoints: list.map((path, i) => endpoint({ id: `e${i}`, path, target: { table: `ext.e${i}`, unique_key: '$.id' } })) });
    const refusal = (i: number, name: string) => [`spec.endpoints[${i}].path`, `spec.endpoints[${i}].path states a credential in its query (${name}=…): ${REFUSALS.inlineQueryCredential}`];
    const stated = ['/a?api_key=k-123', '/a?x=1&apiKey=k', '/a?access_token=t', '/a?key=AIzaSy', '/a?sig=abc%2Fdef', '/a?X-Amz-Signature=ff00', '/a?q=sk_live_abc123', '/a?client_secret=s'];
    expect(errorsOf(paths(...stated))).toEqual(Object.fromEntries([
      refusal(0, 'api_key'), refusal(1, 'apiKey'), refusal(2, 'access_token'), refusal(3, 'key'), refusal(4, 'sig'), refusal(5, 'X-Amz-Signature'), refusal(6, 'q'), refusal(7, 'client_secret'),
    ]));
    // Names holding a credential's word among others, and credential names without a value, state none.
    expect(errorsOf(paths('/a?sort_key=name&page_token=&page_size=10', '/a?token=', '/a?session_length=5&key_prefix=x', '/a?api_key'))).toEqual({});
    expect(errorsOf(paths(...stated), { inlineCredentials: true })).toEqual({});
  });

  it('a well-known key or a JWT written in a request body, GraphQL variables or a SOAP body or session header is refused outside the dev profile, naming the field', () => {
    const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl';
    const post = (body: unknown) => withEndpoint({ method: 'POST', body });
    expect(errorsOf(post('{"key": "sk_live_51HxYzAbc"}'))).toStrictEqual({ 'spec.endpoints[0].body': REFUSALS.inlineBodyCredential });
    expect(errorsOf(post({ auth: { token: jwt } }))).toStrictEqual({ 'spec.endpoints[0].body.auth.token': REFUSALS.inlineBodyCredential });
    expect(errorsOf(post({ keys: ['x', 'AKIAABCDEFGHIJKLMNOP'] }))).toStrictEqual({ 'spec.endpoints[0].body.keys[1]': REFUSALS.inlineBodyCredential });
    const relay = { kind: 'relay', cursor_binding: 'variable', cursor_var: 'after', cursor_path: '$.data.partners.pageInfo.endCursor', has_more_path: '$.data.partners.pageInfo.hasNextPage', response_path: '$.data.partners.edges[*].node' };
    const gql = withEndpoint({ path: undefined, query: gqlQuery, variables: { token: 'ghp_abcdefghijklmnopqrstuvwxyz' }, pagination: relay });
    expect(errorsOf(gql)).toStrictEqual({ 'spec.endpoints[0].variables.token': REFUSALS.inlineBodyCredential });
    const soap = (call: Json) => manifest({ endpoints: [endpoint({ soap: { body: '<List/>', records: 'Row', ...call } })] }, { connector_type: 'soap-generic' });
    expect(errorsOf(soap({ body: `<List><Key>sk_live_51HxYzAbc</Key></List>` }))).toStrictEqual({ 'spec.endpoints[0].soap.body': REFUSALS.inlineSoapCredential });
    expect(errorsOf(soap({ session: { token_env: 'T', header: `<S>{{token}}</S><K>${jwt}</K>` } }))).toStrictEqual({ 'spec.endpoints[0].soap.session.header': REFUSALS.inlineSoapCredential });
    // Templates, plain data and the dev profile pass.
    expect(errorsOf(post({ key: '{{env:STRIPE_KEY}}', plan: 'the basic plan', sort: 'sk_name' }))).toStrictEqual({});
    expect(errorsOf(soap({ session: { token_env: 'T', header: '<S>{{token}}</S>' } }))).toStrictEqual({});
    expect(errorsOf(post({ key: 'sk_live_51HxYzAbc' }), { inlineCredentials: true })).toStrictEqual({});
    expect(errorsOf(soap({ body: `<K>sk_live_51HxYzAbc</K>` }), { inlineCredentials: true })).toStrictEqual({});
  });

  it('a {{env:NAME}} template in a SOAP body, action or session header is refused in every profile (it would be sent as written)', () => {
    const soap = (call: Json) => manifest({ endpoints: [endpoint({ soap: { body: '<List/>', records: 'Row', ...call } })] }, { connector_type: 'soap-generic' });
    for (const options of [{}, { inlineCredentials: true }]) {
      expect(errorsOf(soap({ body: '<List><Key>{{env:TOKEN}}</Key></List>' }), options)).toStrictEqual({ 'spec.endpoints[0].soap.body': REFUSALS.soapTemplate });
      expect(errorsOf(soap({ action: 'urn:list/{{ env:TOKEN }}' }), options)).toStrictEqual({ 'spec.endpoints[0].soap.action': REFUSALS.soapTemplate });
      expect(errorsOf(soap({ session: { token_env: 'T', header: '<S>{{token}}</S><K>{{env:secret:OTHER}}</K>' } }), options)).toStrictEqual({ 'spec.endpoints[0].soap.session.header': REFUSALS.soapTemplate });
    }
    // The SOAP placeholders are no templates.
    expect(errorsOf(soap({ body: '<List><Size>{{page_size}}</Size><From>{{start_row}}</From></List>', session: { token_env: 'T', header: '<S>{{token}}</S>' } }))).toStrictEqual({});
  });

  it('a {{env:NAME}} template in base_url or an endpoint path is refused (it would be sent as written)', () => {
    const withUrl = manifest({ base_url: 'http://src.example/{{env:TENANT_PATH}}' });
    expect(errorsOf(withUrl)).toEqual({ 'spec.base_url': `spec.base_url: ${REFUSALS.urlTemplate}` });
    const withPath = manifest({ endpoints: [{ id: 'p', path: '/items?key={{env:KEY}}', target: { kind: 'hybrid', table: 'ext.p', unique_key: '$.id' } }] });
    expect(errorsOf(withPath)).toEqual({ 'spec.endpoints[0].path': `spec.endpoints[0].path: ${REFUSALS.urlTemplate}` });
  });
  it('{{env:secret:NAME}} is a template as value_env secret:NAME is a name; a credential header may take its value from one', () => {
    const m = manifest({
      headers: [
        { name: 'X-Val', value: '{{env:secret:ETOK}}' },
        { name: 'Authorization', value: 'Bearer {{ env:secret:TOK }}' },
      ],
      endpoints: [endpoint({ method: 'POST', body: { q: '{{env:secret:ETOK}}', '{{env:secret:K}}': 1 } })],
    });
    expect(valid(m).warnings).toEqual([]);
  });
  it('a {{env:…}} whose name is no name (another tenant, a path, a colon, empty, spaces) is refused naming the field, never taken as text', () => {
    const rule = "a name is letters, digits, _, . and - (at most 128, not starting with . or -), or secret:NAME for the tenant's stored secret only (another tenant's secret or a path cannot be named)";
    for (const name of ['secret:../2/X', '2:X', 'secret:2:X', 'secret:', '', 'a b', '../X', 'secret:secret:X']) {
      const m = manifest({ headers: [{ name: 'X-Val', value: `v={{env:${name}}}` }] });
      expect(errorsOf(m)).toEqual({ 'spec.headers[0].value': `spec.headers[0].value holds {{env:${name.trim()}}}, which names no value: ${rule}` });
    }
    const body = manifest({ endpoints: [endpoint({ method: 'POST', body: { filter: { token: ['ok', '{{env:secret:../2/X}}'] } } })] });
    expect(errorsOf(body)).toEqual({ 'spec.endpoints[0].body.filter.token[1]': `spec.endpoints[0].body.filter.token[1] holds {{env:secret:../2/X}}, which names no value: ${rule}` });
    const text = manifest({ endpoints: [endpoint({ method: 'POST', body: 'since={{env:2:X}}' })] });
    expect(Object.keys(errorsOf(text))).toEqual(['spec.endpoints[0].body']);
    const key = manifest({ endpoints: [endpoint({ method: 'POST', body: { '{{env:2:X}}': 1 } })] });
    expect(Object.keys(errorsOf(key))).toEqual(['spec.endpoints[0].body.{{env:2:X}}']);
    const variables = withEndpoint({ path: undefined, query: gqlQuery, variables: { t: '{{env:2:X}}' }, pagination: { kind: 'relay', cursor_binding: 'variable', cursor_var: 'after', cursor_path: '$.data.partners.pageInfo.endCursor', has_more_path: '$.data.partners.pageInfo.hasNextPage', response_path: '$.data.partners.edges[*].node' } });
    expect(Object.keys(errorsOf(variables))).toEqual(['spec.endpoints[0].variables.t']);
    // A template that looks like a credential is not quoted back.
    const credential = manifest({ headers: [{ name: 'X-Val', value: '{{env:sk_live_abc/def}}' }] });
    expect(errorsOf(credential)['spec.headers[0].value']).toBe(`spec.headers[0].value holds a {{env:…}} template, which names no value: ${rule}`);
    // In a URL every template is refused as before, whatever its name.
    expect(errorsOf(manifest({ base_url: 'http://src.example/{{env:secret:P}}' }))).toEqual({ 'spec.base_url': `spec.base_url: ${REFUSALS.urlTemplate}` });
  });
  it('base_url carrying credentials (user:password@) is refused in every profile, the URL not quoted back', () => {
    for (const base_url of ['http://user:sk_live_abc@src.example', 'https://user@src.example/v1', 'http://:pw@src.example', 'http://@src.example']) {
      for (const options of [{}, { inlineCredentials: true }]) {
        const result = checkManifest(manifest({ base_url }), options);
        expect(result.errors).toEqual([{ field: 'spec.base_url', message: REFUSALS.urlCredentials }]);
        expect(JSON.stringify(result)).not.toContain('sk_live_abc');
      }
    }
    // An @ in the path, the query or the fragment is no userinfo.
    for (const base_url of ['http://src.example/a@b', 'http://src.example\\a@b']) expect(errorsOf(manifest({ base_url }))).toEqual({});
  });
  it('base_url carrying a query string or a fragment is refused (the path would be appended after it), the URL not quoted back; a path may carry a query, not a fragment', () => {
    for (const base_url of ['http://src.example/?api_key=X', 'http://src.example/v1?', 'http://src.example?api_key=X']) {
      const result = checkManifest(manifest({ base_url }));
      expect(result.errors).toEqual([{ field: 'spec.base_url', message: REFUSALS.baseQuery }]);
      expect(JSON.stringify(result)).not.toContain('api_key=X');
    }
    for (const base_url of ['http://src.example/#top', 'http://src.example/v1#']) expect(errorsOf(manifest({ base_url }))).toEqual({ 'spec.base_url': REFUSALS.baseFragment });
    expect(errorsOf(withEndpoint({ path: '/ui?view=Y' }))).toEqual({});
    expect(errorsOf(withEndpoint({ path: '/ui?view=Y#x' }))).toEqual({ 'spec.endpoints[0].path': 'spec.endpoints[0].path must not carry a fragment (#…): it is never sent; an # meant for the source is written %23' });
  });
  it('a credential is known by its header name or by an authentication scheme in its value, whatever the name', () => {
    const headers = (h: Json[]) => manifest({ headers: h });
    const refused = [
      { name: 'Authorization2', value: 'abc123' },
      { name: 'X-Custom', value: 'Bearer abc123' },
      { name: 'X-Other', value: 'basic dXNlcjpwYXNz' },
      { name: 'Ocp-Apim-Subscription-Key', value: 'abc123' },
      { name: 'X-Key', value: 'abc123' },
      { name: 'X-Request-Signature', value: 'abc123' },
      { name: 'X-Auth', value: 'abc123' },
      { name: 'Cookie2', value: 'sid=abc' },
      // A template beside a literal credential: the literal is still written into the manifest.
      { name: 'Authorization', value: 'Bearer sk_live_abc{{env:ALLOWED_TOKEN}}' },
      { name: 'X-Api-Key', value: '{{env:PREFIX}}abc123' },
      // Names that say so, and values that are credentials by their form whatever the name.
      { name: 'X-Passphrase', value: 'hunter2hunter2' },
      { name: 'X-JWT', value: 'abc.def.ghi' },
      { name: 'X-Id', value: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl' },
      { name: 'X-Stripe', value: 'sk_live_51HxYz' },
      { name: 'X-GitHub', value: 'ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345' },
      { name: 'X-Aws', value: 'AKIAIOSFODNN7EXAMPLE' },
      // A template before the literal: what is left is still a credential.
      { name: 'X-Custom', value: '{{env:T}}sk_live_abc' },
      { name: 'X-Custom', value: '{{env:T}} Bearer abc' },
      { name: 'X-Custom', value: '{{env:T}} eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijk' },
      // A key anywhere in the value.
      { name: 'X-Custom', value: 'prefix eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijk' },
      { name: 'X-Custom', value: 'v=1;key=AKIAIOSFODNN7EXAMPLE' },
      { name: 'X-Goog', value: 'AIzaSyA1234567890abcdefghijklmnopqrstuv' },
      { name: 'X-OpenAI', value: 'sk-proj-abcdefghijklmnopqrstuvwxyz012345' },
      // A scheme further in, before what has a credential's form.
      { name: 'X-Custom', value: 'x Bearer 9f86d081884c7d659a2feaa0' },
      { name: 'X-Custom', value: 'v1, Basic dXNlcjpwYXNzd29yZDEyMzQ=' },
    ];
    expect(errorsOf(headers(refused))).toEqual(Object.fromEntries(refused.map((_, i) => [`spec.headers[${i}].value`, REFUSALS.inlineHeaderCredential])));
    const plain = [
      { name: 'X-Api-Version', value: '2' },
      { name: 'X-Author', value: 'Ann' },
      { name: 'Accept-Language', value: 'fr' },
      { name: 'X-Keyword', value: 'bearer' },
      { name: 'X-Custom', value: 'Bearer {{env:TOKEN}}' },
      { name: 'X-Key', value_env: 'secret:KEY' },
      // A scheme and parameter names around templates state no credential.
      { name: 'Authorization', value: 'Token token="{{env:TOKEN}}"' },
      { name: 'X-Auth', value: '{{ env:USER }}:{{env:PASS}}' },
      { name: 'Authorization', value: 'Digest username="{{env:U}}", response="{{env:R}}"' },
      { name: 'X-Compass', value: 'north' },
      { name: 'X-Sku', value: 'task-runner-sk-12' },
      { name: 'X-Region', value: '{{env:REGION}}-west' },
      // Prose with a scheme's word in it.
      { name: 'X-Plan', value: 'the basic plan for 2024' },
      { name: 'X-Note', value: 'see token rotation2024 guidelines' },
      { name: 'X-Custom', value: 'x Bearer {{env:T}}' },
    ];
    expect(errorsOf(headers(plain))).toEqual({});
  });
});

describe('the JSON Schema', () => {
  it('is plain JSON that compiles under ajv strict mode (2020-12), with no $id or $ref', () => {
    const text = JSON.stringify(connectorManifestSchema);
    expect(JSON.parse(text)).toEqual(connectorManifestSchema);
    expect(text).not.toMatch(/"\$(id|ref|defs)"/);
    const ajv = new Ajv2020({ strict: true, allowUnionTypes: true });
    expect(() => ajv.compile(JSON.parse(text))).not.toThrow();
  });

  it('lists the promote types, the transforms and every pagination kind and preset', () => {
    const endpoints = (connectorManifestSchema.properties as Json).spec as { properties: { endpoints: { items: { properties: Json } } } };
    const props = endpoints.properties.endpoints.items.properties as Record<string, { properties: Json }>;
    const promote = (props.target!.properties.promote as { items: { properties: Record<string, { enum: string[] }> } }).items.properties;
    expect(promote.type!.enum).toEqual([...PROMOTE_TYPES]);
    expect(promote.transform!.enum).toEqual([...TRANSFORMS]);
    expect((props.pagination!.properties.kind as { enum: string[] }).enum).toEqual(['none', 'page', 'offset', 'cursor', 'link-header', 'body-link', 'relay', 'custom', 'soap', ...PRESET_NAMES]);
  });
});

describe('a minimal manifest', () => {
  it('normalises with every default filled', () => {
    const { connector, warnings } = valid(manifest());
    expect(warnings).toEqual([]);
    expect(connector).toEqual({
      name: 'demo',
      connectorType: 'rest-generic',
      scopes: ['crm'],
      baseUrl: 'http://localhost:8099',
      auth: { kind: 'none' },
      rateLimit: { count: 100, windowMs: 1000 },
      graphqlPath: '/graphql',
      headers: [],
      endpoints: [
        {
          id: 'partners',
          enabled: true,
          method: 'GET',
          path: '/open/partners',
          graphql: false,
          pagination: { kind: 'none', response_path: '$' },
          incremental: { mode: 'full' },
          target: { kind: 'hybrid', table: 'ext.partners', unique_key: '$.id', promote: [] },
        },
      ],
    });
  });

  it('may have no endpoints yet, and no scopes', () => {
    const m = manifest({ endpoints: undefined });
    delete (m.spec as Json).endpoints;
    delete m.scopes;
    expect(valid(m).connector).toMatchObject({ endpoints: [], scopes: [] });
  });
});

describe('the envelope', () => {
  it('refuses anything but an object', () => {
    for (const m of [null, 'text', [manifest()], 42]) {
      expect(checkManifest(m).errors).toEqual([{ field: '', message: 'a manifest must be an object (apiVersion, kind, metadata, connector_type, scopes, spec)' }]);
    }
  });

  it('checks apiVersion, kind, connector_type and the required keys', () => {
    expect(errorsOf(manifest({}, { apiVersion: 'connectors.svc.io/v2' }))).toEqual({ apiVersion: 'apiVersion must be connectors.svc.io/v1' });
    expect(errorsOf(manifest({}, { kind: 'Export' }))).toEqual({ kind: 'kind must be Connector' });
    expect(errorsOf(manifest({}, { connector_type: 'soap' }))).toEqual({ connector_type: 'connector_type must be one of rest-generic, soap-generic; got "soap"' });
    const bare = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector' };
    expect(errorsOf(bare)).toEqual({
      metadata: 'metadata is required',
      connector_type: 'connector_type is required',
      spec: 'spec is required',
    });
    expect(errorsOf(manifest({}, { metadata: {} }))).toEqual({ 'metadata.name': 'metadata.name is required' });
  });

  it('metadata.name is a DNS label; other metadata keys are accepted', () => {
    const text = 'must be a DNS label: 1 to 63 lower-case letters, digits or dashes, starting and ending with a letter or digit';
    for (const name of ['Demo', '-demo', 'demo-', 'de_mo', 'a.b', '', 'x'.repeat(64)]) {
      expect(errorsOf(manifest({}, { metadata: { name } }))).toEqual({ 'metadata.name': `metadata.name ${text}` });
    }
    for (const name of ['a', '1', 'crm-2', 'x'.repeat(63)]) expect(errorsOf(manifest({}, { metadata: { name } }))).toEqual({});
    expect(valid(manifest({}, { metadata: { name: 'demo', namespace: 'ns', labels: { 'svc.io/tenant': 'default' } } })).connector.name).toBe('demo');
  });

  it('refuses unknown top-level keys but ignores a Kubernetes status', () => {
    expect(errorsOf(manifest({}, { scope: ['x'] }))).toEqual({ scope: 'scope is not a known field' });
    expect(errorsOf(manifest({}, { status: { conditions: [] } }))).toEqual({});
  });

  it('scopes: strings without whitespace, duplicates collapse', () => {
    expect(valid(manifest({}, { scopes: ['crm', 'sales', 'crm'] })).connector.scopes).toEqual(['crm', 'sales']);
    expect(errorsOf(manifest({}, { scopes: ['crm', 'two words'] }))).toEqual({
      'scopes[1]': 'scopes[1] must be a non-blank scope tag without whitespace (at most 100 characters)',
    });
    expect(errorsOf(manifest({}, { scopes: 'crm' }))).toEqual({ scopes: 'scopes must be an array' });
  });
});

describe('base_url and the outbound address policy', () => {
  const denying = new EgressPolicy({ denyPrivate: true, allow: ['api.internal'] });
  const reason = (host: string, label: string) => `${host} is ${label}: refused by the outbound address policy (svc.egress.deny-private); runs will fail until svc.egress.allow admits it`;

  it('a host the policy refuses without resolving a name is a warning naming spec.base_url, not an error', () => {
    expect(valid(manifest({ base_url: 'http://127.0.0.1:8080/api' }), { egress: denying }).warnings).toEqual([{ field: 'spec.base_url', message: reason('127.0.0.1', 'a loopback address') }]);
    expect(valid(manifest({ base_url: 'http://[fd00:ec2::254]' }), { egress: denying }).warnings).toEqual([{ field: 'spec.base_url', message: reason('fd00:ec2::254', 'a unique-local address') }]);
    expect(valid(manifest(), { egress: denying }).warnings).toEqual([{ field: 'spec.base_url', message: reason('localhost', 'a loopback name') }]);
  });

  it('none for a name (checked when connecting), an allow-listed name, a public address, or with the policy off or absent', () => {
    for (const base_url of ['https://api.example.com', 'http://api.internal:8080', 'https://93.184.216.34']) {
      expect(valid(manifest({ base_url }), { egress: denying }).warnings).toEqual([]);
    }
    expect(valid(manifest({ base_url: 'http://127.0.0.1' }), { egress: EgressPolicy.open() }).warnings).toEqual([]);
    expect(valid(manifest({ base_url: 'http://127.0.0.1' })).warnings).toEqual([]);
  });
});

describe('the spec level', () => {
  it('an unknown key is a warning and the manifest still applies', () => {
    const { connector, warnings } = valid(manifest({ retries: 3, timeout: '5s' }));
    expect(warnings).toEqual([
      { field: 'spec.retries', message: 'unknown key — ignored by the runtime' },
      { field: 'spec.timeout', message: 'unknown key — ignored by the runtime' },
    ]);
    expect(connector).not.toHaveProperty('retries');
    expect(REFUSALS.unknownSpecKey).toBe('unknown key — ignored by the runtime');
  });

  it('base_url is required and an http(s) URL', () => {
    const m = manifest();
    delete (m.spec as Json).base_url;
    expect(errorsOf(m)).toEqual({ 'spec.base_url': 'spec.base_url is required' });
    for (const url of ['localhost:8099', 'ftp://x', 'http://', 'http://a b']) {
      expect(errorsOf(manifest({ base_url: url }))).toEqual({ 'spec.base_url': 'spec.base_url must be an absolute http or https URL' });
    }
    expect(valid(manifest({ base_url: 'https://api.example.com/v2' })).connector.baseUrl).toBe('https://api.example.com/v2');
    // The pattern's shape, but no request could be sent there: read as a request reads it.
    for (const url of ['http://127.0.0.1%2509:18111', 'http://[fe80::1%25lo]:18111', 'http://h:99999', 'http://a%00b/']) {
      expect(errorsOf(manifest({ base_url: url }))).toEqual({ 'spec.base_url': `spec.base_url must be an absolute http or https URL: ${JSON.stringify(url)} cannot be read as one` });
    }
  });

  it('default_rate_limit is count/window, default 100/s', () => {
    const cases: Array<[string, { count: number; windowMs: number }]> = [
      ['100/s', { count: 100, windowMs: 1000 }],
      ['100/5m', { count: 100, windowMs: 300_000 }],
      ['1000/h', { count: 1000, windowMs: 3_600_000 }],
      ['5/10s', { count: 5, windowMs: 10_000 }],
      ['1/m', { count: 1, windowMs: 60_000 }],
    ];
    for (const [text, limit] of cases) {
      expect(parseRateLimit(text)).toEqual(limit);
      expect(valid(manifest({ default_rate_limit: text })).connector.rateLimit).toEqual(limit);
    }
    for (const text of ['100', '100/d', '0/s', '100/0s', '/s', '10 /s', '100/ms', '-1/s']) {
      expect(errorsOf(manifest({ default_rate_limit: text }))).toEqual({
        'spec.default_rate_limit': 'spec.default_rate_limit must be count/window: a count, a slash, an optional integer and a unit s, m or h (100/s, 100/5m, 1000/h)',
      });
    }
  });

  it('schedule is a 5-field cron (UTC)', () => {
    expect(valid(manifest({ schedule: '*/15 * * * *' })).connector.schedule).toBe('*/15 * * * *');
    expect(valid(manifest({ schedule: '0 2 * * MON-FRI' })).connector.schedule).toBe('0 2 * * MON-FRI');
    expect(valid(manifest()).connector).not.toHaveProperty('schedule');
    const refused: Array<[string, string]> = [
      ['0 */5 * * * *', 'got 6 fields'],
      ['@daily', 'got 1 field'],
      ['61 * * * *', 'the minute field 61: 61 is out of range: the field takes 0-59'],
      ['0 0 * * 8', 'the day-of-week field 8: 8 is out of range: the field takes 0-6 or SUN-SAT, Sunday first'],
      ['0 0 * * MON-SUN', 'the day-of-week field MON-SUN: a range ends before it starts (the field takes 0-6 or SUN-SAT, Sunday first, a range from low to high)'],
      ['*/0 * * * *', 'the minute field */0: a step of 0 repeats nothing'],
      ['0 0 * JANX *', 'the month field JANX: the field takes 1-12 or JAN-DEC, * and the separators , - /'],
      ['0 0 31 2 *', 'day of month 31 never comes in month 2, so it would never run'],
      ['H * * * *', 'hashed fields (H) are not supported'],
      ['a b c d e', 'the minute field a: the field takes 0-59, * and the separators , - /'],
      ['0 2 L * *', 'L (last) and # (nth weekday) are not supported: a Kubernetes CronJob cannot express them'],
      ['0 2 * * 5L', 'L (last) and # (nth weekday) are not supported: a Kubernetes CronJob cannot express them'],
      ['0 2 * * 1#2', 'L (last) and # (nth weekday) are not supported: a Kubernetes CronJob cannot express them'],
      ['0 0 1 1/99999999999999999999 *', 'the month field 1/99999999999999999999: 99999999999999999999 is out of range: a Kubernetes CronJob reads numbers up to 9223372036854775807'],
      ...['0 0 */1 * 1', '0 0 ?/1 * MON', '0 0 */01 * 1-5'].map(
        (cron) =>
          [
            cron,
            `the day-of-month field ${cron.split(' ')[2]} with a day-of-week field given runs on other days in a Kubernetes CronJob (which reads it as *): write * to run on the day-of-week field's days only, or name the days`,
          ] as [string, string],
      ),
      ['0 0 1 * */1', "the day-of-week field */1 with a day-of-month field given runs on other days in a Kubernetes CronJob (which reads it as *): write * to run on the day-of-month field's days only, or name the days"],
      ...['0 0 * * 7', '0 0 * * 5-7', '0 0 * * 0-7', '0 0 * * 1-7/2', '0 0 * * 1,7', '0 0 * * 7-7'].map(
        (cron) => [cron, 'day of week 7 is not supported: write Sunday as 0 (a Kubernetes CronJob reads days of week 0-6)'] as [string, string],
      ),
    ];
    for (const cron of ['0 2 1 JUL *', '0 0 * * 0', '0 0 * * SUN', '0 0 * * */7', '0 0 * * 5-6,0', '0 7 7 7 1-6', '7 7 * * 0/2', '0 0 */1 * *', '0 0 */1 * */1', '0 0 */2 * 1', '*/1 */1 * */1 *']) {
      expect(cronProblem(cron)).toBeUndefined();
    }
    for (const [cron, problem] of refused) {
      expect(cronProblem(cron)).toBe(problem);
      expect(errorsOf(manifest({ schedule: cron }))).toEqual({
        'spec.schedule': `spec.schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, UTC): ${problem}`,
      });
    }
    expect(errorsOf(manifest({ schedule: '' }))).toEqual({ 'spec.schedule': 'spec.schedule must not be empty' });
  });

  it('every schedule accepted at apply is one a Kubernetes CronJob accepts (robfig/cron ParseStandard, as the stand-in parses it)', () => {
    const atoms = ['*', '?', '0', '1', '5', '6', '7', '8', '12', '23', '24', '31', '32', '59', '60', '1-5', '5-7', '0-7', '2-1', '*/7', '*/0', '1-7/2', '0/15', 'mon', 'SUN', 'mon-fri', 'jan', 'jan-mar', '1,2', '15W', 'LW', '5L', '1#2', '-1', '1/99999999999999999999'];
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...atoms), { minLength: 5, maxLength: 5 }), (fields) => {
        const cron = fields.join(' ');
        if (cronProblem(cron) !== undefined) return;
        expect(() => parseStandardCron(cron)).not.toThrow();
      }),
      { numRuns: 20_000, seed: 20261203 },
    );
  });

  it('window is HH:MM-HH:MM, may cross midnight, and warns without a schedule', () => {
    expect(valid(manifest({ schedule: '0 * * * *', window: '22:00-04:30' }))).toEqual({
      connector: expect.objectContaining({ window: { start: 1320, end: 270 } }),
      warnings: [],
    });
    expect(valid(manifest({ window: '09:00-17:00' })).warnings).toEqual([
      { field: 'spec.window', message: 'the window fences scheduled runs only, and this connector has no schedule' },
    ]);
    for (const w of ['9:00-17:00', '24:00-01:00', '09:00 - 17:00', '09:00']) {
      expect(errorsOf(manifest({ window: w }))).toEqual({ 'spec.window': 'spec.window must be HH:MM-HH:MM (UTC, 24-hour)' });
    }
    expect(errorsOf(manifest({ schedule: '0 * * * *', window: '10:00-10:00' }))).toEqual({ 'spec.window': 'spec.window must end at another time than it starts' });
  });

  it('warns when no slot of the schedule falls in the window: its minute and hour fields name no time of day the window holds', () => {
    const never = (window: string) => [
      { field: 'spec.window', message: `no slot of spec.schedule falls in the window ${window} (UTC): every scheduled run would be skipped; widen the window or change the schedule` },
    ];
    expect(valid(manifest({ schedule: '0 12 * * *', window: '00:00-06:00' })).warnings).toEqual(never('00:00-06:00'));
    // The end is exclusive; a window crossing midnight wraps; the day fields do not move a slot's time of day.
    expect(valid(manifest({ schedule: '0 6 * * *', window: '00:00-06:00' })).warnings).toEqual(never('00:00-06:00'));
    expect(valid(manifest({ schedule: '30 12 * * 1-5', window: '22:00-04:30' })).warnings).toEqual(never('22:00-04:30'));
    expect(valid(manifest({ schedule: '59 5 * * *', window: '00:00-06:00' })).warnings).toEqual([]);
    expect(valid(manifest({ schedule: '15 3 1 1 *', window: '22:00-04:30' })).warnings).toEqual([]);
    expect(valid(manifest({ schedule: '*/20 * * * *', window: '10:05-10:15' })).warnings).toEqual(never('10:05-10:15'));
    expect(valid(manifest({ schedule: '*/20 * * * *', window: '10:05-10:25' })).warnings).toEqual([]);
  });

  it('graphql_path defaults to /graphql', () => {
    expect(valid(manifest({ graphql_path: '/api/gql' })).connector.graphqlPath).toBe('/api/gql');
    expect(errorsOf(manifest({ graphql_path: 'graphql' }))).toEqual({ 'spec.graphql_path': 'spec.graphql_path must start with /' });
  });

  it('headers: exactly one of value and value_env', () => {
    const headers = [
      { name: 'X-Api-Version', value: '2' },
      { name: 'X-Trace', value_env: 'TRACE_TOKEN' },
    ];
    expect(valid(manifest({ headers })).connector.headers).toEqual(headers);
    expect(errorsOf(manifest({ headers: [headers[0], { name: 'X-Both', value: 'a', value_env: 'B' }, { name: 'X-None' }] }))).toEqual({
      'spec.headers[1]': 'exactly one of value and value_env',
      'spec.headers[2]': 'exactly one of value and value_env',
    });
    expect(errorsOf(manifest({ headers: [{ name: 'Bad Name', value: 'x' }] }))).toEqual({ 'spec.headers[0].name': 'spec.headers[0].name must be an HTTP header name' });
    expect(errorsOf(manifest({ headers: [{ value: 'x' }] }))).toEqual({ 'spec.headers[0].name': 'spec.headers[0].name is required' });
    // A value no HTTP client can send (a line break, a character beyond Latin-1) is refused at apply, not at the first request.
    const unsendable = 'spec.headers[0].value must be sendable as an HTTP header value: tabs, printable ASCII and Latin-1 letters only (no line breaks)';
    for (const value of ['v\r\nX-Evil: 1', 'v\n', 'v\u2603', 'v\u0085\u2028']) expect(errorsOf(manifest({ headers: [{ name: 'X-A', value }] }))).toEqual({ 'spec.headers[0].value': unsendable });
    expect(valid(manifest({ headers: [{ name: 'X-A', value: 'café\tau lait ~' }] })).connector.headers).toEqual([{ name: 'X-A', value: 'café\tau lait ~' }]);
  });

  it('defaults are stored verbatim, unvalidated', () => {
    const defaults = { anything: [1, { nested: true }], 'odd key': null };
    expect(valid(manifest({ defaults })).connector.defaults).toEqual(defaults);
    expect(valid(manifest({ defaults: 'a string' })).connector.defaults).toBe('a string');
  });

  it('reports every structural error at once', () => {
    const m = manifest({ base_url: 'nope', default_rate_limit: 'fast', endpoints: [endpoint({ id: 'Bad_Id', method: 'FETCH' })] }, { apiVersion: 'v1' });
    expect(Object.keys(errorsOf(m))).toEqual(['apiVersion', 'spec.base_url', 'spec.default_rate_limit', 'spec.endpoints[0].id', 'spec.endpoints[0].method']);
  });
});

describe('authentication', () => {
  const auth = (a: Json) => manifest({ auth: a });

  it('defaults to none; none takes no fields', () => {
    expect(valid(manifest()).connector.auth).toEqual({ kind: 'none' });
    expect(valid(auth({ kind: 'none' })).connector.auth).toEqual({ kind: 'none' });
    expect(errorsOf(auth({ kind: 'none', username: 'x' }))).toEqual({ 'spec.auth.username': 'spec.auth.username is not a field of auth kind none' });
    expect(errorsOf(auth({}))).toEqual({ 'spec.auth.kind': 'spec.auth.kind is required' });
    expect(errorsOf(auth({ kind: 'oauth2' }))).toEqual({ 'spec.auth.kind': 'spec.auth.kind must be one of none, bearer, basic, api-key; got "oauth2"' });
  });

  it('bearer: token_env, or token_value in the dev profile (ignored beside token_env)', () => {
    const dev = { inlineCredentials: true };
    expect(valid(auth({ kind: 'bearer', token_env: 'DEMO_BEARER_TOKEN' }))).toEqual({
      connector: expect.objectContaining({ auth: { kind: 'bearer', token_env: 'DEMO_BEARER_TOKEN' } }),
      warnings: [],
    });
    expect(valid(auth({ kind: 'bearer', token_env: 'secret:demo-token', token_value: 'x' }), dev)).toEqual({
      connector: expect.objectContaining({ auth: { kind: 'bearer', token_env: 'secret:demo-token', token_value: 'x' } }),
      warnings: [{ field: 'spec.auth.token_value', message: 'ignored: token_env is set' }],
    });
    expect(valid(auth({ kind: 'bearer', token_value: 'dev' }), dev).warnings).toEqual([
      { field: 'spec.auth.token_value', message: 'token_value is for development only; name a secret in token_env instead' },
    ]);
    expect(errorsOf(auth({ kind: 'bearer' }))).toEqual({ 'spec.auth.token_env': 'spec.auth.token_env is required for auth kind bearer (or token_value, for development only)' });
    expect(errorsOf(auth({ kind: 'bearer', token_env: 'not a name' }))).toEqual({
      'spec.auth.token_env': 'spec.auth.token_env must be a name (letters, digits, _, ., -; optionally secret:NAME), never the credential itself',
    });
  });

  it('basic: username and password_env; an inline password is refused', () => {
    expect(valid(auth({ kind: 'basic', username: 'demo', password_env: 'DEMO_PASSWORD' })).connector.auth).toEqual({ kind: 'basic', username: 'demo', password_env: 'DEMO_PASSWORD' });
    expect(errorsOf(auth({ kind: 'basic', username: 'demo', password: 'demo-password' }))).toEqual({
      'spec.auth.password': 'basic auth takes no inline password; set password_env to the name of a stored secret or environment variable',
    });
    expect(errorsOf(auth({ kind: 'basic', username: 'demo' }))).toEqual({ 'spec.auth.password_env': 'spec.auth.password_env is required for auth kind basic' });
    expect(errorsOf(auth({ kind: 'basic', username: 'demo', password_env: 'P', token_env: 'T' }))).toEqual({ 'spec.auth.token_env': 'spec.auth.token_env is not a field of auth kind basic' });
  });

  it('api-key: in, name, value_env', () => {
    expect(valid(auth({ kind: 'api-key', in: 'header', name: 'X-API-Key', value_env: 'DEMO_API_KEY' })).connector.auth).toEqual({
      kind: 'api-key', in: 'header', name: 'X-API-Key', value_env: 'DEMO_API_KEY',
    });
    expect(errorsOf(auth({ kind: 'api-key', in: 'cookie', name: 'k', value_env: 'K' }))).toEqual({ 'spec.auth.in': 'spec.auth.in must be one of header, query; got "cookie"' });
    expect(errorsOf(auth({ kind: 'api-key', name: 'k' }))).toEqual({
      'spec.auth.in': 'spec.auth.in is required for auth kind api-key',
      'spec.auth.value_env': 'spec.auth.value_env is required for auth kind api-key',
    });
  });
});

describe('endpoints', () => {
  it('ids are kebab-case and unique', () => {
    for (const id of ['Partners', 'partners_all', '-x', 'x-', 'a--b', '']) {
      expect(errorsOf(withEndpoint({ id }))).toEqual({ 'spec.endpoints[0].id': 'spec.endpoints[0].id must be kebab-case: lower-case letters and digits, words joined by single dashes' });
    }
    expect(errorsOf(manifest({ endpoints: [endpoint(), endpoint({ id: 'other' }), endpoint()] }))).toEqual({
      'spec.endpoints[2].id': 'duplicate endpoint id "partners": spec.endpoints[0] has it too',
    });
    expect(errorsOf(manifest({ endpoints: [{ path: '/x', target: { table: 'ext.x', unique_key: '$.id' } }] }))).toEqual({ 'spec.endpoints[0].id': 'spec.endpoints[0].id is required' });
  });

  it('enabled defaults to true; method to GET; path is required for REST', () => {
    expect(firstEndpoint(withEndpoint({ enabled: false })).enabled).toBe(false);
    expect(firstEndpoint(withEndpoint({ method: 'DELETE' })).method).toBe('DELETE');
    expect(errorsOf(withEndpoint({ method: 'get' }))).toEqual({ 'spec.endpoints[0].method': 'spec.endpoints[0].method must be one of GET, POST, PUT, PATCH, DELETE; got "get"' });
    expect(errorsOf(withEndpoint({ path: undefined }))).toEqual({ 'spec.endpoints[0].path': 'spec.endpoints[0].path is required' });
    expect(firstEndpoint(withEndpoint({ path: '/partners?limit=100' })).path).toBe('/partners?limit=100');
  });

  it('per-endpoint headers are refused with the spec text', () => {
    const result = checkManifest(manifest({ endpoints: [endpoint(), endpoint({ id: 'two', headers: [{ name: 'X-Api-Version', value: '2' }] })] }));
    expect(result.errors).toEqual([{ field: 'spec.endpoints[1].headers', message: 'per-endpoint headers are not supported in this release; declare headers at spec.headers' }]);
  });

  it('a body template goes with POST, PUT or PATCH only and is kept as given', () => {
    expect(firstEndpoint(withEndpoint({ method: 'POST', body: { filter: '{{env:REGION}}' } })).body).toEqual({ filter: '{{env:REGION}}' });
    expect(firstEndpoint(withEndpoint({ method: 'PUT', body: 'raw {{env:X}}' })).body).toBe('raw {{env:X}}');
    expect(errorsOf(withEndpoint({ body: { a: 1 } }))).toEqual({ 'spec.endpoints[0].body': 'spec.endpoints[0].body is sent only with POST, PUT or PATCH (method is GET)' });
  });

  it('unknown endpoint keys are errors; total_path belongs inside pagination', () => {
    expect(errorsOf(withEndpoint({ incremantal: { mode: 'full' } }))).toEqual({ 'spec.endpoints[0].incremantal': 'spec.endpoints[0].incremantal is not a known field' });
    expect(errorsOf(withEndpoint({ total_path: '$.total' }))).toEqual({
      'spec.endpoints[0].total_path': 'spec.endpoints[0].total_path belongs inside pagination (spec.endpoints[0].pagination.total_path)',
    });
  });

  it('incremental: full by default, watermark with param and watermark_path, api_cursor runs as full', () => {
    expect(firstEndpoint(withEndpoint({})).incremental).toEqual({ mode: 'full' });
    expect(firstEndpoint(withEndpoint({ incremental: { mode: 'watermark', param: 'updated_since', watermark_path: '$.updated_at' } })).incremental).toEqual({
      mode: 'watermark', param: 'updated_since', watermark_path: '$.updated_at',
    });
    expect(errorsOf(withEndpoint({ incremental: { mode: 'watermark', param: 'since' } }))).toEqual({
      'spec.endpoints[0].incremental.watermark_path': 'spec.endpoints[0].incremental.watermark_path is required for mode watermark',
    });
    expect(errorsOf(withEndpoint({ incremental: { mode: 'full', param: 'since' } }))).toEqual({
      'spec.endpoints[0].incremental.param': 'spec.endpoints[0].incremental.param is only for mode watermark',
    });
    const api = valid(withEndpoint({ incremental: { mode: 'api_cursor' } }));
    expect(api.connector.endpoints[0]!.incremental).toEqual({ mode: 'api_cursor' });
    expect(api.warnings).toEqual([{ field: 'spec.endpoints[0].incremental.mode', message: 'api_cursor is not implemented; the endpoint runs as mode full' }]);
  });
});

describe('target', () => {
  const target = (t: Json) => withEndpoint({ target: { table: 'ext.partners', unique_key: '$.id', ...t } });

  it('keeps promote entries in order; kind is hybrid', () => {
    const promote = [
      { name: 'name', path: '$.name', type: 'text' },
      { name: 'credit_limit', path: '$.credit_limit', type: 'numeric' },
      { name: 'updated_at', path: '$.updated_at', type: 'timestamptz', transform: 'parse_iso8601' },
    ];
    expect(firstEndpoint(target({ kind: 'hybrid', promote })).target).toEqual({ kind: 'hybrid', table: 'ext.partners', unique_key: '$.id', promote });
    expect(errorsOf(target({ kind: 'relational' }))).toEqual({ 'spec.endpoints[0].target.kind': 'spec.endpoints[0].target.kind must be hybrid' });
  });

  it('table must be ext.<safe identifier>', () => {
    const text = 'must be ext.<name>, <name> a lower-case identifier (letters, digits, underscores; not starting with a digit; at most 63)';
    for (const table of ['partners', 'public.partners', 'ext.Partners', 'ext.1x', 'ext.a-b', 'ext."x"', `ext.${'a'.repeat(64)}`, 'ext.a;drop']) {
      expect(errorsOf(target({ table }))).toEqual({ 'spec.endpoints[0].target.table': `spec.endpoints[0].target.table ${text}` });
    }
    expect(firstEndpoint(target({ table: 'ext._raw_2' })).target.table).toBe('ext._raw_2');
  });

  it('unique_key is a required JSONPath', () => {
    expect(errorsOf(withEndpoint({ target: { table: 'ext.x' } }))).toEqual({ 'spec.endpoints[0].target.unique_key': 'spec.endpoints[0].target.unique_key is required' });
    expect(errorsOf(target({ unique_key: 'id' }))).toEqual({ 'spec.endpoints[0].target.unique_key': 'spec.endpoints[0].target.unique_key must be a JSONPath starting with $' });
    expect(errorsOf(withEndpoint({ target: undefined }))).toEqual({ 'spec.endpoints[0].target': 'spec.endpoints[0].target is required' });
  });

  it('an unknown transform is refused naming the field', () => {
    const promote = [{ name: 'a', path: '$.a', type: 'text' }, { name: 'b', path: '$.b', type: 'text', transform: 'parse_date' }];
    expect(checkManifest(target({ promote })).errors).toEqual([
      {
        field: 'spec.endpoints[0].target.promote[1].transform',
        message: 'unknown transform "parse_date" at spec.endpoints[0].target.promote[1].transform; one of parse_iso8601, trim, lowercase, uppercase, to_string',
      },
    ]);
    for (const transform of TRANSFORMS) expect(errorsOf(target({ promote: [{ name: 'a', path: '$.a', type: 'text', transform }] }))).toEqual({});
  });

  it('promote types come from PROMOTE_TYPES', () => {
    for (const type of PROMOTE_TYPES) expect(errorsOf(target({ promote: [{ name: 'a', path: '$.a', type }] }))).toEqual({});
    expect(errorsOf(target({ promote: [{ name: 'a', path: '$.a', type: 'jsonb' }] }))).toEqual({
      'spec.endpoints[0].target.promote[0].type': 'spec.endpoints[0].target.promote[0].type must be one of text, bigint, timestamptz, numeric, boolean; got "jsonb"',
    });
  });

  it('promote names are usable, unreserved and unique column names', () => {
    expect(errorsOf(target({ promote: [{ name: 'Name', path: '$.name', type: 'text' }] }))).toEqual({
      'spec.endpoints[0].target.promote[0].name': 'spec.endpoints[0].target.promote[0].name must be a lower-case column name (letters, digits, underscores; not starting with a digit; at most 63)',
    });
    expect(errorsOf(target({ promote: [{ name: 'data', path: '$.x', type: 'text' }] }))).toEqual({
      'spec.endpoints[0].target.promote[0].name':
        'spec.endpoints[0].target.promote[0].name "data" is a column every ext table has (id, tenant_id, external_id, row_hash, data, indexed_at, connector_id, endpoint_id)',
    });
    // PostgreSQL's system columns: a table cannot have a column of that name (each run would fail).
    for (const name of ['xmin', 'xmax', 'cmin', 'cmax', 'ctid', 'tableoid']) {
      expect(errorsOf(target({ promote: [{ name, path: '$.x', type: 'text' }] }))).toEqual({
        'spec.endpoints[0].target.promote[0].name': `spec.endpoints[0].target.promote[0].name "${name}" is a system column of every PostgreSQL table (tableoid, xmin, cmin, xmax, cmax, ctid)`,
      });
    }
    expect(errorsOf(target({ promote: [{ name: 'a', path: '$.a', type: 'text' }, { name: 'a', path: '$.b', type: 'text' }] }))).toEqual({
      'spec.endpoints[0].target.promote[1].name': 'duplicate promote name "a": spec.endpoints[0].target.promote[0] has it too',
    });
    expect(errorsOf(target({ promote: [{ name: 'a', path: '$.a' }] }))).toEqual({ 'spec.endpoints[0].target.promote[0].type': 'spec.endpoints[0].target.promote[0].type is required' });
  });
});

describe('pagination strategies', () => {
  const paged = (pagination: Json) => withEndpoint({ pagination });
  const pagination = (p: Json) => firstEndpoint(paged(p)).pagination;

  it('none (or absent): one request, rows at response_path', () => {
    expect(pagination({ kind: 'none' })).toEqual({ kind: 'none', response_path: '$' });
    expect(pagination({ kind: 'none', response_path: '$.items' })).toEqual({ kind: 'none', response_path: '$.items' });
  });

  it('page: page_param and size_param required; start_page 1 and size 50 by default', () => {
    expect(pagination({ kind: 'page', page_param: 'p', size_param: 's' })).toEqual({ kind: 'page', page_param: 'p', size_param: 's', start_page: 1, size: 50, response_path: '$' });
    expect(pagination({ kind: 'page', page_param: 'p', size_param: 's', start_page: 0, size: 10, total_pages_path: '$.pages', response_path: '$.rows', total_path: '$.total' })).toEqual({
      kind: 'page', page_param: 'p', size_param: 's', start_page: 0, size: 10, total_pages_path: '$.pages', response_path: '$.rows', total_path: '$.total',
    });
    expect(errorsOf(paged({ kind: 'page', page_param: 'p' }))).toEqual({ 'spec.endpoints[0].pagination.size_param': 'spec.endpoints[0].pagination.size_param is required for pagination kind page' });
    expect(errorsOf(paged({ kind: 'page', page_param: 'p', size_param: 's', size: 0 }))).toEqual({ 'spec.endpoints[0].pagination.size': 'spec.endpoints[0].pagination.size must be at least 1' });
  });

  it('offset: offset_param and limit_param required; limit 50 and start_offset 0 by default', () => {
    expect(pagination({ kind: 'offset', offset_param: 'offset', limit_param: 'limit', response_path: '$.data', total_path: '$.total' })).toEqual({
      kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, start_offset: 0, response_path: '$.data', total_path: '$.total',
    });
    expect(errorsOf(paged({ kind: 'offset', limit_param: 'limit', page_param: 'p' }))).toEqual({
      'spec.endpoints[0].pagination.page_param': 'spec.endpoints[0].pagination.page_param is not a field of pagination kind offset',
      'spec.endpoints[0].pagination.offset_param': 'spec.endpoints[0].pagination.offset_param is required for pagination kind offset',
    });
  });

  it('cursor, link-header and body-link send no page size', () => {
    expect(pagination({ kind: 'cursor', cursor_param: 'after', cursor_path: '$.next' })).toEqual({ kind: 'cursor', cursor_param: 'after', cursor_path: '$.next', response_path: '$' });
    expect(pagination({ kind: 'link-header' })).toEqual({ kind: 'link-header', response_path: '$' });
    expect(pagination({ kind: 'body-link', link_path: '$.next', response_path: '$.results', total_path: '$.count' })).toEqual({
      kind: 'body-link', link_path: '$.next', response_path: '$.results', total_path: '$.count',
    });
    const hint = "pagination sends no page-size parameter; put the page size in the endpoint path's query string (?limit=100)";
    expect(errorsOf(paged({ kind: 'cursor', cursor_param: 'a', cursor_path: '$.n', size: 100 }))).toEqual({ 'spec.endpoints[0].pagination.size': `cursor ${hint}` });
    expect(errorsOf(paged({ kind: 'link-header', limit: 100 }))).toEqual({ 'spec.endpoints[0].pagination.limit': `link-header ${hint}` });
    expect(errorsOf(paged({ kind: 'drf', size_param: 'page_size' }))).toEqual({ 'spec.endpoints[0].pagination.size_param': `body-link ${hint}` });
    expect(errorsOf(paged({ kind: 'link-header', total_path: '$.n' }))).toEqual({
      'spec.endpoints[0].pagination.total_path': 'spec.endpoints[0].pagination.total_path is not a field of pagination kind link-header',
    });
    expect(errorsOf(paged({ kind: 'body-link' }))).toEqual({ 'spec.endpoints[0].pagination.link_path': 'spec.endpoints[0].pagination.link_path is required for pagination kind body-link' });
  });

  it('custom applies with a warning', () => {
    const { connector, warnings } = valid(paged({ kind: 'custom', response_path: '$.rows' }));
    expect(connector.endpoints[0]!.pagination).toEqual({ kind: 'custom', response_path: '$.rows' });
    expect(warnings).toEqual([{ field: 'spec.endpoints[0].pagination.kind', message: 'custom pagination applies but fails on the second page; do not use' }]);
  });

  it('an unknown kind names the strategies and presets; path fields are JSONPaths', () => {
    expect(errorsOf(paged({ kind: 'unknown' }))).toEqual({
      'spec.endpoints[0].pagination.kind':
        'spec.endpoints[0].pagination.kind must be a strategy (none, page, offset, cursor, link-header, body-link, relay, custom, soap) or a preset (spring, stripe, drf, drf-limit-offset, ninja, laravel, github, jsonapi, hal, odata, graphql-relay); got "unknown"',
    });
    expect(errorsOf(paged({ response_path: '$.x' }))).toEqual({ 'spec.endpoints[0].pagination.kind': 'spec.endpoints[0].pagination.kind is required' });
    expect(errorsOf(paged({ kind: 'body-link', link_path: 'next' }))).toEqual({ 'spec.endpoints[0].pagination.link_path': 'spec.endpoints[0].pagination.link_path must be a JSONPath starting with $' });
  });
});

describe('presets', () => {
  const expand = (p: Json) => firstEndpoint(withEndpoint({ pagination: p })).pagination;

  it('the three expansions spec 3 gives, verbatim', () => {
    expect(expand({ kind: 'spring' })).toEqual({ kind: 'page', page_param: 'page', size_param: 'size', start_page: 0, size: 50, total_pages_path: '$.totalPages', response_path: '$.content' });
    expect(expand({ kind: 'stripe' })).toEqual({ kind: 'cursor', cursor_param: 'starting_after', cursor_path: '$.data[-1:].id', has_more_path: '$.has_more', response_path: '$.data' });
    expect(expand({ kind: 'drf' })).toEqual({ kind: 'body-link', link_path: '$.next', response_path: '$.results' });
  });

  it('two presets publish total_path $.count, one of them limit-offset', () => {
    expect(expand({ kind: 'drf-limit-offset' })).toEqual({ kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, start_offset: 0, response_path: '$.results', total_path: '$.count' });
    expect(expand({ kind: 'ninja' })).toEqual({ kind: 'offset', offset_param: 'offset', limit_param: 'limit', limit: 50, start_offset: 0, response_path: '$.items', total_path: '$.count' });
    const counted = PRESET_NAMES.filter((name) => name !== 'graphql-relay').filter((name) => (expand({ kind: name }) as { total_path?: string }).total_path === '$.count');
    expect(counted).toEqual(['drf-limit-offset', 'ninja']);
  });

  it('the remaining REST presets', () => {
    expect(expand({ kind: 'laravel' })).toEqual({ kind: 'page', page_param: 'page', size_param: 'per_page', start_page: 1, size: 50, total_pages_path: '$.last_page', response_path: '$.data', total_path: '$.total' });
    expect(expand({ kind: 'github' })).toEqual({ kind: 'link-header', response_path: '$' });
    expect(expand({ kind: 'jsonapi' })).toEqual({ kind: 'body-link', link_path: '$.links.next', response_path: '$.data' });
    expect(expand({ kind: 'hal' })).toEqual({ kind: 'body-link', link_path: '$._links.next.href', response_path: '$._embedded.*' });
    expect(expand({ kind: 'odata' })).toEqual({ kind: 'body-link', link_path: "$['@odata.nextLink']", response_path: '$.value' });
  });

  it('graphql-relay, on a GraphQL endpoint', () => {
    const p = firstEndpoint(withEndpoint({ path: undefined, query: gqlQuery, pagination: { kind: 'graphql-relay' } })).pagination;
    expect(p).toEqual({
      kind: 'relay', cursor_binding: 'variable', cursor_var: 'after',
      cursor_path: '$.data.*.pageInfo.endCursor', has_more_path: '$.data.*.pageInfo.hasNextPage', response_path: '$.data.*.edges[*].node',
    });
  });

  it('there are eleven, and given fields override a preset', () => {
    expect(PRESET_NAMES).toHaveLength(11);
    expect(expand({ kind: 'spring', size: 200 })).toMatchObject({ kind: 'page', size: 200, start_page: 0 });
    expect(expand({ kind: 'drf-limit-offset', limit: 100, response_path: '$.items' })).toMatchObject({ kind: 'offset', limit: 100, response_path: '$.items', total_path: '$.count' });
    expect(expand({ kind: 'stripe', cursor_param: 'after' })).toMatchObject({ kind: 'cursor', cursor_param: 'after', cursor_path: '$.data[-1:].id' });
    expect(errorsOf(withEndpoint({ pagination: { kind: 'spring', link_path: '$.next' } }))).toEqual({
      'spec.endpoints[0].pagination.link_path': 'spec.endpoints[0].pagination.link_path is not a field of pagination kind spring (a page preset)',
    });
  });
});

describe('GraphQL endpoints', () => {
  const relay = { kind: 'relay', cursor_binding: 'variable', cursor_var: 'after', cursor_path: '$.data.partners.pageInfo.endCursor', has_more_path: '$.data.partners.pageInfo.hasNextPage', response_path: '$.data.partners.edges[*].node' };
  const gql = (over: Json) => withEndpoint({ path: undefined, query: gqlQuery, pagination: relay, ...over });

  it('POST to graphql_path with the query and variables; carrying query makes an endpoint GraphQL', () => {
    const e = firstEndpoint(gql({ variables: { country: 'FR' } }));
    expect(e).toEqual({
      id: 'partners', enabled: true, method: 'POST', path: '/graphql', graphql: true, query: gqlQuery, variables: { country: 'FR' },
      pagination: relay, incremental: { mode: 'full' }, target: { kind: 'hybrid', table: 'ext.partners', unique_key: '$.id', promote: [] },
    });
    const custom = valid(manifest({ graphql_path: '/gql', endpoints: [endpoint({ path: undefined, kind: 'graphql', query: gqlQuery, pagination: relay })] })).connector;
    expect(custom.endpoints[0]).toMatchObject({ path: '/gql', method: 'POST', graphql: true });
  });

  it('require relay with cursor_binding=variable (spec text)', () => {
    const text = 'graphql endpoints require pagination.kind=relay with cursor_binding=variable';
    expect(REFUSALS.graphqlNeedsRelay).toBe(text);
    expect(errorsOf(gql({ pagination: { kind: 'cursor', cursor_param: 'after', cursor_path: '$.x' } }))).toEqual({ 'spec.endpoints[0].pagination.kind': text });
    expect(errorsOf(gql({ pagination: undefined }))).toEqual({ 'spec.endpoints[0].pagination': text });
    expect(errorsOf(gql({ kind: 'graphql', query: gqlQuery, pagination: { kind: 'stripe' } }))).toEqual({ 'spec.endpoints[0].pagination.kind': text });
    const { cursor_binding: _binding, ...unbound } = relay;
    expect(errorsOf(gql({ pagination: unbound }))).toMatchObject({ 'spec.endpoints[0].pagination.kind': text });
  });

  it('kind graphql needs a query, and the query must declare the cursor variable', () => {
    expect(errorsOf(withEndpoint({ path: undefined, kind: 'graphql', pagination: relay }))).toEqual({
      'spec.endpoints[0].query': 'spec.endpoints[0].query is required for a GraphQL endpoint (the query document)',
    });
    expect(errorsOf(gql({ query: '{ partners { edges { node { id } } } }' }))).toEqual({ 'spec.endpoints[0].query': 'spec.endpoints[0].query must declare the cursor variable $after (cursor_var)' });
    expect(errorsOf(gql({ pagination: { ...relay, cursor_var: '$after' } }))).toEqual({
      'spec.endpoints[0].pagination.cursor_var': 'spec.endpoints[0].pagination.cursor_var must be a GraphQL variable name without its $ sigil',
    });
  });

  it('method and path are implicit (warnings), a body is refused, a watermark warns', () => {
    expect(valid(gql({ method: 'GET', path: '/x' })).warnings).toEqual([
      { field: 'spec.endpoints[0].method', message: 'ignored: GraphQL endpoints always POST' },
      { field: 'spec.endpoints[0].path', message: 'ignored: GraphQL endpoints POST to base_url plus spec.graphql_path' },
    ]);
    expect(errorsOf(gql({ body: { query: 'x' } }))).toEqual({ 'spec.endpoints[0].body': 'spec.endpoints[0].body is not used by GraphQL endpoints: the request body is the query and its variables' });
    expect(valid(gql({ incremental: { mode: 'watermark', param: 'since', watermark_path: '$.updated_at' } })).warnings).toEqual([
      {
        field: 'spec.endpoints[0].incremental.mode',
        message: 'a watermark on a GraphQL endpoint sends a query parameter the server ignores, so every run re-reads everything; use a static variable or a literal argument and keep mode full',
      },
    ]);
    expect(errorsOf(gql({ pagination: { ...relay, size: 10 } }))).toEqual({ 'spec.endpoints[0].pagination.size': 'relay pagination sends no page-size parameter; the page size lives in the query text' });
  });

  it('cursor_binding=variable, relay and variables are refused on a REST endpoint', () => {
    const text = 'cursor_binding=variable is valid only on GraphQL endpoints (kind graphql, or an endpoint carrying query)';
    expect(errorsOf(withEndpoint({ pagination: { kind: 'cursor', cursor_param: 'a', cursor_path: '$.n', cursor_binding: 'variable' } }))).toEqual({
      'spec.endpoints[0].pagination.cursor_binding': text,
    });
    expect(errorsOf(withEndpoint({ pagination: relay }))).toEqual({ 'spec.endpoints[0].pagination.cursor_binding': text });
    expect(errorsOf(withEndpoint({ pagination: { kind: 'graphql-relay' } }))).toEqual({ 'spec.endpoints[0].pagination.kind': text });
    const { cursor_binding: _binding, ...unbound } = relay;
    expect(errorsOf(withEndpoint({ pagination: unbound }))).toMatchObject({
      'spec.endpoints[0].pagination.kind': 'relay pagination is valid only on GraphQL endpoints (kind graphql, or an endpoint carrying query)',
    });
    expect(errorsOf(withEndpoint({ variables: { a: 1 } }))).toEqual({ 'spec.endpoints[0].variables': 'spec.endpoints[0].variables is for GraphQL endpoints only (kind graphql, or an endpoint carrying query)' });
  });
});

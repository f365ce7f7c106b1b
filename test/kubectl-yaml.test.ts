import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { parse, stringify } from 'yaml';
import { parseManifests } from '../src/cli/manifests.js';
import { KUBECTL_YAML } from '../src/manifests/yaml.js';
import { readYamlManifest } from '../src/manifests/yaml-body.js';
import { kubectlBinary } from './harness/helm.js';
import { startTestHub, type TestHub } from './harness/hub.js';

/**
 * The same bytes go to `kubectl apply`, `svc apply -f` and the apply routes: they must become the
 * same object. Compared here with the real kubectl (v1.33, from the devDependency that carries helm;
 * `kubectl label --local -o json` reads a manifest and prints it without a server), on plain
 * scalars YAML 1.1 (kubectl's reading) and YAML 1.2 read differently.
 */

/** What kubectl makes of `text`: its JSON, without the label the command adds. */
function kubectlReads(text: string): Record<string, unknown> {
  const out = kubectl(text);
  if (out.status !== 0) throw new Error(`kubectl failed: ${out.stderr}`);
  const object = JSON.parse(out.stdout) as { metadata: { labels?: Record<string, string> } };
  delete object.metadata.labels;
  return object as unknown as Record<string, unknown>;
}

/** Whether kubectl refuses to read `text`. */
function kubectlFails(text: string): boolean {
  return kubectl(text).status !== 0;
}

/** kubectl reading `text` (no server: `label --local` prints the object it read as JSON). */
function kubectl(text: string) {
  return spawnSync(kubectlBinary(), ['label', '--local', '-f', '-', 'svc-test=1', '-o', 'json'], { input: text, encoding: 'utf8', env: { ...process.env, KUBECONFIG: '/dev/null' } });
}

const QUIRKS = [
  'SE', 'NO', 'DK', 'on', 'Off', 'yes', 'y', 'n', 'N', 'TRUE', 'yEs', '~', 'Null',
  '0755', '0o17', '0O17', '0X1F', '0B11', '-0b11', '0x_1F', '0_o17', '0_x1F', '0_b11', '-0_o17', '0__x__1F', '1_000', '08', '-08', '0b', '0b12',
  '02:30', '1:20', '190:20:30', '2024-01-01', '2001-12-14t21:59:43.10-05:00',
  '1e3', '.5', '1.', '6.8523015e+5', '685.230_15e+03', '+12', '"no"', "'0755'",
  // No digit before the exponent: strings to Go's ParseFloat (an endpoint id `e1`), not NaN.
  'e1', 'E5', '.e1', '-e1', '+e1', '._', '12e',
  // Underscores wherever they stand in a number starting with a digit or a sign (go-yaml drops them), but
  // only between digits after a leading dot (Go's float literal); prefixes without digits are text.
  '1e1_0', '1_e5', '1e_7', '-_1', '+1_0.5', '0_', '00_8', '.5_5', '._5', '.5_', '0x_', '0b_', '-0x_', '0b-1', '0b+1',
  // Past int64 a binary number is one only unsigned, as Go's ParseUint reads it.
  `-0b${'1'.repeat(64)}`, `0b+${'1'.repeat(64)}`, `0b${'1'.repeat(64)}`,
];

const manifest = (name: string, body: string) => `apiVersion: connectors.svc.io/v1
kind: Connector
metadata:
  name: ${name}
connector_type: rest-generic
scopes: [x]
spec:
  base_url: http://127.0.0.1:9
  defaults:
    list: [${QUIRKS.join(', ')}]
${body}
  endpoints:
    - id: items
      path: /items
      pagination: {kind: offset, offset_param: offset, limit_param: limit, limit: 0100}
      target: {kind: hybrid, table: ext.items, unique_key: $.id}
`;

const BLOCK = `    on: 1
    base: &base {k: 1, y: yes}
    merged: {<<: *base, j: 2}
    when: 02:30
    day: 2024-01-01`;

describe('manifests read as kubectl reads them', () => {
  it('the hub\'s reading (YAML 1.1 without timestamps and base 60, Go\'s integer prefixes) is kubectl\'s, scalar by scalar', () => {
    const text = manifest('quirks', BLOCK);
    const kubectl = kubectlReads(text);
    expect(parse(text, KUBECTL_YAML)).toEqual(kubectl);
    expect(parseManifests(text, 'quirks.yaml').map((m) => m.body)).toEqual([kubectl]);
    // What differs from YAML 1.2, so the test can tell: `NO` is false, `0100` is 64, `02:30` a string.
    const spec = kubectl.spec as { defaults: { list: unknown[] }; endpoints: Array<{ pagination: { limit: number } }> };
    expect(spec.defaults.list.slice(0, 3)).toEqual(['SE', false, 'DK']);
    expect(spec.endpoints[0]!.pagination.limit).toBe(64);
    expect((parse(text) as { spec: typeof spec }).spec.defaults.list[1]).toBe("NO");
  });

  it('what the hub writes as YAML, kubectl reads back as the same values (strings that YAML 1.1 would take for booleans or numbers are quoted)', () => {
    // A stored key `<<` (a header's, a data field's) is written quoted: plain, it would merge.
    const values = { strings: ['no', 'NO', 'on', 'y', 'Yes', '0755', '0o17', '1_000', '02:30', '2024-01-01', '~', 'null', '.5', '1e3', '<<', '-_1', '0b+0', '1e1_0', '._5', '0x_'], numbers: [493, 0.5, 1000], flags: [true, false], headers: { '<<': 'text', nested: [{ '<<': { k: 1 }, j: 2 }] } };
    const object = { apiVersion: 'connectors.svc.io/v1', kind: 'Connector', metadata: { name: 'written' }, spec: values };
    const text = stringify(object, KUBECTL_YAML);
    expect(kubectlReads(text)).toEqual(object);
    expect(parse(text, KUBECTL_YAML)).toEqual(object);
  });
});

/** Keys that are not text, in every form go-yaml reads, each with a different value: kubectl's conversion to JSON makes text of them. */
const KEYS = [
  '1', '0x10', '0755', '0b101', '+12', '-0', '9223372036854775807', '-9223372036854775808', '99999999999999999999', '18446744073709551616', '-9223372036854775809',
  '1.0e6', '0.00001', '3.14159265', '-0.0', '.5', '1e-7', '100000.0', '123456789.0', '08', '1_000.5', '2.', '6.8523015e+5',
  'yes', 'Off', 'plain',
];
const keyBlock = (keys: string[]) => keys.map((k, i) => `    ${k}: v${i}`).join('\n');

/** `<<` merges that meet keys given otherwise in the same mapping: go-yaml assigns in order, the last assignment staying. */
const MERGES = `    base: &base {k: base, j: base}
    over: &over {<<: *base, j: over}
    after: {k: explicit, <<: *base}
    before: {<<: *base, k: explicit}
    two: {<<: {k: m1, y: m1}, <<: {k: m2}}
    between: {<<: {k: m1}, k: explicit, <<: {j: m2}}
    overridden: {<<: {k: m1}, k: explicit, <<: {k: m2}}
    seqafter: {k: explicit, <<: [{k: first}, *base]}
    chained: {j: explicit, <<: *over}
    yes: explicit
    <<: {true: merged}`;

describe('merge keys (`<<`) beside keys of their mapping', () => {
  it('give what kubectl gives: a merge after an explicit key, or after another merge, replaces its value', () => {
    const text = manifest('merges', MERGES);
    const kubectl = kubectlReads(text);
    expect(parseManifests(text, 'merges.yaml').map((m) => m.body)).toEqual([kubectl]);
    const read = readYamlManifest(text, 'body');
    expect('json' in read && JSON.parse(read.json)).toEqual(kubectl);
    // So that the test can tell: YAML's own merge lets the explicit key, or the first merge, win.
    const defaults = (kubectl.spec as { defaults: Record<string, Record<string, string> | string> }).defaults;
    expect(defaults.after).toEqual({ k: 'base', j: 'base' });
    expect(defaults.two).toEqual({ k: 'm2', true: 'm1' });
    expect(defaults.true).toBe('merged');
    expect((parse(text, KUBECTL_YAML) as { spec: typeof kubectl.spec }).spec).not.toEqual(kubectl.spec);
  });

  it('a key written twice in the mapping is refused as ever, a merge between the two or not', () => {
    expect(() => parseManifests(manifest('merge-twice', '    b: &b {k: 0}\n    m: {k: 1, <<: *b, k: 2}'), 'm.yaml')).toThrow('m.yaml document 1: spec.defaults.m.k is given twice: a key may appear once in a mapping');
  });
});

describe('keys that are not text', () => {
  it('become the text kubectl makes of them (integers in decimal, floats as Go writes a float32, booleans true or false)', () => {
    const text = manifest('keys', keyBlock(KEYS));
    const kubectl = kubectlReads(text);
    expect(parseManifests(text, 'keys.yaml').map((m) => m.body)).toEqual([kubectl]);
    // So that the test can tell: what JavaScript would have made of some of them.
    const defaults = (kubectl.spec as { defaults: Record<string, string> }).defaults;
    expect(Object.keys(defaults)).toEqual(expect.arrayContaining(['1e+06', '1e-05', '3.1415927', '-0', '1.2345679e+08', '9223372036854775807', '1e+20', 'true', 'false']));
  });

  const REFUSED_KEYS: Array<[string, string, RegExp]> = [
    ['a null key', '    ~: a', /^spec\.defaults has a null key \(~\), which kubectl refuses$/],
    ['a null key spelt null', '    null: a', /^spec\.defaults has a null key \(null\), which kubectl refuses$/],
    ['a sequence as a key', '    ? [a, b]\n    : c', /^spec\.defaults has a key that is a sequence, which kubectl refuses$/],
    ['an integer of 64 bits unsigned', '    18446744073709551615: a', /^spec\.defaults has the key 18446744073709551615, an integer past 64 bits signed, which kubectl refuses$/],
  ];
  it.each(REFUSED_KEYS)('%s: kubectl refuses it, and so does svc apply, naming where', (_name, lines, why) => {
    const text = manifest('refused-key', lines);
    expect(kubectlFails(text)).toBe(true);
    expect(() => parseManifests(text, 'k.yaml')).toThrow(new RegExp(`^k\\.yaml document 1: ${why.source.slice(1)}`));
  });

  const TWICE: Array<[string, string, string, string]> = [
    ['1 and "1"', '    1: a\n    "1": b', '1', 'spec.defaults.1 is given twice: the keys 1 and "1" are both "1" in JSON'],
    ['yes and \'true\'', "    yes: a\n    'true': b", 'true', 'spec.defaults.true is given twice: the keys yes and \'true\' are both "true" in JSON'],
    ['1.0e6 and "1e+06"', '    1.0e6: a\n    "1e+06": b', '1e+06', 'spec.defaults.1e+06 is given twice: the keys 1.0e6 and "1e+06" are both "1e+06" in JSON'],
    ['0x10 and 16', '    0x10: a\n    16: b', '16', 'spec.defaults.16 is given twice: the keys 0x10 and 16 are both "16" in JSON'],
    ['1 and 1.0', '    1: a\n    1.0: b', '1', 'spec.defaults.1 is given twice: the keys 1 and 1.0 are both "1" in JSON'],
    ['a and a', '    a: a\n    a: b', 'a', 'spec.defaults.a is given twice: a key may appear once in a mapping'],
  ];
  it.each(TWICE)('%s: one key once in JSON, which kubectl takes either of; refused naming it', (_name, lines, key, message) => {
    const text = manifest('twice-key', lines);
    const kept = (kubectlReads(text).spec as { defaults: Record<string, unknown> }).defaults;
    expect(['a', 'b']).toContain(kept[key]);
    expect(() => parseManifests(text, 't.yaml')).toThrow(`t.yaml document 1: ${message}`);
  });
});

describe('a byte order mark (U+FEFF) at the start of a document', () => {
  const BOM = '\uFEFF';
  const second = (name: string) => manifest(name, '').replace(/^apiVersion: (.*)\nkind: (.*)\n/, 'kind: $2\napiVersion: $1\n');

  it('after a `---` that ends a document (files that each begin with one, joined): skipped, as kubectl skips it', () => {
    const text = `${manifest('first', '')}---\n${BOM}${second('second')}`;
    // kubectl reads the second document alone once the first has ended (a comment is the first here).
    const expected = [kubectlReads(manifest('first', '')), kubectlReads(`# joined\n---\n${BOM}${second('second')}`)];
    expect((expected[1] as { kind: string }).kind).toBe('Connector');
    expect(parseManifests(text, 'joined.yaml').map((m) => m.body)).toEqual(expected);
  });

  it('after a `---` that begins the file, or inside a document: kept as the key\'s first character, as kubectl keeps it, and named when it hides the kind', () => {
    const leading = `---\n${BOM}${manifest('leading', '')}`;
    expect(Object.keys(kubectlReads(leading))).toContain(`${BOM}apiVersion`);
    expect(parseManifests(leading, 'l.yaml').map((m) => m.body)).toEqual([kubectlReads(leading)]);
    const why = 'no kind (expected one of Connector, Entity, Export, Workflow, Process): its key kind begins with a byte order mark (U+FEFF), which kubectl reads as part of the key too; remove the mark';
    for (const text of [`---\n${BOM}${second('hidden')}`, manifest('inside', '').replace('\nkind:', `\n${BOM}kind:`)]) {
      expect(kubectlFails(text)).toBe(true);
      expect(() => parseManifests(text, 'h.yaml')).toThrow(`h.yaml: ${why}`);
    }
  });
});

describe('what kubectl would read otherwise, or refuse, is refused', () => {
  const REFUSED: Array<[string, string, RegExp]> = [
    ['infinity', 'x: .inf', /\.inf is not a finite number/],
    ['not a number', 'x: .NaN', /\.NaN is not a finite number/],
    ['beyond a double', 'x: 1e400', /1e400 is not a finite number/],
    ['a binary tag', 'x: !!binary aGVsbG8=', /Unresolved tag: tag:yaml\.org,2002:binary/],
    ['a set', 'x: !!set {a, b}', /Unresolved tag: tag:yaml\.org,2002:set/],
    ['an ordered map', 'x: !!omap [a: 1]', /Unresolved tag: tag:yaml\.org,2002:omap/],
    ['a sequence that contains itself', 'x: &self [1, *self]', /the alias \*self is inside the value its anchor &self names/],
    ['a mapping that contains itself, deeper down', 'x: &loop {y: [2, {z: *loop}]}', /the alias \*loop is inside the value its anchor &loop names/],
  ];
  it.each(REFUSED)('%s: svc apply names the document and why', (_name, line, why) => {
    const text = manifest('refused', `    ${line}`);
    expect(() => parseManifests(text, 'refused.yaml')).toThrow(why);
    expect(() => parseManifests(text, 'refused.yaml')).toThrow(/^refused\.yaml document 1: /);
  });

  it('an alias bomb is refused naming the document, as other parse errors are', () => {
    const bomb = ['a: &a [x, x, x, x, x, x, x, x, x]', ...Array.from({ length: 8 }, (_, i) => `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(9).fill(`*${String.fromCharCode(97 + i)}`).join(', ')}]`)].join('\n');
    expect(() => parseManifests(`${manifest('ok', '')}---\n${bomb}\n`, 'bomb.yaml')).toThrow(/^bomb\.yaml document 2: Excessive alias count/);
  });

  it('a %YAML directive (kubectl refuses it; it would switch the reading)', () => {
    expect(() => parseManifests(`%YAML 1.2\n---\n${manifest('directive', '')}`, 'd.yaml')).toThrow(/a %YAML directive is not accepted/);
    expect(kubectlFails(`%YAML 1.2\n---\n${manifest('directive', '')}`)).toBe(true);
  });

  it('a local tag (`!foo`) is read as if untagged, as kubectl reads it', () => {
    const text = manifest('local-tag', '    note: !foo bar\n    meta: !meta {a: 1}');
    expect(parseManifests(text, 'l.yaml').map((m) => m.body)).toEqual([kubectlReads(text)]);
  });

  it('kubectl refuses the non-finite numbers and the values that contain themselves too', () => {
    for (const line of ['x: .inf', 'x: .NaN', 'x: &self [1, *self]', 'x: &loop {y: [2, {z: *loop}]}']) expect({ line, fails: kubectlFails(manifest('refused', `    ${line}`)) }).toEqual({ line, fails: true });
  });

  it('an alias of an anchor it is not inside is read as kubectl reads it, even beside itself', () => {
    const text = manifest('aliases', '    a: &a [1, {b: 2}]\n    c: [*a, *a, {d: *a}]');
    expect(parseManifests(text, 'a.yaml').map((m) => m.body)).toEqual([kubectlReads(text)]);
  });
});

describe('the apply routes read YAML bodies as kubectl does', () => {
  let hub: TestHub;
  beforeAll(async () => {
    hub = await startTestHub();
  });
  afterAll(async () => {
    await hub?.stop();
  });

  it('POST /api/connectors/apply with a YAML body stores what kubectl would have sent', async () => {
    const text = manifest('quirks-http', BLOCK);
    const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/yaml' }, body: text });
    const answer = await applied.text();
    expect(`${applied.status} ${answer}`).toMatch(/^201 /);
    const stored = (await (await fetch(`${hub.url}/api/connectors/quirks-http`, { headers: { 'X-Tenant-ID': '1' } })).json()) as { manifest: { spec: Record<string, unknown> } };
    const kubectl = kubectlReads(text) as { spec: { defaults: unknown; endpoints: Array<{ pagination: unknown }> } };
    expect(stored.manifest.spec.defaults).toEqual(kubectl.spec.defaults);
    expect((stored.manifest.spec.endpoints as Array<{ pagination: { limit: number } }>)[0]!.pagination.limit).toBe(64);
  });

  it('keys that are not text are stored as kubectl would send them; a null key, or one given twice once written as text, is a 400 naming it', async () => {
    const post = (name: string, lines: string) => fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/yaml' }, body: manifest(name, lines) });
    const text = manifest('keys-http', keyBlock(KEYS));
    expect((await post('keys-http', keyBlock(KEYS))).status).toBe(201);
    const stored = (await (await fetch(`${hub.url}/api/connectors/keys-http`, { headers: { 'X-Tenant-ID': '1' } })).json()) as { manifest: { spec: Record<string, unknown> } };
    expect(stored.manifest.spec.defaults).toEqual((kubectlReads(text).spec as { defaults: unknown }).defaults);
    for (const [lines, error, field] of [
      ['    1: a\n    "1": b', 'body.spec.defaults.1 is given twice: the keys 1 and "1" are both "1" in JSON', 'body.spec.defaults.1'],
      ['    ~: a', 'body.spec.defaults has a null key (~), which kubectl refuses', 'body.spec.defaults'],
      ['    x:\n      - {"": 1}\n      - {"": 2, ? "": 3}', 'body.spec.defaults.x[1][""] is given twice: a key may appear once in a mapping', 'body.spec.defaults.x[1][""]'],
    ] as const) {
      const res = await post('refused-keys', lines);
      expect({ status: res.status, body: await res.json() }).toEqual({ status: 400, body: { error, field, hint: expect.any(String) } });
    }
    expect((await fetch(`${hub.url}/api/connectors/refused-keys`, { headers: { 'X-Tenant-ID': '1' } })).status).toBe(404);
  });

  it('a byte order mark at the start of a document a `---` line cut from text before it is skipped, as kubectl skips it', async () => {
    const text = `# joined from files that each begin with a mark\n---\n\uFEFF${manifest('bom-http', '')}`;
    expect(kubectlReads(text).apiVersion).toBe('connectors.svc.io/v1');
    const applied = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/yaml' }, body: text });
    expect(`${applied.status} ${await applied.text()}`).toMatch(/^201 /);
  });

  it('a body kubectl would read otherwise, or refuse, is a 400 naming why', async () => {
    for (const [line, why] of [
      ['x: .inf', '.inf is not a finite number'],
      ['x: !!binary aGVsbG8=', 'Unresolved tag: tag:yaml.org,2002:binary'],
      ['x: &a [*a]', 'the alias *a is inside the value its anchor &a names'],
    ]) {
      const res = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/yaml' }, body: manifest('refused-http', `    ${line}`) });
      const body = (await res.json()) as { error: string; field: string };
      expect({ status: res.status, field: body.field }).toEqual({ status: 400, field: 'body' });
      expect(body.error).toContain(`body is not a manifest kubectl would read the same: ${why}`);
    }
    expect((await fetch(`${hub.url}/api/connectors/refused-http`, { headers: { 'X-Tenant-ID': '1' } })).status).toBe(404);
  });

  it('a body that is not YAML at all (a syntax error, an alias bomb) is a 400 naming the body, as a body that is not JSON is', async () => {
    const bomb = ['a: &a [x, x, x, x, x, x, x, x, x]', ...Array.from({ length: 8 }, (_, i) => `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(9).fill(`*${String.fromCharCode(97 + i)}`).join(', ')}]`)].join('\n');
    for (const [path, text, why] of [
      ['/api/connectors/apply', 'a: [\n', 'Flow sequence in block collection'],
      ['/api/connectors/validate', `${bomb}\n`, 'Excessive alias count'],
      ['/api/exports/apply', `${bomb}\n`, 'Excessive alias count'],
    ]) {
      const res = await fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/yaml' }, body: text });
      const body = (await res.json()) as { error: string; field?: string };
      expect({ path, status: res.status, field: body.field }).toEqual({ path, status: 400, field: 'body' });
      expect(body.error).toContain(`body is not valid YAML: ${why}`);
    }
  });

  it('a YAML syntax error names the line and column, never quoting the text (a secret written there stays out of the answer)', async () => {
    const secret = 'ghp_0123456789abcdefghijklmnopqrstuvwxyz';
    for (const [lines, why] of [
      [`  token: "${secret}\n`, 'Missing closing "quote at line 4, column 1'],
      [`  token: ${secret}: x: y\n`, 'Nested mappings are not allowed in compact mappings at line 3, column 10'],
    ]) {
      const res = await fetch(`${hub.url}/api/connectors/apply`, { method: 'POST', headers: { 'X-Tenant-ID': '1', 'Content-Type': 'application/yaml' }, body: `apiVersion: connectors.svc.io/v1\nspec:\n${lines}` });
      const body = (await res.json()) as { error: string; field?: string };
      expect({ status: res.status, body }).toEqual({ status: 400, body: { error: `body is not valid YAML: ${why}`, field: 'body' } });
    }
  });
});

import { existsSync, readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import { selfContainingAlias } from '../manifests/yaml.js';
import { yamlErrorWithoutText } from '../manifests/yaml-limits.js';
import { CLI_ENVIRONMENT } from '../cli/config.js';
import { unconnectablePort } from '../egress/policy.js';
import { isLoopback } from '../loopback.js';
import { registerSecret } from '../observability/logger.js';
import { parseDuration } from './duration.js';
import { envName, PROPERTIES, type PropertyDef, type PropertyValue } from './properties.js';

/** A configuration value that cannot be used; the message names the property and where it came from. */
export class ConfigError extends Error {
  constructor(
    readonly property: string,
    message: string,
  ) {
    super(message);
    this.name = 'ConfigError';
  }

  /** The error as every configuration error is said: `<property> (<its environment variable>): <what is wrong>`. */
  static of(property: string, what: string): ConfigError {
    return new ConfigError(property, `${property} (${envName(property)}): ${what}`);
  }
}

interface LoadOptions {
  /** The environment to read (default: process.env). */
  env?: NodeJS.ProcessEnv;
  /** Values that win over everything, for tests and embedding. */
  overrides?: Record<string, string | number | boolean>;
}

type Source = { value: string | number | boolean; origin: string };

/**
 * Properties resolved from defaults < application.yaml < environment (< overrides), validated once.
 * Typed getters throw for names that are not in the property table, so a typo fails in tests.
 */
export class Config {
  private constructor(
    private readonly values: Map<string, PropertyValue>,
    readonly warnings: readonly string[],
    private readonly options: LoadOptions,
    private readonly extras: ReadonlyMap<string, string> = new Map(),
  ) {}

  /**
   * A key of application.yaml that is not a hub property: connectors resolve `*_env` credential
   * names here last (stored secret, then environment, then this), as the JVM hub read system properties.
   */
  extra(name: string): string | undefined {
    return this.extras.get(name);
  }

  static load(options: LoadOptions = {}): Config {
    const env = options.env ?? process.env;
    const warnings: string[] = [];
    const raw = new Map<string, Source>();
    const extras = new Map<string, string>();

    const configPath = env.SVC_CONFIG ?? './application.yaml';
    if (existsSync(configPath)) {
      for (const [key, value] of Object.entries(readYamlFile(configPath))) {
        if (key === 'svc.config') {
          warnings.push(`${configPath}: svc.config is read from the environment only (SVC_CONFIG) (ignored)`);
        } else if (!PROPERTIES.some((d) => d.name === key)) {
          if (value !== null) extras.set(key, String(value));
          // `SVC_HTTP_PORT` or `SVC.HTTP.PORT` in the file (a property in another form) too.
          if (/^svc[._]/i.test(key)) warnings.push(`${configPath}: unknown property ${key} (ignored)${meant(key, 'property', (d) => d.name)}`);
        } else if (value !== null) raw.set(key, { value, origin: configPath }); // (never null: a property's list is refused)
      }
    } else if (env.SVC_CONFIG) {
      throw ConfigError.of('svc.config', `configuration file ${configPath} does not exist`);
    }

    for (const def of PROPERTIES) {
      for (const name of [envName(def.name), ...(def.aliases ?? [])]) {
        const value = env[name];
        if (value !== undefined && value !== '') {
          raw.set(def.name, { value, origin: `environment ${name}` });
          break;
        }
      }
    }
    // The `svc` client's own variables are not the hub's, and not typos either.
    const known = new Set([...PROPERTIES.flatMap((d) => [envName(d.name), ...(d.aliases ?? [])]), ...CLI_ENVIRONMENT]);
    for (const name of Object.keys(env)) {
      // Names are case-sensitive: `svc_http_port` is not read either.
      if (name.toUpperCase().startsWith('SVC_') && !known.has(name)) warnings.push(`environment ${name} names no property (ignored)${meant(name, 'variable', (d) => envName(d.name))}`);
    }
    for (const [key, value] of Object.entries(options.overrides ?? {})) {
      if (!PROPERTIES.some((d) => d.name === key)) throw new ConfigError(key, `${key}: unknown property`);
      raw.set(key, { value, origin: 'override' });
    }

    const values = new Map<string, PropertyValue>();
    const resolving = new Set<string>();
    const resolve = (name: string): PropertyValue => {
      if (values.has(name)) return values.get(name);
      const def = PROPERTIES.find((d) => d.name === name);
      if (!def) throw new ConfigError(name, `${name}: unknown property`);
      if (resolving.has(name)) throw new Error(`configuration defaults form a cycle at ${name}`);
      resolving.add(name);
      const given = raw.get(name);
      let value: PropertyValue;
      if (given) value = coerce(def, given.value, given.origin);
      else if (typeof def.default === 'function') value = def.default(resolve);
      else if (def.default !== undefined) value = coerce(def, def.default, 'default');
      resolving.delete(name);
      values.set(name, value);
      return value;
    };
    for (const def of PROPERTIES) resolve(def.name);
    // A credential of the hub's configuration (the embedding and chat endpoints' keys, the mail
    // password, the master keys) is masked wherever a log line or a stored error text quotes it.
    for (const def of PROPERTIES) if (def.kind === 'secret' && typeof values.get(def.name) === 'string') registerSecret(values.get(def.name) as string);

    const config = new Config(values, warnings, options, extras);
    config.checkCombinations();
    return config;
  }

  private checkCombinations(): void {
    const prod = this.string('svc.profile') === 'prod';
    const bypass = this.bool('svc.security.dev-bypass');
    if (prod && bypass) {
      throw ConfigError.of('svc.security.dev-bypass', 'the dev bypass must never be on in the prod profile');
    }
    if (!bypass && !this.optional('svc.oidc.issuer')) {
      throw new ConfigError('svc.oidc.issuer', 'svc.oidc.issuer (SVC_OIDC_ISSUER) is required when the dev bypass is off');
    }
    if (bypass && !isLoopback(this.string('svc.http.host'))) {
      throw ConfigError.of('svc.http.host', `with the dev bypass on the hub listens on a loopback address only, not ${this.string('svc.http.host')}`);
    }
    if (prod && !this.optional('svc.secret.master-key')) {
      throw new ConfigError('svc.secret.master-key', 'svc.secret.master-key (SVC_SECRET_MASTER_KEY) is required in the prod profile');
    }
    // Work that holds a pool connection each must leave two to the rest of the hub.
    const pool = this.int('svc.datasource.pool-size');
    for (const name of ['svc.export.concurrency', 'svc.analytic.concurrency']) {
      const n = this.int(name);
      if (n > pool - 2) {
        throw ConfigError.of(name, `${n} must leave at least 2 connections of svc.datasource.pool-size (${pool}) to the rest of the hub (each run holds one): at most ${pool - 2}`);
      }
    }
  }

  has(name: string): boolean {
    return this.values.get(this.known(name)) !== undefined;
  }

  optional(name: string): string | undefined {
    const value = this.values.get(this.known(name));
    return value === undefined ? undefined : String(value);
  }

  string(name: string): string {
    const value = this.optional(name);
    if (value === undefined) throw new ConfigError(name, `${name}: no value`);
    return value;
  }

  int(name: string): number {
    return this.typed(name, 'number') as number;
  }

  /** Durations are held in milliseconds. */
  duration(name: string): number {
    return this.typed(name, 'number') as number;
  }

  bool(name: string): boolean {
    return this.typed(name, 'boolean') as boolean;
  }

  /** A size property (`10mb`) in bytes (1 kb = 1,024 bytes, as the `bytes` package reads it). */
  bytes(name: string): number {
    return sizeInBytes(this.string(name)) ?? 0;
  }

  /** The same sources with some properties replaced, validated again (tests, sub-commands). */
  with(overrides: Record<string, string | number | boolean>): Config {
    return Config.load({ ...this.options, overrides: { ...this.options.overrides, ...overrides } });
  }

  private known(name: string): string {
    if (!PROPERTIES.some((d) => d.name === name)) throw new ConfigError(name, `${name}: unknown property`);
    return name;
  }

  private typed(name: string, type: 'number' | 'boolean'): number | boolean {
    const value = this.values.get(this.known(name));
    if (typeof value !== type) throw new ConfigError(name, `${name}: no value`);
    return value as number | boolean;
  }
}

/** The longest duration a property takes: 24 days, under node's timer limit of 2^31 - 1 ms. */
export const DURATION_MAX_MS = 24 * 24 * 3600 * 1000;

/** The largest whole number any property takes unless it says otherwise (PostgreSQL's integer). */
export const INT_MAX = 2_147_483_647;

/**
 * A value as an error message may show it: a URL's password (`user:password@`) and `password=`
 * query parameters masked, so that a refused database URL does not put its credential in the log.
 */
export function shownValue(text: string): string {
  return text.replace(/^([a-z][a-z0-9+.-]*:\/\/[^/?#@:]*:)[^/?#@]*@/i, '$1***@').replace(/([?&](?:password|passwd|pwd|secret|token|api[_-]?key)=)[^&#]*/gi, '$1***');
}

function coerce(def: PropertyDef, value: string | number | boolean, origin: string): PropertyValue {
  const text = String(value).trim();
  const fail = (expected: string): never => {
    const where = origin === 'default' ? 'default' : origin;
    throw ConfigError.of(def.name, `'${shownValue(text)}' from ${where} is not ${expected}`);
  };
  switch (def.kind) {
    case 'int': {
      if (!/^-?\d+$/.test(text)) return fail('a whole number');
      const n = Number(text);
      if (def.min !== undefined && n < def.min) return fail(`a whole number of at least ${def.min}`);
      const max = def.max ?? INT_MAX;
      if (n > max) return fail(`a whole number of at most ${max}`);
      return n;
    }
    case 'bool': {
      if (/^(true|yes|on|1)$/i.test(text)) return true;
      if (/^(false|no|off|0)$/i.test(text)) return false;
      return fail('true or false');
    }
    case 'duration': {
      const ms = parseDuration(text);
      if (ms === undefined) return fail('a duration such as 500ms, 5s, 15m, 1h or PT5S');
      if (ms <= 0) return fail('a positive duration');
      // Every duration ends up in a timer, and node's timers hold at most 2^31 - 1 ms (a longer one fires after 1 ms).
      if (ms > DURATION_MAX_MS) return fail('a duration of at most 24d');
      return ms;
    }
    case 'url': {
      let url: URL;
      try {
        url = new URL(text);
      } catch {
        return fail('a URL');
      }
      if (def.schemes && !def.schemes.includes(url.protocol.replace(/:$/, ''))) return fail(`a ${def.schemes.join(' or ')}:// URL`);
      // Nothing listens on port 0 (the outbound policy's rule, egress/policy.ts): leave the port out for the scheme's default.
      if (unconnectablePort(url) !== undefined) return fail('a URL with a port other than 0 (none for the scheme\'s default)');
      return text;
    }
    case 'enum':
      if (!def.values!.includes(text)) return fail(`one of ${def.values!.join(', ')}`);
      return text;
    case 'size': {
      // Less than a whole byte would be read as 0 (every body too large).
      if ((sizeInBytes(text) ?? 0) < 1) return fail('a positive size such as 512kb, 10mb or 1048576 (bytes), at least 1 byte');
      return text;
    }
    case 'pg-memory': {
      const kb = pgMemoryKb(text);
      const least = `${def.min ?? 1}kB`;
      if (kb === undefined) return fail(`an amount of memory as PostgreSQL writes one: a whole number and kB, MB, GB or TB (such as 4MB or 64kB; case as written), at least ${least}`);
      if (kb < (def.min ?? 1)) return fail(`an amount of memory of at least ${least}`);
      if (kb > (def.max ?? INT_MAX)) return fail(`an amount of memory of at most ${def.max ?? INT_MAX}kB`);
      return text;
    }
    default:
      return text;
  }
}

/** Kilobytes of an amount of memory as PostgreSQL writes one (`4MB`, `64kB`, `1GB`, `1TB`; its units, case-sensitive as it reads them); undefined otherwise. */
export function pgMemoryKb(text: string): number | undefined {
  const amount = /^(\d{1,16})(kB|MB|GB|TB)$/.exec(text);
  return amount ? Number(amount[1]) * 1024 ** ['kB', 'MB', 'GB', 'TB'].indexOf(amount[2]!) : undefined;
}

/** `: the <what> is <form>` when `name` writes a property in another form (case, dots or underscores), else nothing. */
function meant(name: string, what: string, form: (def: PropertyDef) => string): string {
  const def = PROPERTIES.find((d) => envName(d.name) === envName(name));
  return def ? `: the ${what} is ${form(def)}` : '';
}

/** The file's keys, flattened; null for a list under a key that is no property (left alone, as another program's). */
function readYamlFile(path: string): Record<string, string | number | boolean | null> {
  let doc: unknown;
  try {
    const read = parseDocument(readFileSync(path, 'utf8'));
    if (read.errors[0]) throw read.errors[0];
    // A mapping that contains itself would be walked below without end.
    const circular = selfContainingAlias(read);
    if (circular) throw new Error(circular);
    doc = read.toJS();
  } catch (err) {
    // The line is not quoted: it may hold the master key or another credential, and this message is logged.
    throw ConfigError.of('svc.config', `${path} is not valid YAML: ${yamlErrorWithoutText((err as Error).message)}`);
  }
  const flat: Record<string, string | number | boolean | null> = {};
  if (doc !== null && doc !== undefined && (typeof doc !== 'object' || Array.isArray(doc))) {
    throw ConfigError.of('svc.config', `${path} holds ${Array.isArray(doc) ? 'a list' : 'a single value'}, not a mapping of properties`);
  }
  const walk = (node: unknown, prefix: string): void => {
    if (node === null || node === undefined) return;
    const property = PROPERTIES.some((d) => d.name === prefix);
    if (typeof node === 'object' && !Array.isArray(node)) {
      // A property's value written as a mapping would otherwise be unknown keys under it, the property left at its default.
      if (property) throw ConfigError.of(prefix, `${path} gives a mapping where a single value is expected`);
      for (const [key, child] of Object.entries(node)) walk(child, prefix ? `${prefix}.${key}` : key);
      return;
    }
    // Nested keys and a dotted key may name the same property: the file gives it twice, as YAML refuses a repeated key.
    // (A key that is no property has no environment variable to name.)
    if (prefix in flat) {
      const what = `${path} gives it twice (as nested keys and as a dotted key)`;
      throw property ? ConfigError.of(prefix, what) : new ConfigError(prefix, `${prefix}: ${what}`);
    }
    if (typeof node === 'string' || typeof node === 'number' || typeof node === 'boolean') flat[prefix] = node;
    else if (property) throw ConfigError.of(prefix, `${path} gives a list where a single value is expected`);
    // A list under any other key is left alone, as keys outside svc. are (another program's); one under svc. is warned about as unknown.
    else flat[prefix] = null;
  };
  walk(doc, '');
  return flat;
}

/** Bytes of a size as configuration writes it (`512kb`, `10mb`, `1048576`), whole bytes; undefined when it is not a size. */
export function sizeInBytes(text: string): number | undefined {
  const size = /^(\d+(?:\.\d+)?)\s*(b|kb|mb|gb)?$/i.exec(text);
  return size ? Math.floor(Number(size[1]) * 1024 ** ['b', 'kb', 'mb', 'gb'].indexOf((size[2] ?? 'b').toLowerCase())) : undefined;
}

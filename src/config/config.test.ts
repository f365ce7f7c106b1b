import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { packageRoot } from '../package-root.js';
import { Config, ConfigError, pgMemoryKb } from './config.js';
import { renderConfigurationDoc } from './docs.js';
import { formatDuration, parseDuration } from './duration.js';
import { envName, PROPERTIES } from './properties.js';

const ISSUER = { SVC_OIDC_ISSUER: 'https://idp.example.com/realms/svc' };

const folders: string[] = [];
afterAll(() => {
  for (const dir of folders) rmSync(dir, { recursive: true, force: true });
});

function yamlFile(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-config-'));
  folders.push(dir);
  const file = join(dir, 'application.yaml');
  writeFileSync(file, text);
  return file;
}

function loadError(env: NodeJS.ProcessEnv): ConfigError {
  try {
    Config.load({ env });
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a configuration error');
}

describe('durations', () => {
  it.each([
    ['500ms', 500],
    ['5s', 5000],
    ['30s', 30000],
    ['15m', 900000],
    ['1h', 3600000],
    ['2d', 172800000],
    ['1.5s', 1500],
    ['PT5S', 5000],
    ['PT1H30M', 5400000],
    ['P1D', 86400000],
    ['pt0.5s', 500],
  ])('%s is %d ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(['5', 'five seconds', '5 s', 'PT', 'P', '-5s', '5w', ''])('%j is not a duration', (text) => {
    expect(parseDuration(text)).toBeUndefined();
  });

  it('formats back to the shortest unit', () => {
    expect(formatDuration(5000)).toBe('5s');
    expect(formatDuration(90_000)).toBe('90s');
    expect(formatDuration(3_600_000)).toBe('1h');
    expect(formatDuration(1500)).toBe('1500ms');
  });
});

describe('configuration sources', () => {
  it('has the spec defaults', () => {
    const config = Config.load({ env: {} });
    expect(config.duration('svc.webhook.sweep-every')).toBe(5000);
    expect(config.duration('svc.webhook.retry-every')).toBe(30000);
    expect(config.duration('svc.webhook.lease')).toBe(60000);
    expect(config.int('svc.webhook.max-attempts')).toBe(3);
    expect(config.duration('svc.webhook.connect-timeout')).toBe(5000);
    expect(config.duration('svc.webhook.timeout')).toBe(10000);
    expect(config.duration('svc.email.sweep-every')).toBe(5000);
    expect(config.duration('svc.process.sweep-every')).toBe(5000);
    expect(config.duration('svc.audit.dispatch-every')).toBe(2000);
    expect(config.duration('svc.events.stream.poll-every')).toBe(1000);
    expect(config.int('svc.events.stream.batch')).toBe(500);
    expect(config.duration('svc.scheduler.tick')).toBe(60000);
    expect(config.duration('svc.workflow.sweep.every')).toBe(900000);
    expect(config.duration('svc.hooks.cache-ttl')).toBe(60000);
    expect(config.int('svc.events.retention-days')).toBe(30);
    expect(config.int('svc.audit.retention-days')).toBe(365);
    expect(config.int('svc.http.port')).toBe(8080);
    expect(config.string('svc.data-dir')).toBe('./.svc');
    expect(config.string('svc.profile')).toBe('dev');
  });

  it('reads the environment as SVC_A_B_C, with the documented aliases', () => {
    expect(envName('svc.webhook.sweep-every')).toBe('SVC_WEBHOOK_SWEEP_EVERY');
    expect(envName('svc.ratelimit.user-chat.rpm')).toBe('SVC_RATELIMIT_USER_CHAT_RPM');
    const config = Config.load({
      env: { SVC_WEBHOOK_SWEEP_EVERY: '250ms', PORT: '9090', DATABASE_URL: 'postgres://u:p@db:5432/hub', SVC_EVENTS_RETENTION_DAYS: '7', SVC_WORKFLOW_SWEEP_EVERY: 'PT1M' },
    });
    expect(config.duration('svc.webhook.sweep-every')).toBe(250);
    expect(config.int('svc.http.port')).toBe(9090);
    expect(config.string('svc.datasource.url')).toBe('postgres://u:p@db:5432/hub');
    expect(config.int('svc.events.retention-days')).toBe(7);
    expect(config.duration('svc.workflow.sweep.every')).toBe(60000);
  });

  it('the canonical variable wins over an alias', () => {
    const config = Config.load({ env: { PORT: '9090', SVC_HTTP_PORT: '9191' } });
    expect(config.int('svc.http.port')).toBe(9191);
  });

  it('defaults < application.yaml < environment', () => {
    const file = yamlFile('svc:\n  webhook:\n    sweep-every: 2s\n    retry-every: 10s\nsvc.http.port: 7070\n');
    const config = Config.load({ env: { SVC_CONFIG: file, SVC_WEBHOOK_RETRY_EVERY: '3s' } });
    expect(config.duration('svc.webhook.sweep-every')).toBe(2000);
    expect(config.duration('svc.webhook.retry-every')).toBe(3000);
    expect(config.int('svc.http.port')).toBe(7070);
    expect(config.duration('svc.webhook.lease')).toBe(60000);
  });

  it('warns about unknown keys and variables instead of ignoring them silently', () => {
    const file = yamlFile('svc:\n  webhook:\n    sweep-evry: 2s\n');
    const config = Config.load({ env: { SVC_CONFIG: file, SVC_WEBHOK_LEASE: '1s' } });
    expect(config.warnings).toEqual(expect.arrayContaining([expect.stringContaining('svc.webhook.sweep-evry'), expect.stringContaining('SVC_WEBHOK_LEASE')]));
  });

  it("the svc client's variables (docs/cli.md, and every one src/cli reads) are no typos: no warning; a near miss still warns", () => {
    const root = packageRoot();
    const table = readFileSync(join(root, 'docs', 'cli.md'), 'utf8').split('**Environment**')[1]!.split('\n\n')[1]!;
    const documented = [...table.matchAll(/^\| `(SVC_[A-Z0-9_]+)` \|/gm)].map((m) => m[1]!);
    const sources = readdirSync(join(root, 'src', 'cli')).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'));
    const read = sources.flatMap((f) => [...readFileSync(join(root, 'src', 'cli', f), 'utf8').matchAll(/\benv\.(SVC_[A-Z0-9_]+)/g)].map((m) => m[1]!));
    expect(documented).toEqual(expect.arrayContaining(['SVC_URL', 'SVC_TOKEN', 'SVC_DEV_TENANT', 'SVC_CLI_CONFIG', 'SVC_CLI_POLL_MS']));
    expect(read.length).toBeGreaterThan(0);
    const client = Object.fromEntries([...documented, ...read].map((name) => [name, '1']));
    expect(Config.load({ env: client }).warnings).toEqual([]);
    const typos = Config.load({ env: { SVC_CLI_CONFG: '/x', SVC_TOKN: 't' } }).warnings;
    expect(typos).toEqual(['environment SVC_CLI_CONFG names no property (ignored)', 'environment SVC_TOKN names no property (ignored)']);
  });

  it('a property in another form (case, underscores) in the file or the environment is named in the warning', () => {
    const file = yamlFile('SVC_HTTP_PORT: 7070\nSVC:\n  WEBHOOK:\n    LEASE: 1s\nsvc.config: /elsewhere.yaml\n');
    const config = Config.load({ env: { SVC_CONFIG: file, svc_http_port: '7071', Svc_Webhook_Lease: '2s' } });
    expect(config.int('svc.http.port')).toBe(8080);
    // Was: not one word (only `svc.`-keys and `SVC_`-variables were looked at).
    expect(config.warnings).toEqual([
      `${file}: unknown property SVC_HTTP_PORT (ignored): the property is svc.http.port`,
      `${file}: unknown property SVC.WEBHOOK.LEASE (ignored): the property is svc.webhook.lease`,
      `${file}: svc.config is read from the environment only (SVC_CONFIG) (ignored)`,
      'environment svc_http_port names no property (ignored): the variable is SVC_HTTP_PORT',
      'environment Svc_Webhook_Lease names no property (ignored): the variable is SVC_WEBHOOK_LEASE',
    ]);
  });

  it('a property given twice in the file (nested and dotted), a mapping as its value, or a file that is no mapping is refused', () => {
    // Was: the later of the two taken silently.
    const twice = yamlFile('svc:\n  http:\n    port: 7070\nsvc.http.port: 7071\n');
    expect(loadError({ SVC_CONFIG: twice }).message).toBe(`svc.http.port (SVC_HTTP_PORT): ${twice} gives it twice (as nested keys and as a dotted key)`);
    // Was: a warning about svc.http.port.x, the port left at its default.
    const mapping = yamlFile('svc:\n  http:\n    port:\n      x: 1\n');
    expect(loadError({ SVC_CONFIG: mapping }).message).toBe(`svc.http.port (SVC_HTTP_PORT): ${mapping} gives a mapping where a single value is expected`);
    const listed = yamlFile('svc:\n  http:\n    port: [7070]\n');
    expect(loadError({ SVC_CONFIG: listed }).message).toBe(`svc.http.port (SVC_HTTP_PORT): ${listed} gives a list where a single value is expected`);
    // Was: a single value ignored without a word; a list refused as ': <file> gives a list …'.
    const scalar = yamlFile('svc.http.port=7070\n');
    expect(loadError({ SVC_CONFIG: scalar }).message).toBe(`svc.config (SVC_CONFIG): ${scalar} holds a single value, not a mapping of properties`);
    const list = yamlFile('- svc.http.port: 7070\n');
    expect(loadError({ SVC_CONFIG: list }).message).toBe(`svc.config (SVC_CONFIG): ${list} holds a list, not a mapping of properties`);
    // An empty file (or one of comments only) is no configuration at all.
    expect(Config.load({ env: { SVC_CONFIG: yamlFile('# nothing yet\n') } }).int('svc.http.port')).toBe(8080);
  });

  it('a list under a key that is no property is left alone (another program\'s), or warned about as an unknown property under svc.', () => {
    // application.yaml may be shared with other programs, whose keys hold lists. Was: the start stopped,
    // 'logging.handlers: <file> gives a list where a single value is expected'.
    const file = yamlFile('svc:\n  http:\n    port: 7070\n  nope: [1, 2]\nlogging:\n  handlers: [console, file]\n');
    const config = Config.load({ env: { SVC_CONFIG: file } });
    expect(config.int('svc.http.port')).toBe(7070);
    expect(config.warnings).toEqual([`${file}: unknown property svc.nope (ignored)`]);
    expect(config.extra('logging.handlers')).toBeUndefined();
    // A key that is no property given twice still stops the start, naming no variable: it has none.
    const twice = yamlFile('other:\n  x: 1\nother.x: 2\n');
    expect(loadError({ SVC_CONFIG: twice }).message).toBe(`other.x: ${twice} gives it twice (as nested keys and as a dotted key)`);
  });

  it('keys of the file that are not hub properties stay readable for connector credentials', () => {
    const file = yamlFile('svc:\n  http:\n    port: 7070\nCRM_TOKEN: from-file\n');
    const config = Config.load({ env: { SVC_CONFIG: file } });
    expect(config.extra('CRM_TOKEN')).toBe('from-file');
    expect(config.extra('svc.http.port')).toBeUndefined();
    expect(config.warnings).toEqual([]);
  });

  it('a named configuration file that does not exist is an error naming the variable that named it', () => {
    const err = loadError({ SVC_CONFIG: '/nonexistent/application.yaml' });
    // Was: 'svc.config: configuration file … does not exist', the variable that pointed there left to guess.
    expect({ property: err.property, message: err.message }).toEqual({
      property: 'svc.config',
      message: 'svc.config (SVC_CONFIG): configuration file /nonexistent/application.yaml does not exist',
    });
  });

  it('invalid YAML names the file', () => {
    const file = yamlFile('svc: [unclosed\n');
    const err = loadError({ SVC_CONFIG: file });
    expect(err.message).toContain(file);
  });

  it('a syntax error names the file, line and column, never quoting the line: the master key written there stays out of the log', () => {
    const key = '0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef';
    const file = yamlFile(`svc:\n  secret:\n    master-key: "${key}\n`);
    const err = loadError({ SVC_CONFIG: file });
    expect({ property: err.property, message: err.message }).toEqual({ property: 'svc.config', message: `svc.config (SVC_CONFIG): ${file} is not valid YAML: Missing closing "quote at line 4, column 1` });
    expect(err.message).not.toContain(key.slice(0, 16));
  });

  it('a mapping that contains itself is refused naming the file and the alias, not walked without end', () => {
    const file = yamlFile('svc: &loop\n  http:\n    again: *loop\n');
    const err = loadError({ SVC_CONFIG: file });
    expect(err.property).toBe('svc.config');
    expect(err.message.startsWith(`svc.config (SVC_CONFIG): ${file} is not valid YAML: the alias *loop is inside the value its anchor &loop names`)).toBe(true);
  });
});

describe('validation at start', () => {
  it.each([
    [{ SVC_WEBHOOK_SWEEP_EVERY: 'soon' }, 'svc.webhook.sweep-every', /not a duration/],
    [{ SVC_WEBHOOK_SWEEP_EVERY: '0s' }, 'svc.webhook.sweep-every', /positive/],
    [{ PORT: 'eighty' }, 'svc.http.port', /whole number/],
    [{ SVC_WEBHOOK_MAX_ATTEMPTS: '0' }, 'svc.webhook.max-attempts', /at least 1/],
    [{ SVC_PROFILE: 'staging' }, 'svc.profile', /one of dev, prod/],
    [{ SVC_SCHEDULER_ENABLED: 'maybe' }, 'svc.scheduler.enabled', /true or false/],
    [{ DATABASE_URL: 'not a url' }, 'svc.datasource.url', /not a URL/],
    [{ SVC_DATASOURCE_URL: 'mysql://x/db' }, 'svc.datasource.url', /not a postgres or postgresql:\/\/ URL/],
    // Nothing listens on port 0: a model, tracing or database URL on it fails at its first use, not at start.
    [{ SVC_EMBEDDING_BASE_URL: 'http://127.0.0.1:0/v1' }, 'svc.embedding.base-url', /not a URL with a port other than 0/],
    [{ SVC_TRACING_ENDPOINT: 'http://collector:00' }, 'svc.tracing.endpoint', /not a URL with a port other than 0/],
    [{ DATABASE_URL: 'postgres://u:p@db:0/hub' }, 'svc.datasource.url', /not a URL with a port other than 0/],
    [{ SVC_LOG_LEVEL: 'loud' }, 'svc.log.level', /one of/],
    [{ SVC_HTTP_PORT: '70000' }, 'svc.http.port', /at most 65535/],
    [{ SVC_HTTP_BODY_LIMIT: 'lots' }, 'svc.http.body-limit', /a positive size/],
    [{ SVC_HTTP_BODY_LIMIT: '-5mb' }, 'svc.http.body-limit', /a positive size/],
    [{ SVC_HTTP_BODY_LIMIT: '0' }, 'svc.http.body-limit', /a positive size/],
    // A timer holds at most 2^31 - 1 ms: a longer duration would fire after 1 ms.
    [{ SVC_EVENTS_STREAM_HEARTBEAT: '25d' }, 'svc.events.stream.heartbeat', /at most 24d/],
    [{ SVC_WEBHOOK_LEASE: 'P30D' }, 'svc.webhook.lease', /at most 24d/],
    [{ SVC_EXPORT_SNAPSHOT_TIMEOUT_SECONDS: '2200000' }, 'svc.export.snapshot.timeout-seconds', /at most 2073600/],
    // A streaming export holds one connection and the rest of the hub needs two.
    [{ SVC_DATASOURCE_POOL_SIZE: '2' }, 'svc.datasource.pool-size', /at least 3/],
  ])('%j is refused naming %s', (env, property, message) => {
    const err = loadError(env);
    expect(err.property).toBe(property);
    expect(err.message).toMatch(message);
    expect(err.message.startsWith(property)).toBe(true);
  });

  it('a refused URL is shown without its password or password-like query parameters', () => {
    const db = loadError({ DATABASE_URL: 'mysql://owner:TopSecretPw1@db.example/hub' });
    expect(db.property).toBe('svc.datasource.url');
    expect(db.message).not.toContain('TopSecretPw1');
    expect(db.message).toContain("'mysql://owner:***@db.example/hub'");
    const app = loadError({ SVC_DATASOURCE_APP_URL: 'postgres://svc_app:AppSecret@db.example:99999/hub?password=Other&sslmode=require' });
    expect(app.message).not.toMatch(/AppSecret|Other/);
    expect(app.message).toContain('postgres://svc_app:***@db.example:99999/hub?password=***&sslmode=require');
  });

  it('whole numbers have an upper bound (their own, else 2147483647), sizes at least one byte', () => {
    expect(loadError({ SVC_DATASOURCE_POOL_SIZE: '99999999999999999999' }).message).toContain('a whole number of at most 1000');
    expect(loadError({ SVC_EVENTS_RETENTION_DAYS: '99999999999' }).message).toContain('a whole number of at most 36500');
    expect(loadError({ SVC_MAIL_PORT: '70000' }).property).toBe('svc.mail.port');
    expect(loadError({ SVC_RETRIEVAL_HNSW_EF_SEARCH: '5000' }).property).toBe('svc.retrieval.hnsw-ef-search');
    expect(loadError({ SVC_CONNECTORS_MAX_PAGES: '2147483648' }).message).toContain('a whole number of at most 2147483647');
    expect(Config.load({ env: { SVC_CONNECTORS_MAX_PAGES: '2147483647' } }).int('svc.connectors.max-pages')).toBe(2147483647);
    expect(loadError({ SVC_HTTP_BODY_LIMIT: '0.5' }).property).toBe('svc.http.body-limit');
    expect(Config.load({ env: { SVC_HTTP_BODY_LIMIT: '0.5kb' } }).string('svc.http.body-limit')).toBe('0.5kb');
  });

  it('an analytic query\'s work_mem and temp_file_limit are amounts of memory as PostgreSQL writes them, checked at start', () => {
    const defaults = Config.load({ env: {} });
    expect([pgMemoryKb(defaults.string('svc.analytic.work-mem')), pgMemoryKb(defaults.string('svc.analytic.temp-file-limit'))]).toEqual([4096, 1024 * 1024]);
    expect(pgMemoryKb(Config.load({ env: { SVC_ANALYTIC_WORK_MEM: '64kB' } }).string('svc.analytic.work-mem'))).toBe(64);
    expect(pgMemoryKb(Config.load({ env: { SVC_ANALYTIC_TEMP_FILE_LIMIT: '1TB' } }).string('svc.analytic.temp-file-limit'))).toBe(1024 ** 3);
    // PostgreSQL's units are case-sensitive (it refuses `4mb`), and a bare number would be read in kB: both refused here.
    for (const value of ['4mb', '4096', '4 MB', '1.5GB', '-1', 'lots']) {
      const err = loadError({ SVC_ANALYTIC_WORK_MEM: value });
      expect(err.property).toBe('svc.analytic.work-mem');
      expect(err.message).toBe(
        `svc.analytic.work-mem (SVC_ANALYTIC_WORK_MEM): '${value}' from environment SVC_ANALYTIC_WORK_MEM is not an amount of memory as PostgreSQL writes one: a whole number and kB, MB, GB or TB (such as 4MB or 64kB; case as written), at least 64kB`,
      );
    }
    expect(loadError({ SVC_ANALYTIC_WORK_MEM: '32kB' }).message).toContain("'32kB' from environment SVC_ANALYTIC_WORK_MEM is not an amount of memory of at least 64kB");
    expect(loadError({ SVC_ANALYTIC_TEMP_FILE_LIMIT: '2TB' }).message).toContain('is not an amount of memory of at most 2147483647kB');
  });

  it('work holding a pool connection each leaves two to the rest of the hub: exports and analytic queries, refused before anything starts', () => {
    const analytic = loadError({ SVC_ANALYTIC_CONCURRENCY: '50', SVC_DATASOURCE_POOL_SIZE: '3' });
    expect(analytic.property).toBe('svc.analytic.concurrency');
    expect(analytic.message).toBe('svc.analytic.concurrency (SVC_ANALYTIC_CONCURRENCY): 50 must leave at least 2 connections of svc.datasource.pool-size (3) to the rest of the hub (each run holds one): at most 1');
    expect(loadError({ SVC_EXPORT_CONCURRENCY: '9', SVC_DATASOURCE_POOL_SIZE: '10' }).property).toBe('svc.export.concurrency');
    expect(Config.load({ env: { SVC_EXPORT_CONCURRENCY: '8', SVC_DATASOURCE_POOL_SIZE: '10' } }).int('svc.export.concurrency')).toBe(8);
  });

  it('the dev bypass is on by default in dev without an issuer, and then listens on loopback only', () => {
    const config = Config.load({ env: {} });
    expect(config.bool('svc.security.dev-bypass')).toBe(true);
    expect(config.string('svc.http.host')).toBe('127.0.0.1');
    expect(loadError({ SVC_HTTP_HOST: '0.0.0.0' }).property).toBe('svc.http.host');
  });

  it('a combination refused names the property with its environment variable, as every configuration error does', () => {
    expect(loadError({ SVC_HTTP_HOST: '0.0.0.0' }).message).toBe(
      'svc.http.host (SVC_HTTP_HOST): with the dev bypass on the hub listens on a loopback address only, not 0.0.0.0',
    );
    expect(loadError({ SVC_PROFILE: 'prod', SVC_SECURITY_DEV_BYPASS: 'true', SVC_SECRET_MASTER_KEY: 'k'.repeat(44) }).message).toBe(
      'svc.security.dev-bypass (SVC_SECURITY_DEV_BYPASS): the dev bypass must never be on in the prod profile',
    );
  });

  it('an issuer turns the bypass off by default and listens on all interfaces', () => {
    const config = Config.load({ env: { ...ISSUER } });
    expect(config.bool('svc.security.dev-bypass')).toBe(false);
    expect(config.string('svc.http.host')).toBe('0.0.0.0');
  });

  it('the prod profile refuses the bypass, requires an issuer and a master key', () => {
    expect(loadError({ SVC_PROFILE: 'prod', SVC_SECURITY_DEV_BYPASS: 'true', SVC_SECRET_MASTER_KEY: 'k'.repeat(44) }).property).toBe('svc.security.dev-bypass');
    expect(loadError({ SVC_PROFILE: 'prod', SVC_SECRET_MASTER_KEY: 'k'.repeat(44) }).property).toBe('svc.oidc.issuer');
    expect(loadError({ SVC_PROFILE: 'prod', ...ISSUER }).property).toBe('svc.secret.master-key');
    const config = Config.load({ env: { SVC_PROFILE: 'prod', ...ISSUER, SVC_SECRET_MASTER_KEY: 'k'.repeat(44) } });
    expect(config.bool('svc.security.dev-bypass')).toBe(false);
  });

  it('bypass off without an issuer is refused', () => {
    expect(loadError({ SVC_SECURITY_DEV_BYPASS: 'false' }).property).toBe('svc.oidc.issuer');
  });

  it('rate limits: 0 in dev, the spec values in prod, per-bucket fallback to the default', () => {
    const dev = Config.load({ env: {} });
    expect(dev.int('svc.ratelimit.user-chat.rpm')).toBe(0);
    const prod = Config.load({ env: { SVC_PROFILE: 'prod', ...ISSUER, SVC_SECRET_MASTER_KEY: 'k'.repeat(44), SVC_RATELIMIT_DEFAULT_RPM: '30' } });
    expect(prod.int('svc.ratelimit.user-chat.rpm')).toBe(30);
    expect(prod.int('svc.ratelimit.view-generate.rpm')).toBe(10);
  });

  it('OTEL_SDK_DISABLED=false turns tracing on, with the default endpoint', () => {
    expect(Config.load({ env: {} }).bool('svc.tracing.enabled')).toBe(false);
    const on = Config.load({ env: { OTEL_SDK_DISABLED: 'false' } });
    expect(on.bool('svc.tracing.enabled')).toBe(true);
    expect(on.string('svc.tracing.endpoint')).toBe('http://localhost:4317');
    expect(Config.load({ env: { OTEL_EXPORTER_ENDPOINT: 'http://collector:4317' } }).string('svc.tracing.endpoint')).toBe('http://collector:4317');
  });

  it('unknown property names are programming errors', () => {
    expect(() => Config.load({ env: {} }).string('svc.nope')).toThrow(/unknown property/);
    expect(() => Config.load({ env: {}, overrides: { 'svc.nope': 1 } })).toThrow(/unknown property/);
  });

  it('with() re-validates and keeps the other sources', () => {
    const base = Config.load({ env: { SVC_WEBHOOK_LEASE: '2s' } });
    const next = base.with({ 'svc.webhook.retry-every': '1s' });
    expect(next.duration('svc.webhook.lease')).toBe(2000);
    expect(next.duration('svc.webhook.retry-every')).toBe(1000);
    expect(() => base.with({ 'svc.webhook.retry-every': 'later' })).toThrow(ConfigError);
  });
});

describe('docs/configuration.md', () => {
  it('is generated from the property table and up to date (npm run docs:config)', () => {
    const onDisk = readFileSync(join(packageRoot(), 'docs', 'configuration.md'), 'utf8');
    expect(onDisk).toBe(renderConfigurationDoc());
  });

  it('documents every property with its environment form', () => {
    const doc = renderConfigurationDoc();
    for (const p of PROPERTIES) {
      expect(doc).toContain(`\`${p.name}\``);
      expect(doc).toContain(`\`${envName(p.name)}\``);
    }
  });
});

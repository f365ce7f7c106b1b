import { setTimeout as sleep } from 'node:timers/promises';
import { holdsUserInfo, inClearTo, isHttpUrl, normaliseUrl, ownsConfigFolder, removeConfig, type Target, USER_INFO_REFUSED, writeConfig } from './config.js';
import { answered, CliError, HttpError, UsageError } from './errors.js';
import { OPEN_TIMEOUT_MS, tailEvents } from './event-tail.js';
import { MAX_YAML_BYTES } from '../manifests/yaml-limits.js';
import { isUuid } from '../validation/uuid.js';
import { download, humanBytes, pollEvery, startRun } from './exports.js';
import { devBypassWithoutTenant, missingObject, path, type Query, type Reply, storedForAnother, tokenWithoutTenant } from './http.js';
import { durationOption, manifestFiles, pipedOrHidden, readSource, secretValue } from './input.js';
import { stringify } from 'yaml';
import { canonical } from '../manifests/canonical.js';
import { redactManifest } from '../connectors/manifest/redact.js';
import { applyPath, inApplyOrder, inDeleteOrder, lineDiff, type Manifest, objectPaths, parseManifests } from './manifests.js';
import { type Column, cell, detail, field, json, jsonLine, printable, type Row, table } from './output.js';
import { runTui } from './tui.js';
import { type Ctx, type Io, rewritesLines } from './context.js';

export type { Ctx, Io };

/**
 * The command table of `svc` (CONTRACTS section 7): every command, its arguments, flags and what it
 * calls. main.ts parses the command line against it; docs/cli.md describes it for people.
 */


export interface Flag {
  type: 'string' | 'boolean';
  short?: string;
  multiple?: boolean;
  required?: boolean;
  /** Placeholder of a string flag's value in help: `--endpoint ID`. */
  arg?: string;
  /** Free text, which may be blank (`--description ' '`); any other string flag's value may not. */
  text?: boolean;
  /** What to do instead of giving the flag twice (it takes one value): said with that usage error. */
  once?: string;
  help: string;
}


export interface Command {
  /** One word, or group and verb: `connectors run`. */
  name: string;
  /** Positional arguments; `[X]` is optional. */
  args?: string[];
  flags?: Record<string, Flag>;
  /** Replaces the synopsis generated from the flags when they are alternatives. */
  synopsis?: string;
  summary: string;
  /** Set for commands without a server side yet: they say this and exit 2. */
  unavailable?: string;
  /**
   * The exit code of a failure (an HTTP error, an unreadable file, …): 1 unless set. `svc diff` takes
   * kubectl diff's convention, where 1 means "differences found" and an error is 2.
   */
  failure?: number;
  /** False for a command with no JSON to print (`svc tui`): `--json` is a usage error, and its help does not offer it. */
  json?: false;
  /** Returns the exit code (default 0). */
  run?: (c: Ctx) => Promise<number | undefined> | number | undefined;
}

// ---- reading the parsed command line ----

const str = (c: Ctx, name: string) => c.opts[name] as string | undefined;
const bool = (c: Ctx, name: string) => c.opts[name] === true;
const list = (c: Ctx, name: string) => (c.opts[name] as string[] | undefined) ?? [];

function positiveInt(c: Ctx, name: string): number | undefined {
  const value = str(c, name);
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < 1) throw new UsageError(`--${name} must be a positive integer, not '${value}'`);
  return Number(value);
}

const SCOPE: Flag = { type: 'string', arg: 'S', help: 'only this scope (default: your default scope; all: every scope you may read)' };
/** Search without --scope reads every scope the caller may read (chat reads the default scope). */
const SEARCH_SCOPE: Flag = { ...SCOPE, help: 'only this scope (default and all: every scope you may read)' };
const TOP: Flag = { type: 'string', arg: 'K', help: 'number of rows retrieved (default 10)' };

/** The body of a search or chat call from QUERY and the flags. */
function searchBody(c: Ctx, field: 'query' | 'question'): Record<string, unknown> {
  const body: Record<string, unknown> = { [field]: c.args[0]! };
  const scope = str(c, 'scope');
  if (scope !== undefined) body.scope = scope;
  const top = positiveInt(c, 'top');
  if (top !== undefined) body.topK = top;
  const corpus = str(c, 'corpus');
  if (corpus !== undefined) body.corpus = corpus;
  return body;
}

/**
 * `svc chat`: the answer, then either the cited rows (table, key and hash, as the answer's
 * `citedRows` names them) or, analytic, the SQL that ran and its rows. Before, the table and key
 * came from a second call, a search with the same question: it did not apply the caller's default
 * scope as chat does, and printed blank columns for the rows it did not find again.
 */
async function chat(c: Ctx): Promise<number> {
  const body = searchBody(c, 'question');
  if (bool(c, 'analytic')) body.mode = 'analytic';
  const { body: answer } = await c.hub().call<Row>('POST', '/api/platform/rag/chat', { json: body });
  if (c.json) {
    c.out(json(answer));
    if (body.mode !== 'analytic') await warnIndexBehind(c);
    return 0;
  }
  let text = `${String(answer.answer)}\n`;
  if (body.mode === 'analytic') {
    if (answer.sql) text += `\nSQL: ${String(answer.sql)}\n`;
    const rows = (answer.rows as Row[] | undefined) ?? [];
    if (rows.length) text += `\n${table(rows, Object.keys(rows[0]!).map((k) => field(k.toUpperCase(), k, 40)))}`;
    if (answer.dataAsOf) text += `\nData as of ${String(answer.dataAsOf)}\n`;
  } else {
    const cited = (answer.citedRows as Row[] | undefined) ?? [];
    if (cited.length) text += `\nCitations:\n${table(cited, [field('TABLE', 'table'), field('KEY', 'key'), field('ROW', 'rowHash')])}`;
  }
  c.out(text);
  if (body.mode !== 'analytic') await warnIndexBehind(c);
  return 0;
}

/** The most entries a listing answers: a page of the hub's lists (it reads a larger limit as this). */
const MAX_LIMIT = 200;
const LIMIT: Flag = { type: 'string', arg: 'N', help: `at most N entries (1 to ${MAX_LIMIT})` };

/** --limit: a positive integer up to MAX_LIMIT, or a usage error (exit 2) before anything is sent. */
function limitFlag(c: Ctx): number | undefined {
  const limit = positiveInt(c, 'limit');
  if (limit !== undefined && limit > MAX_LIMIT) throw new UsageError(`--limit must be at most ${MAX_LIMIT}, not ${limit}`);
  return limit;
}

// ---- shared shapes of a command ----

/** Prints the hub's JSON for --json, else what `human` makes of it. */
function show(c: Ctx, body: unknown, human: () => string): void {
  c.out(c.json ? json(body) : human());
}

/** --all on a paged list: every page, one after another (the `before` of each answer's Link header). */
const ALL: Flag = { type: 'boolean', help: 'every entry, page after page (of --limit entries each, default the hub\'s), not the first page alone' };

async function listing(c: Ctx, route: string, columns: Column[], empty: string, query?: Query): Promise<Row[]> {
  let { body, next } = await c.hub().call<Row[]>('GET', route, { query });
  // A list ordered by something that changes (deliveries, failures first) may show a record again on a
  // later page once it moved (failed, then delivered): each id is listed once, where it was first seen.
  const seen = new Set(body.map((row) => row.id).filter((id) => id !== undefined && id !== null));
  while (next !== undefined && bool(c, 'all')) {
    const page = await c.hub().call<Row[]>('GET', route, { query: { ...query, before: next } });
    const fresh = page.body.filter((row) => row.id === undefined || row.id === null || !seen.has(row.id));
    for (const row of fresh) if (row.id !== undefined && row.id !== null) seen.add(row.id);
    body = [...body, ...fresh];
    next = page.next;
  }
  show(c, body, () => (body.length ? table(body, columns) : `${empty}\n`));
  return body;
}

/**
 * A list filtered by a connector's name came back empty: when the tenant has no connector of that
 * name, a warning says so (a typo in the name would otherwise list nothing, silently). An id is
 * not checked.
 */
async function warnUnknownConnector(c: Ctx, rows: Row[], connector: string | undefined): Promise<void> {
  if (rows.length > 0 || connector === undefined || isUuid(connector)) return;
  try {
    await c.hub().call('GET', path`/api/connectors/${connector}`);
  } catch (err) {
    if (err instanceof HttpError && err.status === 404) warn(c, `the tenant has no connector named '${connector}'`);
  }
}

async function record(c: Ctx, route: string): Promise<void> {
  const { body } = await c.hub().call('GET', route);
  show(c, body, () => detail(body));
}

/** A call answered with 204 (or a record nobody reads as a person): says `done` to people. */
async function act(c: Ctx, method: 'POST' | 'PUT' | 'DELETE', route: string, done: string | ((body: unknown) => string), options: { json?: unknown; query?: Query } = {}): Promise<void> {
  const { body } = await c.hub().call(method, route, options);
  if (c.json) {
    if (body !== undefined) c.out(json(body));
  } else c.out(`${typeof done === 'string' ? done : done(body)}\n`);
}

/** What a cancel's answer says of a connector run: ended at once (a run whose process died ends as interrupted), or asked to stop. */
export const cancelled = (id: string) =>
  cancelAnswer(
    `run ${id}`,
    ': cancellation requested (the process running it stops it within a heartbeat; if that process died, the run ends as interrupted once its last heartbeat is svc.connectors.run-stale-after old, and a cancel then ends it at once)',
  );

/** What a cancel's answer says of an export run: ended at once (a run no live process held), or asked to stop. */
export const exportCancelled = (name: string, id: string) => cancelAnswer(`export/${name.toLowerCase()}: run ${id}`, ' cancellation requested');

/** `WHO ended STATUS (why)` for a run a cancel ended at once, else `WHO` and `pending`. */
const cancelAnswer = (who: string, pending: string) => (body: unknown) => {
  const run = (body ?? {}) as { status?: string; endedAt?: string | null; errorMessage?: string | null; failureReason?: string | null };
  if (!run.endedAt) return `${who}${pending}`;
  const why = run.errorMessage ?? run.failureReason;
  return `${who}: ended ${run.status ?? ''}${why ? ` (${why})` : ''}`.trimEnd();
};

// ---- columns ----

const when = (key: string): Column['value'] => (row) => {
  const value = row[key];
  return typeof value === 'string' ? value.replace(/\.\d+Z$/, 'Z').replace('T', ' ') : value;
};

const RUN_COLUMNS: Column[] = [
  field('ID', 'id'),
  field('CONNECTOR', 'connector'),
  field('ENDPOINT', 'endpoint'),
  field('STATUS', 'status'),
  field('IN', 'recordsIn'),
  field('OUT', 'recordsOut'),
  field('SKIPPED', 'recordsSkipped'),
  field('DLQ', 'deadLetterCount'),
  { header: 'STARTED', value: when('startedAt') },
  field('ERROR', 'errorMessage', 40),
];

const ISSUE_COLUMNS: Column[] = [field('FIELD', 'field'), field('MESSAGE', 'message')];

// ---- commands with more than one call ----

interface Me {
  tenant: { id: number; code: string; impersonating?: boolean } | null;
  roles: string[];
  user?: { id?: string; login?: string };
  via?: string;
}

function whoText(target: Target, me: Me): Row {
  return {
    url: target.url,
    tenant: me.tenant ? `${me.tenant.code} (${me.tenant.id})${me.tenant.impersonating ? ', impersonated' : ''}` : null,
    user: me.user?.login ?? null,
    roles: me.roles,
    via: me.via ?? null,
  };
}

/** The 403s of `GET /api/bff/v1/me` that the hub gives the credential on every call, whatever the route (its authentication refuses it). */
const NEVER_WORKS = /^(unknown tenant \d+|tenant inactive|X-Tenant-ID names the system tenant|svc_superadmin required to impersonate a tenant|unknown user|account inactive)$/;

async function login(c: Ctx): Promise<number> {
  const url = normaliseUrl(str(c, 'url') ?? '');
  if (!isHttpUrl(url)) throw new UsageError(`--url must be an http or https URL, not '${url}'`);
  if (holdsUserInfo(url)) throw new UsageError(`--url ${USER_INFO_REFUSED}`);
  const given = ['token', 'token-stdin', 'dev-tenant'].filter((name) => c.opts[name] !== undefined);
  if (given.length !== 1) throw new UsageError('give exactly one of --token, --token-stdin, --dev-tenant');
  const target: Target = { url };
  if (given[0] === 'dev-tenant') {
    const tenant = str(c, 'dev-tenant')!;
    if (!/^\d+$/.test(tenant)) throw new UsageError(`--dev-tenant must be a numeric tenant id, not '${tenant}'`);
    target.devTenant = tenant;
    target.tokenFrom = 'login';
  } else {
    // A bearer token over plain http to another machine can be read (and replayed) by anyone on the way.
    const host = inClearTo(url);
    if (host) {
      if (c.opts['allow-http'] !== true) {
        throw new UsageError(`--url ${url} is plain http to another machine: the token would travel in clear, at login and in every later call; use https, or give --allow-http if the network to the hub is trusted`);
      }
      warn(c, `the token travels in clear to ${host} (plain http, --allow-http)`);
      target.allowHttp = true; // recorded with the token: later calls to this URL send it without asking again
    }
    target.token = (given[0] === 'token' ? str(c, 'token')! : await pipedOrHidden(c.io.stdin, c.err, 'Token: ', c.signal)).trim();
    if (!target.token) throw new UsageError('the token is empty');
    target.tokenFrom = 'login';
  }
  // The credential is checked before it is stored: a refused one (401) or an unreachable URL is not kept.
  let me: Me | undefined;
  try {
    me = (await c.hub(target).call<Me>('GET', '/api/bff/v1/me')).body;
  } catch (err) {
    if (!(err instanceof HttpError)) throw err;
    // A tenant the hub does not have, one deactivated (deactivation is final) or the system tenant
    // (no caller acts as it); a token impersonating without svc_superadmin, naming a user the hub
    // does not have, or one deactivated: the hub refuses the credential on every call, it could never work.
    if (err.status === 403 && NEVER_WORKS.test(err.message)) {
      throw new HttpError(403, `${err.message}; nothing was stored`, err.body);
    }
    // Every hub serves /me: even its 404 naming something (any other 404 says so already, http.ts) means another server.
    if (err.status === 404 && missingObject(err.body) && !/\/api\/*$/i.test(url)) {
      throw new HttpError(404, `${err.message}; ${c.hub(target).notServed('GET', '/api/bff/v1/me')}`, err.body);
    }
    if (err.status !== 403) throw err;
    warn(c, `the hub refused /api/bff/v1/me (${err.message}, HTTP 403); storing the credential anyway`);
  }
  // A hub running the dev bypass reads no Authorization header: the token would never be checked and
  // every call would act as no tenant (each tenant command a 401 that looks like an expired token).
  if (target.token && me?.via === 'dev-bypass') {
    throw new CliError(`${url} runs the dev bypass and checks no token (a token would act as no tenant): svc login --url ${url} --dev-tenant ID; nothing was stored`);
  }
  writeConfig(c.configFile, target, ownsConfigFolder(c.io.env));
  warnOverridden(c, url);
  if (c.json) c.out(json(me ?? null));
  else {
    const who = me ? whoText(target, me) : undefined;
    const as = who?.user ? ` as ${who.user}${who.tenant ? `, tenant ${who.tenant}` : ''}` : '';
    c.out(`Logged in to ${url}${as}. Stored in ${c.configFile}.\n`);
  }
  return 0;
}

/**
 * The environment wins over the config file (docs/cli.md, "Environment"): a login stored while
 * SVC_TOKEN or SVC_DEV_TENANT is set, or while SVC_URL names another URL, is not what later commands
 * use. Said after the login (never a value: SVC_URL may hold what it must not), as logout says it.
 */
function warnOverridden(c: Ctx, url: string): void {
  const env = c.io.env;
  const credential = ['SVC_TOKEN', 'SVC_DEV_TENANT'].find((name) => env[name]);
  if (credential) warn(c, `${credential} is set in the environment and wins over the stored login: commands send it, not the credential just stored; unset it to use this login`);
  if (env.SVC_URL && normaliseUrl(env.SVC_URL) !== url) warn(c, `SVC_URL is set in the environment and names another URL: commands call it, and send the stored credential only to ${url}; unset SVC_URL to use this login`);
}

interface Applied {
  name: string;
  id: string;
  /** The manifest was the one the hub stores: nothing written (a hub before this field: absent). */
  unchanged?: boolean;
  warnings?: Array<{ field: string; message: string }>;
}

async function readManifests(c: Ctx): Promise<Manifest[]> {
  const manifests: Manifest[] = [];
  const given = str(c, 'file')!;
  const files = await manifestFiles(given);
  const directory = files.length !== 1 || files[0] !== given;
  // A directory's files are all read (and every kind checked) before anything is sent.
  for (const file of files) {
    const text = await readSource(file, c.io.stdin, c.signal);
    const name = file === '-' ? 'stdin' : file;
    // YAML is read at about a MiB a second, in one go: a larger text says what is taking the time (JSON.parse reads most JSON at once).
    const slow = {
      above: MAX_YAML_BYTES,
      reading: () => c.err(`reading ${printable(name)} (${humanBytes(Buffer.byteLength(text))})…${rewritesLines(c.io) ? '' : '\n'}`),
      // cleared on a terminal, also before the error that says why the file was not read
      done: () => rewritesLines(c.io) && c.err('\r\u001b[K'),
    };
    manifests.push(...parseManifests(text, name, slow, directory));
  }
  if (!manifests.length) throw new CliError(`${given}: no manifest in its ${files.length === 1 ? 'file' : `${files.length} files`}`);
  return manifests;
}

/** Re-throws an HTTP error naming the document it was about (and, when the hub found it too large, its size as sent). */
async function about<T>(manifest: Manifest, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (!(err instanceof HttpError)) throw err;
    const size = err.status === 413 ? `; ${manifest.source} is ${Buffer.byteLength(JSON.stringify(manifest.body)).toLocaleString('en-US')} bytes as JSON` : '';
    throw new HttpError(err.status, `${manifest.source}: ${err.message}${size}`, err.body);
  }
}

async function apply(c: Ctx): Promise<number> {
  const manifests = inApplyOrder(await readManifests(c));
  const routes = manifests.map(applyPath); // every kind checked before anything is sent
  const results = await eachDocument(c, manifests, 'applied', async (manifest, i) => {
    const { status, body } = await about(manifest, () => c.hub().call<Applied>('POST', routes[i]!, { json: manifest.body }));
    if (!c.json) c.out(`${manifest.kind.toLowerCase()}/${body.name ?? manifest.name} ${status === 201 ? 'created' : body.unchanged === true ? 'unchanged' : 'configured'}\n`);
    for (const w of body.warnings ?? []) warn(c, `${manifest.source}: ${issueLine(w)}`);
    return body;
  });
  // one document: its answer; two or more: an array (as when a refusal stopped them)
  if (c.json) c.out(json(manifests.length === 1 ? results[0] : results));
  return 0;
}

/**
 * `send` for each document in turn (apply, delete). What was done before a refusal stays done: --json
 * prints its results (people have read a line for each). The first refusal stops the rest, saying
 * how many documents were not sent; with `--continue` a refusal of the hub (an HTTP error) is said
 * on stderr and the rest is sent, and the command fails at the end naming the refused documents,
 * as kubectl apply and delete do. A hub that cannot be reached stops it still.
 */
async function eachDocument<R>(c: Ctx, manifests: Manifest[], done: 'applied' | 'deleted', send: (manifest: Manifest, i: number) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  const refused: string[] = [];
  for (const [i, manifest] of manifests.entries()) {
    try {
      results.push(await send(manifest, i));
    } catch (err) {
      if (c.signal.aborted) throw err;
      if (bool(c, 'continue') && err instanceof HttpError) {
        c.err(`error: ${printable(err.message)} (${answered(err)})\n`);
        refused.push(manifest.source);
        continue;
      }
      if (c.json && results.length) c.out(json(results));
      throw notSent(err, manifests.length - i - 1, refused);
    }
  }
  if (!refused.length) return results;
  if (c.json && results.length) c.out(json(results));
  const others = manifests.length - refused.length;
  throw new CliError(`${refusedNote(refused, manifests.length)}${others ? `; the other ${others === 1 ? 'one was' : `${others} were`} ${done}` : ''}`);
}

/** `1 of 3 documents was refused (file#2)`. */
function refusedNote(refused: string[], of: number): string {
  return `${refused.length} of ${of} document${of === 1 ? '' : 's'} ${refused.length === 1 ? 'was' : 'were'} refused (${refused.join(', ')})`;
}

/** `err` saying that `later` documents after the refused one were not sent (and, with --continue, which ones were refused before it). */
function notSent(err: unknown, later: number, refused: string[] = []): unknown {
  if ((later === 0 && !refused.length) || !(err instanceof CliError)) return err;
  const before = refused.length ? `; before it, ${refused.join(', ')} ${refused.length === 1 ? 'was' : 'were'} refused` : '';
  const note = `${before}${later ? `; ${later} later document${later === 1 ? ' was' : 's were'} not sent` : ''}`;
  return err instanceof HttpError ? new HttpError(err.status, `${err.message}${note}`, err.body, err.retryAfterSeconds) : new CliError(`${err.message}${note}`);
}

/**
 * What `call` answers, or undefined when the hub has no such object: its 404 names the object
 * (`entity partner not found`). Any other 404 is an error, not an object already gone: the hub's for
 * a path it does not serve says `not found` alone (a SVC_URL that is not the hub's base URL), and
 * another server at the URL answers an empty body or JSON of its own (`{"error": "not_found"}`);
 * the HTTP helper says so of those (missingObject), and of a sentence naming something else here.
 */
async function unlessGone<T>(c: Ctx, method: 'GET' | 'DELETE', route: string, kind: string): Promise<Reply<T> | undefined> {
  try {
    return await c.hub().call<T>(method, route);
  } catch (err) {
    if (!(err instanceof HttpError) || err.status !== 404 || !missingObject(err.body)) throw err;
    const error = (err.body as { error: string }).error;
    if (error.toLowerCase().startsWith(`${kind.toLowerCase()} `) && error.endsWith(' not found')) return undefined;
    throw new HttpError(404, `${err.message}; ${c.hub().notServed(method, route)}`, err.body);
  }
}

/** `connector/NAME`, `entity/name`: as `svc <kind> rm` names it (names other than a connector's are case-insensitive, shown lower-case). */
function objectName(manifest: Manifest): string {
  return `${manifest.kind.toLowerCase()}/${manifest.kind === 'Connector' ? manifest.name : manifest.name.toLowerCase()}`;
}

/**
 * `svc delete -f`: each document's object deleted through its kind's delete route, in the reverse of
 * apply's order; one already gone (404) is said so and is no failure; the first other refusal stops
 * the rest, as in apply (with --continue, not).
 */
async function deleteManifests(c: Ctx): Promise<number> {
  const manifests = inDeleteOrder(await readManifests(c));
  const routes = manifests.map(objectPaths); // every kind and name checked before anything is sent
  const results = await eachDocument(c, manifests, 'deleted', async (manifest, i) => {
    const deleted = (await about(manifest, () => unlessGone(c, 'DELETE', routes[i]!.delete, manifest.kind))) !== undefined;
    if (!c.json) c.out(`${printable(objectName(manifest))} ${deleted ? 'deleted' : 'not found (already deleted)'}\n`);
    return { kind: manifest.kind, name: manifest.name, source: manifest.source, deleted };
  });
  if (c.json) c.out(json(results));
  return 0;
}

/**
 * A manifest as a file's and the hub's are compared (`svc diff`, `svc connectors preflight -f`):
 * keys sorted, a Connector's inline credentials redacted as the hub shows its stored manifest (a
 * second redaction changes nothing).
 */
function comparable(manifest: unknown, kind: string): string {
  return canonical(kind === 'Connector' ? redactManifest(manifest) : manifest);
}

/**
 * A manifest as `svc diff` compares and shows it: a connector's inline credentials written
 * `[REDACTED]` as the hub shows its stored manifest (so neither side prints one, and a credential in
 * the file is no difference), keys sorted as apply's comparison sorts them (`canonical`), as YAML lines.
 */
function diffForm(manifest: unknown, kind: string): { text: string; lines: string[] } {
  const text = comparable(manifest, kind);
  return { text, lines: stringify(JSON.parse(text), { lineWidth: 0 }).trimEnd().split('\n').map(printable) };
}

/** `svc diff -f`: each document against its stored object; exit 1 when one differs or is not on the hub (an error exits 2: `failure`). */
async function diff(c: Ctx): Promise<number> {
  const manifests = inApplyOrder(await readManifests(c));
  const routes = manifests.map(objectPaths); // every kind and name checked before anything is sent
  const results: Array<{ kind: string; name: string; source: string; status: 'same' | 'changed' | 'new'; diff?: string }> = [];
  for (const [i, manifest] of manifests.entries()) {
    const stored = (await about(manifest, () => unlessGone<{ manifest?: unknown }>(c, 'GET', routes[i]!.get, manifest.kind)))?.body.manifest;
    const result = { kind: manifest.kind, name: manifest.name, source: manifest.source };
    const mine = diffForm(manifest.body, manifest.kind);
    const what = printable(objectName(manifest));
    if (stored === undefined) {
      const text = lineDiff([], mine.lines);
      results.push({ ...result, status: 'new', diff: text });
      c.exitIfCut(1);
      if (!c.json) c.out(`+ new ${what} (${printable(manifest.source)}): not on the hub\n${text}`);
      continue;
    }
    const theirs = diffForm(stored, manifest.kind);
    if (theirs.text === mine.text) {
      results.push({ ...result, status: 'same' });
      continue;
    }
    const text = lineDiff(theirs.lines, mine.lines);
    results.push({ ...result, status: 'changed', diff: text });
    c.exitIfCut(1);
    if (!c.json) c.out(`--- ${what} (on the hub)\n+++ ${what} (${printable(manifest.source)})\n${text}`);
  }
  if (c.json) c.out(json(results));
  return results.every((r) => r.status === 'same') ? 0 : 1;
}

function connectorManifests(manifests: Manifest[]): Manifest[] {
  const connectors = manifests.filter((m) => m.kind === 'Connector');
  if (!connectors.length) throw new CliError(`${manifests[0]?.source ?? 'the file'}: no Connector manifest in it`);
  return connectors;
}

interface Verdict {
  valid: boolean;
  errors: Array<{ field: string; message: string }>;
  warnings: Array<{ field: string; message: string }>;
}

/** Validates each Connector document of -f FILE on the hub (nothing written); false when one is invalid. */
async function validateAll(c: Ctx, manifests: Manifest[], printValid: boolean): Promise<{ ok: boolean; verdicts: Verdict[] }> {
  const verdicts: Verdict[] = [];
  for (const manifest of manifests) {
    const { body } = await about(manifest, () => c.hub().call<Verdict>('POST', '/api/connectors/validate', { json: manifest.body }));
    verdicts.push(body);
    if (c.json) continue;
    if (body.valid && printValid) c.out(`${manifest.source}: connector/${manifest.name} is valid\n`);
    if (!body.valid) c.out(`${manifest.source}: connector/${manifest.name} is not valid\n${table(body.errors, ISSUE_COLUMNS)}`);
    for (const w of body.warnings) warn(c, `${manifest.source}: ${issueLine(w)}`);
  }
  return { ok: verdicts.every((v) => v.valid), verdicts };
}

async function validate(c: Ctx): Promise<number> {
  const { ok, verdicts } = await validateAll(c, connectorManifests(await readManifests(c)), true);
  if (c.json) c.out(json(verdicts.length === 1 ? verdicts[0] : verdicts));
  return ok ? 0 : 1;
}

interface Preflight {
  ok: boolean;
  skipped: number;
  endpoints: Row[];
}

async function preflight(c: Ctx): Promise<number> {
  const byName = c.args[0];
  const file = str(c, 'file');
  if (Boolean(byName) === Boolean(file)) throw new UsageError('give a connector NAME or -f FILE');
  let names: string[];
  if (file) {
    // The hub pre-flights applied connectors: the file is validated, then its connector is
    // pre-flighted as applied, with a warning when the applied manifest is not the file's.
    const manifests = connectorManifests(await readManifests(c));
    const { ok, verdicts } = await validateAll(c, manifests, false);
    if (!ok) {
      if (c.json) c.out(json(verdicts.length === 1 ? verdicts[0] : verdicts));
      return 1;
    }
    names = [];
    for (const manifest of manifests) {
      let applied: { manifest?: unknown };
      try {
        applied = (await c.hub().call<{ manifest?: unknown }>('GET', path`/api/connectors/${manifest.name}`)).body;
      } catch (err) {
        if (err instanceof HttpError && err.status === 404 && missingObject(err.body))
          throw new CliError(`${manifest.source}: connector ${manifest.name} is not applied; the hub pre-flights applied connectors: run svc apply -f ${file} first`);
        throw err;
      }
      if (comparable(applied.manifest, 'Connector') !== comparable(manifest.body, 'Connector'))
        warn(c, `${manifest.source}: the applied connector ${manifest.name} differs from this file; the pre-flight uses the applied one (svc apply -f ${file} to change it)`);
      names.push(manifest.name);
    }
  } else names = [byName!];
  const reports: Preflight[] = [];
  for (const name of names) {
    const { body } = await c.hub().call<Preflight>('POST', path`/api/connectors/${name}/preflight`);
    reports.push(body);
    if (c.json) continue;
    c.out(
      `connector/${name}: ${body.ok ? 'ok' : 'NOT OK'}${body.skipped ? ` (${body.skipped} disabled endpoint${body.skipped > 1 ? 's' : ''} skipped)` : ''}\n` +
        table(body.endpoints, [field('ENDPOINT', 'id'), field('METHOD', 'method'), field('STATUS', 'status'), field('ITEMS', 'items'), field('VERDICT', 'verdict', 60), field('URL', 'url')]),
    );
    for (const endpoint of body.endpoints) for (const warning of (endpoint.warnings as string[] | undefined) ?? []) warn(c, `connector/${name} endpoint ${String(endpoint.id)}: ${warning}`);
  }
  if (c.json) c.out(json(reports.length === 1 ? reports[0] : reports));
  return reports.every((r) => r.ok) ? 0 : 1;
}

interface Run extends Row {
  id: string;
  status: string;
}

async function runConnector(c: Ctx): Promise<number> {
  const name = c.args[0]!;
  const endpoint = str(c, 'endpoint');
  const every = pollEvery(c.io.env);
  const { body } = await c.hub().call<{ runs: Row[] }>('POST', path`/api/connectors/${name}/runs`, { json: endpoint ? { endpoint } : {} });
  // Every endpoint disabled: the hub starts none and says so (409), which call() reports as an error, exit 1.
  if (!bool(c, 'wait')) {
    show(c, body, () => table(body.runs, [field('RUN', 'id'), field('ENDPOINT', 'endpoint'), field('ENDPOINT UUID', 'endpointId')]));
    return 0;
  }
  const ids = body.runs.map((r) => String(r.id));
  if (!c.json) c.err(`waiting for ${ids.length} run${ids.length === 1 ? '' : 's'} of ${printable(name)}…\n`);
  let runs: Run[];
  for (;;) {
    runs = await Promise.all(ids.map(async (id) => (await c.hub().call<Run>('GET', path`/api/platform/runs/${id}`)).body));
    if (runs.every((r) => r.status !== 'Running')) break;
    await sleep(every, undefined, { signal: c.signal });
  }
  show(c, runs, () => table(runs, RUN_COLUMNS));
  return runs.every((r) => r.status === 'Completed') ? 0 : 1;
}

async function getConnector(c: Ctx): Promise<void> {
  const { body } = await c.hub().call<Row & { endpoints: Row[]; manifest: unknown }>('GET', path`/api/connectors/${c.args[0]!}`);
  show(c, body, () => {
    const { id, name, connectorType, scopes, schedule, createdAt, updatedAt } = body;
    const endpoints = table(body.endpoints, [
      field('ENDPOINT', 'id'),
      field('ENABLED', 'enabled'),
      field('METHOD', 'method'),
      field('PATH', 'path', 50),
      field('PAGINATION', 'pagination'),
      field('TABLE', 'table'),
      field('SYNC', 'syncMode'),
      field('WATERMARK', 'watermark', 30),
      // Where the next run reads on when the last one stopped at the page budget (docs/connector-runs.md).
      field('RESUME FROM', 'resumeFrom', 30),
    ]);
    return `${detail({ name, id, connectorType, scopes, schedule, createdAt, updatedAt })}\nEndpoints:\n${indent(endpoints)}\nManifest:\n${indent(detail(manifestOrder(body.manifest)))}`;
  });
}

/** The stored manifest comes back with its keys in the database's order: put the usual ones first. */
function manifestOrder(manifest: unknown): unknown {
  const ordered = keysFirst(manifest, ['apiVersion', 'kind', 'metadata', 'connector_type', 'scopes', 'spec']);
  if (!ordered || typeof ordered !== 'object' || !('spec' in ordered)) return ordered;
  // Entity, Export and Process specs, in the order their docs write them.
  const spec = keysFirst(ordered.spec, ['scope', 'source', 'key', 'columns', 'sources', 'order', 'format', 'destination', 'mode', 'schedule', 'event', 'when', 'decision', 'message']);
  if (spec && typeof spec === 'object' && 'destination' in spec) spec.destination = keysFirst(spec.destination, ['kind']);
  return { ...ordered, spec };
}

function keysFirst(value: unknown, first: string[]): unknown {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return value;
  const head = first.filter((k) => k in value);
  return Object.fromEntries([...head, ...Object.keys(value).filter((k) => !head.includes(k))].map((k) => [k, (value as Row)[k]]));
}

function indent(text: string): string {
  return text.replace(/^(?=.)/gm, '  ');
}

async function getEntity(c: Ctx): Promise<void> {
  const { body } = await c.hub().call<Row & { columns: Row[]; sources: Row[]; manifest: unknown }>('GET', path`/api/entities/${c.args[0]!}`);
  show(c, body, () => {
    const { name, id, scopes, key, createdAt, updatedAt } = body;
    const columns = table(body.columns, [field('COLUMN', 'name'), field('TYPE', 'type'), field('LABEL', 'label', 30), field('DESCRIPTION', 'description', 50), field('VALUES', 'values', 40)]);
    const sources = table(body.sources, [field('TABLE', 'table'), field('KEY', 'key')]);
    return `${detail({ name, id, scopes, key, createdAt, updatedAt })}\nColumns:\n${indent(columns)}\nSources (in order of precedence):\n${indent(sources)}\nManifest:\n${indent(detail(manifestOrder(body.manifest)))}`;
  });
}

async function getWorkflow(c: Ctx): Promise<void> {
  const { body } = await c.hub().call<Row & { transitions: Row[]; manifest: unknown }>('GET', path`/api/platform/workflows/${c.args[0]!}`);
  show(c, body, () => {
    const { name, entity, scope, stateColumn, states, createdAt, updatedAt } = body;
    const dormancy = body.dormancy as { after: string; states: string[] } | null;
    const transitions = body.transitions.length ? table(body.transitions, [field('FROM', 'from'), field('TO', 'to')]) : 'none declared\n';
    return (
      `${detail({ name, entity, scope, stateColumn, states, dormantAfter: dormancy?.after ?? '-', dormantIn: dormancy?.states ?? '-', createdAt, updatedAt })}\n` +
      `Transitions:\n${indent(transitions)}\nManifest:\n${indent(detail(keysFirst(body.manifest, ['apiVersion', 'kind', 'metadata', 'spec'])))}`
    );
  });
}

async function getExport(c: Ctx): Promise<void> {
  const { body } = await c.hub().call<Row & { manifest: unknown }>('GET', path`/api/exports/${c.args[0]!}`);
  show(c, body, () => {
    const { name, id, entity, scope, destination, schedule, columns, createdAt, updatedAt } = body;
    return `${detail({ name, id, entity, scope, destination, schedule, columns, createdAt, updatedAt })}\nManifest:\n${indent(detail(manifestOrder(body.manifest)))}`;
  });
}

const EXPORT_RUN_COLUMNS: Column[] = [
  field('ID', 'id'),
  field('STATUS', 'status'),
  field('TRIGGER', 'trigger'),
  field('ATTEMPT', 'attempt'),
  { header: 'STARTED', value: when('startedAt') },
  { header: 'ENDED', value: when('endedAt') },
  field('ROWS', 'rowCount'),
  field('BYTES', 'byteCount'),
  field('FAILURE', 'failureCode'),
];

async function tail(c: Ctx): Promise<number> {
  const since = str(c, 'since');
  if (since !== undefined && !/^\d+$/.test(since)) throw new UsageError(`--since must be an event id, not '${since}'`);
  const openTimeout = str(c, 'open-timeout');
  await tailEvents(c.hub(), {
    topics: list(c, 'topic'),
    since,
    openTimeoutMs: openTimeout === undefined ? OPEN_TIMEOUT_MS : durationOption('--open-timeout', openTimeout, [1_000, '1s'], [3_600_000, '1h (3600s)']),
    signal: c.signal,
    onEvent: (event) => {
      if (c.json) c.out(jsonLine(event));
      else c.out(`${event.capturedAt}  ${event.id}  ${event.topic}  ${event.payload}\n`);
    },
    onNotice: (text) => c.err(`${printable(text)}\n`),
  });
  return 0;
}

async function secretBody(c: Ctx, name: string): Promise<Row> {
  const body: Row = { value: await secretValue(bool(c, 'value-stdin'), c.io.stdin, (t) => c.err(printable(t)), name, c.signal) };
  const description = str(c, 'description');
  if (description !== undefined) body.description = description;
  return body;
}

// ---- the table ----

const VALUE_STDIN: Flag = { type: 'boolean', help: 'read the value from stdin (without it: a prompt that does not echo)' };
const DESCRIPTION: Flag = { type: 'string', arg: 'TEXT', text: true, help: 'a description shown by secrets ls' };
const NO_WAIT: Flag = { type: 'boolean', help: 'print the run id and return at once (follow it with svc exports runs NAME)' };
const MANIFEST_FILE: Flag = {
  type: 'string',
  short: 'f',
  arg: 'FILE',
  help: 'YAML or JSON, several documents allowed; a directory: its .json, .yaml and .yml files by name; - reads stdin',
  once: 'name a directory holding the files, or join them with --- in one file',
};

const CONTINUE: Flag = { type: 'boolean', help: 'go on after a document the hub refuses, each refusal said on stderr; exit 1 at the end when one was refused' };

export const COMMANDS: Command[] = [
  {
    name: 'login',
    synopsis: '--url URL (--token T | --token-stdin | --dev-tenant ID) [--allow-http]',
    summary: 'Check a credential against the hub and store it with the URL in the config file',
    flags: {
      url: { type: 'string', arg: 'URL', required: true, help: 'base URL of the hub, e.g. http://127.0.0.1:8080' },
      token: { type: 'string', arg: 'T', help: 'an access token of the hub\'s identity provider (visible in the process list: prefer --token-stdin)' },
      'token-stdin': { type: 'boolean', help: 'read the token from stdin' },
      'dev-tenant': { type: 'string', arg: 'ID', help: 'development hubs without an identity provider: act as this tenant id (X-Tenant-ID)' },
      'allow-http': { type: 'boolean', help: 'send the token over plain http to a host other than loopback (it travels in clear: only on a trusted network)' },
    },
    run: login,
  },
  {
    name: 'logout',
    summary: 'Remove the config file and the credential in it',
    run: (c) => {
      const removed = removeConfig(c.configFile);
      // The environment's credential is no file to remove: every later command still sends it.
      const still = ['SVC_TOKEN', 'SVC_DEV_TENANT'].filter((name) => c.io.env[name]);
      if (still.length) warn(c, `${still.join(' and ')} ${still.length > 1 ? 'are' : 'is'} still set in the environment: commands go on sending ${still.length > 1 ? 'them' : 'it'}; unset ${still.length > 1 ? 'them' : 'it'} to log out there too`);
      show(c, { configFile: c.configFile, removed }, () => (removed ? `Logged out: removed ${c.configFile}.\n` : `Not logged in: no ${c.configFile}.\n`));
      return 0;
    },
  },
  {
    name: 'whoami',
    summary: 'The hub, tenant, user and roles the credential stands for',
    run: async (c) => {
      const hub = c.hub();
      const { body } = await hub.call<Me>('GET', '/api/bff/v1/me');
      const { target } = hub;
      // A hub running the dev bypass reads no token: the token stands for no one there (login refuses to store one).
      if (target.token && body.via === 'dev-bypass') throw new CliError(tokenWithoutTenant(target, body.via));
      show(c, body, () => detail(whoText(target, body)));
      // No credential at all there: the answer is right (no tenant), and what a newcomer gives next is a dev tenant.
      if (!target.token && !target.devTenant && !target.storedFor && body.via === 'dev-bypass' && !body.tenant) warn(c, devBypassWithoutTenant(target.url));
      // The stored login went nowhere (SVC_URL names another URL): the answer is for no credential, which a 401 would say too.
      if (target.storedFor) warn(c, `${storedForAnother(target)}; no credential was sent`);
      return 0;
    },
  },
  { name: 'apply', flags: { file: { ...MANIFEST_FILE, required: true }, continue: CONTINUE }, summary: 'Apply manifests, each to the apply path of its kind: Connectors first, then Entities, then Workflows, Exports and Processes', run: apply },
  {
    name: 'delete',
    flags: { file: { ...MANIFEST_FILE, required: true }, continue: CONTINUE },
    summary: 'Delete the objects of manifests, each by its kind\'s delete route, in the reverse of apply\'s order; one not found is already deleted (exit 0)',
    run: deleteManifests,
  },
  {
    name: 'diff',
    flags: { file: { ...MANIFEST_FILE, required: true } },
    summary: 'Compare manifests with the objects stored on the hub (credentials redacted); exit 0 when all are the same, 1 when one differs or is new, 2 on an error',
    failure: 2,
    run: diff,
  },

  {
    name: 'connectors ls',
    summary: 'Connectors of the tenant',
    run: async (c) => {
      await listing(
        c,
        '/api/connectors',
        [
          field('NAME', 'name'),
          field('TYPE', 'connectorType'),
          field('SCOPES', 'scopes'),
          field('SCHEDULE', 'schedule'),
          { header: 'ENDPOINTS', value: (r) => (r.endpoints as Row[]).length },
          { header: 'UPDATED', value: when('updatedAt') },
        ],
        'No connectors.',
      );
      return 0;
    },
  },
  { name: 'connectors get', args: ['NAME'], summary: 'One connector: its endpoints and the applied manifest', run: async (c) => void (await getConnector(c)) },
  {
    name: 'connectors rm',
    args: ['NAME'],
    summary: 'Delete a connector with its ext.* tables and retrieval chunks (its runs stay)',
    run: async (c) => void (await act(c, 'DELETE', path`/api/connectors/${c.args[0]!}`, `connector/${c.args[0]} deleted`)),
  },
  {
    name: 'connectors run',
    args: ['NAME'],
    flags: {
      endpoint: { type: 'string', arg: 'ID', help: 'only this endpoint (its id in the manifest)' },
      wait: { type: 'boolean', help: 'wait for the runs to end; exit 1 unless all are Completed' },
    },
    summary: 'Start a run per enabled endpoint',
    run: runConnector,
  },
  {
    name: 'connectors preflight',
    args: ['[NAME]'],
    synopsis: 'NAME | -f FILE',
    flags: { file: MANIFEST_FILE },
    summary: 'Send each endpoint\'s first request once, write nothing; exit 1 unless ok',
    run: preflight,
  },
  {
    name: 'connectors validate',
    flags: { file: { ...MANIFEST_FILE, required: true } },
    summary: 'Check Connector manifests on the hub without applying them; exit 1 when one is invalid',
    run: validate,
  },

  {
    name: 'runs ls',
    flags: { connector: { type: 'string', arg: 'NAME', help: 'only this connector\'s runs (a name or an id)' }, limit: LIMIT, all: ALL },
    summary: 'Connector runs, newest first',
    run: async (c) => {
      const connector = str(c, 'connector');
      await warnUnknownConnector(c, await listing(c, '/api/platform/runs', RUN_COLUMNS, 'No runs.', { connector, limit: limitFlag(c) }), connector);
      return 0;
    },
  },
  { name: 'runs get', args: ['ID'], summary: 'One run record', run: async (c) => void (await record(c, path`/api/platform/runs/${c.args[0]!}`)) },
  {
    name: 'runs cancel',
    args: ['ID'],
    summary: 'Stop a running run (it ends Cancelled): at once when the process that answers runs it, else at its next heartbeat, page or chunk',
    run: async (c) => void (await act(c, 'POST', path`/api/platform/runs/${c.args[0]!}/cancel`, cancelled(c.args[0]!))),
  },

  {
    name: 'dlq ls',
    flags: {
      connector: { type: 'string', arg: 'NAME', help: 'a connector\'s unresolved entries (name or id)' },
      run: { type: 'string', arg: 'ID', help: 'a run\'s entries, resolved ones included' },
      limit: LIMIT,
      all: ALL,
    },
    summary: 'Dead-letter entries (without payloads)',
    run: async (c) => {
      const query = { connector: str(c, 'connector'), run: str(c, 'run'), limit: limitFlag(c) };
      const columns = [
        field('ID', 'id'),
        field('RUN', 'runId'),
        field('REASON', 'skipReason'),
        field('ATTEMPTS', 'attempts'),
        field('RESOLUTION', 'resolution'),
        { header: 'CAPTURED', value: when('capturedAt') },
        field('ERROR', 'errorMessage', 50),
      ];
      await warnUnknownConnector(c, await listing(c, '/api/platform/dlq', columns, 'No dead letters.', query), query.connector);
      return 0;
    },
  },
  { name: 'dlq get', args: ['ID'], summary: 'One entry with its payload and skip detail', run: async (c) => void (await record(c, path`/api/platform/dlq/${c.args[0]!}`)) },
  {
    name: 'dlq replayed',
    args: ['ID'],
    flags: { 'new-run': { type: 'string', arg: 'RUN', help: 'the run that replayed it' } },
    summary: 'Mark an entry replayed',
    run: async (c) => {
      const newRun = str(c, 'new-run');
      if (newRun !== undefined && !isUuid(newRun)) throw new UsageError(`--new-run must be a run id (a UUID, as svc runs ls --json shows), not '${newRun}'`);
      await act(c, 'POST', path`/api/platform/dlq/${c.args[0]!}/replayed`, `dead letter ${c.args[0]} marked replayed`, { query: { newRunId: newRun } });
    },
  },
  {
    name: 'dlq discard',
    args: ['ID'],
    summary: 'Discard an entry (the resolution is recorded, the entry kept)',
    run: async (c) => void (await act(c, 'POST', path`/api/platform/dlq/${c.args[0]!}/discard`, `dead letter ${c.args[0]} discarded`)),
  },
  {
    name: 'dlq erase',
    args: ['ID'],
    summary: 'Erase an entry for data-protection reasons (payload scrubbed; needs svc_admin)',
    run: async (c) => void (await act(c, 'DELETE', path`/api/platform/dlq/${c.args[0]!}`, `dead letter ${c.args[0]} erased`)),
  },

  {
    name: 'deliveries ls',
    flags: {
      failed: { type: 'boolean', help: 'only deliveries not (yet) successful' },
      integration: { type: 'string', arg: 'ID', help: 'only this integration\'s deliveries' },
      limit: LIMIT,
      all: ALL,
    },
    summary: 'Webhook deliveries of the tenant, failures first',
    run: async (c) => {
      const integration = str(c, 'integration');
      if (integration !== undefined && !/^\d+$/.test(integration)) throw new UsageError(`--integration must be an integration id, not '${integration}'`);
      const query = { status: bool(c, 'failed') ? 'failed' : undefined, integrationId: integration, limit: limitFlag(c) };
      const columns: Column[] = [
        field('ID', 'id'),
        field('INTEGRATION', 'integrationId'),
        field('EVENT', 'eventType'),
        field('KIND', 'kind'),
        field('ATTEMPTS', 'attempts'),
        field('OK', 'succeeded'),
        field('HTTP', 'http_status'),
        { header: 'ERROR', value: (r) => r.error ?? r.closedReason, max: 40 },
        { header: 'CREATED', value: when('createdAt') },
      ];
      await listing(c, '/api/platform/deliveries', columns, bool(c, 'failed') ? 'No failed deliveries.' : 'No deliveries.', query);
      return 0;
    },
  },
  {
    name: 'deliveries replay',
    args: ['ID'],
    summary: 'Send a delivery again (a new delivery with the original body)',
    run: async (c) => {
      const { body } = await c.hub().call<Row>('POST', path`/api/platform/deliveries/${c.args[0]!}/replay`);
      show(c, body, () => `delivery ${c.args[0]} replayed as delivery ${cell(body.id)}\n${detail(body)}`);
      return 0;
    },
  },

  {
    name: 'events ls',
    summary: 'The event types the hub emits (its catalog)',
    run: async (c) => {
      const columns: Column[] = [
        field('TYPE', 'type'),
        field('MODULE', 'module'),
        { header: 'PAYLOAD', value: (r) => Object.keys((r.payload as Row | undefined) ?? {}), max: 50 },
        field('DESCRIPTION', 'description', 60),
      ];
      await listing(c, '/api/platform/events', columns, 'No event types.');
      return 0;
    },
  },
  {
    name: 'events tail',
    flags: {
      topic: { type: 'string', multiple: true, arg: 'GLOB', help: 'only these event types (repeatable; * matches any run of characters)' },
      since: { type: 'string', arg: 'ID', help: 'start after this event id instead of now' },
      'open-timeout': { type: 'string', arg: 'DURATION', help: 'the longest wait for the hub to answer each opening of the stream (default 30s; 1s to 1h: 10s, 2m, …)' },
    },
    summary: 'Print live events as they happen until Ctrl-C (--json: one JSON object per line)',
    run: tail,
  },

  {
    name: 'secrets ls',
    summary: 'Secrets of the tenant (names and dates, never values)',
    run: async (c) => {
      const columns: Column[] = [
        field('NAME', 'name'),
        field('DESCRIPTION', 'description', 50),
        { header: 'CREATED', value: when('createdAt') },
        { header: 'ROTATED', value: when('rotatedAt') },
      ];
      await listing(c, '/api/platform/secrets', columns, 'No secrets.');
      return 0;
    },
  },
  { name: 'secrets get', args: ['NAME'], summary: 'One secret\'s metadata (never its value)', run: async (c) => void (await record(c, path`/api/platform/secrets/${c.args[0]!}`)) },
  {
    name: 'secrets create',
    args: ['NAME'],
    flags: { 'value-stdin': VALUE_STDIN, description: DESCRIPTION },
    summary: 'Store a secret; the value comes from stdin or a prompt, never the command line',
    run: async (c) => {
      const name = c.args[0]!;
      const body = { name, ...(await secretBody(c, name)) };
      try {
        await act(c, 'POST', '/api/platform/secrets', `secret/${name} created`, { json: body });
      } catch (err) {
        // A name already taken: a new value for it is a rotation.
        if (err instanceof HttpError && err.status === 409) throw new HttpError(409, `${err.message}; to give it a new value: svc secrets rotate ${name}`, err.body);
        throw err;
      }
      return 0;
    },
  },
  {
    name: 'secrets rotate',
    args: ['NAME'],
    flags: { 'value-stdin': VALUE_STDIN, description: DESCRIPTION },
    summary: 'Replace a secret\'s value',
    run: async (c) => {
      const name = c.args[0]!;
      await act(c, 'PUT', path`/api/platform/secrets/${name}`, `secret/${name} rotated`, { json: await secretBody(c, name) });
      return 0;
    },
  },
  { name: 'secrets rm', args: ['NAME'], summary: 'Delete a secret', run: async (c) => void (await act(c, 'DELETE', path`/api/platform/secrets/${c.args[0]!}`, `secret/${c.args[0]} deleted`)) },

  {
    name: 'entities ls',
    summary: 'Entities of the tenant',
    run: async (c) => {
      const columns: Column[] = [
        field('NAME', 'name'),
        field('SCOPES', 'scopes'),
        field('KEY', 'key'),
        { header: 'COLUMNS', value: (r) => (r.columns as Row[]).length },
        { header: 'SOURCES', value: (r) => (r.sources as Row[]).map((s) => s.table) },
      ];
      await listing(c, '/api/entities', columns, 'No entities.');
      return 0;
    },
  },
  { name: 'entities get', args: ['NAME'], summary: 'One entity: its columns, sources and the applied manifest', run: async (c) => void (await getEntity(c)) },
  {
    name: 'entities rm',
    args: ['NAME'],
    summary: 'Delete an entity (the ext.* tables it reads stay)',
    run: async (c) => void (await act(c, 'DELETE', path`/api/entities/${c.args[0]!}`, `entity/${c.args[0]!.toLowerCase()} deleted`)),
  },

  {
    name: 'processes ls',
    summary: 'Processes of the tenant',
    run: async (c) => {
      const columns: Column[] = [field('NAME', 'name'), field('EVENT', 'event'), field('WHEN', 'when', 40), field('DECISION', 'decision'), { header: 'UPDATED', value: when('updatedAt') }];
      await listing(c, '/api/processes', columns, 'No processes.');
      return 0;
    },
  },
  {
    name: 'processes get',
    args: ['NAME'],
    summary: 'One process with the applied manifest',
    run: async (c) => {
      const { body } = await c.hub().call<Row & { manifest: unknown }>('GET', path`/api/processes/${c.args[0]!}`);
      show(c, body, () => {
        const { name, event, when: condition, decision, message, createdAt, updatedAt } = body;
        return `${detail({ name, event, when: condition, decision, message, createdAt, updatedAt })}\nManifest:\n${indent(detail(manifestOrder(body.manifest)))}`;
      });
      return 0;
    },
  },

  {
    name: 'audit ls',
    flags: {
      actor: { type: 'string', arg: 'A', help: 'only this actor\'s entries (exactly as ACTOR shows it)' },
      action: { type: 'string', arg: 'X', help: 'only this action, exactly: \'DELETE /api/platform/dlq/{id}\'' },
      outcome: { type: 'string', arg: 'O', help: 'only success or failure' },
      since: { type: 'string', arg: 'T', help: 'only entries at or after this instant (2026-12-01T00:00:00Z)' },
      until: { type: 'string', arg: 'T', help: 'only entries before this instant' },
      limit: LIMIT,
      all: ALL,
    },
    summary: 'The audit trail of the tenant, newest first (needs svc_admin)',
    run: async (c) => {
      const outcome = str(c, 'outcome');
      if (outcome !== undefined && outcome !== 'success' && outcome !== 'failure') throw new UsageError(`--outcome must be success or failure, not '${outcome}'`);
      const query = { actor: str(c, 'actor'), action: str(c, 'action'), outcome, since: str(c, 'since'), until: str(c, 'until'), limit: limitFlag(c) };
      const columns: Column[] = [
        { header: 'AT', value: when('at') },
        field('ACTOR', 'actor', 30),
        field('ACTION', 'action', 50),
        field('TARGET', 'target', 50),
        field('STATUS', 'status'),
        { header: 'FROM', value: (row) => (row.impersonating ? `tenant ${String(row.homeTenantId ?? '?')}` : null) },
      ];
      await listing(c, '/api/platform/audit', columns, 'No audit entries.', query);
      return 0;
    },
  },

  {
    name: 'inbox ls',
    flags: { unacked: { type: 'boolean', help: 'only decisions not acknowledged yet' }, limit: LIMIT, all: ALL },
    summary: 'The decision inbox of the tenant, newest first',
    run: async (c) => {
      const query = { acked: bool(c, 'unacked') ? 'false' : undefined, limit: limitFlag(c) };
      const columns: Column[] = [
        field('ID', 'id'),
        field('TYPE', 'type'),
        field('MESSAGE', 'message', 60),
        { header: 'CREATED', value: when('createdAt') },
        { header: 'ACKED', value: when('ackedAt') },
        field('BY', 'ackedBy'),
      ];
      await listing(c, '/api/inbox', columns, bool(c, 'unacked') ? 'No unacknowledged decisions.' : 'No decisions.', query);
      return 0;
    },
  },
  {
    name: 'inbox ack',
    args: ['ID'],
    summary: 'Acknowledge a decision (a second ack changes nothing)',
    run: async (c) => {
      const { body } = await c.hub().call<Row>('POST', path`/api/inbox/${c.args[0]!}/ack`);
      show(c, body, () => `decision ${c.args[0]} acknowledged by ${cell(body.ackedBy)} at ${cell(body.ackedAt)}\n`);
      return 0;
    },
  },

  {
    name: 'workflows ls',
    summary: 'Workflows of the tenant (svc_integrator plus svc_admin or svc_superadmin)',
    run: async (c) => {
      const columns: Column[] = [
        field('NAME', 'name'),
        field('ENTITY', 'entity'),
        field('SCOPE', 'scope'),
        field('STATE COLUMN', 'stateColumn'),
        field('STATES', 'states'),
        { header: 'DORMANT AFTER', value: (r) => (r.dormancy as { after: string } | null)?.after ?? null },
      ];
      await listing(c, '/api/platform/workflows', columns, 'No workflows.');
      return 0;
    },
  },
  { name: 'workflows get', args: ['NAME'], summary: 'One workflow: its lifecycle, dormancy and the applied manifest', run: async (c) => void (await getWorkflow(c)) },
  {
    name: 'workflows rm',
    args: ['NAME'],
    summary: 'Delete a workflow (its dormancy spells and lifecycle corpus go with it; svc_admin)',
    run: async (c) => void (await act(c, 'DELETE', path`/api/workflows/${c.args[0]!}`, `workflow/${c.args[0]!.toLowerCase()} deleted`)),
  },

  {
    name: 'exports ls',
    summary: 'Exports of the tenant whose scope you hold',
    run: async (c) => {
      const columns: Column[] = [field('NAME', 'name'), field('ENTITY', 'entity'), field('SCOPE', 'scope'), field('DESTINATION', 'destination'), field('SCHEDULE', 'schedule')];
      await listing(c, '/api/exports', columns, 'No exports.');
      return 0;
    },
  },
  { name: 'exports get', args: ['NAME'], summary: 'One export and its applied manifest', run: async (c) => void (await getExport(c)) },
  {
    name: 'exports rm',
    args: ['NAME'],
    summary: 'Delete an export (a run in flight is stopped; its runs stay; published files stay where they are)',
    run: async (c) => void (await act(c, 'DELETE', path`/api/exports/${c.args[0]!}`, `export/${c.args[0]!.toLowerCase()} deleted`)),
  },
  {
    name: 'exports run',
    args: ['NAME'],
    flags: { 'no-wait': NO_WAIT },
    summary: 'Start a run and follow it: progress, then the receipt; exit 1 unless Completed',
    run: (c) => startRun(c, c.args[0]!, path`/api/exports/${c.args[0]!}/runs`, bool(c, 'no-wait')),
  },
  {
    name: 'exports runs',
    args: ['NAME'],
    flags: { limit: { type: 'string', arg: 'N', help: `at most N runs (1 to ${MAX_LIMIT}, default 50)` }, all: ALL },
    summary: 'Runs of an export, newest first',
    run: async (c) => {
      await listing(c, path`/api/exports/${c.args[0]!}/runs`, EXPORT_RUN_COLUMNS, 'No runs.', { limit: limitFlag(c) });
      return 0;
    },
  },
  {
    name: 'exports retry',
    args: ['NAME', 'RUN_ID'],
    flags: { 'no-wait': NO_WAIT },
    summary: 'Retry a Failed run (same file name) and follow it like run',
    run: (c) => startRun(c, c.args[0]!, path`/api/exports/${c.args[0]!}/runs/${c.args[1]!}/retry`, bool(c, 'no-wait'), c.args[1]),
  },
  {
    name: 'exports cancel',
    args: ['NAME', 'RUN_ID'],
    summary: 'Stop a Running run (it ends Failed interrupted, nothing published; one already publishing ends as its publication does)',
    run: async (c) => void (await act(c, 'POST', path`/api/exports/${c.args[0]!}/runs/${c.args[1]!}/cancel`, exportCancelled(c.args[0]!, c.args[1]!))),
  },
  {
    name: 'exports download',
    args: ['ENTITY'],
    flags: { output: { type: 'string', short: 'o', arg: 'FILE', help: 'write the CSV to FILE (default: stdout); --json needs it, and prints {entity, file, rows, bytes, sha256}' } },
    summary: 'One-shot CSV of an entity, its SHA-256 checked against the hub\'s',
    run: (c) => {
      const file = str(c, 'output');
      // Without -o stdout is the CSV: --json, which scripts read as JSON, would print CSV (checked before anything is sent)
      if (c.json && (file === undefined || file === '-')) throw new UsageError('--json prints the summary of a download written to a file, and needs -o FILE: without it stdout is the CSV, not JSON');
      return download(c, c.args[0]!, file === '-' ? undefined : file);
    },
  },

  {
    name: 'search',
    args: ['QUERY'],
    flags: { scope: SEARCH_SCOPE, top: TOP, corpus: { type: 'string', arg: 'NAME', help: 'only this corpus (a connector\'s name, or system)' } },
    summary: 'Semantic search over the ingested data: the nearest rows, best first',
    run: async (c) => {
      const { body } = await c.hub().call<{ results: Row[] }>('POST', '/api/platform/rag/search', { json: searchBody(c, 'query') });
      const columns: Column[] = [
        { header: 'SIMILARITY', value: (r) => (r.similarity as number).toFixed(3) },
        { header: 'TABLE', value: (r) => (r.metadata as Row).table ?? (r.metadata as Row).corpus },
        { header: 'KEY', value: (r) => (r.metadata as Row).key ?? '' },
        { header: 'CONTENT', value: (r) => r.content, max: 70 },
      ];
      show(c, body, () => (body.results.length ? table(body.results, columns) : 'Nothing found.\n'));
      await warnIndexBehind(c);
      return 0;
    },
  },
  {
    name: 'chat',
    args: ['QUESTION'],
    flags: { analytic: { type: 'boolean', help: 'answer with one read-only SQL query over the scope\'s schema card' }, scope: SCOPE, top: TOP },
    summary: 'Ask a question over the ingested data: the answer and its cited rows, or the SQL that ran',
    run: chat,
  },
  {
    name: 'index status',
    summary: 'How far the index of the ingested data is: rows not made into chunks yet, chunks without their vector, the model (needs svc_admin)',
    run: async (c) => {
      const { body } = await c.hub().call<Row>('GET', '/api/platform/rag/status');
      show(c, body, () => {
        const behind = notSearchable(body);
        let head = '';
        if (behind && behind.pendingRows + behind.waiting + behind.setAside === 0) head = `searchable: all ${behind.chunks} chunk(s)\n`;
        else if (behind) {
          head = `searchable: ${behind.embedded} of ${behind.chunks} chunk(s); not yet: ${behind.pendingRows} ingested row(s) still to be made into chunks, ${behind.waiting} chunk(s) waiting for their vector, ${behind.setAside} set aside (refused by the model, tried again later)\n`;
        }
        return `${head}${detail(body)}`;
      });
      return 0;
    },
  },
  {
    name: 'rediscover',
    flags: { scope: { type: 'string', arg: 'S', required: true, help: 'the scope whose schema card is discovered again' } },
    summary: 'Discover a scope\'s schema card from its ingested tables (what chat --analytic reads); replaces the card',
    run: async (c) => {
      const { body } = await c.hub().call<{ scope: string; tableCount: number; columnCount: number; enriched: boolean; sourceType: string }>(
        'POST',
        '/api/platform/rag/rediscover',
        { query: { scope: str(c, 'scope') } },
      );
      show(c, body, () => `scope ${body.scope}: ${body.tableCount} table(s), ${body.columnCount} column(s) discovered (source ${body.sourceType}${body.enriched ? ', enriched' : ''})\n`);
      if (body.tableCount === 0) await warnEmptyCard(c, body.scope);
      return 0;
    },
  },
  {
    name: 'tui',
    flags: {
      every: { type: 'string', arg: 'DURATION', help: 'refresh runs, dead letters, deliveries and the inbox this often (default 3s; 500ms, 1m, …)' },
      topic: { type: 'string', multiple: true, arg: 'GLOB', help: 'the events view shows only these event types (repeatable)' },
    },
    summary: 'Full-screen terminal UI: runs, dead letters, deliveries, live events, the decision inbox (needs a terminal)',
    json: false,
    run: runTui,
  },
];

/**
 * A rediscover that found nothing stored an empty card: the scope is declared (the hub answers a
 * scope nothing declares with a 404, storing nothing), but what declares it has no table yet, which
 * a warning says, naming them. Asked on this path only; a list the caller may not read leaves the
 * warning out.
 */
async function warnEmptyCard(c: Ctx, scope: string): Promise<void> {
  const declaring: string[] = [];
  for (const [kind, route] of [['connector', '/api/connectors'], ['entity', '/api/entities']] as const) {
    try {
      const { body } = await c.hub().call<Array<{ name: string; scopes?: unknown }>>('GET', route);
      for (const row of body) if (Array.isArray(row.scopes) && row.scopes.includes(scope)) declaring.push(`${kind}/${row.name}`);
    } catch (err) {
      if (err instanceof HttpError) return;
      throw err;
    }
  }
  if (declaring.length) warn(c, `scope '${scope}' is declared by ${declaring.join(', ')}, but none of the tables they read exists yet: run the connectors, then svc rediscover --scope ${scope} again`);
}

/** A status's counts, when it has them all (an older hub's lacks `pendingRows`). */
function notSearchable(status: Row): { chunks: number; embedded: number; setAside: number; waiting: number; pendingRows: number } | undefined {
  const { chunks, embedded, setAside, pendingRows } = status as Partial<Record<'chunks' | 'embedded' | 'setAside' | 'pendingRows', unknown>>;
  if (typeof chunks !== 'number' || typeof embedded !== 'number' || typeof setAside !== 'number' || typeof pendingRows !== 'number') return undefined;
  return { chunks, embedded, setAside, waiting: chunks - embedded - setAside, pendingRows };
}

/**
 * After a search or a semantic chat: a warning when part of the tenant's ingested data is not
 * searchable yet (rows the indexer has not made into chunks, chunks waiting for their vector), so
 * that a search right after a run does not pass for one over all of it. The status needs svc_admin:
 * a caller without it (or an older hub, or one that fails the call) gets no warning.
 */
async function warnIndexBehind(c: Ctx): Promise<void> {
  let status: Row;
  try {
    ({ body: status } = await c.hub().call<Row>('GET', '/api/platform/rag/status'));
  } catch {
    return;
  }
  const behind = notSearchable(status);
  if (!behind || behind.pendingRows + behind.waiting === 0) return;
  const parts = [behind.pendingRows ? `${behind.pendingRows} ingested row(s) not yet made into chunks` : '', behind.waiting ? `${behind.waiting} chunk(s) waiting for their vector` : ''].filter(Boolean);
  warn(c, `the index is still being built: ${parts.join(' and ')}, not searched yet (svc index status)`);
}

/** A warning on stderr: its text may quote the hub or a manifest, so it is shown, never obeyed by the terminal. */
/** A manifest issue as a line: its field first; the entry counting the issues past the listed ones has none. */
const issueLine = (w: { field: string; message: string }) => (w.field ? `${w.field}: ${w.message}` : w.message);

function warn(c: Ctx, text: string): void {
  c.err(`warning: ${printable(text)}\n`);
}

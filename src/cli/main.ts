import { type ParseArgsConfig, parseArgs } from 'node:util';
import { packageVersion } from '../package-root.js';
import { COMMANDS, type Command, type Ctx, type Flag, type Io } from './commands.js';
import type { Output } from './context.js';
import { configPath, resolveTarget, type Target } from './config.js';
import { answered, CliError, HttpError, Interrupted, UsageError } from './errors.js';
import { Hub } from './http.js';
import { columnsOf, padTo, printable } from './output.js';
import { closest } from '../validation/closest.js';

/**
 * `svc`, the command-line client of the hub: finds the command in the table (commands.ts), parses
 * its flags, runs it and turns what it throws into an exit code: 0 success, 1 any failure (an HTTP
 * error prints the hub's message and status; the command's `failure` instead when set, svc diff's
 * 2), 2 a wrong command line (with the usage), 130 Ctrl-C (143 SIGTERM).
 */

const GLOBAL: Record<string, Flag> = {
  json: { type: 'boolean', help: 'print the hub\'s JSON, indented (for scripts)' },
  help: { type: 'boolean', short: 'h', help: 'show help' },
};

/** The global options as they are written on a command line. */
const GLOBAL_TOKENS = Object.entries(GLOBAL).flatMap(([name, flag]) => [`--${name}`, ...(flag.short ? [`-${flag.short}`] : [])]);

export async function main(argv: string[], io: Io = processIo()): Promise<number> {
  const out = (text: string) => void io.stdout.write(text);
  const err = (text: string) => void io.stderr.write(text);
  // help on stdout (--help, svc help) is wrapped to stdout's width, the usage after an error to stderr's
  const w = helpWidth(io.stdout);
  const ew = helpWidth(io.stderr);

  const words: string[] = [];
  const rest = [...argv];
  // The global options may come before the command or between a group and its verb too (`svc --json
  // runs ls`, `svc runs --json ls`): taken there, the words after them were no command ('unknown option --json').
  const early: string[] = [];
  while (rest.length && words.length < 2) {
    const token = rest[0]!;
    if (GLOBAL_TOKENS.includes(token)) {
      early.push(rest.shift()!);
      continue;
    }
    if (token.startsWith('-')) break;
    if (words.length === 1 && !isGroup(words[0]!)) break;
    words.push(rest.shift()!);
  }
  rest.unshift(...early);
  const wantsHelp = rest.includes('--help') || rest.includes('-h');

  if (words[0] === 'help') {
    const topic = [...words.slice(1), ...rest].filter((w) => !w.startsWith('-')).join(' ');
    const found = topic ? COMMANDS.find((c) => c.name === topic) : undefined;
    if (found) out(commandHelp(found, w));
    else if (topic && isGroup(topic)) out(groupHelp(topic, w));
    else if (topic) return usageError(err, `unknown command '${topic}'${meant(topic, [...topWords(), ...COMMANDS.map((c) => c.name)])}`, overview(ew));
    else out(overview(w));
    return 0;
  }
  if (!words.length) {
    const option = rest.find((token) => !GLOBAL_TOKENS.includes(token));
    if (option === '--version') {
      out(`${packageVersion()}\n`);
      return 0;
    }
    if (wantsHelp) {
      out(overview(w));
      return 0;
    }
    const near = option?.startsWith('--') ? meant(option.slice(2), ['version', ...Object.keys(GLOBAL)], '--') : '';
    return usageError(err, option !== undefined ? `unknown option '${option}'${near}` : 'no command given', overview(ew));
  }

  const [group, verb] = words;
  const unavailable = COMMANDS.find((c) => c.name === group && c.unavailable);
  if (unavailable) {
    err(`svc ${group}: not available yet: ${unavailable.unavailable}.\n`);
    return 2;
  }
  let command: Command | undefined;
  if (isGroup(group!)) {
    if (!verb) {
      if (wantsHelp) {
        out(groupHelp(group!, w));
        return 0;
      }
      return usageError(err, `svc ${group}: which one?`, groupHelp(group!, ew));
    }
    command = COMMANDS.find((c) => c.name === `${group} ${verb}`);
    if (!command) return usageError(err, `svc ${group}: unknown command '${verb}'${meant(verb!, verbsOf(group!))}`, groupHelp(group!, ew));
  } else {
    command = COMMANDS.find((c) => c.name === group);
    if (!command) return usageError(err, `unknown command '${group}'${meant(group!, topWords())}`, overview(ew));
  }

  let parsed: { values: Ctx['opts']; positionals: string[]; repeated?: string };
  try {
    const result = parseArgs({ args: negativeValues(rest, { ...command.flags, ...GLOBAL }), options: parseOptions({ ...command.flags, ...GLOBAL }), allowPositionals: true, strict: true, tokens: true });
    parsed = { values: result.values as Ctx['opts'], positionals: result.positionals, repeated: repeatedFlag(result.tokens, command.flags ?? {}) };
  } catch (e) {
    return usageError(err, `svc ${command.name}: ${parseProblem(e as Error & { code?: string }, { ...command.flags, ...GLOBAL })}`, commandHelp(command, ew));
  }
  if (parsed.values.help) {
    out(commandHelp(command, w));
    return 0;
  }
  // `svc tui --json` ran the UI as if the option were not there, which its help offered.
  if (command.json === false && parsed.values.json) return usageError(err, `svc ${command.name}: --json is for scripts, and svc ${command.name} has no JSON to print: svc runs ls --json, svc events tail --json, …`, commandHelp(command, ew));
  const problem = parsed.repeated ?? argumentProblem(command, parsed.positionals, parsed.values);
  if (problem) return usageError(err, `svc ${command.name}: ${problem}`, commandHelp(command, ew));

  failureExit = command.failure ?? 1;
  cutExit = 0;
  const controller = new AbortController();
  // Ctrl-C (SIGINT), and SIGTERM (`timeout`, `kill`, a supervisor): the command stops as it does for
  // Ctrl-C, cleaning up after itself (a download's temporary file); killed outright, it left that file.
  let exitOnSignal = 130;
  const onSigint = () => controller.abort();
  const onSigterm = () => {
    exitOnSignal = 143;
    controller.abort();
  };
  if (io.signal) io.signal.addEventListener('abort', onSigint, { once: true });
  else {
    process.once('SIGINT', onSigint);
    process.once('SIGTERM', onSigterm);
  }
  const hubs: Hub[] = [];
  let loggedIn: Hub | undefined;
  const configFile = configPath(io.env);
  const ctx: Ctx = {
    args: parsed.positionals,
    opts: parsed.values,
    json: parsed.values.json === true,
    io,
    signal: controller.signal,
    configFile,
    hub: (target?: Target) => {
      if (!target && loggedIn) return loggedIn;
      const hub = new Hub(target ?? resolveTarget(io.env, configFile, (text) => err(`warning: ${printable(text)}\n`)), controller.signal);
      hubs.push(hub);
      if (!target) loggedIn = hub;
      return hub;
    },
    // For people, text from the hub is shown, never obeyed by the terminal; --json is the hub's JSON as sent.
    out: parsed.values.json === true ? out : (text: string) => out(printable(text)),
    err,
    exitIfCut: (code) => {
      cutExit = code;
    },
  };
  try {
    const running = Promise.resolve(command.run!(ctx));
    // A command stops on the signal, cleaning up as it goes; one held by a wait nothing can cut (a
    // read of a FIFO, a write to a pipe nobody reads) is given STOP_GRACE_MS, then svc exits anyway.
    const held = await unlessHeld(running, controller.signal, STOP_GRACE_MS);
    if (held === STOPPED) {
      running.catch(() => undefined);
      // Its wait sits in libuv's thread pool (the open or read of a FIFO), which process.exit joins:
      // an exit would wait for it for ever. The process ends by the signal itself instead (its
      // listener, once, is gone: the default action), which the shell counts as 130 (143).
      if (!io.signal) process.kill(process.pid, exitOnSignal === 143 ? 'SIGTERM' : 'SIGINT');
      return exitOnSignal;
    }
    return held ?? 0;
  } catch (e) {
    if (controller.signal.aborted || e instanceof Interrupted) return exitOnSignal;
    if (e instanceof UsageError) return usageError(err, `svc ${command.name}: ${e.message}`, commandHelp(command, ew));
    if (e instanceof HttpError) err(`error: ${printable(e.message)} (${answered(e)})\n`);
    else if (e instanceof CliError) err(`error: ${printable(e.message)}\n`);
    else err(`error: ${printable((e as Error).message ?? String(e))}\n`);
    return command.failure ?? 1;
  } finally {
    if (io.signal) io.signal.removeEventListener('abort', onSigint);
    else {
      process.off('SIGINT', onSigint);
      process.off('SIGTERM', onSigterm);
    }
    await Promise.all(hubs.map((h) => h.close()));
  }
}

/** How long a command has to end after Ctrl-C (or SIGTERM) before svc exits without it. */
const STOP_GRACE_MS = 2_000;
const STOPPED = Symbol('stopped');

/** `running`, or STOPPED when it has not settled `grace` ms after `signal` aborted. */
async function unlessHeld<T>(running: Promise<T>, signal: AbortSignal, grace: number): Promise<T | typeof STOPPED> {
  let timer: NodeJS.Timeout | undefined;
  let later = () => undefined as unknown;
  const held = new Promise<typeof STOPPED>((resolve) => {
    later = () => (timer = setTimeout(() => resolve(STOPPED), grace));
    if (signal.aborted) later();
    else signal.addEventListener('abort', later, { once: true });
  });
  try {
    return await Promise.race([running, held]);
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', later);
  }
}

/** The exit code of output that cannot be written: the running command's failure code (`svc diff`: 2, where 1 says "differences"). */
let failureExit = 1;
/** The exit code of output cut by its reader (`svc runs ls | head`): 0, or what the command has found so far (Ctx.exitIfCut). */
let cutExit = 0;

function processIo(): Io {
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    // `svc runs ls | head`: a closed pipe ends the output, not with a stack trace.
    if (e.code === 'EPIPE') process.exit(cutExit);
    // Any other failure to write (a full disk: ENOSPC, EIO) lost output a script reads: never a success.
    process.stderr.write(`error: cannot write to standard output: ${e.code ?? e.message}; what was printed is incomplete\n`);
    process.exit(failureExit);
  });
  return { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin, env: process.env };
}

function usageError(err: (text: string) => void, message: string, usage: string): number {
  // The message quotes what was typed, which a script may have taken from elsewhere (the hub, a file).
  err(`${printable(message)}\n\n${usage}`);
  return 2;
}

/**
 * node:util's parse error as the CLI's other usage errors read: `--limit needs a value`, `--json
 * takes no value`, otherwise lower case without node's advice on positionals starting with '-', and
 * with the command's nearest flag when an unknown one is a near spelling of it.
 */
/**
 * `--limit -1`, `--every -1`: a value that begins with a dash and a digit can be no option, so it is
 * given to the option before it (as `--limit=-1`), whose own check then refuses it in svc's words;
 * parseArgs would call it an ambiguous argument.
 */
function negativeValues(args: string[], flags: Record<string, Flag>): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--') return [...out, ...args.slice(i)];
    const next = args[i + 1];
    if (arg.startsWith('--') && flags[arg.slice(2)]?.type === 'string' && next !== undefined && /^-\.?\d/.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else out.push(arg);
  }
  return out;
}

function parseProblem(e: Error & { code?: string }, flags: Record<string, Flag>): string {
  const stripped = e.message.replace(/\. To specify a positional argument.*$/s, '');
  const missing = /^Option '(.+?)(?: <value>)?' argument missing$/.exec(stripped);
  if (missing) return `${missing[1]} needs a value`;
  const unwanted = /^Option '(.+?)' does not take an argument$/.exec(stripped);
  if (unwanted) return `${unwanted[1]} takes no value`;
  // node's three sentences, as one: `--connector -x` may be a forgotten value or a value beginning with a dash.
  const ambiguous = /^Option '(.+?)' argument is ambiguous\..*use '(--[^=']+)=-XYZ'/s.exec(stripped);
  if (ambiguous) return `${ambiguous[1]} needs a value; one that begins with a dash is written ${ambiguous[2]}=-VALUE`;
  const message = stripped.charAt(0).toLowerCase() + stripped.slice(1);
  if (e.code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return message;
  const option = /'([^']+)'/.exec(message)?.[1] ?? '';
  const name = option.replace(/^--?/, '').replace(/=.*$/s, '');
  return `unknown option '${option}'${option.startsWith('--') ? meant(name, Object.keys(flags), '--') : ''}`;
}

/** `; did you mean 'x'?` when `word` is a near spelling of one candidate, else nothing. */
function meant(word: string, candidates: Iterable<string>, prefix = ''): string {
  const near = closest(word, candidates);
  return near === undefined ? '' : `; did you mean '${prefix}${near}'?`;
}

function verbsOf(group: string): string[] {
  return COMMANDS.filter((c) => c.name.startsWith(`${group} `)).map((c) => c.name.slice(group.length + 1));
}

function topWords(): Set<string> {
  return new Set(COMMANDS.map((c) => c.name.split(' ')[0]!));
}

function isGroup(word: string): boolean {
  return COMMANDS.some((c) => c.name.startsWith(`${word} `));
}

function parseOptions(flags: Record<string, Flag>): NonNullable<ParseArgsConfig['options']> {
  return Object.fromEntries(
    Object.entries(flags).map(([name, f]) => [name, { type: f.type, ...(f.short ? { short: f.short } : {}), ...(f.multiple ? { multiple: true } : {}) }]),
  );
}

function argumentProblem(command: Command, positionals: string[], values: Ctx['opts']): string | undefined {
  const names = command.args ?? [];
  const required = names.filter((a) => !a.startsWith('[')).length;
  if (positionals.length < required) return `missing ${names.slice(positionals.length, required).join(' ')}`;
  if (positionals.length > names.length) return `unexpected argument '${positionals[names.length]}'`;
  // No argument is meaningful blank (names, ids, a query, a question), and the hub would not take one: an
  // empty name would even name the collection (`secrets get ''` was GET /api/platform/secrets/, the list).
  const blank = positionals.findIndex((p) => p.trim() === '');
  if (blank >= 0) return `${names[blank]!.replace(/^\[(.*)\]$/, '$1')} must not be empty`;
  for (const [name, flag] of Object.entries(command.flags ?? {})) {
    if (flag.required && values[name] === undefined) return `${flagName(name, flag)} is required`;
    // A name, an id, a scope, a file: never blank (`rediscover --scope ' '` was the hub's 400, `search --scope ' '` found nothing).
    const value = values[name];
    if (flag.type === 'string' && !flag.multiple && typeof value === 'string' && (value === '' || (!flag.text && value.trim() === ''))) return `${flagName(name, flag)} needs a value`;
  }
  return undefined;
}

/**
 * A flag of one value given twice with different values: parseArgs keeps the last and drops the
 * first without a word (`svc apply -f a.yaml -f b.yaml` applied b.yaml alone, as kubectl would apply both).
 */
function repeatedFlag(tokens: Array<{ kind: string; name?: string; value?: string }>, flags: Record<string, Flag>): string | undefined {
  const seen = new Map<string, string>();
  for (const token of tokens) {
    const name = token.kind === 'option' ? token.name : undefined;
    const flag = name === undefined ? undefined : flags[name];
    if (name === undefined || flag?.type !== 'string' || flag.multiple || token.value === undefined) continue;
    const first = seen.get(name);
    if (first === undefined) seen.set(name, token.value);
    else if (first !== token.value)
      return `${flagName(name, flag)} is given twice ('${first}', '${token.value}') and takes one ${flag.arg ?? 'value'}${flag.once ? `: ${flag.once}` : ''}`;
  }
  return undefined;
}

// ---- help ----

function flagName(name: string, flag: Flag): string {
  return flag.short ? `-${flag.short}` : `--${name}`;
}

function synopsis(command: Command): string {
  if (command.synopsis) return `svc ${command.name} ${command.synopsis}`;
  const parts = [...(command.args ?? [])];
  for (const [name, flag] of Object.entries(command.flags ?? {})) {
    const text = `${flagName(name, flag)}${flag.type === 'string' ? ` ${flag.arg ?? 'VALUE'}` : ''}`;
    parts.push(flag.required ? text : `[${text}]${flag.multiple ? '...' : ''}`);
  }
  return `svc ${[command.name, ...parts].join(' ')}`;
}

/** Help is wrapped to the terminal's width (at least 40 columns), to 80 when it is not a terminal. */
function helpWidth(stream: Output): number {
  return stream.isTTY && stream.columns ? Math.max(40, stream.columns) : 80;
}

/**
 * `text` wrapped at its spaces to `width` terminal columns: the first line starts at column `start`,
 * the others are indented `indent` spaces. A word longer than a line stays whole.
 */
function wrap(text: string, width: number, indent: number, start = indent): string {
  const rows: string[] = [];
  let row = '';
  let room = width - start;
  for (const word of text.split(/ +/).filter(Boolean)) {
    if (row && columnsOf(row) + 1 + columnsOf(word) > room) {
      rows.push(row);
      row = word;
      room = width - indent;
    } else row = row ? `${row} ${word}` : word;
  }
  rows.push(row);
  return rows.join(`\n${' '.repeat(indent)}`);
}

/**
 * Two columns (commands and their summaries, options and their help), the right one wrapped within
 * its column. A left cell wider than `maxLeft` has a line of its own; where the right column would
 * be narrower than 24, every right cell goes on the next line, indented 6.
 */
function twoColumns(rows: ReadonlyArray<readonly [string, string]>, width: number, maxLeft = Infinity): string {
  const left = Math.min(maxLeft, Math.max(...rows.map(([l]) => columnsOf(l))));
  const at = 2 + left + 2;
  const hang = width - at >= 24 ? at : 6;
  return rows
    .map(([l, r]) => (columnsOf(l) > left || hang !== at ? `  ${wrap(l, width, 6, 2)}\n${' '.repeat(hang)}${wrap(r, width, hang)}` : `  ${padTo(l, left)}  ${wrap(r, width, at)}`))
    .join('\n');
}

function commandList(commands: Command[], width: number): string {
  const rows = commands.map((c) => [c.unavailable ? `svc ${c.name}` : synopsis(c), c.unavailable ? `${c.summary} (not available yet)` : c.summary] as const);
  // the commands' column: up to 48 wide, less on a narrow terminal so that the summaries keep room
  return twoColumns(rows, width, Math.min(48, Math.floor(width * 0.45)));
}

const GLOBAL_HELP = [
  ['--json', "print the hub's JSON, indented (for scripts)"],
  ['-h, --help', 'help for any command: svc connectors run --help'],
  ['--version', 'the version of svc (alone: svc --version)'],
] as const;

function footer(width: number): string {
  const paragraph = (text: string) => `${wrap(text, width, 0)}\n`;
  return `Global options:
${twoColumns(GLOBAL_HELP, width)}

${paragraph(
  'Configuration: svc login writes $SVC_CLI_CONFIG (default $XDG_CONFIG_HOME/svc/config.json, else ~/.config/svc/config.json; mode 0600); SVC_URL, SVC_TOKEN and SVC_DEV_TENANT override it; a token goes over plain http to another machine only after svc login --allow-http, or with SVC_ALLOW_HTTP=1.',
)}${paragraph('Exit codes: 0 ok, 1 failed (an HTTP error prints the hub\'s message and status), 2 wrong command line (svc diff: 1 a difference, 2 an error), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM. See docs/cli.md.')}`;
}

function overview(width: number): string {
  return `svc: the command-line client of svc-hub

Usage: svc COMMAND [ARGS] [OPTIONS]

Commands:
${commandList(COMMANDS, width)}

${footer(width)}`;
}

function groupHelp(group: string, width: number): string {
  return `Usage: svc ${group} COMMAND

${commandList(
  COMMANDS.filter((c) => c.name.startsWith(`${group} `)),
  width,
)}
`;
}

function commandHelp(command: Command, width: number): string {
  const global = Object.entries(GLOBAL).filter(([name]) => name !== 'json' || command.json !== false);
  const flags = [...Object.entries(command.flags ?? {}), ...global].map(([name, f]) => {
    const left = `${f.short ? `-${f.short}, ` : ''}--${name}${f.type === 'string' ? ` ${f.arg ?? 'VALUE'}` : ''}`;
    return [left, f.help] as const;
  });
  return `Usage: ${wrap(synopsis(command), width, 4, 7)}

${wrap(`${command.summary}.`, width, 0)}

Options:
${twoColumns(flags, width)}
`;
}

import { Readable } from 'node:stream';
import type { Env } from '../../src/cli/config.js';
import type { Output } from '../../src/cli/context.js';
import type { Stdin } from '../../src/cli/input.js';
import { main } from '../../src/cli/main.js';

/**
 * `svc` run in-process for the CLI's tests: main() with its stdout and stderr captured and its exit
 * code, as the executable would run it (bin/svc.js) but with the environment, stdin and terminal
 * given by the test. One runner for every CLI test file (tests of the executable itself spawn it).
 */

export interface SvcResult {
  code: number;
  /** stdout as text (bytes written, as `exports download` does, read as UTF-8). */
  out: string;
  err: string;
}

/** What a terminal stream claims to be: help is wrapped to its columns, progress lines rewritten in place. */
export interface Terminal {
  isTTY?: boolean;
  columns?: number;
}

export interface SvcOptions {
  /** svc's whole environment (SVC_URL, SVC_TOKEN, SVC_CLI_CONFIG, …); nothing of the test process's. */
  env?: Env;
  /** Text piped in (and ended), or a stream the test feeds (a pipe held open, a terminal stand-in); by default an empty pipe. */
  stdin?: string | Stdin;
  /** Ctrl-C: stops long commands (events tail, --wait, a prompt); `AbortSignal.timeout(ms)` for a bound. */
  signal?: AbortSignal;
  stdout?: Terminal;
  stderr?: Terminal;
  /** Called on every write to stdout, with all of stdout so far and the chunk written. */
  onOut?(out: string, chunk: string | Uint8Array): void;
  /** Called on every write to stderr, with all of stderr so far and the chunk written. */
  onErr?(err: string, chunk: string | Uint8Array): void;
}

const text = (chunk: string | Uint8Array): string => (typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8'));

/** A terminal stream (or a pipe) whose writes go to `record`, each taken at once (no backpressure). */
function capture(terminal: Terminal | undefined, record: (chunk: string | Uint8Array) => void): Output {
  return {
    ...terminal,
    write: (chunk: string | Uint8Array) => {
      record(chunk);
      return true;
    },
  };
}

/** Runs `svc args…` and answers its exit code and what it wrote. */
export async function runSvc(args: string[], options: SvcOptions = {}): Promise<SvcResult> {
  let out = '';
  let err = '';
  const { stdin } = options;
  const code = await main(args, {
    stdout: capture(options.stdout, (chunk) => {
      out += text(chunk);
      options.onOut?.(out, chunk);
    }),
    stderr: capture(options.stderr, (chunk) => {
      err += text(chunk);
      options.onErr?.(err, chunk);
    }),
    stdin: typeof stdin === 'string' ? Readable.from([Buffer.from(stdin)]) : (stdin ?? Readable.from([])),
    env: options.env ?? {},
    signal: options.signal,
  });
  return { code, out, err };
}

/**
 * A runner whose options default to `defaults()`, read at each call (a config file or a hub made in
 * beforeAll): `const svc = svcRunner(() => ({ env: { SVC_CLI_CONFIG: config } }))`. A call's own
 * options replace the defaults one by one (one left undefined does not; an `env` given replaces the default env as a whole).
 */
export function svcRunner(defaults: () => SvcOptions = () => ({})): (args: string[], options?: SvcOptions) => Promise<SvcResult> {
  return (args, options = {}) => runSvc(args, { ...defaults(), ...Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined)) });
}

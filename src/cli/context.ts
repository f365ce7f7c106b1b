import type { Env, Target } from './config.js';
import type { Hub } from './http.js';
import type { Stdin } from './input.js';

/** What a command runs with: its arguments, the terminal, and a client of the hub (its own file, so the commands and the TUI share it without importing each other). */

/** Where `svc` writes: text, or a file's bytes (`exports download` without -o). */
export interface Output {
  write(chunk: string | Uint8Array): unknown;
  /** A terminal: progress lines are rewritten in place. */
  isTTY?: boolean;
  /** A terminal's width in columns (help is wrapped to it). */
  columns?: number;
  /** A stream's `drain`, awaited when `write` answers false (a slow pipe). */
  once?(event: 'drain', listener: () => void): unknown;
}

export interface Io {
  stdout: Output;
  stderr: Output;
  stdin: Stdin;
  env: Env;
  /** Stops long commands (events tail, run --wait, exports run); the executable wires Ctrl-C to it. */
  signal?: AbortSignal;
}

export interface Ctx {
  args: string[];
  opts: Record<string, string | boolean | string[] | undefined>;
  json: boolean;
  io: Io;
  signal: AbortSignal;
  configFile: string;
  /** A client of the logged-in hub, or of `target` (login). */
  hub(target?: Target): Hub;
  out(text: string): void;
  err(text: string): void;
  /**
   * The exit code when stdout's reader closes the pipe from now on (`svc diff | head`): 0 unless the
   * command says what it found so far (a difference printed is `svc diff`'s 1, never a "same" 0).
   */
  exitIfCut(code: number): void;
}

/** `TERM=dumb`: a terminal that moves no cursor and takes no escape sequence (Emacs' shell, some CI logs). */
export function dumbTerminal(env: Env): boolean {
  return env.TERM === 'dumb';
}

/** Whether `out` is a terminal whose lines can be rewritten in place (`\r` and erase-line): a TTY that is not `TERM=dumb`. */
export function rewritesLines(io: Io, out: Output = io.stderr): boolean {
  return out.isTTY === true && !dumbTerminal(io.env);
}

/** https://no-color.org: `NO_COLOR` set to any non-empty value turns colour off (bold, dim and reverse video stay: they are not colour). */
export function colourWanted(env: Env): boolean {
  return !env.NO_COLOR && !dumbTerminal(env);
}

import { readdir, readFile, stat } from 'node:fs/promises';
import { extname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { CliError, Interrupted, UsageError } from './errors.js';
import { CONTROL_KEYS, KeyReader, PASTE } from './keys.js';

/** What `svc` reads besides its arguments: files, stdin, and secret values typed at a prompt. */

export type Stdin = Readable & { isTTY?: boolean; setRawMode?: (mode: boolean) => unknown };

/**
 * All of stdin. Ctrl-C (`signal`) ends the wait for its end: stdin the terminal, or a pipe whose
 * writer never closes it, held `svc apply -f -` after the Ctrl-C, which svc takes itself.
 */
export async function readStdin(stdin: Readable, signal?: AbortSignal): Promise<string> {
  const read = (async () => {
    const chunks: Buffer[] = [];
    for await (const chunk of stdin) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
    return Buffer.concat(chunks).toString('utf8');
  })();
  if (!signal) return read;
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(new Interrupted('interrupted'));
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    read.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** A file's text, or stdin's for `-`. */
export async function readSource(file: string, stdin: Readable, signal?: AbortSignal): Promise<string> {
  if (file === '-') return readStdin(stdin, signal);
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    throw new CliError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/** The file extensions `svc apply -f DIR` reads, as kubectl does. */
const MANIFEST_EXTENSIONS = ['.json', '.yaml', '.yml'];

/**
 * The files `-f` names: the file itself, or, for a directory, its `.json`, `.yaml` and `.yml` files in
 * the order of their names (not its subdirectories), as `kubectl apply -f DIR` reads them. `-` is stdin.
 */
export async function manifestFiles(path: string): Promise<string[]> {
  if (path === '-') return [path];
  let isDirectory: boolean;
  try {
    isDirectory = (await stat(path)).isDirectory();
  } catch (err) {
    throw new CliError(`cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  if (!isDirectory) return [path];
  const entries = await readdir(path, { withFileTypes: true }).catch((err: NodeJS.ErrnoException) => {
    throw new CliError(`cannot read ${path}: ${err.code ?? err.message}`);
  });
  const files = entries
    .filter((e) => !e.isDirectory() && MANIFEST_EXTENSIONS.includes(extname(e.name).toLowerCase()))
    .map((e) => e.name)
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    .map((name) => join(path, name));
  if (files.length === 0) throw new CliError(`${path}: no ${MANIFEST_EXTENSIONS.join(', ')} file in it`);
  return files;
}

/**
 * A secret value: all of stdin with one trailing newline removed (`--value-stdin`), or typed at a
 * prompt without echo when stdin is a terminal. Never from the command line, where other users
 * and the shell history would see it.
 */
export async function secretValue(fromStdin: boolean, stdin: Stdin, prompt: (text: string) => void, what: string, signal?: AbortSignal): Promise<string> {
  if (!fromStdin && !atTerminal(stdin)) throw new UsageError('no terminal to prompt on: pipe the value in with --value-stdin');
  const value = (await pipedOrHidden(stdin, prompt, `Value of ${what}: `, signal)).replace(/\r?\n$/, '');
  if (!value) throw new UsageError('the value is empty');
  return value;
}

function atTerminal(stdin: Stdin): boolean {
  return stdin.isTTY === true && typeof stdin.setRawMode === 'function';
}

/**
 * A credential from stdin (`--value-stdin`, `--token-stdin`): all of it when it is piped in; typed
 * without echo after `question` when stdin is the terminal, where read as it was it would be shown
 * as typed, and stay in the scrollback, with no word of what was being waited for.
 */
export function pipedOrHidden(stdin: Stdin, prompt: (text: string) => void, question: string, signal?: AbortSignal): Promise<string> {
  return atTerminal(stdin) ? promptHidden(stdin, prompt, question, signal) : readStdin(stdin, signal);
}

/** `signal`: a SIGTERM (or a Ctrl-C that came as a signal) ends the prompt as its Ctrl-C key does, raw mode off. */
function promptHidden(stdin: Stdin, prompt: (text: string) => void, question: string, signal?: AbortSignal): Promise<string> {
  prompt(question);
  stdin.setRawMode!(true);
  stdin.setEncoding('utf8');
  stdin.resume();
  return new Promise((resolve, reject) => {
    let value = '';
    const finish = () => {
      stdin.off('data', onData);
      signal?.removeEventListener('abort', onAbort);
      stdin.setRawMode!(false);
      stdin.pause();
      prompt('\n');
    };
    const onAbort = () => {
      finish();
      reject(new Interrupted('interrupted'));
    };
    // An arrow, Home or a function key sends an escape sequence: read as one key and ignored, it was
    // added to the value unseen (the prompt does not echo); a paste's text is typed text.
    const reader = new KeyReader();
    const onData = (chunk: string) => {
      for (const key of reader.feed(chunk).flatMap((k) => (k.startsWith(PASTE) ? [...k.slice(PASTE.length)].map((ch) => CONTROL_KEYS[ch] ?? ch) : [k]))) {
        if (key === 'enter' || key === '\u0004') {
          finish();
          resolve(value);
          return;
        }
        if (key === 'ctrl-c') {
          finish();
          // Raw mode turns Ctrl-C into a character, not SIGINT: the same exit as a signal (130).
          reject(new Interrupted('interrupted'));
          return;
        }
        if (key === '\u007f' || key === '\b') value = [...value].slice(0, -1).join('');
        else if (key === 'tab') value += '\t';
        else if ([...key].length === 1) value += key;
        // any other key (an arrow, Esc, Alt and a key) is no character of the value
      }
    };
    stdin.on('data', onData);
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) onAbort();
  });
}

/**
 * A duration option's value in ms: `3s`, `500ms`, `1m`, `1h`, or seconds as a bare number, from `min`
 * to `max` (each [ms, as said in the error]). A timer's delay beyond 2^31 ms would fire at once.
 */
export function durationOption(flag: string, text: string, min: [number, string], max: [number, string]): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new UsageError(`${flag} must be a duration like 3s, 500ms or 1m, not '${text}'`);
  const ms = Number(m[1]) * (m[2] === 'ms' ? 1 : m[2] === 'm' ? 60_000 : m[2] === 'h' ? 3_600_000 : 1_000);
  if (ms < min[0]) throw new UsageError(`${flag} must be at least ${min[1]}, not '${text}'`);
  if (ms > max[0]) throw new UsageError(`${flag} must be at most ${max[1]}, not '${text}'`);
  return ms;
}

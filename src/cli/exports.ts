import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { type FileHandle, open, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Env } from './config.js';
import { type Ctx, type Output, rewritesLines } from './context.js';
import { CliError } from './errors.js';
import { path } from './http.js';
import { json, printable } from './output.js';

/**
 * The two export commands that are more than one call: following a run to its end with a
 * progress line (`exports run`, `exports retry`), and the verified one-shot download of an
 * entity (`exports download`).
 */

/** An export run record as GET /api/exports/{name}/runs/{id} answers it (src/exports/runs/ledger.ts). */
export interface ExportRun {
  id: string;
  exportName: string;
  status: 'Running' | 'Completed' | 'Failed';
  trigger: string;
  attempt: number;
  retryOf: string | null;
  startedAt: string;
  endedAt: string | null;
  /** So far while Running; the receipt once Completed. */
  rowCount: number | null;
  byteCount: number | null;
  sha256: string | null;
  location: string | null;
  failureCode: string | null;
  failureReason: string | null;
  etag?: string;
  versionId?: string;
}

const DEFAULT_POLL_MS = 500;

/** How often a followed run is read: `SVC_CLI_POLL_MS` milliseconds (tests, slow links), else 500. */
export function pollEvery(env: Env): number {
  const value = env.SVC_CLI_POLL_MS;
  if (value === undefined || value === '') return DEFAULT_POLL_MS;
  if (!/^\d+$/.test(value) || Number(value) < 1) throw new CliError(`SVC_CLI_POLL_MS must be a positive number of milliseconds, not '${value}'`);
  return Number(value);
}

/** 1536 → `1.5 KiB`. */
export function humanBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** The progress line: `Running: 1200 rows, 84213 bytes (82.2 KiB) so far, 3s`, the hub's figures shown as text is (they are its JSON). */
export function progressLine(run: ExportRun, elapsedMs: number): string {
  const bytes = run.byteCount ?? 0;
  return printable(`${run.status}: ${run.rowCount ?? 0} rows, ${bytes} bytes (${humanBytes(bytes)}) so far, ${Math.floor(elapsedMs / 1000)}s`);
}

/** A line on stderr that quotes what was typed (a name, a run id, a file) or what the hub answered: shown, never obeyed by the terminal. */
function say(c: Ctx, line: string): void {
  c.err(`${printable(line)}\n`);
}

/** The end of a run for people: the receipt, or the failure code and reason. */
export function runOutcome(name: string, run: ExportRun): string {
  const head = `export/${name} run ${run.id}: ${run.status}${run.status === 'Failed' && run.failureCode ? ` (${run.failureCode})` : ''}\n`;
  const fields: Array<[string, unknown]> =
    run.status === 'Completed'
      ? [
          ['rows', run.rowCount],
          ['bytes', run.byteCount === null ? null : `${run.byteCount} (${humanBytes(run.byteCount)})`],
          ['sha256', run.sha256],
          ['location', run.location],
          ['etag', run.etag],
          ['versionId', run.versionId],
        ]
      : [
          ['code', run.failureCode],
          ['reason', run.failureReason],
          ['rows', run.rowCount],
          ['bytes', run.byteCount],
        ];
  if (run.attempt > 1) fields.push(['attempt', `${run.attempt} (retry of ${run.retryOf})`]);
  const shown = fields.filter(([, v]) => v !== undefined && v !== null);
  const width = Math.max(...shown.map(([k]) => k.length)) + 1;
  return head + shown.map(([k, v]) => `  ${`${k}:`.padEnd(width)} ${String(v)}\n`).join('');
}

/**
 * Follows a claimed run until it has ended: its record is read every `pollEvery` ms and a progress
 * line shows the rows and bytes so far on stderr (a terminal: one line rewritten in place;
 * otherwise a new line only when the figures change, so logs stay short). Then the receipt or the
 * failure on stdout (`--json`: the final run record). Exit 0 when Completed, 1 when Failed.
 */
export async function followRun(c: Ctx, name: string, runId: string, every = pollEvery(c.io.env)): Promise<number> {
  const tty = rewritesLines(c.io) && !c.json;
  const began = Date.now();
  let shown = '';
  let drawn = false;
  let run: ExportRun;
  try {
    for (;;) {
      run = (await c.hub().call<ExportRun>('GET', path`/api/exports/${name}/runs/${runId}`)).body;
      if (run.status !== 'Running') break;
      if (!c.json) {
        const figures = `${run.rowCount ?? 0}/${run.byteCount ?? 0}`;
        if (tty) {
          c.err(`\r${progressLine(run, Date.now() - began)}\u001b[K`);
          drawn = true;
        } else if (figures !== shown) c.err(`${progressLine(run, Date.now() - began)}\n`);
        shown = figures;
      }
      await sleep(every, undefined, { signal: c.signal });
    }
  } catch (err) {
    if (drawn) c.err('\n');
    if (!c.json) say(c, `stopped following run ${runId}; it goes on in the hub: svc exports runs ${name}`);
    throw err;
  }
  if (drawn) c.err('\r\u001b[K');
  c.out(c.json ? json(run) : runOutcome(name, run));
  return run.status === 'Completed' ? 0 : 1;
}

/** POST …/runs or …/runs/{id}/retry, then follows the new run unless --no-wait. */
export async function startRun(c: Ctx, typed: string, route: string, noWait: boolean, retryOf?: string): Promise<number> {
  const name = typed.toLowerCase(); // as the hub stores it
  const every = noWait ? 0 : pollEvery(c.io.env); // a bad SVC_CLI_POLL_MS is refused before the run starts
  const { body } = await c.hub().call<{ runId: string }>('POST', route);
  const what = `export/${name}: run ${body.runId} started${retryOf ? ` (retry of ${retryOf})` : ''}`;
  if (noWait) {
    c.out(c.json ? json(body) : `${what}\n`);
    return 0;
  }
  if (!c.json) say(c, what);
  return followRun(c, name, body.runId, every);
}

/** Writes a chunk, waiting for `drain` when the stream asks to (a slow pipe). */
function write(out: Output, chunk: Uint8Array): Promise<void> | undefined {
  if (out.write(chunk) !== false || !out.once) return undefined;
  return new Promise((resolve) => out.once!('drain', resolve));
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * `svc exports download ENTITY [-o FILE]`: the entity's CSV streamed to FILE (through a temporary
 * file next to it, renamed once the SHA-256 of what was written equals the hub's
 * `X-Content-SHA256`; nothing is left at FILE otherwise) or to stdout; rows, bytes and the SHA-256
 * on stderr. Exit 1 when the digest or the length differ from what the hub announced.
 */
export async function download(c: Ctx, entity: string, file: string | undefined): Promise<number> {
  // What FILE is now: a directory is refused before anything is downloaded; something that exists and
  // is not a regular file (a FIFO of a process substitution, /dev/null, /dev/stdout) is written
  // through, as stdout is: a rename over it would replace it with a file (as root, /dev/null too).
  const found = file ? await stat(file).catch(() => undefined) : undefined;
  if (file && found?.isDirectory()) throw new CliError(`${file} is a directory: name the file to write (-o ${join(file, `${entity}.csv`)})`);
  const through = found !== undefined && !found.isFile();
  // The temporary file beside FILE is made before the request: a directory that is missing or not
  // writable is refused before the hub sends (and its audit trail records) the entity's data.
  const temp = file && !through ? join(dirname(file), `.${basename(file)}.${randomBytes(4).toString('hex')}.part`) : undefined;
  let handle: FileHandle | undefined;
  if (temp) {
    try {
      handle = await open(temp, 'wx', 0o644);
    } catch (err) {
      const { code, message } = err as NodeJS.ErrnoException;
      throw new CliError(`cannot write ${file}: ${code ?? message}`);
    }
  }
  try {
    return await downloadTo(c, entity, file, temp, handle);
  } finally {
    await handle?.close().catch(() => undefined);
    if (temp) await rm(temp, { force: true });
  }
}

async function downloadTo(c: Ctx, entity: string, file: string | undefined, temp: string | undefined, handle: FileHandle | undefined): Promise<number> {
  const res = await c.hub().fetch(path`/api/exports/entities/${entity}/download`, { accept: 'text/csv' });
  const expected = header(res.headers, 'x-content-sha256')?.toLowerCase();
  const rows = header(res.headers, 'x-row-count');
  const length = header(res.headers, 'content-length');
  if (!expected) {
    await res.body.dump();
    throw new CliError('the hub sent no X-Content-SHA256 header: the download cannot be verified');
  }
  const hash = createHash('sha256');
  let bytes = 0;
  const count = (chunk: Buffer) => {
    hash.update(chunk);
    bytes += chunk.length;
  };
  // The body, counted and hashed, into the file at `to` (FILE, or the temporary file beside it).
  const save = async (to: string | FileHandle, unwritten: string) => {
    const tap = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        count(chunk);
        done(null, chunk);
      },
    });
    try {
      const out = typeof to === 'string' ? createWriteStream(to, { flags: 'w', mode: 0o644 }) : createWriteStream('', { fd: to });
      await pipeline(res.body, tap, out, { signal: c.signal });
    } catch (err) {
      if (c.signal.aborted) throw err;
      const { syscall, code, message } = err as NodeJS.ErrnoException;
      if (syscall) throw new CliError(`cannot write ${file}: ${code ?? message}`);
      throw new CliError(`the download broke off after ${bytes} bytes: ${message}; ${unwritten}`);
    }
  };
  if (file && temp && handle) {
    await save(handle, `${file} was not written`);
    verify(expected, hash.digest('hex'), bytes, length, `${file} was not written`);
    await rename(temp, file); // the stream closed the handle at its end
  } else if (file) {
    await save(file, 'discard what was written');
    verify(expected, hash.digest('hex'), bytes, length, 'discard what was written');
  } else {
    const shown = c.io.stdout.isTTY ? terminalText() : undefined;
    for await (const chunk of res.body) {
      count(chunk as Buffer);
      await write(c.io.stdout, shown ? Buffer.from(shown.text(chunk as Buffer)) : (chunk as Buffer));
    }
    if (shown) await write(c.io.stdout, Buffer.from(shown.end()));
    verify(expected, hash.digest('hex'), bytes, length, 'discard what was written');
  }
  const summary = { entity, file: file ?? null, rows: rows === undefined ? null : Number(rows), bytes, sha256: expected };
  say(c, `${entity}: ${rows ?? '?'} rows, ${bytes} bytes (${humanBytes(bytes)}), SHA-256 ${expected} verified${file ? `, written to ${file}` : ''}`);
  if (c.json && file) c.out(json(summary));
  return 0;
}

/**
 * The CSV as a terminal shows it: its values come from remote systems and other users of the tenant,
 * and an escape sequence in one, written as it is, would be obeyed (a cleared screen, a window title,
 * the clipboard). Shown as the other commands show text (`\x1b`, `\u202e`), the CRLF record ends as
 * line ends. Decoded across chunks; a CR at the end of a chunk waits for the next one.
 */
function terminalText(): { text(chunk: Buffer): string; end(): string } {
  const decoder = new TextDecoder();
  let held = '';
  const shown = (text: string) => printable(text.replace(/\r\n/g, '\n'));
  return {
    text(chunk) {
      const text = held + decoder.decode(chunk, { stream: true });
      held = text.endsWith('\r') ? '\r' : '';
      return shown(held ? text.slice(0, -1) : text);
    },
    end: () => shown(held + decoder.decode()),
  };
}

function verify(expected: string, actual: string, bytes: number, length: string | undefined, consequence: string): void {
  if (length !== undefined && Number(length) !== bytes) throw new CliError(`the hub announced ${length} bytes but ${bytes} arrived; ${consequence}`);
  if (actual !== expected) throw new CliError(`SHA-256 mismatch: the hub announced ${expected}, the ${bytes} bytes received hash to ${actual}; ${consequence}`);
}

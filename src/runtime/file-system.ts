import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { StartRefused } from '../errors.js';

/** The file-system refusals a start reports as one line naming the path (fileSystemRefusal): what the operator changes, not the hub. */
const REFUSALS: Record<string, { reason: string; remedy: string }> = {
  ENOSPC: { reason: 'no space left on the device', remedy: 'Free space on its file system' },
  EDQUOT: { reason: 'the disk quota is used up', remedy: 'Free space on its file system (or raise the quota)' },
  EROFS: { reason: 'the file system is read-only', remedy: 'Make it writable (mount it read-write)' },
  EACCES: { reason: 'permission denied', remedy: "Give the hub's OS user the right to write there" },
  EPERM: { reason: 'operation not permitted', remedy: "Give the hub's OS user the right to write there (an immutable attribute? a mount that refuses it?)" },
};

/** What a system call did to its path, as a refusal names it. */
const OPERATIONS: Record<string, string> = {
  open: 'create or open',
  write: 'write',
  mkdir: 'create the directory',
  rename: 'rename into',
  link: 'create',
  copyfile: 'copy to',
  cp: 'copy to',
  chmod: 'change the mode of',
  chown: 'change the owner of',
  unlink: 'remove',
  rmdir: 'remove',
  rm: 'remove',
  symlink: 'create',
  scandir: 'list',
};

/**
 * A file system's refusal of what a start writes (a full disk, a read-only mount, a directory the
 * hub's user may not write) as a StartRefused that names the path, the operation and what to do, so
 * the start ends with that one line (cmd/svc-hub.ts) instead of a bare `ENOSPC: no space left on
 * device, write` and its stack; `otherwise`: the way around it (another directory, the setting that
 * names one). Undefined for any other error. The path is the error's (its destination for a
 * rename, link or copy), or the one `withPath` gave an error of a system call that names none (a
 * write to an open file). `doing`: what the start was doing, instead of the operation on the path
 * (the copy of a whole directory tree, whose error names the one file it failed on), and its path.
 */
export function fileSystemRefusal(err: unknown, otherwise: (path: string) => string, doing?: { what: string; path: string }): StartRefused | undefined {
  if (err instanceof StartRefused) return undefined;
  const { code, syscall, path, dest } = (err ?? {}) as NodeJS.ErrnoException & { dest?: string };
  const refusal = code === undefined ? undefined : REFUSALS[code];
  const target = doing?.path ?? dest ?? path;
  if (!refusal || !syscall || !target) return undefined;
  const what = doing?.what ?? `cannot ${OPERATIONS[syscall] ?? syscall} ${target}`;
  return new StartRefused(`${what}: ${refusal.reason} (${code}). ${refusal.remedy}, or ${otherwise(target)}`, { cause: err });
}

/** `err`, when a file-system error that names no path (a write's), given `path`: the file it was writing, for fileSystemRefusal. */
export function withPath(err: unknown, path: string): unknown {
  const failure = err as NodeJS.ErrnoException;
  if (failure && typeof failure === 'object' && failure.syscall && !failure.path) failure.path = path;
  return err;
}

/**
 * mkdirSync(path, { recursive: true }), failing with the refusal of the directory it could not
 * create: Node's recursive mkdir answers the refusal of its last directory (EROFS, EACCES) with the
 * ENOENT of a stat of that directory ("ENOENT: no such file or directory, mkdir '/var/lib/svc-hub'"
 * on a read-only /var/lib), so the directory is made once more, alone, which fails with the refusal.
 */
export function makeDirectory(path: string, mode?: number): void {
  try {
    mkdirSync(path, { recursive: true, mode });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(path) === path) throw err;
    if (!existsSync(dirname(path))) makeDirectory(dirname(path), mode);
    if (!existsSync(path)) mkdirSync(path, { mode });
  }
}

/**
 * A new file beside `path` holding `content` (`<path>.<pid>.<random>.tmp`, created here or not at
 * all), for a link or a rename into place; removed again when its write fails (a full disk makes the
 * file, then refuses its bytes), the error then naming `path` (withPath).
 */
export function filledBeside(path: string, content: string, mode = 0o644): string {
  const file = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    writeFileSync(file, content, { flag: 'wx', mode });
  } catch (err) {
    // EEXIST: not this call's file.
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') rmSync(file, { force: true });
    throw withPath(err, path);
  }
  return file;
}

/**
 * The data directory lock of an earlier version, copied verbatim from commit 83b12e2
 * (src/db/embedded.ts: lockDataDir, unlockDataDir, takeFile and what they call), the last before
 * hub.pid held more than the pid: every version up to it reads hub.pid as `Number(content.trim())`
 * and takes a file that is no live pid for stale. Only the error is changed (a plain Error naming
 * the pid, where that version threw its DataDirInUse), so that tests can run that logic over the
 * files this version writes, and race it against this version's starts.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, linkSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const LOCK_FILE = 'hub.pid';

/** 83b12e2's DataDirInUse, reduced to what a test checks. */
export class EarlierDataDirInUse extends Error {
  constructor(
    readonly dataDir: string,
    readonly pid: number,
  ) {
    super(`data directory ${dataDir} is already used by another svc-hub process (pid ${pid}); stop that process, or point SVC_DATA_DIR at another directory`);
    this.name = 'DataDirInUse';
  }
}

/** Alive and not a zombie. */
function isLive(pid: number): boolean {
  if (!isAlive(pid)) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return !existsSync('/proc/self');
  }
}

/**
 * Takes `<dataDir>/hub.pid` for this process, or throws DataDirInUse naming the live process that
 * holds it. Race-free with other starts on the same directory, at the same time too: the file is
 * made whole beside it and linked into place (an exclusive create that never shows an empty file,
 * which a concurrent start would take for a stale one), and a file whose process is gone is
 * replaced by one start only (`takeFile`).
 */
export async function lockDataDir(dataDir: string): Promise<void> {
  const holder = await takeFile(join(dataDir, LOCK_FILE));
  if (holder !== undefined) throw new EarlierDataDirInUse(dataDir, holder);
}

/** Removes `<dataDir>/hub.pid` when this process holds it. */
export function unlockDataDir(dataDir: string): void {
  const file = join(dataDir, LOCK_FILE);
  try {
    if (Number(readFileSync(file, 'utf8').trim()) === process.pid) rmSync(file, { force: true });
  } catch {
    // already gone
  }
}

/**
 * Makes `path` hold this process's pid, unless a live process other than this one holds it: then
 * that process's pid. A file naming a process that is gone is replaced, never removed: a removal
 * followed by a create lets a second start that judged the same file stale remove the first one's
 * new file in between, and both would hold the directory. Its replacement goes through a gate,
 * `<path>.stale-<hash of its content>`, taken the same way (so a gate left by a start killed inside
 * it is taken over in turn): only the process that holds the gate replaces the file, and only while
 * it still has the content judged stale; every change of the file from that content passes the gate.
 */
async function takeFile(path: string): Promise<number | undefined> {
  const mine = String(process.pid);
  for (let attempt = 0; attempt < 200; attempt++) {
    if (createExclusive(path, mine)) return undefined;
    const content = readIfThere(path);
    if (content === undefined) continue; // released meanwhile
    const pid = Number(content.trim());
    if (Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid && isLive(pid)) return pid;
    const gate = `${path}.stale-${createHash('sha256').update(content).digest('hex').slice(0, 12)}`;
    if ((await takeFile(gate)) !== undefined) {
      // Another start is replacing the same stale file this very moment: see what it made.
      await new Promise((r) => setTimeout(r, 10));
      continue;
    }
    try {
      if (readIfThere(path) === content) {
        const next = filledBeside(path, mine);
        renameSync(next, path);
        return undefined;
      }
    } finally {
      rmSync(gate, { force: true });
    }
  }
  throw new Error(`could not lock ${path}: it keeps changing`);
}

/** Creates `path` holding `content`, whole at once; false when it exists. */
function createExclusive(path: string, content: string): boolean {
  const filled = filledBeside(path, content);
  try {
    linkSync(filled, path);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    // A file system without hard links: an exclusive create, empty for the moment of its write.
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw err;
    try {
      writeFileSync(path, content, { flag: 'wx', mode: 0o644 });
      return true;
    } catch (wxErr) {
      if ((wxErr as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw wxErr;
    }
  } finally {
    rmSync(filled, { force: true });
  }
}

/** A new file beside `path` holding `content`, for a link or a rename into place. */
function filledBeside(path: string, content: string): string {
  const file = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(file, content, { flag: 'wx', mode: 0o644 });
  return file;
}

function readIfThere(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}


// Shared by the executables in bin/: loads an entry module's `main`. In a source checkout the
// TypeScript runs through tsx; an installed build (no sources, as in the container image) runs the
// compiled file under dist/.
import { accessSync, constants, existsSync, mkdirSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** `main` of `<path>.ts` (relative to the package root), or of `dist/<path>.js` when the source is absent. */
export async function loadMain(path) {
  const source = join(root, `${path}.ts`);
  let entry;
  if (existsSync(source)) {
    if (!tsxCacheWritable()) process.env.TSX_DISABLE_CACHE = '1';
    const { register } = await import('tsx/esm/api');
    register();
    entry = pathToFileURL(source).href;
  } else {
    entry = pathToFileURL(join(root, 'dist', `${path}.js`)).href;
  }
  return (await import(entry)).main;
}

/**
 * Whether tsx can keep its compile cache, `<TMPDIR>/tsx-<uid>`: it makes that directory as it
 * compiles the first module and fails the whole start where it cannot (a TMPDIR that is read-only,
 * not this user's to write, or missing under such a directory: `EACCES: permission denied, mkdir
 * '…/tsx-1000'`). Without it, tsx compiles every module anew at each start, a little slower.
 */
function tsxCacheWritable() {
  const cache = join(tmpdir(), `tsx-${process.geteuid ? process.geteuid() : userInfo().username}`);
  try {
    mkdirSync(cache, { recursive: true });
    accessSync(cache, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

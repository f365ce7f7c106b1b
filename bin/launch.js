// Shared by the executables in bin/: loads an entry module's `main`. In a source checkout the
// TypeScript runs through tsx; an installed build (no sources, as in the container image) runs the
// compiled file under dist/.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** `main` of `<path>.ts` (relative to the package root), or of `dist/<path>.js` when the source is absent. */
export async function loadMain(path) {
  const source = join(root, `${path}.ts`);
  let entry;
  if (existsSync(source)) {
    const { register } = await import('tsx/esm/api');
    register();
    entry = pathToFileURL(source).href;
  } else {
    entry = pathToFileURL(join(root, 'dist', `${path}.js`)).href;
  }
  return (await import(entry)).main;
}

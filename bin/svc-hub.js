#!/usr/bin/env node
// Entry point of the svc-hub executable. In a source checkout the TypeScript runs through tsx; an
// installed build (no src/, as in the container image) runs the compiled dist/.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'cmd', 'svc-hub.ts');
let entry;
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  entry = pathToFileURL(source).href;
} else {
  entry = pathToFileURL(join(root, 'dist', 'cmd', 'svc-hub.js')).href;
}
const { main } = await import(entry);
process.exit(await main(process.argv.slice(2)));

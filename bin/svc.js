#!/usr/bin/env node
// Entry point of svc, the command-line client of the hub. In a source checkout the TypeScript runs
// through tsx; an installed build (no src/, as in the container image) runs the compiled dist/.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'src', 'cli', 'main.ts');
let entry;
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  entry = pathToFileURL(source).href;
} else {
  entry = pathToFileURL(join(root, 'dist', 'src', 'cli', 'main.js')).href;
}
const { main } = await import(entry);
const code = await main(process.argv.slice(2));
// Exit once stdout is flushed (a pipe may still hold output); open keep-alive sockets do not wait.
process.stdout.write('', () => process.exit(code));

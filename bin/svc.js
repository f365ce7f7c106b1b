#!/usr/bin/env node
// Entry point of svc, the command-line client of the hub (src/cli/main.ts; bin/launch.js finds the
// source or the build).
import { loadMain } from './launch.js';

const main = await loadMain('src/cli/main');
const code = await main(process.argv.slice(2));
// Exit once stdout is flushed (a pipe may still hold output); open keep-alive sockets do not wait.
// A turn later: a write that failed is reported by stdout's error listener (main.ts), which exits 1.
setImmediate(() => {
  if (process.stdout.writableLength === 0) process.exit(code);
  else process.stdout.write('', () => process.exit(code));
});

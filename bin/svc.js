#!/usr/bin/env node
// Entry point of svc, the command-line client of the hub (src/cli/main.ts; bin/launch.js finds the
// source or the build).
import { loadMain } from './launch.js';

const main = await loadMain('src/cli/main');
const code = await main(process.argv.slice(2));
// Exit once stdout is flushed (a pipe may still hold output); open keep-alive sockets do not wait.
process.stdout.write('', () => process.exit(code));

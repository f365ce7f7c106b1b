#!/usr/bin/env -S MALLOC_MMAP_THRESHOLD_=131072 node --max-semi-space-size=64 --no-allocation-site-pretenuring
// Entry point of the svc-hub executable (cmd/svc-hub.ts; bin/launch.js finds the source or the build).
import { loadMain } from './launch.js';

const main = await loadMain('cmd/svc-hub');
process.exit(await main(process.argv.slice(2)));

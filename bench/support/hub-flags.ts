/**
 * The V8 flags and the allocator setting the hub's executables run it with (bin/svc-hub.js, `npm
 * start`, the image's ENTRYPOINT and ENV; docs/operations.md "The hub's process"): each bench runs
 * its hub in its own process, so it takes the same ones (bench/run.ts for every bench, the
 * `bench:<name>` scripts of package.json, and bench/export.ts for each size's process).
 */
export const HUB_NODE_FLAGS = ['--max-semi-space-size=64', '--no-allocation-site-pretenuring'];
export const HUB_MALLOC_ENV = { MALLOC_MMAP_THRESHOLD_: '131072' };

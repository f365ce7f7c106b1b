/** Jest runs the TypeScript sources as ESM through @swc/jest (see docs/development.md). */
export default {
  testEnvironment: 'node',
  // Jest 30 "soft-deletes" what a test file left on the global object and warns on later access;
  // with the WebAssembly modules of retrieval (libpg-query, the vector kernels) loaded in a worker,
  // that proxy once recursed without end and failed an unrelated suite. Each file still gets a
  // fresh global object; only the after-the-fact sweep of the old one is off.
  testEnvironmentOptions: { globalsCleanup: 'off' },
  roots: ['<rootDir>/src', '<rootDir>/apiserver', '<rootDir>/operator', '<rootDir>/kube', '<rootDir>/cmd', '<rootDir>/test', '<rootDir>/e2e'],
  testMatch: ['**/*.test.ts'],
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: {
    '^.+\\.ts$': [
      '@swc/jest',
      { jsc: { parser: { syntax: 'typescript' }, target: 'es2022' }, module: { type: 'es6' } },
    ],
  },
  setupFiles: ['<rootDir>/test/harness/quiet-logs.ts'],
  // After each file: a transaction with an xid it left open is ended and fails it (test/harness/open-transactions.ts).
  setupFilesAfterEnv: ['<rootDir>/test/harness/open-transactions.ts'],
  globalSetup: '<rootDir>/test/harness/global-setup.js',
  globalTeardown: '<rootDir>/test/harness/global-teardown.js',
  testTimeout: 30000,
  maxWorkers: 2,
  // A worker whose heap grew past this after a test file is replaced by a fresh one: tests that
  // force full collections (src/exports/csv/memory.test.ts) otherwise pay for every module graph
  // the worker kept from earlier files (one such run took over 60 s instead of 3).
  workerIdleMemoryLimit: '1GB',
};

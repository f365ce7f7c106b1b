/** Jest runs the TypeScript sources as ESM through @swc/jest (see docs/development.md). */
export default {
  testEnvironment: 'node',
  roots: ['<rootDir>/src', '<rootDir>/apiserver', '<rootDir>/operator', '<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: {
    '^.+\\.ts$': [
      '@swc/jest',
      { jsc: { parser: { syntax: 'typescript' }, target: 'es2022' }, module: { type: 'es6' } },
    ],
  },
  globalSetup: '<rootDir>/test/harness/global-setup.ts',
  globalTeardown: '<rootDir>/test/harness/global-teardown.ts',
  testTimeout: 30000,
  maxWorkers: 2,
};

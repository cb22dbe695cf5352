// The suites are compiled by `npm run build` (one compiler, the same output that ships) and jest
// runs the JavaScript in dist/. No ts-jest: one toolchain (TypeScript 5.9, pinned) is enough.
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/dist/test'],
  testMatch: ['**/*.test.js'],
  globalSetup: '<rootDir>/dist/test/support/globalSetup.js',
  globalTeardown: '<rootDir>/dist/test/support/globalTeardown.js',
  testTimeout: 120000,
  maxWorkers: 2,
  verbose: false,
};

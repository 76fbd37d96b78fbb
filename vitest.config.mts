import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['__test__/**/*.test.{ts,mts}'],
    // Each run's temporary directories under one, removed at the end (see the file).
    globalSetup: ['__test__/tmp-root.ts'],
    // Native addons inside worker threads are fragile; each file gets its own process.
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
})

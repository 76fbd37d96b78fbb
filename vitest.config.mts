import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['__test__/**/*.test.{ts,mts}'],
    // Native addons inside worker threads are fragile; each file gets its own process.
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
})

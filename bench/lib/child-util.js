'use strict'
// Helpers for the measuring child processes (heap-child.js, probe.js): memory readings,
// reporting one JSON result to run.js, and bounded waiting.

const fs = require('node:fs')

const RESULT_PREFIX = 'BENCH_RESULT '

/** Current RSS and its parts from /proc/self/status, in KiB. */
function memKiB() {
  const text = fs.readFileSync('/proc/self/status', 'utf8')
  const field = (name) => {
    const m = new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)
    return m ? Number(m[1]) : NaN
  }
  return { rss: field('VmRSS'), anon: field('RssAnon'), file: field('RssFile'), hwm: field('VmHWM') }
}

/** Peak RSS of this process so far (getrusage ru_maxrss), KiB. */
function peakRssKiB() {
  return process.resourceUsage().maxRSS
}

/** Prints the result line run.js looks for, then exits once stdout is flushed. */
function emit(result) {
  process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`, () => process.exit(0))
}

function fail(err) {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Resolves with the promise's value, or with `onTimeout` after `ms`. */
function within(promise, ms, onTimeout) {
  let timer
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((resolve) => {
      timer = setTimeout(() => resolve(onTimeout), ms)
    }),
  ])
}

/** Parses argv as `positional... --flag value ...`. */
function parseArgs(argv) {
  const positional = []
  const flags = {}
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (!arg.startsWith('--')) {
      positional.push(arg)
      continue
    }
    const next = argv[i + 1]
    if (next !== undefined && !next.startsWith('--')) {
      flags[arg.slice(2)] = next
      i++
    } else flags[arg.slice(2)] = 'true'
  }
  return { positional, flags }
}

module.exports = { RESULT_PREFIX, emit, fail, memKiB, parseArgs, peakRssKiB, sleep, within }

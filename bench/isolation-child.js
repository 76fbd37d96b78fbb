'use strict'
// Sequential latency of `/bin/true` through the finn-sandbox pool (2 workers) under one
// isolation variant, with this Node process holding <GiB> of live, touched memory first (as
// heap-child.js). Started by bench/isolation.js as
//   node --max-old-space-size=4096 bench/isolation-child.js <variant> <GiB> --iterations N --warmup W [--pause-ms P]
// With --pause-ms, each timed job comes P ms after the previous one ended (as an agent's
// commands do), instead of right after it.
// Prints one BENCH_RESULT line: { samplesMs, applied, degraded, failures, ... }.

const path = require('node:path')

const { emit, fail, memKiB, parseArgs, sleep } = require('./lib/child-util.js')
const { CWD, spec } = require('./lib/contenders.js')

const CHUNK = 64 * 1024

/**
 * The variants, cumulative, each as public `IsolationOptions` (landlock and seccomp are one
 * step: the API has no switch for either alone). `auto` is the default a caller gets.
 */
const VARIANTS = {
  off: null,
  // rlimits, privileges, cgroup (root), landlock without a denyRead carve, seccomp.
  'landlock+seccomp': { mode: 'auto', fs: { denyRead: [], protect: [] }, namespaces: { mount: false } },
  // + the default denyRead list, by landlock alone (carving /etc and $HOME).
  'no-mountns': { mode: 'auto', namespaces: { mount: false } },
  // What `mode: "auto"` gives: where the host permits, the mount namespace (protect, denyRead).
  auto: { mode: 'auto' },
  '+pidns': { mode: 'auto', namespaces: { pid: true } },
  '+pidns+netns': { mode: 'auto', namespaces: { pid: true, net: true } },
  // Not cumulative: `auto` with a network allowlist, the job's own network namespace whose
  // only route is the pool's egress proxy (started at the first such job, during the warmup).
  egress: { mode: 'auto', network: { allow: ['example.invalid'] } },
  // Not cumulative: the bwrap backend with its defaults (network denied, so a network
  // namespace; a pid namespace with its own /proc), and without either namespace. No target:
  // the issue cites about +5 ms per exec as bwrap's known cost.
  bwrap: { mode: 'bwrap' },
  'bwrap-no-ns': { mode: 'bwrap', namespaces: { net: false, pid: false } },
}

async function main() {
  const { positional, flags } = parseArgs(process.argv.slice(2))
  const [variant, gibArg] = positional
  const gib = Number(gibArg || 0)
  const iterations = Math.min(Number(flags.iterations || 100), 100_000)
  const warmup = Math.min(Number(flags.warmup || 20), 10_000)
  const pauseMs = Math.min(Number(flags['pause-ms'] || 0), 10_000)
  if (!(variant in VARIANTS) || !(gib >= 0 && gib <= 64)) {
    throw new Error(`usage: isolation-child.js <${Object.keys(VARIANTS).join('|')}> <GiB> [--iterations N] [--warmup W]`)
  }
  const hold = []
  const chunks = Math.round((gib * 1024 * 1024 * 1024) / CHUNK)
  for (let i = 0; i < chunks; i++) hold.push(Buffer.allocUnsafeSlow(CHUNK).fill((i % 251) + 1))
  const rssHeld = memKiB().rss

  const { WorkerPool } = require(path.join(__dirname, '..', 'index.js'))
  const pool = new WorkerPool({ interactiveWorkers: 2, maxQueueDepth: 100_000 })
  const s = VARIANTS[variant] ? spec('/bin/true', [], { isolation: VARIANTS[variant] }) : spec('/bin/true', [])
  let failures = 0
  let last = null
  const run = async () => {
    try {
      const r = await pool.exec(s, 'interactive', CWD)
      if (r.exitCode !== 0) failures++
      last = r
    } catch (e) {
      failures++
      last = { error: `${e.code}: ${e.message}` }
    }
  }
  for (let i = 0; i < warmup; i++) await run()
  await sleep(20)
  const samplesMs = new Array(iterations)
  for (let i = 0; i < iterations; i++) {
    if (pauseMs) await sleep(pauseMs)
    const t0 = process.hrtime.bigint()
    await run()
    samplesMs[i] = Number(process.hrtime.bigint() - t0) / 1e6
  }
  await pool.shutdown()
  const iso = last && last.isolation
  const checksum = hold.length ? hold[hold.length - 1][0] : 0
  emit({
    variant,
    gib,
    iterations,
    warmup,
    pauseMs,
    samplesMs,
    failures,
    rssHeldKiB: rssHeld,
    applied: iso ? iso.applied : [],
    degraded: iso ? iso.degraded : [],
    error: last && last.error,
    checksum,
  })
}

if (require.main === module) main().catch(fail)

module.exports = { VARIANTS }

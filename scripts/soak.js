'use strict'
// npm run soak [-- --quick] [-- --jobs N] [-- --out FILE] [-- --no-escapees]
//
// Runs many mixed jobs through one WorkerPool (fast, failing, unspawnable, timing out with
// TERM-obeying and TERM-immune trees, truncated invalid UTF-8, aborted while queued or running,
// refused because the lane's queue is full) and checks that nothing leaks:
//   - threads and fds of this Node process are back to their start once the pool is shut down;
//   - no zombie child of this process;
//   - RSS growth over the second half <= 4 MiB and overall <= 16 MiB;
//   - no survivor: every command carries a unique token in its environment and command line,
//     and /proc is scanned for it (not only the pids we recorded);
//   - every job settled the way its kind must (an unexpected outcome is a failure too).
// The mix includes timed-out trees whose `setsid` grandchild has lost its parent: before the
// supervisor (a subreaper per slot) the process group and the /proc walk could not reach it,
// and the soak failed with survivors; --no-escapees leaves them out.
// Prints the figures as JSON (and writes them to --out, default bench/results/soak[-quick].json)
// and exits 1 when a bound is missed. Run with --expose-gc so RSS is read after a full GC; the
// script re-executes itself with the flag when it is missing.
//
// Baselines: threads and fds are taken after a warm-up pool has run every kind of job and shut
// down, because the first job lazily starts runtimes that live as long as the process (napi's
// tokio runtime, the jobs runtime, libuv's pool): those are one-time costs, not leaks. RSS is
// bounded both from that baseline (`rss.overall`) and from the first half's end (`rss.secondHalf`);
// the RSS before anything ran is reported too (`rss.processStart`).

const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const crypto = require('node:crypto')

if (typeof global.gc !== 'function') {
  const r = spawnSync(process.execPath, ['--expose-gc', __filename, ...process.argv.slice(2)], { stdio: 'inherit' })
  process.exit(r.status ?? 1)
}

const { WorkerPool, PoolError } = require('..')

const argv = process.argv.slice(2)
const flag = (name) => argv.includes(name)
const option = (name, fallback) => {
  const at = argv.indexOf(name)
  return at >= 0 && at + 1 < argv.length ? argv[at + 1] : fallback
}
const quick = flag('--quick')
const escapees = !flag('--no-escapees')
const JOBS = Number(option('--jobs', quick ? 1000 : 10000))
const OUT = option('--out', path.join(__dirname, '..', 'bench', 'results', quick ? 'soak-quick.json' : 'soak.json'))
const MiB = 1024 * 1024
const BOUNDS = { rssSecondHalf: 4 * MiB, rssOverall: 16 * MiB }
// Test-only: keeps one extra fd open after the run, to show the fd check can fail.
const LEAK_FD = process.env.FINN_SOAK_TEST_LEAK_FD === '1'

const TOKEN = `finn-soak-${process.pid}-${crypto.randomBytes(6).toString('hex')}`
const ENV = { PATH: '/usr/local/bin:/usr/bin:/bin', FINN_SOAK_TOKEN: TOKEN }
const WORKERS = 4
// No job may take longer than this to settle (the longest ones time out after 40 ms).
const STALL_MS = 20_000
const DEPTH = 4

// ── /proc readings ─────────────────────────────────────────────────────────────────────────

function threads() {
  return fs.readdirSync('/proc/self/task').length
}
/** Threads of the jobs runtime (named by src/binding/pool.rs). */
function jobThreads() {
  let n = 0
  for (const tid of fs.readdirSync('/proc/self/task')) {
    try {
      if (fs.readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').startsWith('finn-sandbox-jo')) n++ // comm is cut at 15 bytes
    } catch {
      // the thread exited meanwhile
    }
  }
  return n
}
function fds() {
  return fs.readdirSync('/proc/self/fd').length
}
/** What each open fd is, for the report when the count differs. */
function fdTargets() {
  const out = {}
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      const target = fs.readlinkSync(`/proc/self/fd/${fd}`).replace(/\[\d+\]$/, '')
      out[target] = (out[target] || 0) + 1
    } catch {
      // the fd of the directory listing itself
    }
  }
  return out
}
function rss() {
  global.gc()
  global.gc()
  const status = fs.readFileSync('/proc/self/status', 'utf8')
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) * 1024
}
function stat(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const rest = s.slice(s.lastIndexOf(')') + 2).split(' ')
    return { state: rest[0], ppid: Number(rest[1]) }
  } catch {
    return undefined
  }
}
function pids() {
  return fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n)).map(Number)
}
/** Children of this process in state Z. */
function zombies() {
  return pids().filter((pid) => {
    const s = stat(pid)
    return s !== undefined && s.ppid === process.pid && s.state === 'Z'
  })
}
/** Live processes (not zombies) whose command line or environment holds the token. */
function survivors() {
  const found = []
  for (const pid of pids()) {
    if (pid === process.pid) continue
    let text = ''
    for (const file of ['cmdline', 'environ']) {
      try {
        text += fs.readFileSync(`/proc/${pid}/${file}`, 'latin1')
      } catch {
        // gone, or not ours to read: a process of ours is always readable by us
      }
    }
    if (!text.includes(TOKEN)) continue
    const s = stat(pid)
    if (s && s.state !== 'Z' && s.state !== 'X') found.push({ pid, cmdline: text.split('\0').slice(0, 4).join(' ') })
  }
  return found
}
async function settle(read, target, timeoutMs) {
  // Threads retire asynchronously after shutdown (a parked worker exits when told, the runtime
  // lets it go after 200 ms): poll the reading, which is the real signal, up to a deadline.
  const start = Date.now()
  let value = read()
  while (value > target && Date.now() - start < timeoutMs) {
    await new Promise((r) => setTimeout(r, 20))
    value = read()
  }
  return value
}

// ── the jobs ───────────────────────────────────────────────────────────────────────────────

const sh = (script, extra = {}) => ({
  binaryPath: '/bin/sh',
  args: ['-c', script, TOKEN],
  cwd: '/',
  env: ENV,
  ...extra,
})

/** Each kind: how to submit it and what must come back. */
const KINDS = {
  fast: {
    run: (pool) => pool.exec({ binaryPath: '/bin/true', args: [TOKEN], cwd: '/', env: ENV }),
    check: (r) => r.exitCode === 0,
  },
  output: {
    run: (pool) => pool.exec(sh('echo out; echo err >&2')),
    check: (r) => r.exitCode === 0 && r.stdout === 'out\n' && r.stderr === 'err\n',
  },
  failing: {
    run: (pool) => pool.exec(sh('exit 3')),
    check: (r) => r.exitCode === 3,
  },
  unspawnable: {
    run: (pool) => pool.exec({ binaryPath: `/nonexistent/${TOKEN}`, args: [], cwd: '/', env: ENV }),
    check: (r) => r.exitCode === 127,
  },
  timeout: {
    // A background child and a double-forked one in the job's group, all obeying SIGTERM.
    run: (pool) => pool.exec(sh('sleep 30 & (sleep 30 &); sleep 30', { timeoutMs: 40 })),
    error: 'EXEC_TIMEOUT',
  },
  timeoutImmune: {
    // SIGTERM ignored by the shell and inherited by its children: SIGKILL after the grace.
    run: (pool) => pool.exec(sh('trap "" TERM; sleep 30 & sleep 30', { timeoutMs: 40 })),
    error: 'EXEC_TIMEOUT',
  },
  truncated: {
    // 64 kB of random bytes (mostly invalid UTF-8) under a 2 kB cap.
    run: (pool) => pool.exec(sh('head -c 65536 /dev/urandom', { maxBuffer: 2048 })),
    check: (r) => r.truncated === true && Buffer.byteLength(r.stdout) + Buffer.byteLength(r.stderr) <= 2048,
  },
  abortRunning: {
    run: (pool) => {
      const ac = new AbortController()
      const p = pool.exec(sh('echo started; sleep 30'), undefined, undefined, { signal: ac.signal })
      setTimeout(() => ac.abort(), 15)
      return p
    },
    error: 'ABORTED',
  },
  abortAtOnce: {
    // Aborted in the same turn: removed from the queue or stopped right after dispatch.
    run: (pool) => {
      const ac = new AbortController()
      const p = pool.exec(sh('sleep 30'), undefined, undefined, { signal: ac.signal })
      ac.abort()
      return p
    },
    error: 'ABORTED',
  },
  escapee: {
    // The subshell exits at once, so the setsid'd sleep is reparented out of the tree.
    run: (pool) => pool.exec(sh('(setsid sleep 30 &); sleep 30', { timeoutMs: 40 })),
    error: 'EXEC_TIMEOUT',
  },
  queueFull: {
    // The system lane is held full (one running, DEPTH queued) for the whole run.
    run: (pool) => pool.exec(sh('true'), 'system'),
    error: 'WORKER_UNAVAILABLE',
  },
}
const ROTATION = [
  'fast',
  'output',
  'failing',
  'timeout',
  'fast',
  'truncated',
  'abortRunning',
  'unspawnable',
  'fast',
  'queueFull',
  'timeoutImmune',
  'output',
  'abortAtOnce',
  'fast',
  ...(escapees ? ['escapee'] : []),
]

/** Runs `count` jobs with at most WORKERS + DEPTH interactive ones in flight (so none is refused). */
async function drive(pool, count, counts, unexpected, onHalf, onTenth) {
  let next = 0
  let done = 0
  const half = Math.floor(count / 2)
  let halfReached = false
  const inFlight = WORKERS + DEPTH
  const pending = new Map()
  let lastProgress = Date.now()
  // A job that never settles is a bug of the pool: report which kinds are pending, then fail.
  const watchdog = setInterval(() => {
    if (Date.now() - lastProgress < STALL_MS) return
    process.stderr.write(
      `soak STALLED: ${done}/${count} settled, pending ${JSON.stringify([...pending.values()])}, stats ${JSON.stringify(pool.stats())}\n`,
    )
    process.exit(3)
  }, 1000)
  await new Promise((resolve) => {
    const launch = () => {
      while (next < count && next - done < inFlight) {
        const kind = ROTATION[next % ROTATION.length]
        const n = next++
        pending.set(n, kind)
        const spec = KINDS[kind]
        const finish = (ok, what) => {
          pending.delete(n)
          lastProgress = Date.now()
          counts[kind] = (counts[kind] || 0) + 1
          if (!ok && unexpected.length < 20) unexpected.push({ kind, what })
          done++
          if (onTenth && done % Math.max(1, Math.floor(count / 10)) === 0) onTenth(done)
          if (!halfReached && done >= half && onHalf) {
            halfReached = true
            onHalf()
          }
          if (done === count) resolve()
          else launch()
        }
        spec.run(pool).then(
          (r) => finish(spec.check !== undefined && spec.check(r), r),
          (e) => finish(spec.error !== undefined && e instanceof PoolError && e.code === spec.error, String(e && e.message)),
        )
      }
    }
    launch()
  })
  clearInterval(watchdog)
}

async function main() {
  const started = Date.now()
  const rssProcessStart = rss()

  // Warm-up: every kind once over, then shut down, so lazily started runtimes exist.
  {
    const pool = new WorkerPool({ interactiveWorkers: WORKERS, maxQueueDepth: DEPTH, killGraceMs: 20 })
    const blockers = holdSystemLane(pool)
    await drive(pool, ROTATION.length * 3, {}, [])
    await releaseSystemLane(pool, blockers)
    await pool.shutdown()
  }
  // Shutdown retires the parked workers, and the runtime lets a retired thread go after 200 ms:
  // the baseline is taken once no job thread is left.
  await settle(jobThreads, 0, 5000)
  const base = { threads: threads(), fds: fds(), fdTargets: fdTargets(), rss: rss(), heapTotal: process.memoryUsage().heapTotal }

  const pool = new WorkerPool({ interactiveWorkers: WORKERS, maxQueueDepth: DEPTH, killGraceMs: 20 })
  const blockers = holdSystemLane(pool)
  const counts = {}
  const unexpected = []
  let rssHalf = 0
  // [jobs, RSS, V8 heapTotal] (MiB) after each tenth of the jobs: a plateau is the allocator
  // settling, a line a leak; heapTotal shows how much of RSS is V8 sizing its own heap (its
  // young generation grows to several MiB under allocation pressure and stays after a GC).
  const samples = []
  await drive(
    pool,
    JOBS,
    counts,
    unexpected,
    () => {
      rssHalf = rss()
    },
    (done) => samples.push([done, Number((rss() / MiB).toFixed(2)), Number((process.memoryUsage().heapTotal / MiB).toFixed(2))]),
  )
  const rssEnd = rss()
  const heapTotalEnd = process.memoryUsage().heapTotal
  const stats = pool.stats()
  await releaseSystemLane(pool, blockers)
  await pool.shutdown()
  const survivorsAfterShutdown = survivors()
  const zombiesAfterShutdown = zombies()
  if (LEAK_FD) fs.openSync('/dev/null', 'r')
  const endThreads = await settle(threads, base.threads, 5000)
  const endFds = await settle(fds, base.fds, 2000)

  const figures = {
    jobs: JOBS,
    quick,
    escapees,
    seconds: Number(((Date.now() - started) / 1000).toFixed(1)),
    node: process.version,
    uid: process.getuid(),
    kinds: counts,
    totals: stats.totals,
    unexpected,
    survivors: survivorsAfterShutdown.length,
    survivorSamples: survivorsAfterShutdown.slice(0, 5),
    zombies: zombiesAfterShutdown.length,
    threads: { start: base.threads, end: endThreads, delta: endThreads - base.threads },
    fds: { start: base.fds, end: endFds, delta: endFds - base.fds },
    fdTargets: { start: base.fdTargets, end: fdTargets() },
    rss: {
      processStart: rssProcessStart,
      start: base.rss,
      half: rssHalf,
      end: rssEnd,
      secondHalf: rssEnd - rssHalf,
      overall: rssEnd - base.rss,
      secondHalfMiB: Number(((rssEnd - rssHalf) / MiB).toFixed(2)),
      overallMiB: Number(((rssEnd - base.rss) / MiB).toFixed(2)),
      samplesMiB: samples,
      heapTotalStartMiB: Number((base.heapTotal / MiB).toFixed(2)),
      heapTotalEndMiB: Number((heapTotalEnd / MiB).toFixed(2)),
    },
    bounds: BOUNDS,
  }
  const failures = []
  if (unexpected.length > 0) failures.push(`${unexpected.length} job(s) settled unexpectedly`)
  if (figures.survivors !== 0) failures.push(`${figures.survivors} survivor(s) carry the token`)
  if (figures.zombies !== 0) failures.push(`${figures.zombies} zombie child(ren)`)
  if (figures.threads.delta > 0) failures.push(`threads not back to start (+${figures.threads.delta})`)
  if (figures.fds.delta > 0) failures.push(`fds not back to start (+${figures.fds.delta})`)
  if (figures.rss.secondHalf > BOUNDS.rssSecondHalf) failures.push(`RSS grew ${figures.rss.secondHalfMiB} MiB over the second half (bound 4)`)
  if (figures.rss.overall > BOUNDS.rssOverall) failures.push(`RSS grew ${figures.rss.overallMiB} MiB overall (bound 16)`)
  const expectedCount = Object.values(counts).reduce((a, b) => a + b, 0)
  if (expectedCount !== JOBS) failures.push(`${expectedCount} of ${JOBS} jobs settled`)
  figures.failures = failures
  figures.ok = failures.length === 0

  const json = JSON.stringify(figures, null, 2)
  fs.mkdirSync(path.dirname(OUT), { recursive: true })
  fs.writeFileSync(OUT, `${json}\n`)
  process.stdout.write(`${json}\n`)
  if (!figures.ok) {
    process.stderr.write(`soak FAILED: ${failures.join('; ')}\n`)
    process.exitCode = 1
  }
}

/** Fills the system lane: one long job running and DEPTH queued, so `queueFull` is refused. */
function holdSystemLane(pool) {
  const blockers = []
  for (let i = 0; i <= DEPTH; i++) {
    const ac = new AbortController()
    const p = pool.exec(sh('sleep 3600', { timeoutMs: 2147483647 }), 'system', undefined, { signal: ac.signal }).catch((e) => e)
    blockers.push({ ac, p })
  }
  return blockers
}

async function releaseSystemLane(pool, blockers) {
  for (const b of blockers) b.ac.abort()
  const errors = await Promise.all(blockers.map((b) => b.p))
  for (const e of errors) {
    if (!(e instanceof PoolError && e.code === 'ABORTED')) throw new Error(`a system-lane blocker settled with ${e}`)
  }
}

main().catch((err) => {
  process.stderr.write(`soak crashed: ${err && err.stack}\n`)
  process.exit(2)
})

'use strict'
// One measurement of one contender in a fresh Node process, started by run.js:
//   node bench/probe.js throughput <contender> --total 1000 --concurrency 8
//   node bench/probe.js eld <contender|idle|execFileSync> <burst|sleep>
//   node --expose-gc bench/probe.js rss <bare|addon-loaded|addon-created|addon-used|addon-retired|wt-created>
//   [FINN_SANDBOX_TEST_HOOKS=1 FINN_SANDBOX_SUPERVISOR=off] node bench/probe.js hop <supervisor|direct> --jobs 1000
//   node bench/probe.js nodekill --bound-ms 5000
//   node bench/probe.js output <contender> <yes|drain>
//   node bench/probe.js kill <contender> <obey|ignore> --timeout-ms 300 --bound-ms 3000 --grace-ms 200
//   node bench/probe.js processlog --samples 200
// Prints one BENCH_RESULT line. Every loop is bounded; every child it starts is gone (or
// killed by pid) before it exits.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFileSync } = require('node:child_process')
const { monitorEventLoopDelay } = require('node:perf_hooks')

const { emit, fail, memKiB, parseArgs, peakRssKiB, sleep, within } = require('./lib/child-util.js')
const { CWD, open, spec } = require('./lib/contenders.js')

const TRUE = spec('/bin/true', [])
const MiB = 1024 * 1024

/** Runs `total` jobs with at most `concurrency` in flight; returns the outcomes' failure count. */
async function runMany(c, s, total, concurrency) {
  let next = 0
  let failures = 0
  const lane = async () => {
    while (next < total) {
      next++
      const r = await c.run(s)
      if (r.status !== 'ok' || r.exitCode !== 0) failures++
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, total) }, lane))
  return failures
}

async function warm(c, n = 20) {
  for (let i = 0; i < n; i++) await c.run(TRUE)
  await runMany(c, TRUE, 16, 8)
  await sleep(20)
}

/** Which column a thread of this process counts in: Node's main thread, the addon's job threads, or the rest. */
function threadGroup(tid, comm) {
  if (Number(tid) === process.pid) return 'main'
  return comm.startsWith('finn-sandbox-jo') ? 'addonThreads' : 'otherThreads'
}

/**
 * CPU time (ms) this process has used so far, by thread: Node's main thread, the addon's job
 * threads, every other thread (worker_threads, libuv's pool, V8), the pool's helper processes
 * (supervisor and reapers), and the children reaped by this process or by those helpers.
 * From /proc (clock ticks, 10 ms each: meaningful over a few thousand commands).
 */
function cpuByThread() {
  const tick = 1000 / 100
  const fields = (stat) => stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  const out = { main: 0, addonThreads: 0, otherThreads: 0, children: 0, helpers: 0 }
  for (const tid of fs.readdirSync('/proc/self/task')) {
    let stat
    try {
      stat = fs.readFileSync(`/proc/self/task/${tid}/stat`, 'utf8')
    } catch {
      continue // the thread exited
    }
    const f = fields(stat)
    out[threadGroup(tid, stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')))] += (Number(f[11]) + Number(f[12])) * tick
  }
  const self = fields(fs.readFileSync('/proc/self/stat', 'utf8'))
  out.children = (Number(self[13]) + Number(self[14])) * tick
  // The pool's supervisor and reapers (live all through a run: a reaper retires after 10 s
  // idle): their own CPU, and that of the commands they reaped, which is not in Node's.
  out.helpers = 0
  for (const pid of descendants(process.pid)) {
    try {
      const f = fields(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))
      out.helpers += (Number(f[11]) + Number(f[12])) * tick
      out.children += (Number(f[13]) + Number(f[14])) * tick
    } catch {
      /* exited */
    }
  }
  return out
}

/**
 * Voluntary context switches so far (a thread going to sleep: each is a wake-up later), grouped
 * as in `cpuByThread`. On this VM a wake-up of a thread on another vCPU costs its waker an
 * inter-processor interrupt, so the count explains much of the CPU column.
 */
function switchesByThread() {
  const out = { main: 0, addonThreads: 0, otherThreads: 0, helpers: 0 }
  const voluntary = (status) => Number(/^voluntary_ctxt_switches:\s*(\d+)/m.exec(status)[1])
  for (const tid of fs.readdirSync('/proc/self/task')) {
    try {
      const status = fs.readFileSync(`/proc/self/task/${tid}/status`, 'utf8')
      out[threadGroup(tid, /^Name:\s*(.*)$/m.exec(status)[1])] += voluntary(status)
    } catch {
      // the thread exited
    }
  }
  for (const pid of descendants(process.pid)) {
    try {
      out.helpers += voluntary(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))
    } catch {
      // exited
    }
  }
  return out
}

async function throughput(id, flags) {
  const total = Math.min(Number(flags.total || 1000), 100_000)
  const concurrency = Math.min(Number(flags.concurrency || 8), 1024)
  const c = await open(id)
  await warm(c)
  const cpu0 = cpuByThread()
  const sw0 = switchesByThread()
  const t0 = performance.now()
  const failures = await runMany(c, TRUE, total, concurrency)
  const elapsedMs = performance.now() - t0
  const cpu1 = cpuByThread()
  const sw1 = switchesByThread()
  await c.close()
  // Threads that exited during the run (execa's, say) drop out of the per-thread sums: the
  // columns are a lower bound for those; the addon's job threads stay parked until close.
  const cpuUsPerCommand = {}
  for (const k of Object.keys(cpu1)) cpuUsPerCommand[k] = +(((cpu1[k] - cpu0[k]) * 1000) / total).toFixed(1)
  const sleepsPerCommand = {}
  for (const k of Object.keys(sw1)) sleepsPerCommand[k] = +((sw1[k] - sw0[k]) / total).toFixed(2)
  return { contender: id, total, concurrency, elapsedMs, throughputPerSec: (total / elapsedMs) * 1000, failures, cpuUsPerCommand, sleepsPerCommand }
}

const ms = (ns) => ns / 1e6

async function eld(id, workload) {
  if (!['burst', 'sleep'].includes(workload)) throw new Error(`eld workload must be burst or sleep, not ${workload}`)
  const burst = workload === 'burst'
  const sleepSpec = spec('/bin/sleep', ['1'])
  let c = null
  if (id !== 'idle' && id !== 'execFileSync') {
    c = await open(id)
    await warm(c)
  } else if (id === 'execFileSync') {
    for (let i = 0; i < 20; i++) execFileSync('/bin/true', [], { cwd: CWD, env: TRUE.env })
  }
  const h = monitorEventLoopDelay({ resolution: 1 })
  h.enable()
  // The histogram records intervals between its own ticks: let it tick before the workload,
  // or a block right at the start would go unrecorded.
  await sleep(10)
  const t0 = performance.now()
  let failures = 0
  if (id === 'idle') {
    // The machine's own noise floor: the loop sits idle for as long as a burst takes.
    await sleep(burst ? 300 : 1000)
  } else if (id === 'execFileSync') {
    // The blocked baseline: the same commands, one after another, on the main thread,
    // yielding to the loop between them (as a request handler calling execFileSync would).
    const n = burst ? 200 : 4
    for (let i = 0; i < n; i++) {
      try {
        execFileSync(burst ? '/bin/true' : '/bin/sleep', burst ? [] : ['1'], { cwd: CWD, env: TRUE.env, stdio: 'ignore' })
      } catch {
        failures++
      }
      await new Promise((resolve) => setImmediate(resolve))
    }
    // Let the histogram's timer fire once more so the last block is recorded.
    await sleep(5)
  } else if (burst) {
    failures = await runMany(c, TRUE, 200, 8)
  } else {
    failures = await runMany(c, sleepSpec, 4, 4)
  }
  const elapsedMs = performance.now() - t0
  h.disable()
  if (c) await c.close()
  return {
    contender: id,
    workload,
    elapsedMs,
    failures,
    count: h.count,
    p50Ms: ms(h.percentile(50)),
    p99Ms: ms(h.percentile(99)),
    maxMs: ms(h.max),
    meanMs: ms(h.mean),
  }
}

async function rss(variant) {
  if (typeof global.gc !== 'function') throw new Error('rss needs node --expose-gc')
  let c = null
  if (variant === 'addon-loaded') {
    // The addon required, no pool: what the module itself costs a process.
    require('../index.js')
  } else if (variant === 'addon-created') {
    c = await open('addon-2')
  } else if (variant === 'addon-used') {
    c = await open('addon-2')
    await runMany(c, TRUE, 100, 8)
  } else if (variant === 'addon-retired') {
    // An idle reaper retires after 10 s without a job: what a pool idle for longer holds.
    c = await open('addon-2')
    await runMany(c, TRUE, 100, 8)
    await sleep(10_500)
  } else if (variant === 'wt-created') {
    c = await open('wt-2')
    // Let the three worker threads boot.
    await c.run(TRUE)
  } else if (variant !== 'bare') {
    throw new Error(`unknown rss variant ${variant}`)
  }
  await sleep(300)
  global.gc()
  await sleep(700)
  global.gc()
  await sleep(100)
  const mem = memKiB()
  // The pool's supervisor and whatever reapers are still alive (idle ones retire after 10 s):
  // their RSS counts toward the pool's. Summed RSS counts the pages a reaper shares with the
  // supervisor it was forked from twice; PSS splits them, so both are reported.
  const helpers = descendants(process.pid).map((pid) => ({ pid, comm: comm(pid), ...helperMem(pid) }))
  const sum = (k) => helpers.reduce((a, h) => a + (h[k] || 0), 0)
  // Closing a pool after the reading; an idle addon pool would not keep the process alive.
  if (c && variant === 'wt-created') await c.close()
  return { variant, rssKiB: mem.rss, anonKiB: mem.anon, fileKiB: mem.file, helpers, helpersRssKiB: sum('rssKiB'), helpersPssKiB: sum('pssKiB') }
}

/** Every live descendant of `pid` (not `pid` itself), by the `children` files of its threads. */
function descendants(pid) {
  const out = []
  const stack = [pid]
  while (stack.length) {
    const parent = stack.pop()
    let tasks = []
    try {
      tasks = fs.readdirSync(`/proc/${parent}/task`)
    } catch {
      continue // exited
    }
    for (const tid of tasks) {
      let kids = []
      try {
        kids = fs.readFileSync(`/proc/${parent}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)
      } catch {
        /* the thread exited */
      }
      for (const k of kids) {
        if (out.includes(k)) continue
        out.push(k)
        stack.push(k)
      }
    }
  }
  return out
}

function comm(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim()
  } catch {
    return null
  }
}

/** VmRSS, and PSS from smaps_rollup, of another process, KiB (null when unreadable). */
function helperMem(pid) {
  const field = (text, name) => {
    const m = new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)
    return m ? Number(m[1]) : null
  }
  let rssKiB = null
  let pssKiB = null
  try {
    rssKiB = field(fs.readFileSync(`/proc/${pid}/status`, 'utf8'), 'VmRSS')
    pssKiB = field(fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'), 'Pss')
  } catch {
    /* gone, or not ours to read */
  }
  return { rssKiB, pssKiB }
}

/** utime+stime (ms) and context switches of one process (all its threads), or zeros when gone. */
function procCost(pid) {
  const tick = 1000 / 100
  let cpuMs = 0
  let switches = 0
  let tasks = []
  try {
    tasks = fs.readdirSync(`/proc/${pid}/task`)
  } catch {
    return { cpuMs, switches }
  }
  for (const tid of tasks) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      cpuMs += (Number(f[11]) + Number(f[12])) * tick
      const status = fs.readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8')
      for (const m of status.matchAll(/^(?:non)?voluntary_ctxt_switches:\s+(\d+)/gm)) switches += Number(m[1])
    } catch {
      /* the thread exited */
    }
  }
  return { cpuMs, switches }
}

/**
 * The supervisor hop: sequential /bin/true through the 2-worker pool, the path chosen by the
 * environment run.js sets (supervisor: the default; direct: FINN_SANDBOX_TEST_HOOKS=1
 * FINN_SANDBOX_SUPERVISOR=off, posix_spawn from Node without the supervisor). Per job: the
 * wall time, and the own CPU and context switches (wake-ups) of Node plus the supervisor and
 * its reapers, without the commands' own (the reapers' children are not counted in their
 * utime/stime).
 */
async function hop(mode, flags) {
  if (!['supervisor', 'direct'].includes(mode)) throw new Error(`hop mode must be supervisor or direct, not ${mode}`)
  const direct = process.env.FINN_SANDBOX_SUPERVISOR === 'off'
  if (direct !== (mode === 'direct')) throw new Error(`hop ${mode}: FINN_SANDBOX_SUPERVISOR is ${process.env.FINN_SANDBOX_SUPERVISOR ?? 'unset'}`)
  const jobs = Math.min(Number(flags.jobs || 1000), 100_000)
  const c = await open('addon-2')
  await warm(c)
  const helpers = descendants(process.pid)
  if (direct ? helpers.length !== 0 : helpers.length === 0) throw new Error(`hop ${mode}: ${helpers.length} helper processes below Node`)
  const cost = () => {
    const own = [process.pid, ...descendants(process.pid)].map(procCost)
    return { cpuMs: own.reduce((a, x) => a + x.cpuMs, 0), switches: own.reduce((a, x) => a + x.switches, 0) }
  }
  const before = cost()
  const samplesMs = new Array(jobs)
  let failures = 0
  const t0 = performance.now()
  for (let i = 0; i < jobs; i++) {
    const t = performance.now()
    const r = await c.run(TRUE)
    samplesMs[i] = performance.now() - t
    if (r.status !== 'ok' || r.exitCode !== 0) failures++
  }
  const elapsedMs = performance.now() - t0
  const after = cost()
  const helpersAfter = descendants(process.pid).length
  await c.close()
  return {
    mode,
    jobs,
    failures,
    helpers: helpersAfter,
    msPerJob: elapsedMs / jobs,
    samplesMs: samplesMs.map((x) => +x.toFixed(4)),
    cpuMsPerJob: (after.cpuMs - before.cpuMs) / jobs,
    switchesPerJob: (after.switches - before.switches) / jobs,
  }
}

/** Non-zombie processes whose command line holds `token`. */
function holders(token) {
  const out = []
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8')
      if (stat.slice(stat.lastIndexOf(')') + 2)[0] === 'Z') continue
      if (fs.readFileSync(`/proc/${name}/cmdline`, 'latin1').includes(token)) out.push(Number(name))
    } catch {
      /* gone */
    }
  }
  return out
}

/** A token for /proc scans that `sleep` still reads as a number: `<n>.<12 random digits>`. */
const token = (n) => `${n}.${String(Math.floor(Math.random() * 1e12)).padStart(12, '0')}`

/**
 * `kill -9` of a Node running five escaping trees (18 processes: TERM-immune, setsid, double
 * fork) on a pool: the time from the kill until /proc holds no process with the run's token,
 * and until the dead Node is reaped by this process. Polled every millisecond (a busy loop
 * would take a core from the processes being killed).
 */
async function nodekill(flags) {
  const boundMs = Number(flags['bound-ms'] || 5000)
  const tok = token(9999)
  const scripts = [
    `trap '' TERM; sleep ${tok} & wait; : ${tok}`,
    `setsid sleep ${tok} & wait; : ${tok}`,
    `(sleep ${tok} &); sh -c 'sleep ${tok}; :' & wait; : ${tok}`,
    `trap '' TERM; setsid sleep ${tok} & (setsid sh -c 'sleep ${tok}; :' &); sh -c 'trap "" TERM; sleep ${tok}; :' & wait; : ${tok}`,
    `(setsid sleep ${tok} &); sleep ${tok}; : ${tok}`,
  ]
  const expected = 18
  const body = `
    const { WorkerPool } = require(${JSON.stringify(path.join(__dirname, '..', 'index.js'))})
    const pool = new WorkerPool({ interactiveWorkers: 5 })
    for (const s of ${JSON.stringify(scripts)}) {
      pool.exec({ binaryPath: '/bin/sh', args: ['-c', s], cwd: '/', env: { PATH: '/usr/bin:/bin' }, timeoutMs: 600000 }).catch(() => {})
    }
    setInterval(() => {}, 1000)`
  const child = require('node:child_process').spawn(process.execPath, ['-e', body], { stdio: 'ignore' })
  let exitedAt = null
  child.on('exit', () => (exitedAt = performance.now()))
  const cleanup = () => {
    for (const pid of holders(tok)) try { process.kill(pid, 'SIGKILL') } catch { /* gone */ }
  }
  process.once('exit', cleanup)
  const startBy = performance.now() + 20_000
  let before = 0
  while ((before = holders(tok).length) < expected) {
    if (performance.now() > startBy) {
      child.kill('SIGKILL')
      cleanup()
      throw new Error(`only ${before} of ${expected} processes started within 20 s`)
    }
    await sleep(5)
  }
  await sleep(20)
  const start = performance.now()
  child.kill('SIGKILL')
  let left = expected
  while ((left = holders(tok).length) > 0 && performance.now() - start < boundMs) await sleep(1)
  const goneMs = left === 0 ? performance.now() - start : null
  await within(new Promise((resolve) => (exitedAt !== null ? resolve() : child.once('exit', resolve))), 5000, null)
  cleanup()
  process.removeListener('exit', cleanup)
  return { processes: before, goneMs, leftAtBound: left === 0 ? 0 : left, boundMs, nodeReapedMs: exitedAt === null ? null : exitedAt - start }
}

async function output(id, which) {
  const s =
    which === 'yes'
      ? spec('/usr/bin/yes', [], { maxBuffer: MiB })
      : which === 'drain'
        ? spec('/usr/bin/head', ['-c', String(100 * MiB), '/dev/zero'], { maxBuffer: 200 * MiB })
        : null
  if (!s) throw new Error(`output must be yes or drain, not ${which}`)
  const c = await open(id)
  for (let i = 0; i < 3; i++) await c.run(TRUE)
  await sleep(50)
  const rssBefore = memKiB().rss
  const peakBefore = peakRssKiB()
  const t0 = performance.now()
  // A contender that never returns must not hang the run.
  const r = await within(c.run(s), 60_000, { status: 'hung', message: 'did not return within 60 s' })
  const elapsedMs = performance.now() - t0
  const peakAfter = peakRssKiB()
  await c.close()
  return {
    contender: id,
    which,
    maxBuffer: s.maxBuffer,
    elapsedMs,
    status: r.status,
    code: r.code,
    message: r.message,
    truncated: r.truncated,
    outBytes: r.outBytes,
    rssBeforeKiB: rssBefore,
    peakBeforeKiB: peakBefore,
    peakRssKiB: peakAfter,
  }
}

/** /proc/<pid>/stat: [state, starttime] or null when gone. */
function procStat(pid) {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const rest = text.slice(text.lastIndexOf(')') + 2).split(' ')
    return { state: rest[0], start: rest[19] }
  } catch {
    return null
  }
}

/** Alive: the same process (same start time) still exists and is not a zombie. */
function alive(p) {
  const st = procStat(p.pid)
  return st !== null && st.start === p.start && st.state !== 'Z' && st.state !== 'X'
}

async function kill(id, which, flags) {
  const timeoutMs = Number(flags['timeout-ms'] || 300)
  const boundMs = Number(flags['bound-ms'] || 3000)
  const graceMs = Number(flags['grace-ms'] || 200)
  if (!['obey', 'ignore'].includes(which)) throw new Error(`kill tree must be obey or ignore, not ${which}`)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'finn-bench-kill-'))
  const pidFile = path.join(dir, 'pids')
  const trap = which === 'ignore' ? 'trap "" TERM; ' : ''
  // Every process of the tree carries the token in its command line (the sleeps read it as
  // 100.xxx seconds), so a /proc scan finds whatever is left of it, recorded or not.
  const tok = token(100)
  const script = `${trap}echo $$ >> ${pidFile}; sleep ${tok} & echo $! >> ${pidFile}; sleep ${tok} & echo $! >> ${pidFile}; wait; : ${tok}`
  const c = await open(id, { killGraceMs: graceMs })
  for (let i = 0; i < 3; i++) await c.run(TRUE)
  await sleep(20)

  let pids = []
  const recordPids = () => {
    try {
      const list = fs.readFileSync(pidFile, 'utf8').trim().split('\n').filter(Boolean).map(Number)
      for (const pid of list) {
        if (!pids.some((p) => p.pid === pid)) {
          const st = procStat(pid)
          if (st) pids.push({ pid, start: st.start })
        }
      }
    } catch {
      /* not written yet */
    }
  }
  const cleanup = () => {
    recordPids()
    for (const p of pids) if (alive(p)) try { process.kill(p.pid, 'SIGKILL') } catch { /* gone */ }
    // Nothing of ours may outlive the probe, recorded or not (the contenders that leave trees behind).
    if (id.startsWith('addon')) return
    for (const pid of holders(tok)) try { process.kill(pid, 'SIGKILL') } catch { /* gone */ }
  }
  process.once('exit', cleanup)

  const started = performance.now()
  const deadline = started + timeoutMs
  let settledAt = null
  let aliveAtSettle = null
  let scanAliveAtSettle = null
  const running = c.run(spec('/bin/sh', ['-c', script], { timeoutMs })).then((r) => {
    settledAt = performance.now()
    // Checked right when the promise settles: which recorded pids still exist?
    recordPids()
    aliveAtSettle = pids.filter(alive).length
    // And by the /proc scan: any process still carrying the token (a zombie counts as gone).
    scanAliveAtSettle = holders(tok).length
    return r
  })
  // The tree writes its pids at once; read them (and their start times) well before the deadline.
  await sleep(Math.min(100, timeoutMs / 2))
  recordPids()
  for (let i = 0; i < 20 && pids.length < 3; i++) {
    await sleep(5)
    recordPids()
  }
  let r = await within(running, Math.max(0, deadline + boundMs - performance.now()), null)
  const settled = r !== null
  let settledAfterCleanupMs = null
  let aliveAtBound = null
  if (!settled) {
    // Did not return within the bound: count what is still alive, kill it by pid, and wait
    // (bounded) for the contender to notice.
    aliveAtBound = pids.filter(alive).length
    cleanup()
    r = await within(running, 15_000, { status: 'hung', message: 'still pending 15 s after its tree was SIGKILLed' })
    settledAfterCleanupMs = settledAt === null ? null : settledAt - deadline
    aliveAtSettle = null
    scanAliveAtSettle = null
  }
  const deadToMs = settled ? settledAt - deadline : null
  cleanup()
  process.removeListener('exit', cleanup)
  fs.rmSync(dir, { recursive: true, force: true })
  await within(c.close(), 20_000, null)
  return {
    contender: id,
    tree: which,
    timeoutMs,
    boundMs,
    graceMs: id.startsWith('addon') ? graceMs : null,
    pids: pids.length,
    settled,
    settleAfterDeadlineMs: deadToMs,
    aliveAtSettle,
    scanAliveAtSettle,
    aliveAtBound,
    settledAfterCleanupMs,
    status: r.status,
    code: r.code || null,
    exitCode: r.exitCode ?? null,
  }
}

/**
 * A background process's log followed live: a Node child writes its CLOCK_MONOTONIC time
 * (`process.hrtime`, the same clock as ours) to its stdout pipe every 10 ms; `onStdout` takes
 * the difference to its own clock when the chunk arrives. Per sample: from the write to the
 * byte seen by JS, through the pipe, the process's thread and the threadsafe function.
 */
async function processlog(flags) {
  const samples = Number(flags.samples || 200)
  const sandbox = require('../index.js')
  const pool = new sandbox.WorkerPool()
  const lagsMs = []
  let partial = ''
  const child = `let n = 0; const t = setInterval(() => { process.stdout.write(process.hrtime.bigint() + '\\n'); if (++n === ${samples}) clearInterval(t) }, 10)`
  const proc = await sandbox._startProcess(pool, [process.execPath, '-e', child], {
    onStdout: (chunk) => {
      const now = process.hrtime.bigint()
      const lines = (partial + chunk.toString()).split('\n')
      partial = lines.pop()
      for (const line of lines) lagsMs.push(Number(now - BigInt(line)) / 1e6)
    },
  })
  const exit = await proc.waitForExit({ timeoutMs: 60_000 })
  await pool.shutdown()
  return { samples: lagsMs.length, lagsMs, exitCode: exit.exitCode }
}

async function main() {
  const { positional, flags } = parseArgs(process.argv.slice(2))
  const [task, a, b] = positional
  let result
  if (task === 'throughput') result = await throughput(a, flags)
  else if (task === 'eld') result = await eld(a, b)
  else if (task === 'rss') result = await rss(a)
  else if (task === 'output') result = await output(a, b)
  else if (task === 'kill') result = await kill(a, b, flags)
  else if (task === 'hop') result = await hop(a, flags)
  else if (task === 'nodekill') result = await nodekill(flags)
  else if (task === 'processlog') result = await processlog(flags)
  else throw new Error(`unknown task ${task}`)
  emit(result)
}

main().catch(fail)

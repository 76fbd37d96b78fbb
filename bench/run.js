'use strict'
// npm run bench [-- --quick]: the side-by-side benchmark of finn-sandbox against the
// worker_threads pool it replaces, child_process, execa and a native posix_spawn loop.
//
// Everything runs in ONE run. Each measurement is taken in a fresh child process (one
// contender per process, so what one contender loads never changes another's fork cost),
// in rounds, and every round visits the contenders in a rotated order, so a slow phase of
// the machine (another build, a noisy neighbour) is spread over all of them.
//
// Writes bench/results/<date>.json (<date>-2.json for a second run that day, and so on), the
// SVG charts next to it, and BENCHMARKS.md (the latest full run) at the top of the repository. A --quick run writes bench/results/<date>-quick.{json,md,svg} instead and
// leaves BENCHMARKS.md (the full run's page) alone. Benchmarks are not tests: nothing here
// runs in `npm test`.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawn, spawnSync } = require('node:child_process')

const { summarize } = require('./lib/stats.js')
const { RESULT_PREFIX } = require('./lib/child-util.js')
const report = require('./lib/report.js')
const supervisor = require('./supervisor.js')

const ROOT = path.resolve(__dirname, '..')
const RESULTS = path.join(__dirname, 'results')
const NATIVE_DIR = path.join(__dirname, 'native-limit')
const NATIVE_BIN = path.join(NATIVE_DIR, 'target', 'release', 'native-limit')
const quick = process.argv.includes('--quick')
// --only hop,nodeKill,...: just those phases (the keys of `results`), for a look at a few aims;
// writes bench/results/<date>-quick-only.json and prints the targets, never a page.
const onlyArg = process.argv.indexOf('--only')
const only = onlyArg > 0 ? new Set(String(process.argv[onlyArg + 1] || '').split(',')) : null
const want = (phase) => !only || only.has(phase)

const CONFIG = quick
  ? {
      seq: { rounds: 2, iterations: 150, warmup: 20 },
      throughput: { rounds: 1, total: 1000, concurrency: 8 },
      heap: { sizes: [0, 1], rounds: 2, iterations: 30, warmup: 10 },
      eld: { rounds: 1 },
      rss: { rounds: 2 },
      output: { rounds: 1 },
      kill: { rounds: 1, timeoutMs: 300, boundMs: 1500, graceMs: 200 },
      hop: { rounds: 2, jobs: 500 },
      nodeKill: { rounds: 2, boundMs: 5000 },
      processLog: { rounds: 2, samples: 100 },
    }
  : {
      seq: { rounds: 8, iterations: 250, warmup: 20 },
      throughput: { rounds: 5, total: 1000, concurrency: 8 },
      heap: { sizes: [0, 1, 2], rounds: 3, iterations: 40, warmup: 10 },
      eld: { rounds: 5 },
      rss: { rounds: 5 },
      output: { rounds: 3 },
      kill: { rounds: 3, timeoutMs: 300, boundMs: 3000, graceMs: 200 },
      hop: { rounds: 4, jobs: 1000 },
      nodeKill: { rounds: 5, boundMs: 5000 },
      processLog: { rounds: 3, samples: 200 },
    }

const POOLS_AND_LIBS = ['addon-2', 'addon-4', 'wt-2', 'wt-4', 'execFile', 'spawn', 'execa']
// Single-job measurements: the worker count makes no difference there.
const SINGLE = ['addon-2', 'wt-2', 'execFile', 'spawn', 'execa']

// ── child processes: tracked, bounded, their process groups killed afterwards ──────────

const live = new Set()

function killGroup(child) {
  try {
    process.kill(-child.pid, 'SIGKILL')
  } catch {
    /* already gone */
  }
}

function cleanupAll() {
  for (const child of live) killGroup(child)
  live.clear()
}
process.on('exit', cleanupAll)
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    process.stderr.write(`\nbench: ${sig}, killing ${live.size} child process group(s)\n`)
    cleanupAll()
    process.exit(130)
  })
}

/**
 * Runs a command in its own process group and resolves with the JSON it reports (the line
 * after RESULT_PREFIX, or the whole stdout when `json: 'stdout'`). Never hangs: the group is
 * SIGKILLed after `timeoutMs`. Resolves { error } on any failure.
 */
function runChild(command, args, { timeoutMs, json = 'prefix', env = process.env }) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: ROOT, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] })
    live.add(child)
    const out = []
    const err = []
    let outLen = 0
    child.stdout.on('data', (d) => {
      if (outLen < 64 * 1024 * 1024) out.push(d)
      outLen += d.length
    })
    child.stderr.on('data', (d) => {
      if (err.length < 256) err.push(d)
    })
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      killGroup(child)
    }, timeoutMs)
    child.on('error', (e) => {
      clearTimeout(timer)
      live.delete(child)
      resolve({ error: `${command}: ${e.message}` })
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      // Whatever the child left in its group (an orphaned grandchild) goes with it.
      killGroup(child)
      live.delete(child)
      const stdout = Buffer.concat(out).toString('utf8')
      const stderr = Buffer.concat(err).toString('utf8').trim()
      if (timedOut) return resolve({ error: `timed out after ${timeoutMs} ms: ${args.join(' ')}` })
      try {
        if (json === 'stdout') return resolve(JSON.parse(stdout))
        const line = stdout.split('\n').find((l) => l.startsWith(RESULT_PREFIX))
        if (line) return resolve(JSON.parse(line.slice(RESULT_PREFIX.length)))
      } catch (e) {
        return resolve({ error: `bad output (${e.message}) from ${args.join(' ')}` })
      }
      resolve({ error: `exit ${code ?? signal} without a result: ${args.join(' ')}\n${stderr.slice(-2000)}` })
    })
  })
}

const node = (script, args, { flags = [], timeoutMs = 300_000, env } = {}) =>
  runChild(process.execPath, [...flags, path.join(__dirname, script), ...args], { timeoutMs, env })

const rotate = (list, r) => list.map((_, i) => list[(i + r) % list.length])

function log(line) {
  process.stderr.write(`${line}\n`)
}

const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : String(x))

// ── setup ────────────────────────────────────────────────────────────────────

function sh(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: ROOT, encoding: 'utf8', timeout: 30_000 })
  return r.status === 0 ? r.stdout.trim() : null
}

function machine() {
  const cpus = os.cpus()
  let glibc = null
  try {
    glibc = process.report.getReport().header.glibcVersionRuntime
  } catch {
    /* not glibc */
  }
  return {
    cpuModel: cpus[0] ? cpus[0].model.trim() : 'unknown',
    cores: os.availableParallelism ? os.availableParallelism() : cpus.length,
    ramBytes: os.totalmem(),
    kernel: `${os.type()} ${os.release()}`,
    arch: os.arch(),
    node: process.version,
    v8: process.versions.v8,
    libuv: process.versions.uv,
    glibc,
  }
}

function versions() {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'))
  let execa = null
  try {
    execa = JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', 'execa', 'package.json'), 'utf8')).version
  } catch {
    /* missing */
  }
  const binary = fs.readdirSync(ROOT).find((f) => /^finn-sandbox\..*\.node$/.test(f))
  let newestSource = 0
  const visit = (p) => {
    const st = fs.statSync(p)
    if (st.isDirectory()) for (const n of fs.readdirSync(p)) visit(path.join(p, n))
    else newestSource = Math.max(newestSource, st.mtimeMs)
  }
  for (const p of ['src', 'crates', 'Cargo.toml', 'Cargo.lock', 'build.rs']) if (fs.existsSync(path.join(ROOT, p))) visit(path.join(ROOT, p))
  const binaryMtime = binary ? fs.statSync(path.join(ROOT, binary)).mtimeMs : null
  const dirty = sh('git', ['status', '--porcelain', '--', 'src', 'crates', 'Cargo.toml', 'Cargo.lock', 'build.rs'])
  return {
    finnSandbox: pkg.version,
    gitCommit: sh('git', ['rev-parse', '--short', 'HEAD']),
    rustSourcesDirty: dirty === null ? null : dirty.length > 0,
    addonBinary: binary || null,
    addonBinaryBuilt: binaryMtime ? new Date(binaryMtime).toISOString() : null,
    addonBinaryOlderThanSources: binaryMtime ? binaryMtime < newestSource : null,
    execa,
    rustc: sh('rustc', ['--version']),
  }
}

function buildNativeLimit() {
  log('building bench/native-limit (cargo build --release)')
  const r = spawnSync('cargo', ['build', '--release', '--manifest-path', path.join(NATIVE_DIR, 'Cargo.toml')], {
    cwd: ROOT,
    stdio: ['ignore', 'inherit', 'inherit'],
    timeout: 15 * 60_000,
  })
  if (r.error || r.status !== 0) {
    log(`  native-limit did not build (${r.error ? r.error.message : `exit ${r.status}`}); its rows will be missing`)
    return false
  }
  return fs.existsSync(NATIVE_BIN)
}

// ── phases ───────────────────────────────────────────────────────────────────

async function phaseSequential(haveNative) {
  if (!want('sequential')) return undefined
  const { rounds, iterations, warmup } = CONFIG.seq
  log(`\n[1/7] sequential latency of /bin/true: ${rounds} rounds x ${iterations} per contender`)
  const samples = {}
  const errors = {}
  const ids = haveNative ? [...POOLS_AND_LIBS, 'native'] : POOLS_AND_LIBS
  for (let r = 0; r < rounds; r++) {
    for (const id of rotate(ids, r)) {
      const res =
        id === 'native'
          ? await runChild(NATIVE_BIN, ['--sequential', String(iterations), '--warmup', String(warmup), '--total', '0'], { timeoutMs: 120_000, json: 'stdout' })
          : await node('heap-child.js', [id, '0', '--iterations', String(iterations), '--warmup', String(warmup)], { flags: ['--max-old-space-size=4096'] })
      if (res.error) {
        errors[id] = res.error
        log(`  ${id}: ERROR ${res.error}`)
        continue
      }
      const xs = id === 'native' ? res.sequentialUs.map((us) => us / 1000) : res.samplesMs
      if (res.failures) errors[id] = `${res.failures} runs did not exit 0`
      ;(samples[id] ||= []).push(...xs)
      log(`  round ${r + 1} ${id.padEnd(9)} median ${fmt(summarize(xs).median, 3)} ms`)
    }
  }
  const out = {}
  for (const id of ids) out[id] = { summary: summarize(samples[id] || []), samplesMs: (samples[id] || []).map((x) => +x.toFixed(4)), error: errors[id] }
  return out
}

async function phaseThroughput(haveNative) {
  if (!want('throughput')) return undefined
  const { rounds, total, concurrency } = CONFIG.throughput
  log(`\n[2/7] throughput: ${total} x /bin/true at concurrency ${concurrency}, ${rounds} round(s)`)
  const perRound = {}
  const cpuRounds = {}
  const sleepRounds = {}
  const errors = {}
  // The native limit also at 2 and 4 threads (information only, not a target): the pools
  // run at most 2 or 4 commands at once whatever the caller's concurrency.
  const ids = haveNative ? [...POOLS_AND_LIBS, 'native', 'native-c2', 'native-c4'] : POOLS_AND_LIBS
  const nativeThreads = { native: concurrency, 'native-c2': 2, 'native-c4': 4 }
  for (let r = 0; r < rounds; r++) {
    for (const id of rotate(ids, r)) {
      const res =
        id in nativeThreads
          ? await runChild(NATIVE_BIN, ['--sequential', '0', '--total', String(total), '--concurrency', String(nativeThreads[id])], { timeoutMs: 120_000, json: 'stdout' })
          : await node('probe.js', ['throughput', id, '--total', String(total), '--concurrency', String(concurrency)])
      if (res.error) {
        errors[id] = res.error
        log(`  ${id}: ERROR ${res.error}`)
        continue
      }
      if (res.failures) errors[id] = `${res.failures} runs did not exit 0`
      ;(perRound[id] ||= []).push(res.throughputPerSec)
      // CPU per command: the probe's own per-thread split, or the native loop's own and its
      // children's (it has no Node thread).
      const cpu = res.cpuUsPerCommand || (res.parentCpuUsPerRun !== undefined ? { main: res.parentCpuUsPerRun, addonThreads: 0, otherThreads: 0, helpers: 0, children: res.childCpuUsPerRun } : null)
      if (cpu) (cpuRounds[id] ||= []).push(cpu)
      const sleeps = res.sleepsPerCommand || (res.parentSleepsPerRun !== undefined ? { main: res.parentSleepsPerRun, addonThreads: 0, otherThreads: 0, helpers: 0 } : null)
      if (sleeps) (sleepRounds[id] ||= []).push(sleeps)
      log(`  round ${r + 1} ${id.padEnd(9)} ${fmt(res.throughputPerSec, 0)} /s`)
    }
  }
  const out = {}
  for (const id of ids) {
    out[id] = { summary: summarize(perRound[id] || []), perRound: perRound[id] || [], error: errors[id] }
    const rounds = cpuRounds[id] || []
    if (rounds.length) {
      // The median of each column over the rounds.
      out[id].cpuUsPerCommand = {}
      for (const k of Object.keys(rounds[0])) out[id].cpuUsPerCommand[k] = summarize(rounds.map((r) => r[k])).median
    }
    const sleeps = sleepRounds[id] || []
    if (sleeps.length) {
      out[id].sleepsPerCommand = {}
      for (const k of Object.keys(sleeps[0])) out[id].sleepsPerCommand[k] = summarize(sleeps.map((r) => r[k])).median
    }
  }
  return out
}

async function phaseHeap() {
  if (!want('heap')) return undefined
  const { sizes, rounds, iterations, warmup } = CONFIG.heap
  log(`\n[3/7] latency vs heap: ${sizes.join(', ')} GiB, ${rounds} round(s) x ${iterations} per contender and size`)
  const samples = {}
  const held = {}
  const errors = {}
  for (let r = 0; r < rounds; r++) {
    for (const gib of rotate(sizes, r)) {
      for (const id of rotate(SINGLE, r)) {
        const res = await node('heap-child.js', [id, String(gib), '--iterations', String(iterations), '--warmup', String(warmup)], {
          flags: ['--max-old-space-size=4096'],
        })
        const key = `${id}@${gib}`
        if (res.error) {
          errors[key] = res.error
          log(`  ${key}: ERROR ${res.error}`)
          continue
        }
        if (res.failures) errors[key] = `${res.failures} runs did not exit 0`
        ;((samples[id] ||= {})[gib] ||= []).push(...res.samplesMs)
        ;((held[id] ||= {})[gib] ||= []).push(res.rssHeldKiB)
        log(`  round ${r + 1} ${gib} GiB ${id.padEnd(9)} median ${fmt(summarize(res.samplesMs).median, 2)} ms (RSS ${fmt(res.rssHeldKiB / 1024, 0)} MiB)`)
      }
    }
  }
  const out = { sizes, contenders: {} }
  for (const id of SINGLE) {
    out.contenders[id] = {}
    for (const gib of sizes) {
      const xs = (samples[id] && samples[id][gib]) || []
      out.contenders[id][gib] = {
        summary: summarize(xs),
        rssHeldMiB: summarize(((held[id] && held[id][gib]) || []).map((k) => k / 1024)).median,
        samplesMs: xs.map((x) => +x.toFixed(4)),
        error: errors[`${id}@${gib}`],
      }
    }
  }
  return out
}

async function phaseEld() {
  if (!want('eld')) return undefined
  const { rounds } = CONFIG.eld
  const ids = ['idle', ...POOLS_AND_LIBS, 'execFileSync']
  log(`\n[4/7] event-loop delay: 200 x /bin/true at concurrency 8, and 4 x sleep 1; ${rounds} round(s)`)
  const out = { burst: {}, sleep: {} }
  for (let r = 0; r < rounds; r++) {
    for (const workload of ['burst', 'sleep']) {
      for (const id of rotate(ids, r)) {
        const res = await node('probe.js', ['eld', id, workload], { timeoutMs: 120_000 })
        const slot = (out[workload][id] ||= { rounds: [] })
        if (res.error) {
          slot.error = res.error
          log(`  ${workload} ${id}: ERROR ${res.error}`)
          continue
        }
        if (res.failures) slot.error = `${res.failures} runs failed`
        slot.rounds.push(res)
        log(`  round ${r + 1} ${workload.padEnd(5)} ${id.padEnd(12)} p99 ${fmt(res.p99Ms)} ms, max ${fmt(res.maxMs)} ms (${fmt(res.elapsedMs, 0)} ms)`)
      }
    }
  }
  for (const workload of ['burst', 'sleep']) {
    for (const slot of Object.values(out[workload])) {
      slot.p99 = summarize(slot.rounds.map((x) => x.p99Ms))
      slot.max = summarize(slot.rounds.map((x) => x.maxMs))
      slot.elapsed = summarize(slot.rounds.map((x) => x.elapsedMs))
    }
  }
  return out
}

async function phaseRss() {
  if (!want('rss')) return undefined
  const { rounds } = CONFIG.rss
  const variants = ['bare', 'addon-loaded', 'addon-created', 'addon-used', 'addon-retired', 'wt-created']
  log(`\n[5/7] idle RSS: ${variants.join(', ')}; ${rounds} round(s)`)
  const kib = {}
  const anonKib = {}
  const helperKib = {}
  const errors = {}
  for (let r = 0; r < rounds; r++) {
    for (const v of rotate(variants, r)) {
      const res = await node('probe.js', ['rss', v], { flags: ['--expose-gc'], timeoutMs: 90_000 })
      if (res.error) {
        errors[v] = res.error
        log(`  ${v}: ERROR ${res.error}`)
        continue
      }
      ;(kib[v] ||= []).push(res.rssKiB)
      ;(anonKib[v] ||= []).push(res.anonKiB)
      ;(helperKib[v] ||= []).push({ rss: res.helpersRssKiB || 0, pss: res.helpersPssKiB || 0, n: (res.helpers || []).length })
      const helpers = res.helpers && res.helpers.length ? `, + ${res.helpers.length} helper process(es) RSS ${fmt(res.helpersRssKiB / 1024, 1)} MiB (PSS ${fmt(res.helpersPssKiB / 1024, 1)})` : ''
      log(`  round ${r + 1} ${v.padEnd(13)} RSS ${fmt(res.rssKiB / 1024, 1)} MiB${helpers}`)
    }
  }
  const out = {}
  const bare = summarize((kib.bare || []).map((k) => k / 1024)).median
  const bareAnon = summarize((anonKib.bare || []).map((k) => k / 1024)).median
  for (const v of variants) {
    const s = summarize((kib[v] || []).map((k) => k / 1024))
    // The pool's helper processes (supervisor, live reapers): their summed RSS, and their PSS.
    const h = helperKib[v] || []
    const helpersRssMiB = summarize(h.map((x) => x.rss / 1024)).median
    const helpersPssMiB = summarize(h.map((x) => x.pss / 1024)).median
    const helpers = h.length ? Math.max(...h.map((x) => x.n)) : 0
    // Node's added RSS split: anonymous (heap, stacks, relocated data) and the rest, file pages
    // (the addon's code and data, Node's own binary paged in by the load).
    const addedAnonMiB = summarize((anonKib[v] || []).map((k) => k / 1024)).median - bareAnon
    out[v] = { summaryMiB: s, addedMiB: s.median - bare, addedAnonMiB, helpers, helpersRssMiB, helpersPssMiB, addedWithHelpersMiB: s.median - bare + (helpers ? helpersRssMiB : 0), error: errors[v] }
  }
  return out
}

async function phaseOutput() {
  if (!want('output')) return undefined
  const { rounds } = CONFIG.output
  log(`\n[6/7] output: yes with a 1 MiB cap, head -c 100 MiB /dev/zero with a 200 MiB cap; ${rounds} round(s)`)
  const out = { yes: {}, drain: {} }
  for (let r = 0; r < rounds; r++) {
    for (const which of ['yes', 'drain']) {
      for (const id of rotate(SINGLE, r)) {
        const res = await node('probe.js', ['output', id, which], { timeoutMs: 120_000 })
        const slot = (out[which][id] ||= { rounds: [] })
        if (res.error) {
          slot.error = res.error
          log(`  ${which} ${id}: ERROR ${res.error}`)
          continue
        }
        slot.rounds.push(res)
        log(`  round ${r + 1} ${which.padEnd(5)} ${id.padEnd(9)} ${fmt(res.elapsedMs, 1)} ms, peak RSS ${fmt(res.peakRssKiB / 1024, 0)} MiB, ${res.status}${res.truncated ? ' truncated' : ''}`)
      }
    }
  }
  for (const which of ['yes', 'drain']) {
    for (const slot of Object.values(out[which])) {
      slot.timeMs = summarize(slot.rounds.map((x) => x.elapsedMs))
      slot.peakMiB = summarize(slot.rounds.map((x) => x.peakRssKiB / 1024))
      slot.addedPeakMiB = summarize(slot.rounds.map((x) => (x.peakRssKiB - x.rssBeforeKiB) / 1024))
    }
  }
  return out
}

async function phaseProcessLog() {
  if (!want('processLog')) return undefined
  const { rounds, samples } = CONFIG.processLog
  log(`\nprocess log: a background process's write seen by onStdout, ${rounds} round(s) x ${samples} writes 10 ms apart`)
  const lags = []
  const out = { rounds, samples }
  for (let r = 0; r < rounds; r++) {
    const res = await node('probe.js', ['processlog', '--samples', String(samples)], { timeoutMs: 120_000 })
    if (res.error) {
      out.error = res.error
      log(`  ERROR ${res.error}`)
      continue
    }
    lags.push(...res.lagsMs)
    log(`  round ${r + 1} median ${fmt(summarize(res.lagsMs).median, 3)} ms over ${res.samples} writes`)
  }
  out.lagMs = summarize(lags)
  return out
}

async function phaseKill() {
  if (!want('kill')) return undefined
  const { rounds, timeoutMs, boundMs, graceMs } = CONFIG.kill
  log(`\n[7/7] kill: timeout ${timeoutMs} ms on a TERM-obeying and a TERM-ignoring tree; ${rounds} round(s), bound ${boundMs} ms`)
  const out = { timeoutMs, boundMs, addonKillGraceMs: graceMs, obey: {}, ignore: {} }
  const args = ['--timeout-ms', String(timeoutMs), '--bound-ms', String(boundMs), '--grace-ms', String(graceMs)]
  for (let r = 0; r < rounds; r++) {
    for (const tree of ['obey', 'ignore']) {
      for (const id of rotate(SINGLE, r)) {
        const res = await node('probe.js', ['kill', id, tree, ...args], { timeoutMs: 120_000 })
        const slot = (out[tree][id] ||= { rounds: [] })
        if (res.error) {
          slot.error = res.error
          log(`  ${tree} ${id}: ERROR ${res.error}`)
          continue
        }
        slot.rounds.push(res)
        const when = res.settled ? `settled ${fmt(res.settleAfterDeadlineMs, 1)} ms after the deadline, ${res.aliveAtSettle}/${res.pids} pids alive` : `not settled within ${boundMs} ms, ${res.aliveAtBound}/${res.pids} pids alive`
        log(`  round ${r + 1} ${tree.padEnd(6)} ${id.padEnd(9)} ${when}`)
      }
    }
  }
  for (const tree of ['obey', 'ignore']) {
    for (const slot of Object.values(out[tree])) {
      const settled = slot.rounds.filter((x) => x.settled)
      slot.settleMs = summarize(settled.map((x) => x.settleAfterDeadlineMs))
      slot.settledRounds = settled.length
      slot.maxAliveAtSettle = settled.length ? Math.max(...settled.map((x) => x.aliveAtSettle)) : null
      slot.maxScanAliveAtSettle = settled.length ? Math.max(...settled.map((x) => x.scanAliveAtSettle ?? Infinity)) : null
      slot.maxAliveAtBound = slot.rounds.some((x) => !x.settled) ? Math.max(...slot.rounds.filter((x) => !x.settled).map((x) => x.aliveAtBound)) : null
    }
  }
  return out
}

// ── main ─────────────────────────────────────────────────────────────────────

async function main() {
  const started = Date.now()
  const date = new Date(started).toISOString().slice(0, 10)
  // A full run never overwrites an earlier one: a second run on the same day is <date>-2.
  let base = only ? `${date}-quick-only` : quick ? `${date}-quick` : date
  for (let n = 2; !quick && !only && fs.existsSync(path.join(RESULTS, `${base}.json`)); n++) base = `${date}-${n}`
  // The page: BENCHMARKS.md for a full run; a quick run's page stays next to its data.
  const page = quick ? path.join(RESULTS, `${base}.md`) : path.join(ROOT, 'BENCHMARKS.md')
  const pageName = path.relative(ROOT, page)
  log(`finn-sandbox bench (${quick ? 'quick' : 'full'}), results -> bench/results/${base}.json, ${pageName}`)

  const haveNative = (want('sequential') || want('throughput')) && buildNativeLimit()
  const loadStart = os.loadavg()
  const results = {
    meta: {
      date,
      mode: quick ? 'quick' : 'full',
      command: `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
      only: only ? [...only] : null,
      startedAt: new Date(started).toISOString(),
      machine: machine(),
      versions: versions(),
      config: CONFIG,
      loadAvgStart: loadStart,
    },
  }
  if (results.meta.versions.addonBinaryOlderThanSources) {
    log('  note: the addon binary is older than the Rust sources (the sources are being edited); measuring the binary as built')
  }

  results.sequential = await phaseSequential(haveNative)
  results.throughput = await phaseThroughput(haveNative)
  results.heap = await phaseHeap()
  const ctx = (config) => ({ node, log, rotate, fmt, summarize, config })
  if (want('hop')) results.hop = await supervisor.phaseHop(ctx(CONFIG.hop))
  if (want('nodeKill')) results.nodeKill = await supervisor.phaseNodeKill(ctx(CONFIG.nodeKill))
  results.eld = await phaseEld()
  results.rss = await phaseRss()
  results.output = await phaseOutput()
  results.kill = await phaseKill()
  results.processLog = await phaseProcessLog()
  // Issue 17's cost of isolation per exec, at 0 and 2 GiB (bench/isolation.js).
  if (want('isolation')) results.isolation = await require('./isolation.js').phase({ node, log, rotate, quick })
  if (want('session')) results.session = await require('./session.js').phase({ node, log, rotate, quick })
  // The structured tools against rg and fd run directly, and a page of a 1 MiB file (bench/tools.js).
  if (want('tools')) results.tools = await require('./tools.js').phase({ log, quick })

  results.meta.loadAvgEnd = os.loadavg()
  // Someone rebuilding the addon during the run means later rounds measured another binary.
  const builtAtEnd = versions().addonBinaryBuilt
  results.meta.addonBinaryChangedDuringRun = builtAtEnd !== results.meta.versions.addonBinaryBuilt
  if (results.meta.addonBinaryChangedDuringRun) {
    results.meta.addonBinaryBuiltAtEnd = builtAtEnd
    log(`  WARNING: the addon binary was rebuilt during the run (${results.meta.versions.addonBinaryBuilt} -> ${builtAtEnd}); its rows mix two builds`)
  }
  results.meta.durationS = (Date.now() - started) / 1000
  results.targets = report.targets(results)

  fs.mkdirSync(RESULTS, { recursive: true })
  const write = (file, text) => {
    const tmp = `${file}.${process.pid}.tmp`
    fs.writeFileSync(tmp, text)
    fs.renameSync(tmp, file)
  }
  if (only) {
    write(path.join(RESULTS, `${base}.json`), `${JSON.stringify(results, null, 1)}\n`)
    log(`\n${report.targetsText(results, { measuredOnly: true })}`)
    log(`\ndone in ${fmt(results.meta.durationS, 0)} s: bench/results/${base}.json (--only ${[...only].join(',')}: no page)`)
    return
  }
  const charts = { heap: `${base}-heap.svg`, throughput: `${base}-throughput.svg` }
  write(path.join(RESULTS, charts.heap), report.heapSvg(results))
  write(path.join(RESULTS, charts.throughput), report.throughputSvg(results))
  write(path.join(RESULTS, `${base}.json`), `${JSON.stringify(results, null, 1)}\n`)
  // Links in the page are written relative to where the page lives.
  const link = (fromRoot) => path.relative(path.dirname(page), path.join(ROOT, fromRoot))
  write(page, report.markdown(results, { json: `bench/results/${base}.json`, charts, link }))

  log(`\n${report.targetsText(results)}`)
  log(`\ndone in ${fmt(results.meta.durationS, 0)} s: bench/results/${base}.json, bench/results/${charts.heap}, bench/results/${charts.throughput}, ${pageName}`)
}

main().catch((err) => {
  log(err && err.stack ? err.stack : String(err))
  cleanupAll()
  process.exit(1)
})

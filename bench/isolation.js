'use strict'
// The isolation phase of `npm run bench`: what native isolation adds per exec over a plain exec,
// at 0 and at 2 GiB of Node heap. Per-exec latency of `/bin/true` through
// the finn-sandbox pool (2 workers) with isolation off, with each cumulative layer set, with
// the `auto` default, and with the bwrap backend (its defaults, and without net/pid namespaces;
// no target), at each heap size; every (variant, size) in a fresh
// `bench/isolation-child.js` process, variants rotated each round.
//
// Then one `auto` job taken apart layer by layer (`layers`): the `one_job_layer_by_layer`
// harness of tests/isolate_cost.rs, built with cargo and run once, which times the crate's own
// functions on the reaper's path (the preparation, each layer applied in the forked child, the
// exec and exit under the layers, the teardown) and measures the seccomp programs a reaper and
// its jobs load.
//
// run.js calls `phase({ node, log, rotate, quick })` and stores the result as `results.isolation`;
// report.js turns it into targets (`targets`) and a section of BENCHMARKS.md (`markdown`).
// Alone, for a quick look at this phase only: `node bench/isolation.js [--quick]`.

const os = require('node:os')
const path = require('node:path')
const { spawn, spawnSync } = require('node:child_process')

const { summarize } = require('./lib/stats.js')
const { RESULT_PREFIX } = require('./lib/child-util.js')
const { VARIANTS } = require('./isolation-child.js')

const CONFIG = {
  quick: { sizes: [0, 2], rounds: 1, iterations: 100, warmup: 20, layerRuns: 150, paused: 20 },
  full: { sizes: [0, 2], rounds: 3, iterations: 200, warmup: 20, layerRuns: 600, paused: 30 },
}
/** The pause before each job of the `paused` rows: commands an agent sends seconds apart. */
const PAUSE_MS = 100
const ROOT = path.resolve(__dirname, '..')
/** The per-layer harness: its cargo command (the build) and its arguments (the run). */
const LAYERS_BUILD = ['test', '--release', '--test', 'isolate_cost', '--no-run', '--message-format=json']
const LAYERS_ARGS = ['--ignored', '--exact', 'one_job_layer_by_layer', '--nocapture']
const LAYERS_COMMAND = `FINN_ISO_N=<n> cargo test --release --test isolate_cost -- ${LAYERS_ARGS.join(' ')}`
/** What `auto` may add per exec over `off`, and what the pid and net namespaces may add with it. */
const BAR_MS = 1
const BAR_NS_MS = 2
/** What a network allowlist may add per exec over `auto`, and the proxy's share of a direct download. */
const BAR_EGRESS_MS = 1
const BAR_EGRESS_RATE = 0.8

const fmt = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '–')

/** Builds the per-layer harness (before anything is timed); its executable, or `{ error }`. */
function buildLayers(log) {
  log('building the per-layer harness (cargo test --release --test isolate_cost --no-run)')
  const r = spawnSync('cargo', LAYERS_BUILD, { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 30 * 60_000 })
  if (r.error || r.status !== 0) return { error: `cargo ${LAYERS_BUILD.join(' ')}: ${r.error ? r.error.message : `exit ${r.status}`}` }
  for (const line of r.stdout.split('\n')) {
    if (!line.startsWith('{')) continue
    const m = JSON.parse(line)
    if (m.reason === 'compiler-artifact' && m.target && m.target.name === 'isolate_cost' && m.executable) return { exe: m.executable }
  }
  return { error: 'cargo named no isolate_cost executable' }
}

/** Runs the per-layer harness once: its BENCH_RESULT, with the load around it. */
function runLayers(exe, n) {
  return new Promise((resolve) => {
    const loadAvgStart = os.loadavg()
    const child = spawn(exe, LAYERS_ARGS, { cwd: ROOT, env: { ...process.env, FINN_ISO_N: String(n) }, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (err += d))
    const timer = setTimeout(() => child.kill('SIGKILL'), 10 * 60_000)
    child.on('close', (code) => {
      clearTimeout(timer)
      const line = out.split('\n').find((l) => l.startsWith(RESULT_PREFIX))
      if (!line) return resolve({ error: `the harness exited ${code} without a result: ${err.slice(-500)}` })
      resolve({ ...JSON.parse(line.slice(RESULT_PREFIX.length)), loadAvgStart, loadAvgEnd: os.loadavg(), command: LAYERS_COMMAND.replace('<n>', String(n)) })
    })
  })
}

async function phase({ node, log, rotate, quick }) {
  const { sizes, rounds, iterations, warmup, layerRuns, paused } = quick ? CONFIG.quick : CONFIG.full
  const built = buildLayers(log)
  const loadAvgStart = os.loadavg()
  const ids = Object.keys(VARIANTS)
  log(`\n[isolation] /bin/true through the pool (2 workers): ${ids.join(', ')}; ${sizes.join(', ')} GiB heap; ${rounds} round(s) x ${iterations}`)
  const samples = {}
  const info = {}
  const errors = {}
  for (let r = 0; r < rounds; r++) {
    for (const gib of rotate(sizes, r)) {
      for (const id of rotate(ids, r)) {
        const res = await node('isolation-child.js', [id, String(gib), '--iterations', String(iterations), '--warmup', String(warmup)], {
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
        info[id] = { applied: res.applied, degraded: res.degraded }
        log(`  round ${r + 1} ${gib} GiB ${id.padEnd(14)} median ${fmt(summarize(res.samplesMs).median)} ms  [${res.applied.join(',') || 'off'}]`)
      }
    }
  }
  // `off` and `auto` once more at 0 GiB, each job PAUSE_MS after the previous one: the state a
  // job finds in the kernel after a pause is not the one back-to-back jobs keep warm.
  const pausedSamples = { off: [], auto: [] }
  const pausedErrors = {}
  for (let r = 0; r < rounds; r++) {
    for (const id of rotate(['off', 'auto'], r)) {
      const res = await node('isolation-child.js', [id, '0', '--iterations', String(paused), '--warmup', '5', '--pause-ms', String(PAUSE_MS)], {
        flags: ['--max-old-space-size=4096'],
      })
      if (res.error || res.failures) {
        pausedErrors[id] = res.error || `${res.failures} runs did not exit 0`
        log(`  paused ${id}: ERROR ${pausedErrors[id]}`)
        if (res.error) continue
      }
      pausedSamples[id].push(...res.samplesMs)
      log(`  round ${r + 1} 0 GiB ${id.padEnd(14)} ${PAUSE_MS} ms apart: median ${fmt(summarize(res.samplesMs).median)} ms`)
    }
  }
  const pausedOut = { pauseMs: PAUSE_MS, iterations: paused, variants: {} }
  for (const id of ['off', 'auto']) {
    pausedOut.variants[id] = { summary: summarize(pausedSamples[id]), samplesMs: pausedSamples[id].map((x) => +x.toFixed(4)), error: pausedErrors[id] }
  }
  pausedOut.addedMs = pausedOut.variants.auto.summary.median - pausedOut.variants.off.summary.median
  // 100 MiB through the egress proxy against the same download straight to the server.
  const egressRounds = quick ? 3 : 7
  log(`  100 MiB through the egress proxy vs direct (curl in an isolated job, ${egressRounds} rounds)`)
  const egressLoadStart = os.loadavg()
  const egress = await node('egress-child.js', ['--rounds', String(egressRounds), '--mib', '100'])
  egress.loadAvgStart = egressLoadStart
  egress.loadAvgEnd = os.loadavg()
  if (egress.error) log(`  egress: ERROR ${egress.error}`)
  else log(`  egress: proxy ${fmt(egress.proxyMiBps, 0)} MiB/s, direct ${fmt(egress.directMiBps, 0)} MiB/s`)
  const loadAvgEnd = os.loadavg()
  log(`  one \`auto\` job layer by layer (tests/isolate_cost.rs one_job_layer_by_layer, ${layerRuns} runs)`)
  const layers = built.error ? { error: built.error } : await runLayers(built.exe, layerRuns)
  if (layers.error) log(`  layers: ERROR ${layers.error}`)
  const { probeIsolation } = require('..')
  const out = {
    sizes,
    rounds,
    iterations,
    loadAvgStart,
    loadAvgEnd,
    paused: pausedOut,
    layers,
    egress,
    uid: process.getuid(),
    // The figures hold for this CPU only: the same layers cost about three times as much on one
    // kind of machine as on another.
    cpuModel: os.cpus()[0] ? os.cpus()[0].model.trim() : 'unknown',
    seccompInstructions: probeIsolation().seccompInstructions,
    variants: {},
  }
  for (const id of ids) {
    out.variants[id] = { ...(info[id] || { applied: [], degraded: [] }), bySize: {} }
    for (const gib of sizes) {
      const xs = (samples[id] && samples[id][gib]) || []
      const s = summarize(xs)
      out.variants[id].bySize[gib] = { summary: s, samplesMs: xs.map((x) => +x.toFixed(4)), error: errors[`${id}@${gib}`] }
    }
  }
  for (const id of ids) {
    for (const gib of sizes) {
      const cell = out.variants[id].bySize[gib]
      cell.addedMs = cell.summary.median - out.variants.off.bySize[gib].summary.median
    }
  }
  return out
}

/** The targets, through report.js's `add(name, value, op, limit, measured, note, unit)`. */
function targets(iso, add) {
  egressTargets(iso, add)
  for (const gib of iso.sizes) {
    const a = iso.variants.auto.bySize[gib]
    const off = iso.variants.off.bySize[gib]
    add(
      `Isolation \`auto\` added per exec at ${gib} GiB heap (over isolation off)`,
      a.error ? NaN : a.addedMs,
      '<=',
      BAR_MS,
      `${fmt(a.summary.median)} ms vs ${fmt(off.summary.median)} ms`,
      `as uid ${iso.uid} on ${iso.cpuModel || 'an unrecorded CPU'}: ${iso.variants.auto.applied.join(', ')}`,
      'ms',
    )
    const eg = iso.variants.egress && iso.variants.egress.bySize[gib]
    if (eg) {
      add(
        `Isolation \`auto\` with a network allowlist added per exec at ${gib} GiB heap (over \`auto\`)`,
        eg.error || a.error ? NaN : eg.summary.median - a.summary.median,
        '<=',
        BAR_EGRESS_MS,
        `${fmt(eg.summary.median)} ms vs ${fmt(a.summary.median)} ms`,
        `as uid ${iso.uid} on ${iso.cpuModel || 'an unrecorded CPU'}: ${iso.variants.egress.applied.join(', ')}`,
        'ms',
      )
    }
    const ns = iso.variants['+pidns+netns'] && iso.variants['+pidns+netns'].bySize[gib]
    if (ns) {
      add(
        `Isolation \`+pidns+netns\` added per exec at ${gib} GiB heap (over isolation off)`,
        ns.error ? NaN : ns.addedMs,
        '<=',
        BAR_NS_MS,
        `${fmt(ns.summary.median)} ms vs ${fmt(off.summary.median)} ms`,
        `as uid ${iso.uid} on ${iso.cpuModel || 'an unrecorded CPU'}: ${iso.variants['+pidns+netns'].applied.join(', ')}`,
        'ms',
      )
    }
  }
}

const loadText = (a, b) => (a && b ? `${a.map((x) => Number(x).toFixed(2)).join(' ')} at the start, ${b.map((x) => Number(x).toFixed(2)).join(' ')} at the end` : 'not recorded')
const signed = (x) => (Number.isFinite(x) ? `${x >= 0 ? '+' : ''}${x.toFixed(3)}` : '–')

/** The 100 MiB download through the egress proxy and without it (see `phase`). */
function egressTargets(iso, add) {
  const e = iso.egress
  if (!e) return
  add(
    '100 MiB through the egress proxy (rate over the same download without it)',
    e.error ? NaN : e.proxyMiBps / e.directMiBps,
    '>=',
    BAR_EGRESS_RATE,
    `${fmt(e.proxyMiBps, 0)} vs ${fmt(e.directMiBps, 0)} MiB/s`,
    `curl in an isolated job, medians of ${e.rounds} interleaved rounds, as uid ${iso.uid} on ${iso.cpuModel || 'an unrecorded CPU'}; load average ${loadText(e.loadAvgStart, e.loadAvgEnd)}`,
    'x',
  )
}

/** The rows of jobs that come after a pause (see `phase`). */
function pausedMarkdown(iso, link) {
  const p = iso.paused
  if (!p) return []
  const cell = (id) => {
    const v = p.variants[id]
    return `${fmt(v.summary.median)}${v.error ? ` (${v.error})` : ''}`
  }
  return [
    `Jobs ${p.pauseMs} ms apart (0 GiB, ${p.iterations} per round, no target): \`off\` ${cell('off')} ms, \`auto\` ${cell('auto')} ms, added **${fmt(p.addedMs)} ms**. Back-to-back jobs keep the kernel's state warm; after a pause, a job's move into its cgroup (v1) waits for an RCU grace period unless the hierarchy is mounted with \`favordynmods\` ([RELIABILITY.md](${link('RELIABILITY.md')}#isolation-cost)).`,
    '',
  ]
}

/** The per-layer part of the section: one `auto` job taken apart (see `runLayers`). */
function layersMarkdown(iso) {
  const l = iso.layers
  if (!l) return []
  const head = ['### Where the time goes: one job, layer by layer', '']
  if (l.error) return [...head, `Not measured in this run: ${l.error}.`, '']
  const load = (s) => (Array.isArray(s) ? s : String(s).split(' ').map(Number))
  const parts = ['prepareMs', 'applyMs', 'restMs', 'teardownMs']
  const rows = l.steps.map((r, i) =>
    i === 0
      ? [r.layers, ...parts.map((k) => fmt(r[k])), fmt(r.jobMs), '–']
      : [r.layers, ...parts.map((k) => signed(r[k] - l.steps[i - 1][k])), fmt(r.jobMs), signed(r.jobMs - l.steps[0].jobMs)],
  )
  const o = l.others
  const p = l.programs
  return [
    ...head,
    `\`${l.command}\` (run by this phase after the pool variants; as uid ${iso.uid}, on ${iso.cpuModel || 'an unrecorded CPU'}, landlock ABI ${l.landlockAbi}; load average ${loadText(load(l.loadAvgStart), load(l.loadAvgEnd))}). It drives the crate's own functions on the reaper's path, in this process standing for a reaper (the guard installed first, as a reaper does): \`prepare\` (in the reaper, before the fork), the layers applied in the forked child (\`apply_in_child\`, timed inside the child), the child's fork, exec of \`/bin/true\`, exit and reaping, and the teardown (dropping the preparation: the cgroup's removal, the mount namespace's release). The layers are added one at a time in the order the child applies them; each row is the difference to the row above, the first is absolute. ${l.n} runs of each row, interleaved, in ${l.rounds} rounds; medians (ms).`,
    '',
    table(['layers (cumulative)', 'prepare (reaper)', 'apply (child)', 'fork, exec, exit, reap', 'teardown', 'job (ms)', 'added over no layer'], rows),
    '',
    'Beside the job:',
    '',
    table(
      ['what', 'ms', 'paid'],
      [
        ['the plan: `auto` resolved (the cwd and writable roots opened and checked, the deny list resolved)', fmt(o.resolveMs), 'per job, on the pool\'s worker thread'],
        ['the plan through the `Run` frame (JSON out and back)', fmt(o.frameMs), 'per job'],
        ['start path: `posix_spawn` of `/bin/true` to its exit', fmt(o.posixSpawnMs), 'per job without isolation'],
        ['start path: fork + exec of `/bin/true` to its exit', fmt(o.forkMs), 'per isolated job (the layers are applied between the two)'],
        [`seccomp: the sandbox filter, ${p.sandbox} instructions in 1 program`, 'in the `+ seccomp` row', 'loaded per isolated job, on the guard'],
        [`seccomp: the guard, ${p.guard.join(' + ')} instructions in ${p.guard.length} program${p.guard.length === 1 ? '' : 's'}`, fmt(o.guardLoadMs), 'loaded once per reaper (a reaper serves job after job; the pool starts one only when none is idle)'],
        [`seccomp: the watch, ${p.watch} instructions`, fmt(o.watchLoadMs), 'loaded per job only where the kernel lacks the landlock signal scope (ABI < 6)'],
      ],
    ),
    '',
  ]
}

/** The section of BENCHMARKS.md, as lines; `link` makes a path from the repository's root relative to the page. */
function markdown(iso, link = (p) => p) {
  const head = ['variant', 'applied', ...iso.sizes.flatMap((g) => [`${g} GiB median (ms)`, `${g} GiB added (ms)`])]
  const rows = Object.entries(iso.variants).map(([id, v]) => [
    `\`${id}\``,
    v.applied.join(', ') || '–',
    ...iso.sizes.flatMap((g) => {
      const c = v.bySize[g]
      return [`${fmt(c.summary.median)}${c.error ? ` (${c.error})` : ''}`, id === 'off' ? '–' : fmt(c.addedMs)]
    }),
  ])
  return [
    '## Isolation cost per exec',
    '',
    `\`/bin/true\` through the pool (2 workers), one at a time, as uid ${iso.uid}, on ${iso.cpuModel || 'an unrecorded CPU'}${iso.seccompInstructions ? "; the sandbox's seccomp program has " + iso.seccompInstructions + ' instructions' : ''}; load average ${loadText(iso.loadAvgStart, iso.loadAvgEnd)}. Each (variant, heap) runs in its own \`bench/isolation-child.js\` process; ${iso.rounds} round(s) x ${iso.iterations}. Variants are public \`IsolationOptions\` (\`bench/isolation-child.js\`), cumulative from \`off\` to \`+pidns+netns\`: landlock and seccomp have no separate switch, so they are one step. \`bwrap\` is \`mode: "bwrap"\` with its defaults (network and pid namespaces), \`bwrap-no-ns\` the same without either; they have no target (bwrap's known cost is about +5 ms per exec). \`egress\` is \`auto\` with a network allowlist (a network namespace of the job's own whose only route is the pool's egress proxy), judged over \`auto\`. "added" is the median over \`off\`'s at the same heap. The bars (\`auto\` at most ${BAR_MS} ms over \`off\`, \`+pidns+netns\` at most ${BAR_NS_MS} ms) are judged in the targets above for this CPU only: the same layers cost several times as much on another CPU kind.`,
    '',
    table(head, rows),
    '',
    ...pausedMarkdown(iso, link),
    ...layersMarkdown(iso),
  ]
}

const table = (head, rows) => [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n')

module.exports = { phase, targets, markdown }

if (require.main === module) {
  // A quick look at this phase alone (its own children, no BENCHMARKS.md).
  const quick = process.argv.includes('--quick')
  const node = (script, args, { flags = [] } = {}) =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [...flags, path.join(__dirname, script), ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
      let out = ''
      child.stdout.on('data', (d) => (out += d))
      child.on('close', (code) => {
        const line = out.split('\n').find((l) => l.startsWith(RESULT_PREFIX))
        resolve(line ? JSON.parse(line.slice(RESULT_PREFIX.length)) : { error: `exit ${code} without a result` })
      })
    })
  const rotate = (list, r) => list.map((_, i) => list[(i + r) % list.length])
  const log = (s) => process.stderr.write(`${s}\n`)
  const load = os.loadavg()[0]
  phase({ node, log, rotate, quick }).then((iso) => {
    log(`\nload average ${load.toFixed(2)} at the start, ${os.loadavg()[0].toFixed(2)} at the end (${os.availableParallelism()} cores)`)
    log(markdown(iso).join('\n'))
    const t = []
    targets(iso, (name, value, op, limit, measured) => t.push(`  ${value <= limit ? 'pass' : 'MISS'}  ${name}: ${fmt(value)} ms (bar ${op} ${limit} ms) [${measured}]`))
    log(t.join('\n'))
  })
}

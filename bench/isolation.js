'use strict'
// The isolation phase of `npm run bench`: what native isolation adds per exec over a plain exec,
// at 0 and at 2 GiB of Node heap. Per-exec latency of `/bin/true` through
// the finn-sandbox pool (2 workers) with isolation off, with each cumulative layer set, with
// the `auto` default, and with the bwrap backend (its defaults, and without net/pid namespaces;
// no target), at each heap size; every (variant, size) in a fresh
// `bench/isolation-child.js` process, variants rotated each round.
//
// run.js calls `phase({ node, log, rotate, quick })` and stores the result as `results.isolation`;
// report.js turns it into targets (`targets`) and a section of BENCHMARKS.md (`markdown`).
// Alone, for a quick look at this phase only: `node bench/isolation.js [--quick]`.

const os = require('node:os')
const path = require('node:path')
const { spawn } = require('node:child_process')

const { summarize } = require('./lib/stats.js')
const { RESULT_PREFIX } = require('./lib/child-util.js')
const { VARIANTS } = require('./isolation-child.js')

const CONFIG = {
  quick: { sizes: [0, 2], rounds: 1, iterations: 100, warmup: 20 },
  full: { sizes: [0, 2], rounds: 3, iterations: 200, warmup: 20 },
}
/** What `auto` may add per exec over `off`, and what the pid and net namespaces may add with it. */
const BAR_MS = 1
const BAR_NS_MS = 2

const fmt = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '–')

async function phase({ node, log, rotate, quick }) {
  const { sizes, rounds, iterations, warmup } = quick ? CONFIG.quick : CONFIG.full
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
  const { probeIsolation } = require('..')
  const out = {
    sizes,
    rounds,
    iterations,
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

/** The section of BENCHMARKS.md, as lines. */
function markdown(iso) {
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
    `\`/bin/true\` through the pool (2 workers), one at a time, as uid ${iso.uid}, on ${iso.cpuModel || 'an unrecorded CPU'}${iso.seccompInstructions ? "; the sandbox's seccomp program has " + iso.seccompInstructions + ' instructions' : ''}. Each (variant, heap) runs in its own \`bench/isolation-child.js\` process; ${iso.rounds} round(s) x ${iso.iterations}. Variants are public \`IsolationOptions\` (\`bench/isolation-child.js\`), cumulative from \`off\` to \`+pidns+netns\`: landlock and seccomp have no separate switch, so they are one step. \`bwrap\` is \`mode: "bwrap"\` with its defaults (network and pid namespaces), \`bwrap-no-ns\` the same without either; they have no target (bwrap's known cost is about +5 ms per exec). "added" is the median over \`off\`'s at the same heap.`,
    '',
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
    '',
  ]
}

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

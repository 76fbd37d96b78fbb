'use strict'
// Turns the results of bench/run.js into the targets (pass/miss), BENCHMARKS.md and two
// hand-written SVG charts (no dependencies).

const { CONTENDERS } = require('./contenders.js')

const LABELS = {
  ...Object.fromEntries(Object.entries(CONTENDERS).map(([id, c]) => [id, c.label])),
  native: 'native limit (Rust posix_spawn + waitpid)',
  'native-c2': 'native limit, only 2 threads (info)',
  'native-c4': 'native limit, only 4 threads (info)',
  idle: 'idle loop, no commands (noise floor)',
  execFileSync: 'execFileSync (blocks the loop)',
  bare: 'bare Node process',
  'addon-loaded': 'finn-sandbox addon required, no pool',
  'addon-created': 'finn-sandbox pool, created',
  'addon-used': 'finn-sandbox pool, after 100 jobs, idle 1 s',
  'addon-retired': 'finn-sandbox pool, after 100 jobs, idle 11 s (reapers retired)',
  'wt-created': 'worker_threads pool (2+1 workers), created',
  supervisor: 'with the supervisor (default)',
  direct: 'direct posix_spawn from Node (no supervisor; test hooks)',
}
const label = (id) => LABELS[id] || id

const COLORS = {
  'addon-2': '#1b7f5a',
  'addon-4': '#5cc49a',
  'wt-2': '#d95f02',
  'wt-4': '#f4a261',
  execFile: '#6a51a3',
  spawn: '#c51b7d',
  execa: '#b8860b',
  native: '#333333',
  'native-c2': '#999999',
  'native-c4': '#777777',
}

// ── formatting ───────────────────────────────────────────────────────────────

function num(x, digits) {
  if (x === null || x === undefined || !Number.isFinite(x)) return '–'
  if (digits !== undefined) return x.toFixed(digits)
  const a = Math.abs(x)
  return x.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3)
}
const ratio = (x) => (Number.isFinite(x) ? `${x.toFixed(2)}x` : '–')
const spread = (s) => (s && s.n ? `${num(s.p10)}..${num(s.p90)}` : '–')
const table = (head, rows) =>
  [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n')

const median = (slot) => (slot && slot.summary ? slot.summary.median : NaN)

// ── targets ──────────────────────────────────────────────────────────────────

/**
 * Each target: { name, measured, value, bar, op ('<=', '>=', '<'), limit, pass, by, note }.
 * `pass` is null when it could not be measured. `by` says how far off a miss is.
 */
function targets(res) {
  const out = []
  const add = (name, value, op, limit, measured, note, unit = 'x') => {
    let pass = null
    let by = ''
    if (Number.isFinite(value)) {
      pass = op === '<=' ? value <= limit : op === '>=' ? value >= limit : value < limit
      if (!pass) {
        const rel = op === '>=' ? (1 - value / limit) * 100 : (value / limit - 1) * 100
        by = op === '>=' ? `${rel.toFixed(0)}% short of the bar` : `${rel.toFixed(0)}% over the bar`
      }
    }
    out.push({ name, value, op, limit, unit, measured, pass, by, note: note || '' })
  }
  const seq = res.sequential || {}
  const tp = res.throughput || {}

  for (const n of [2, 4]) {
    const a = median(seq[`addon-${n}`])
    const w = median(seq[`wt-${n}`])
    add(`Sequential latency, ${n} workers vs worker_threads pool (${n} workers)`, a / w, '<=', 0.5, `${num(a)} ms vs ${num(w)} ms`)
  }
  for (const n of [2, 4]) {
    const a = median(seq[`addon-${n}`])
    const nat = median(seq.native)
    const r = a / nat
    add(`Sequential latency, ${n} workers vs native limit`, r, '<=', 1.6, `${num(a)} ms vs ${num(nat)} ms`, Number.isFinite(r) ? `team aim 1.3x: ${r <= 1.3 ? 'pass' : 'miss'}` : '')
  }
  for (const n of [2, 4]) {
    const a = median(tp[`addon-${n}`])
    const w = median(tp[`wt-${n}`])
    add(`Throughput at concurrency 8, ${n} workers vs worker_threads pool (${n} workers)`, a / w, '>=', 3, `${num(a, 0)}/s vs ${num(w, 0)}/s`)
  }
  for (const n of [2, 4]) {
    const a = median(tp[`addon-${n}`])
    const nat = median(tp.native)
    const same = median(tp[`native-c${n}`])
    add(
      `Throughput at concurrency 8, ${n} workers vs native limit (8 threads)`,
      a / nat,
      '>=',
      0.8,
      `${num(a, 0)}/s vs ${num(nat, 0)}/s`,
      Number.isFinite(same) ? `info: native limit with ${n} threads ${num(same, 0)}/s, ratio ${ratio(a / same)}` : '',
    )
  }
  if (res.processLog) {
    const lag = res.processLog.lagMs || {}
    add(
      "A background process's log followed live: first byte seen after its write (median)",
      lag.median,
      '<=',
      2,
      `${num(lag.median, 3)} ms median, p99 ${num(lag.p99, 3)} ms`,
      '',
      'ms',
    )
  }
  if (res.heap) {
    const sizes = res.heap.sizes
    const top = Math.max(...sizes)
    const h = res.heap.contenders['addon-2'] || {}
    const a0 = median(h[0])
    const aTop = median(h[top])
    add(
      `Latency at ${top} GiB heap vs 0 GiB (finn-sandbox, 2 workers)`,
      aTop / a0,
      '<=',
      1.3,
      `${num(aTop)} ms vs ${num(a0)} ms`,
      top < 2 ? `--quick measures ${top} GiB, not 2 GiB` : '',
    )
  }
  if (res.eld) {
    for (const n of [2, 4]) {
      const slot = res.eld.burst[`addon-${n}`]
      const max = slot && slot.max ? slot.max.max : NaN
      const idle = res.eld.burst.idle && res.eld.burst.idle.max ? res.eld.burst.idle.max.max : NaN
      add(
        `Event-loop delay max during 200 x /bin/true burst, ${n} workers`,
        max,
        '<=',
        5,
        `${num(max)} ms (worst of ${slot ? slot.rounds.length : 0} rounds)`,
        `idle loop on this machine: ${num(idle)} ms`,
        'ms',
      )
    }
  }
  if (res.rss) {
    const used = res.rss['addon-used']
    const created = res.rss['addon-created']
    add('Idle pool added RSS over bare Node (pool after 100 jobs; Node process only)', used ? used.addedMiB : NaN, '<=', 5, `${num(used && used.addedMiB)} MiB`, `pool only created: ${num(created && created.addedMiB)} MiB`, 'MiB')
  }
  if (res.output) {
    const a = res.output.yes['addon-2']
    const e = res.output.yes.execFile
    add('Endless producer (yes, 1 MiB cap): time vs execFile', a && e ? a.timeMs.median / e.timeMs.median : NaN, '<=', 1, `${num(a && a.timeMs.median)} ms vs ${num(e && e.timeMs.median)} ms`)
    const ad = res.output.drain['addon-2']
    const ed = res.output.drain.execFile
    add('Drain 100 MiB: time vs execFile', ad && ed ? ad.timeMs.median / ed.timeMs.median : NaN, '<=', 1.2, `${num(ad && ad.timeMs.median)} ms vs ${num(ed && ed.timeMs.median)} ms`)
    add('Drain 100 MiB: peak RSS vs execFile (must be lower)', ad && ed ? ad.peakMiB.median / ed.peakMiB.median : NaN, '<', 1, `${num(ad && ad.peakMiB.median, 0)} MiB vs ${num(ed && ed.peakMiB.median, 0)} MiB`)
  }
  if (res.kill) {
    const k = res.kill.obey['addon-2']
    const worst = k && k.settleMs.n ? k.settleMs.max : NaN
    const allDead = k && k.maxAliveAtSettle === 0 && k.maxScanAliveAtSettle === 0 && k.settledRounds === k.rounds.length
    add(
      'Kill: SIGTERM-obeying tree dead after the deadline (worst round)',
      allDead ? worst : NaN,
      '<=',
      20,
      k ? `${num(worst)} ms, median ${num(k.settleMs.median)} ms; pids alive at rejection: ${k.maxAliveAtSettle ?? '–'}` : '–',
      allDead ? 'every recorded pid gone at rejection, and no process with the tree’s token in a /proc scan' : 'NOT all pids gone at rejection',
      'ms',
    )
    if (k && !allDead) out[out.length - 1].pass = false
  }
  aims(res, add, out)
  if (res.isolation) require('../isolation.js').targets(res.isolation, add)
  if (res.session) require('../session.js').targets(res.session, add)
  if (res.tools) require('../tools.js').targets(res.tools, add)
  return out
}

/**
 * The aims for containment on every job, as rows of the same table: each one
 * judged on this run, the supervisor in the path of every finn-sandbox row.
 */
function aims(res, add, out) {
  const seq = res.sequential || {}
  const tp = res.throughput || {}
  const A = 'Aim: '
  for (const n of [2, 4]) {
    const a = median(seq[`addon-${n}`])
    const nat = median(seq.native)
    add(`${A}sequential latency, ${n} workers vs native posix_spawn loop`, a / nat, '<=', 1.3, `${num(a)} ms vs ${num(nat)} ms`)
  }
  for (const n of [2, 4]) {
    const a = median(tp[`addon-${n}`])
    const nat = median(tp.native)
    add(`${A}throughput at concurrency 8, ${n} workers vs native loop (8 threads)`, a / nat, '>=', 0.9, `${num(a, 0)}/s vs ${num(nat, 0)}/s`)
  }
  if (res.heap) {
    const sizes = res.heap.sizes
    const top = Math.max(...sizes)
    const h = res.heap.contenders['addon-2'] || {}
    // "Flat": the median at the top size within 1.2x of the one at 0 GiB (the run-to-run spread
    // of the native loop on a shared VM is about 10%).
    add(
      `${A}latency flat from 0 to ${top} GiB of Node heap (2 workers, ${top} GiB / 0 GiB)`,
      median(h[top]) / median(h[0]),
      '<=',
      1.2,
      `${num(median(h[top]))} ms vs ${num(median(h[0]))} ms`,
      top < 2 ? `--quick measures ${top} GiB, not 2 GiB` : '',
    )
  }
  if (res.rss) {
    const used = res.rss['addon-used']
    const created = res.rss['addon-created']
    const retired = res.rss['addon-retired']
    const loaded = res.rss['addon-loaded']
    // The reading judged: the pool idle for 11 s after 100 jobs (its worker threads, reapers
    // and then supervisor leave after 10 s without a job): Node's RSS over a bare Node's, plus
    // the whole RSS of every helper process still alive then (shared pages, libc's, counted in
    // full). The other readings are shown beside it.
    add(
      `${A}idle pool added RSS, supervisor included (pool idle 11 s after 100 jobs: Node’s added RSS + the RSS of every helper process alive then)`,
      retired ? retired.addedWithHelpersMiB : NaN,
      '<=',
      5,
      retired
        ? retired.helpers
          ? `${num(retired.addedMiB)} MiB Node + ${num(retired.helpersRssMiB)} MiB in ${retired.helpers} helper process(es)`
          : `${num(retired.addedMiB)} MiB Node, no helper process left (the supervisor leaves with the pool’s last worker thread)`
        : '–',
      [
        retired && retired.helpers ? `with the helpers’ PSS instead of their RSS: ${num(retired.addedMiB + retired.helpersPssMiB)} MiB` : '',
        used ? `1 s after the jobs, supervisor and reapers still alive: ${num(used.addedWithHelpersMiB)} MiB (${num(used.addedMiB)} MiB Node + ${num(used.helpersRssMiB)} MiB summed RSS of ${used.helpers} helpers; with their PSS ${num(used.addedMiB + used.helpersPssMiB)} MiB)` : '',
        created ? `pool created, no job yet (no supervisor): ${num(created.addedMiB)} MiB` : '',
        loaded ? `addon required only: ${num(loaded.addedMiB)} MiB (${num(loaded.addedAnonMiB)} MiB of it anonymous)` : '',
      ]
        .filter(Boolean)
        .join('; '),
      'MiB',
    )
  }
  if (res.kill) {
    const k = res.kill.obey['addon-2']
    const worst = k && k.settleMs.n ? k.settleMs.max : NaN
    const allDead = k && k.maxAliveAtSettle === 0 && k.maxScanAliveAtSettle === 0 && k.settledRounds === k.rounds.length
    add(
      `${A}SIGTERM-obeying tree dead after its deadline (worst round, every pid gone)`,
      allDead ? worst : NaN,
      '<=',
      5,
      k ? `${num(worst)} ms, median ${num(k.settleMs.median)} ms` : '–',
      allDead ? 'the job rejects only once its reaper has no child left; checked at rejection by recorded pids and a /proc token scan' : 'NOT all gone at rejection',
      'ms',
    )
    if (k && !allDead) out[out.length - 1].pass = false
  }
}

const SYM = { '<=': '≤', '>=': '≥', '<': '<' }
const barText = (t) => `${SYM[t.op]} ${t.limit}${t.unit === 'x' ? 'x' : ` ${t.unit}`}`
const valueText = (t) => (!Number.isFinite(t.value) ? '–' : t.unit === 'x' ? ratio(t.value) : `${num(t.value)} ${t.unit}`)

const verdict = (t) => (t.pass === null ? 'not measured' : t.pass ? '**pass**' : `**MISS** (${t.by})`)

function targetsText(res, { measuredOnly = false } = {}) {
  return [
    'targets:',
    ...res.targets.filter((t) => !measuredOnly || t.pass !== null).map(
      (t) => `  ${t.pass === null ? 'n/a ' : t.pass ? 'pass' : 'MISS'}  ${t.name}: ${valueText(t)} (bar ${barText(t)}) [${t.measured}]${t.by ? ` ${t.by}` : ''}${t.note ? `; ${t.note}` : ''}`,
    ),
  ].join('\n')
}

// ── SVG ──────────────────────────────────────────────────────────────────────

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')

const tick = (v) => String(Number(v.toPrecision(3)))

function niceMax(x) {
  if (!(x > 0)) return 1
  const p = 10 ** Math.floor(Math.log10(x))
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= x) return m * p
  return 10 * p
}

function heapSvg(res) {
  const W = 940
  const H = 460
  const L = 64
  const R = 380
  const T = 48
  const B = 56
  const pw = W - L - R
  const ph = H - T - B
  const { sizes, contenders } = res.heap
  const ids = Object.keys(contenders)
  const lo = Math.min(...sizes)
  const hi = Math.max(...sizes)
  const x = (g) => (hi === lo ? L + pw / 2 : L + ((g - lo) / (hi - lo)) * pw)
  let top = 0
  for (const id of ids) for (const g of sizes) top = Math.max(top, contenders[id][g].summary.p90 || 0)
  const yMax = niceMax(top * 1.05)
  const y = (v) => T + ph - (v / yMax) * ph
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="${L}" y="22" font-size="15" font-weight="bold">Sequential /bin/true latency vs live memory held by the Node process</text>`,
    `<text x="${L}" y="38" fill="#555">median per contender; whiskers p10–p90; ${esc(res.meta.date)}, ${esc(res.meta.mode)} run, ${esc(res.meta.machine.cores)} cores</text>`,
  ]
  for (let i = 0; i <= 5; i++) {
    const v = (yMax / 5) * i
    parts.push(`<line x1="${L}" x2="${L + pw}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#e3e3e3"/>`)
    parts.push(`<text x="${L - 8}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end" fill="#444">${tick(v)}</text>`)
  }
  for (const g of sizes) {
    parts.push(`<line x1="${x(g).toFixed(1)}" x2="${x(g).toFixed(1)}" y1="${T + ph}" y2="${T + ph + 5}" stroke="#444"/>`)
    parts.push(`<text x="${x(g).toFixed(1)}" y="${T + ph + 20}" text-anchor="middle" fill="#444">${g} GiB</text>`)
  }
  parts.push(`<line x1="${L}" x2="${L + pw}" y1="${T + ph}" y2="${T + ph}" stroke="#444"/>`)
  parts.push(`<line x1="${L}" x2="${L}" y1="${T}" y2="${T + ph}" stroke="#444"/>`)
  parts.push(`<text x="${L + pw / 2}" y="${H - 12}" text-anchor="middle" fill="#222">live memory held (64 KiB Buffers, touched)</text>`)
  parts.push(`<text x="16" y="${T + ph / 2}" text-anchor="middle" fill="#222" transform="rotate(-90 16 ${T + ph / 2})">latency per command (ms)</text>`)
  ids.forEach((id, i) => {
    const color = COLORS[id] || '#888'
    const dx = (i - (ids.length - 1) / 2) * 5 // spread whiskers so they do not overlap
    const pts = sizes.filter((g) => Number.isFinite(contenders[id][g].summary.median))
    if (pts.length > 1) {
      const d = pts.map((g) => `${(x(g) + dx).toFixed(1)},${y(contenders[id][g].summary.median).toFixed(1)}`).join(' ')
      parts.push(`<polyline points="${d}" fill="none" stroke="${color}" stroke-width="2.5"/>`)
    }
    for (const g of pts) {
      const s = contenders[id][g].summary
      const cx = (x(g) + dx).toFixed(1)
      parts.push(`<line x1="${cx}" x2="${cx}" y1="${y(s.p10).toFixed(1)}" y2="${y(s.p90).toFixed(1)}" stroke="${color}" stroke-width="1.5"/>`)
      parts.push(`<circle cx="${cx}" cy="${y(s.median).toFixed(1)}" r="4" fill="${color}"><title>${esc(label(id))} at ${g} GiB: median ${num(s.median)} ms, p10 ${num(s.p10)}, p90 ${num(s.p90)}, p99 ${num(s.p99)}</title></circle>`)
    }
    const ly = T + 10 + i * 22
    const last = contenders[id][hi].summary.median
    parts.push(`<line x1="${L + pw + 20}" x2="${L + pw + 44}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="3"/>`)
    parts.push(`<text x="${L + pw + 50}" y="${ly + 4}">${esc(label(id))}: ${num(last)} ms at ${hi} GiB</text>`)
  })
  parts.push('</svg>')
  return `${parts.join('\n')}\n`
}

function throughputSvg(res) {
  const tp = res.throughput
  const ids = Object.keys(tp).filter((id) => tp[id].summary.n > 0)
  const rowH = 32
  const W = 820
  const L = 290
  const R = 110
  const T = 52
  const H = T + ids.length * rowH + 40
  const pw = W - L - R
  const top = niceMax(Math.max(...ids.map((id) => tp[id].summary.max)) * 1.05)
  const x = (v) => L + (v / top) * pw
  const { total, concurrency } = res.meta.config.throughput
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="16" y="22" font-size="15" font-weight="bold">Throughput: ${total} x /bin/true at concurrency ${concurrency} (commands per second)</text>`,
    `<text x="16" y="38" fill="#555">bar: median of ${res.meta.config.throughput.rounds} round(s); whisker: min–max; ${esc(res.meta.date)}, ${esc(res.meta.mode)} run, ${esc(res.meta.machine.cores)} cores</text>`,
  ]
  for (let i = 0; i <= 5; i++) {
    const v = (top / 5) * i
    parts.push(`<line x1="${x(v).toFixed(1)}" x2="${x(v).toFixed(1)}" y1="${T - 4}" y2="${T + ids.length * rowH}" stroke="#e3e3e3"/>`)
    parts.push(`<text x="${x(v).toFixed(1)}" y="${T + ids.length * rowH + 16}" text-anchor="middle" fill="#444">${tick(v)}</text>`)
  }
  ids.forEach((id, i) => {
    const s = tp[id].summary
    const cy = T + i * rowH + rowH / 2
    const color = COLORS[id] || '#888'
    parts.push(`<text x="${L - 10}" y="${cy + 4}" text-anchor="end">${esc(label(id))}</text>`)
    parts.push(`<rect x="${L}" y="${cy - 10}" width="${Math.max(1, x(s.median) - L).toFixed(1)}" height="20" fill="${color}"><title>${esc(label(id))}: median ${num(s.median, 0)}/s, min ${num(s.min, 0)}, max ${num(s.max, 0)}, n ${s.n}</title></rect>`)
    if (s.n > 1) {
      parts.push(`<line x1="${x(s.min).toFixed(1)}" x2="${x(s.max).toFixed(1)}" y1="${cy}" y2="${cy}" stroke="#111" stroke-width="1.5"/>`)
      for (const v of [s.min, s.max]) parts.push(`<line x1="${x(v).toFixed(1)}" x2="${x(v).toFixed(1)}" y1="${cy - 5}" y2="${cy + 5}" stroke="#111" stroke-width="1.5"/>`)
    }
    parts.push(`<text x="${(Math.max(x(s.median), x(s.max)) + 8).toFixed(1)}" y="${cy + 4}" fill="#222">${num(s.median, 0)}/s</text>`)
  })
  parts.push('</svg>')
  return `${parts.join('\n')}\n`
}

// ── markdown ─────────────────────────────────────────────────────────────────

function machineLine(m) {
  const gib = (m.ramBytes / 1024 ** 3).toFixed(1)
  return `${m.cpuModel}, ${m.cores} cores, ${gib} GiB RAM, ${m.kernel} ${m.arch}, Node ${m.node} (libuv ${m.libuv}, V8 ${m.v8}), glibc ${m.glibc || 'n/a'}`
}

function markdown(res, files) {
  const m = res.meta
  const v = m.versions
  const lines = []
  const p = (s = '') => lines.push(s)
  const heapTop = res.heap ? Math.max(...res.heap.sizes) : null

  p('# Benchmarks')
  p()
  p(`Generated by \`${m.command}\` (\`bench/run.js\`) on ${m.date}: a ${m.mode} run that took ${Math.round(m.durationS)} s. Do not edit by hand; run it again.`)
  if (m.mode === 'quick') p('**This is a `--quick` run: fewer iterations and rounds, 0 and 1 GiB heap only. Use `npm run bench` for numbers to quote.**')
  p()
  p(`**Machine:** ${machineLine(m.machine)}.`)
  p(`Load average (1 min) ${m.loadAvgStart[0].toFixed(2)} at the start, ${m.loadAvgEnd[0].toFixed(2)} at the end: with ${m.machine.cores} cores, a load near or above the core count means other work competed for the CPUs during the run, which widens the spread of every contender alike.`)
  p()
  p(
    `**Versions:** finn-sandbox ${v.finnSandbox} (commit ${v.gitCommit || '?'}, binary \`${v.addonBinary}\` built ${v.addonBinaryBuilt}${v.addonBinaryOlderThanSources ? '; **the Rust sources were newer than the binary during the run: the binary as built was measured**' : ''}), execa ${v.execa}, ${v.rustc}, native limit built with the same toolchain (\`bench/native-limit\`, release).`,
  )
  if (m.addonBinaryChangedDuringRun) {
    p(`**Warning: the addon binary was rebuilt during this run (built ${v.addonBinaryBuilt} at the start, ${m.addonBinaryBuiltAtEnd} at the end), so the finn-sandbox rows mix two builds. Run it again.**`)
  }
  p(`Raw data: [\`${files.json}\`](${files.link(files.json)}).`)
  p()

  p('## Targets')
  p()
  p('Ratios are finn-sandbox over the other contender, from the same run. Each measurement is median-based unless it says worst.')
  p()
  p(
    table(
      ['target', 'measured', 'value', 'bar', 'result', 'note'],
      res.targets.map((t) => [t.name, t.measured, valueText(t), barText(t), verdict(t), t.note || '']),
    ),
  )
  const misses = res.targets.filter((t) => t.pass === false)
  p()
  p(misses.length ? `**${misses.length} of ${res.targets.length} targets missed:** ${misses.map((t) => `${t.name} (${valueText(t)} against ${barText(t)}: ${t.by || 'see note'})`).join('; ')}.` : `All ${res.targets.length} targets passed.`)
  p()

  p('## Headline')
  p()
  const seq = res.sequential
  const tp = res.throughput
  const heads = ['contender', 'sequential median (ms)', 'sequential p99 (ms)', `throughput, c=8 (/s)`]
  if (heapTop !== null) heads.push(`latency at ${heapTop} GiB heap (ms)`)
  heads.push('event-loop delay max, burst (ms)')
  const headIds = [...Object.keys(CONTENDERS), 'native']
  p(
    table(
      heads,
      headIds.map((id) => {
        const row = [label(id), num(median(seq[id])), num(seq[id] && seq[id].summary.p99), num(median(tp[id]), 0)]
        if (heapTop !== null) row.push(res.heap.contenders[id] ? num(res.heap.contenders[id][heapTop].summary.median) : '–')
        const e = res.eld.burst[id]
        row.push(e && e.max ? num(e.max.max) : '–')
        return row
      }),
    ),
  )
  p()
  p(`![latency vs heap](${files.link(`bench/results/${files.charts.heap}`)})`)
  p()
  p(`![throughput](${files.link(`bench/results/${files.charts.throughput}`)})`)
  p()

  p('## Sequential latency of `/bin/true`')
  p()
  p(`One command at a time, from the call until the result is back in JS (native limit: from \`posix_spawn\` until \`waitpid\` returns). ${m.config.seq.rounds} rounds x ${m.config.seq.iterations} per contender, each round in a fresh process after ${m.config.seq.warmup} warm-up runs.`)
  p()
  p(
    table(
      ['contender', 'median (ms)', 'p99 (ms)', 'p10..p90 (ms)', 'stdev (ms)', 'n'],
      Object.entries(seq).map(([id, s]) => [label(id), num(s.summary.median), num(s.summary.p99), spread(s.summary), num(s.summary.stdev), `${s.summary.n}${s.error ? ` (${s.error})` : ''}`]),
    ),
  )
  p()

  p(`## Throughput: ${m.config.throughput.total} x \`/bin/true\` at concurrency ${m.config.throughput.concurrency}`)
  p()
  p('The caller keeps 8 commands in flight. A pool with N workers runs N of them at a time and queues the rest (that is the pool’s contract); child_process and execa run all 8. The native limit runs 8 threads that each spawn and reap one child at a time; its 2- and 4-thread rows run at the pools’ own concurrency, for information (the targets use 8 threads).')
  p()
  p(
    table(
      ['contender', 'median (/s)', 'min..max (/s)', 'stdev (/s)', 'rounds'],
      Object.entries(tp).map(([id, s]) => [label(id), num(s.summary.median, 0), s.summary.n ? `${num(s.summary.min, 0)}..${num(s.summary.max, 0)}` : '–', num(s.summary.stdev, 0), `${s.summary.n}${s.error ? ` (${s.error})` : ''}`]),
    ),
  )
  p()
  const withCpu = Object.entries(tp).filter(([, s]) => s.cpuUsPerCommand)
  if (withCpu.length) {
    p('CPU per command during the same runs (µs, median of rounds; from /proc in 10 ms clock ticks, so good to about 10 µs over 1000 commands). Where it goes explains the throughput: on 2 cores, what the spawning process spends per command is taken from the children. The native loop has no Node thread: its own threads are in the first column. The addon’s commands are started and reaped by its reapers: their CPU is in the children column through the reapers’ own counters, and the supervisor’s and reapers’ own CPU has its column. Threads that exit during a run (execa’s) drop out of the thread columns.')
    p()
    p(
      table(
        ['contender', 'Node main thread / own threads', 'addon job threads', 'other threads', 'supervisor + reapers', 'children', 'total'],
        withCpu.map(([id, s]) => {
          const c = s.cpuUsPerCommand
          const helpers = c.helpers || 0
          return [label(id), num(c.main, 0), num(c.addonThreads, 0), num(c.otherThreads, 0), num(helpers, 0), num(c.children, 0), num(c.main + c.addonThreads + c.otherThreads + helpers + c.children, 0)]
        }),
      ),
    )
    p()
  }
  const withSleeps = Object.entries(tp).filter(([, s]) => s.sleepsPerCommand)
  if (withSleeps.length) {
    p('Voluntary context switches per command in the same runs (a thread going to sleep, each one a wake-up later; median of rounds). On this VM waking a thread on the other vCPU costs its waker an inter-processor interrupt, so these explain much of the CPU above. The native loop has no Node thread: its own threads (asleep in vfork and in waitpid) are in the first column.')
    p()
    p(
      table(
        ['contender', 'Node main thread / own threads', 'addon job threads', 'other threads', 'supervisor + reapers'],
        withSleeps.map(([id, s]) => {
          const c = s.sleepsPerCommand
          return [label(id), num(c.main, 2), num(c.addonThreads, 2), num(c.otherThreads, 2), num(c.helpers, 2)]
        }),
      ),
    )
    p()
  }

  if (res.heap) {
    p('## Sequential latency with a big heap')
    p()
    p(
      `Each (contender, size) runs in its own \`node --max-old-space-size=4096 bench/heap-child.js <contender> <GiB>\`, which first allocates the memory as 64 KiB Buffers with every byte written (RSS column) and keeps it live. fork() must copy the page tables of all of it; posix_spawn (vfork-class) does not. ${m.config.heap.rounds} round(s) x ${m.config.heap.iterations} per cell.`,
    )
    p()
    const rows = []
    for (const [id, bySize] of Object.entries(res.heap.contenders)) {
      for (const g of res.heap.sizes) {
        const c = bySize[g]
        rows.push([label(id), `${g} GiB`, num(c.rssHeldMiB, 0), num(c.summary.median), num(c.summary.p99), spread(c.summary), `${c.summary.n}${c.error ? ` (${c.error})` : ''}`])
      }
      const r = median(bySize[heapTop]) / median(bySize[0])
      rows.push(['', `**${heapTop} GiB / 0 GiB**`, '', `**${ratio(r)}**`, '', '', ''])
    }
    p(table(['contender', 'heap', 'RSS (MiB)', 'median (ms)', 'p99 (ms)', 'p10..p90 (ms)', 'n'], rows))
    p()
  }

  p('## Event-loop delay')
  p()
  p(
    '`perf_hooks.monitorEventLoopDelay({ resolution: 1 })` in a fresh process per contender and round, enabled after warm-up. Its samples are the intervals between 1 ms timer ticks, so an idle loop reads about 1.1 ms; values are reported as the API returns them (not minus the 1 ms). p99 is the median over rounds; max is the worst of all rounds. execFileSync runs the same commands one after another, yielding to the loop between them, to show what blocking costs.',
  )
  p()
  for (const [workload, title] of [
    ['burst', '200 x `/bin/true` at concurrency 8'],
    ['sleep', '4 x `sleep 1` at once'],
  ]) {
    p(`**${title}**`)
    p()
    p(
      table(
        ['contender', 'p99 (ms)', 'max (ms)', 'median of per-round max (ms)', 'workload took (ms)', 'rounds'],
        Object.entries(res.eld[workload]).map(([id, s]) => [
          label(id),
          num(s.p99 && s.p99.median),
          num(s.max && s.max.max),
          num(s.max && s.max.median),
          num(s.elapsed && s.elapsed.median, 0),
          `${s.rounds.length}${s.error ? ` (${s.error})` : ''}`,
        ]),
      ),
    )
    p()
  }

  p('## Idle RSS')
  p()
  p(
    'RSS (`VmRSS`) of separate processes after settling (two `gc()` calls, 1 s): a bare Node process running the same probe script, one that only requires the addon, one that also creates a pool, one whose pool has run 100 commands and is idle again (read 1 s and 11 s after them), and the worker_threads pool for comparison. Node’s added RSS is split into anonymous memory and the rest (file pages: the addon’s code and data, and pages of Node’s own binary the load touched; they are shared with other processes mapping the same files, but RSS counts them). The pool’s helper processes are every descendant of Node at the reading: the `finn-supervisor` process (started with the first job) and its reapers (after 10 s without a job the reapers retire and the supervisor leaves with the pool’s last worker thread: 1 s after 100 jobs they are there, 11 s after they are gone). Their summed RSS counts shared pages (libc, and the pages a reaper shares with the supervisor it was forked from) once per process; PSS splits them.',
  )
  p()
  p(
    table(
      ['process', 'Node RSS median (MiB)', 'min..max (MiB)', 'Node added over bare (MiB)', 'of it anonymous (MiB)', 'helper processes', 'helpers RSS (MiB)', 'helpers PSS (MiB)', 'added, helpers’ RSS included (MiB)', 'n'],
      Object.entries(res.rss).map(([id, s]) => [
        label(id),
        num(s.summaryMiB.median, 1),
        s.summaryMiB.n ? `${num(s.summaryMiB.min, 1)}..${num(s.summaryMiB.max, 1)}` : '–',
        id === 'bare' ? '–' : num(s.addedMiB, 1),
        id === 'bare' || s.addedAnonMiB === undefined ? '–' : num(s.addedAnonMiB, 1),
        s.helpers ?? '–',
        s.helpers ? num(s.helpersRssMiB, 1) : '–',
        s.helpers ? num(s.helpersPssMiB, 1) : '–',
        id === 'bare' ? '–' : num(s.addedWithHelpersMiB, 1),
        `${s.summaryMiB.n}${s.error ? ` (${s.error})` : ''}`,
      ]),
    ),
  )
  p()

  p('## Output')
  p()
  p('Each in a fresh process per contender and round; peak RSS is the process’s `ru_maxrss` after the command (so it includes the runtime and the result string); "added" is the peak minus the RSS just before the command. Output is returned as strings by every contender. execFile’s `maxBuffer` is per stream and kills the child when a stream goes over it; the addon’s caps stdout+stderr bytes together.')
  p()
  for (const [which, title] of [
    ['yes', 'Endless producer: `yes` with maxBuffer 1 MiB'],
    ['drain', 'Drain: `head -c 104857600 /dev/zero` (100 MiB) with maxBuffer 200 MiB'],
  ]) {
    p(`**${title}**`)
    p()
    p(
      table(
        ['contender', 'time median (ms)', 'time min..max (ms)', 'peak RSS (MiB)', 'added peak (MiB)', 'bytes returned', 'truncated flag', 'outcome', 'n'],
        Object.entries(res.output[which]).map(([id, s]) => {
          const last = s.rounds[s.rounds.length - 1] || {}
          return [
            label(id),
            num(s.timeMs.median, 1),
            s.timeMs.n ? `${num(s.timeMs.min, 1)}..${num(s.timeMs.max, 1)}` : '–',
            num(s.peakMiB.median, 0),
            num(s.addedPeakMiB.median, 0),
            last.outBytes ?? '–',
            String(last.truncated ?? '–'),
            `${last.status || '–'}${last.code ? ` ${last.code}` : ''}`,
            `${s.rounds.length}${s.error ? ` (${s.error})` : ''}`,
          ]
        }),
      ),
    )
    p()
  }

  const k = res.kill
  p('## Kill on timeout')
  p()
  p(
    `timeoutMs ${k.timeoutMs}. Obeying tree: \`sh -c 'sleep 100 & sleep 100 & wait'\`; ignoring tree: the same after \`trap "" TERM\` (inherited by the sleeps). Each writes its pids to a file; the probe records them with their start times and, at the moment the promise settles, checks in /proc which of them still exist (a zombie counts as gone). "After deadline" is settle time minus (call time + timeoutMs). Calls that had not settled ${k.boundMs} ms after the deadline are recorded as such, then their recorded pids are SIGKILLed by the probe.`,
  )
  p()
  p(
    `What each contender does at the deadline: finn-sandbox freezes and signals the whole tree (SIGTERM, SIGKILL after \`killGraceMs\`, here **${k.addonKillGraceMs} ms**; the default is 5000) and rejects once every process of it is gone. The worker_threads pool posts an abort; its worker calls \`process.kill(-pid)\`, which fails because \`execFile\` ignores \`detached\` (no process group), so nothing is signalled until execFile’s own safety timeout (2 x timeoutMs, SIGKILL to the shell only). execFile and spawn send SIGTERM to the direct child only (\`timeout\` option); execa sends SIGTERM to the direct child and SIGKILL after 5 s (its \`forceKillAfterDelay\` default). The sleeps are never signalled by any of them, and they hold the output pipes open.`,
  )
  p()
  for (const [tree, title] of [
    ['obey', 'Tree that obeys SIGTERM'],
    ['ignore', 'Tree that ignores SIGTERM'],
  ]) {
    p(`**${title}**`)
    p()
    p(
      table(
        ['contender', 'settled after deadline, median (ms)', 'worst (ms)', 'pids alive at settle (of 3)', 'token holders in /proc at settle', 'rounds not settled within bound', 'outcome'],
        Object.entries(k[tree]).map(([id, s]) => {
          const unsettled = s.rounds.length - s.settledRounds
          const last = s.rounds[s.rounds.length - 1] || {}
          return [
            label(id),
            num(s.settleMs.median, 1),
            num(s.settleMs.max, 1),
            s.maxAliveAtSettle ?? '–',
            s.maxScanAliveAtSettle ?? '–',
            unsettled ? `${unsettled} of ${s.rounds.length} (${s.maxAliveAtBound} pids alive at the bound)` : `0 of ${s.rounds.length}`,
            `${last.status || '–'}${last.code ? ` ${last.code}` : ''}${s.error ? ` (${s.error})` : ''}`,
          ]
        }),
      ),
    )
    p()
  }

  if (res.hop) {
    const h = res.hop
    const sup = h.supervisor
    const dir = h.direct
    p('## The supervisor hop')
    p()
    p(
      `Every job runs under a job reaper forked by the pool’s \`finn-supervisor\` process: the worker thread sends the spec and the pipes’ write ends over the reaper’s socket, the reaper starts the command and reports its exit and, once it has no child left, that the tree is gone. This phase runs sequential \`/bin/true\` through the 2-worker pool both ways, in fresh processes, ${h.rounds} interleaved round(s) x ${h.jobs} jobs: with the supervisor, and on the direct path without it (\`FINN_SANDBOX_TEST_HOOKS=1 FINN_SANDBOX_SUPERVISOR=off\`: posix_spawn from Node, contained by process groups only). Own CPU and context switches (wake-ups) are those of Node’s threads, the supervisor and its reapers, from /proc (CPU in 10 ms ticks), without the commands’ own.`,
    )
    p()
    p(
      table(
        ['path', 'median (ms)', 'p99 (ms)', 'p10..p90 (ms)', 'mean per round (ms)', 'own CPU per job (ms)', 'context switches per job', 'helper processes', 'n'],
        [
          ['supervisor', sup],
          ['direct', dir],
        ].map(([id, s]) => [
          label(id),
          num(s.summary.median),
          num(s.summary.p99),
          spread(s.summary),
          s.meanMsPerRound.map((x) => num(x)).join(', ') || '–',
          num(s.cpuMsPerJob.median),
          num(s.switchesPerJob.median, 1),
          s.helpers ?? '–',
          `${s.summary.n}${s.error ? ` (${s.error})` : ''}`,
        ]),
      ),
    )
    p()
    const wall = median(sup) - median(dir)
    p(
      `The hop costs **${num(wall)} ms** per job in wall time (${ratio(median(sup) / median(dir))} the direct path), **${num(sup.cpuMsPerJob.median - dir.cpuMsPerJob.median)} ms** of own CPU and **${num(sup.switchesPerJob.median - dir.switchesPerJob.median, 1)}** context switches.`,
    )
    p()
  }

  if (res.nodeKill) {
    const n = res.nodeKill
    p('## `kill -9` of Node: until the last process of its trees is gone')
    p()
    p(
      `A Node process runs five escaping trees on a pool (18 processes: a TERM-immune shell, \`setsid\` children, double forks, each process carrying the round’s token in its command line) and is SIGKILLed. Nothing runs in Node after that: the supervisor sees its socket close, the reapers see theirs close (and the lifeline pipe when the supervisor goes), and each SIGKILLs its tree. Timed from the kill until a /proc scan (every 1 ms) finds no process with the token, ${n.rounds.length} round(s); "Node reaped" is when the measuring process saw its SIGKILLed child exit.`,
    )
    p()
    p(
      table(
        ['', 'median (ms)', 'min..max (ms)', 'rounds'],
        [
          ['kill -9 -> last process of the trees gone', num(n.goneMs.median, 1), n.goneMs.n ? `${num(n.goneMs.min, 1)}..${num(n.goneMs.max, 1)}` : '–', `${n.rounds.length}${n.survivedRounds ? ` (**${n.survivedRounds} with processes alive after ${n.boundMs} ms**)` : ''}${n.error ? ` (${n.error})` : ''}`],
          ['kill -9 -> Node reaped', num(n.nodeReapedMs.median, 1), n.nodeReapedMs.n ? `${num(n.nodeReapedMs.min, 1)}..${num(n.nodeReapedMs.max, 1)}` : '–', String(n.rounds.length)],
        ],
      ),
    )
    p()
  }

  if (res.isolation) lines.push(...require('../isolation.js').markdown(res.isolation, files.link))
  if (res.session) lines.push(...require('../session.js').markdown(res.session, files.link))
  p('## Method')
  p()
  p('- One run measures everything. Every measurement runs in fresh child processes, one contender per process, in rounds; each round visits the contenders in a rotated order, so slow periods of the machine fall on all contenders.')
  p('- Every contender runs the same spec: absolute binary path, `cwd` = the realpath of the temp directory, an environment of `PATH`, `HOME`, `LANG` only, `timeoutMs` 30000 unless stated, `maxBuffer` 1 MiB unless stated. Both pools get the same `jailRoot` (the cwd), as loa-finn passes one.')
  p('- finn-sandbox: `new WorkerPool({ interactiveWorkers: 2 | 4, maxQueueDepth: 100000 })` from `index.js`, the binary as built. worker_threads pool: `bench/baselines/worker-pool.js` + `sandbox-worker.js`, loa-finn’s published design transcribed to JS (N interactive + 1 system worker, randomUUID job ids, main-thread timeout, execFile in the worker). execFile/spawn: Node’s own options (`timeout`, `maxBuffer`; spawn collects output itself up to maxBuffer). execa 9: `reject: false`, `extendEnv: false`, `stdin: "ignore"`.')
  p('- Native limit: `bench/native-limit`, a Rust loop of `posix_spawn(/bin/true)` + `waitpid` with no Node (inherited environment, no pipes, no file actions): the floor for this machine.')
  p('- Spread columns: p10..p90 of all samples (throughput: min..max of rounds). p99 needs many samples; with few (heap, kill) it is close to the max.')
  p()
  return `${lines.join('\n')}\n`
}

module.exports = { heapSvg, markdown, targets, targetsText, throughputSvg }

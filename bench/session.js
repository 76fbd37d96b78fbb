'use strict'
// The session phase of `npm run bench`: a persistent session's round trip and bulk output.
//
// - `session.exec("true")` sequentially through one session, against a fresh `bash -c true`
//   per command through the same pool (what a command costs without a session);
// - 100 MiB of stdout (`head -c 104857600 /dev/zero`) through one session exec, against
//   `child_process.execFile` of the same command.
//
// Each (measurement, contender) runs in a fresh `bench/session-child.js` process, contenders
// rotated each round. run.js calls `phase({ node, log, rotate, quick })` and stores the result
// as `results.session`; report.js turns it into targets (`targets`) and a section of
// BENCHMARKS.md (`markdown`). Alone: `node bench/run.js --only session [--quick]`.

const { summarize } = require('./lib/stats.js')

const CONFIG = {
  quick: { rounds: 2, iterations: 200, warmup: 30, bulkRounds: 2 },
  full: { rounds: 5, iterations: 300, warmup: 30, bulkRounds: 5 },
}
const BULK_BYTES = 100 * 1024 * 1024
/** The issue's bars: a round trip of at most 1 ms, and at most half a fresh bash's. */
const BAR_TRUE_MS = 1
const BAR_TRUE_RATIO = 0.5

const fmt = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '–')

async function phase({ node, log, rotate, quick }) {
  const c = quick ? CONFIG.quick : CONFIG.full
  log(`\n[session] exec("true") round trip vs a fresh bash -c true through the pool: ${c.rounds} round(s) x ${c.iterations}; 100 MiB through a session exec vs execFile: ${c.bulkRounds} round(s)`)
  const out = { config: c, trueRoundTrip: {}, bulk: { bytes: BULK_BYTES } }
  const samples = { session: [], pool: [] }
  const errors = {}
  for (let r = 0; r < c.rounds; r++) {
    for (const mode of rotate(['session', 'pool'], r)) {
      const res = await node('session-child.js', ['true', mode, '--iterations', String(c.iterations), '--warmup', String(c.warmup)], { timeoutMs: 300_000 })
      if (res.error || res.failures) {
        errors[mode] = res.error || `${res.failures} commands did not exit 0`
        log(`  ${mode}: ERROR ${errors[mode]}`)
        continue
      }
      samples[mode].push(...res.samplesMs)
      log(`  round ${r + 1} ${mode.padEnd(8)} median ${fmt(summarize(res.samplesMs).median)} ms`)
    }
  }
  for (const mode of ['session', 'pool']) out.trueRoundTrip[mode] = { summary: summarize(samples[mode]), error: errors[mode] }
  const bulk = { session: [], execFile: [] }
  for (let r = 0; r < c.bulkRounds; r++) {
    for (const mode of rotate(['session', 'execFile'], r)) {
      const res = await node('session-child.js', ['bulk', mode, '--bytes', String(BULK_BYTES)], { timeoutMs: 300_000 })
      if (res.error || res.bytes !== BULK_BYTES) {
        errors[`bulk-${mode}`] = res.error || `${res.bytes} bytes instead of ${BULK_BYTES}`
        log(`  100 MiB ${mode}: ERROR ${errors[`bulk-${mode}`]}`)
        continue
      }
      bulk[mode].push(res.ms)
      log(`  round ${r + 1} 100 MiB ${mode.padEnd(8)} ${fmt(res.ms, 1)} ms`)
    }
  }
  for (const mode of ['session', 'execFile']) out.bulk[mode] = { summary: summarize(bulk[mode]), error: errors[`bulk-${mode}`] }
  return out
}

function targets(s, add) {
  const sess = s.trueRoundTrip.session.summary
  const pool = s.trueRoundTrip.pool.summary
  add('`session.exec("true")` round trip, median', sess.median, '<=', BAR_TRUE_MS, `${fmt(sess.median)} ms`, 'one session, sequential', 'ms')
  add('`session.exec("true")` vs a fresh `bash -c true` through the pool, median', sess.median / pool.median, '<=', BAR_TRUE_RATIO, `${fmt(sess.median)} ms vs ${fmt(pool.median)} ms`, 'same pool (2 workers)')
  const a = s.bulk.session.summary
  const b = s.bulk.execFile.summary
  add('100 MiB through a session exec vs `execFile`, median wall time', a.median / b.median, '<=', 1, `${fmt(a.median, 1)} ms vs ${fmt(b.median, 1)} ms`, '`head -c 104857600 /dev/zero`, output as a Buffer')
}

function markdown(s, link) {
  const row = (name, x) => `| ${name} | ${fmt(x.summary.median)} | ${x.summary.n ? `${fmt(x.summary.p10)}..${fmt(x.summary.p90)}` : '–'} | ${x.summary.n}${x.error ? ` (${x.error})` : ''} |`
  return [
    '## Sessions',
    '',
    `A persistent session ([docs/sessions.md](${link('docs/sessions.md')})) against a fresh command per call (\`bench/session.js\`).`,
    '',
    '| | median (ms) | p10..p90 (ms) | samples |',
    '| --- | --- | --- | --- |',
    row('`session.exec("true")`', s.trueRoundTrip.session),
    row('fresh `bash -c true` through the pool', s.trueRoundTrip.pool),
    row('100 MiB through a session exec', s.bulk.session),
    row('100 MiB through `execFile`', s.bulk.execFile),
    '',
  ]
}

module.exports = { phase, targets, markdown }

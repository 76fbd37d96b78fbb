'use strict'
// The session phase of `npm run bench`: a persistent session's round trip and bulk output.
//
// - `session.exec("true")` sequentially through one session, against a fresh `bash -c true`
//   per command through the same pool (what a command costs without a session);
// - 100 MiB of stdout (`head -c 104857600 /dev/zero`) through one session exec, against
//   `child_process.execFile` of the same command;
// - both through the Cloudflare Sandbox SDK's shell protocol (temp files, a line labeller in
//   bash, an exit-code file found by `fs.watch` and a 50 ms poll: bench/lib/sdk-shell.js), as a
//   contender with no bar: its bulk row records how many of the bytes arrived.
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
  const samples = { session: [], pool: [], sdk: [] }
  const errors = {}
  for (let r = 0; r < c.rounds; r++) {
    for (const mode of rotate(['session', 'pool', 'sdk'], r)) {
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
  for (const mode of ['session', 'pool', 'sdk']) out.trueRoundTrip[mode] = { summary: summarize(samples[mode]), error: errors[mode] }
  const bulk = { session: [], execFile: [], sdk: [] }
  const sdkBytes = []
  for (let r = 0; r < c.bulkRounds; r++) {
    for (const mode of rotate(['session', 'execFile', 'sdk'], r)) {
      const res = await node('session-child.js', ['bulk', mode, '--bytes', String(BULK_BYTES)], { timeoutMs: 300_000 })
      if (mode === 'sdk' && !res.error) sdkBytes.push(res.bytes)
      if (res.error || (mode !== 'sdk' && res.bytes !== BULK_BYTES)) {
        errors[`bulk-${mode}`] = res.error || `${res.bytes} bytes instead of ${BULK_BYTES}`
        log(`  100 MiB ${mode}: ERROR ${errors[`bulk-${mode}`]}`)
        continue
      }
      bulk[mode].push(res.ms)
      log(`  round ${r + 1} 100 MiB ${mode.padEnd(8)} ${fmt(res.ms, 1)} ms`)
    }
  }
  for (const mode of ['session', 'execFile', 'sdk']) out.bulk[mode] = { summary: summarize(bulk[mode]), error: errors[`bulk-${mode}`] }
  out.bulk.sdk.bytesArrived = sdkBytes.length ? Math.max(...sdkBytes) : null
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
  const row = (name, x) => (x ? `| ${name} | ${fmt(x.summary.median)} | ${x.summary.n ? `${fmt(x.summary.p10)}..${fmt(x.summary.p90)}` : '–'} | ${x.summary.n}${x.error ? ` (${x.error})` : ''} |` : `| ${name} | not measured in this run | | |`)
  const sdkBulk = s.bulk.sdk && s.bulk.sdk.bytesArrived !== null && s.bulk.sdk.bytesArrived !== undefined ? ` (${s.bulk.sdk.bytesArrived} of ${s.bulk.bytes} bytes arrive)` : ''
  return [
    '## Sessions',
    '',
    `A persistent session ([docs/sessions.md](${link('docs/sessions.md')})) against a fresh command per call (\`bench/session.js\`).`,
    '',
    '| | median (ms) | p10..p90 (ms) | samples |',
    '| --- | --- | --- | --- |',
    row('`session.exec("true")`', s.trueRoundTrip.session),
    row('fresh `bash -c true` through the pool', s.trueRoundTrip.pool),
    row("`exec(\"true\")` through the Sandbox SDK's shell protocol", s.trueRoundTrip.sdk),
    row('100 MiB through a session exec', s.bulk.session),
    row('100 MiB through `execFile`', s.bulk.execFile),
    row(`100 MiB through the Sandbox SDK's shell protocol${sdkBulk}`, s.bulk.sdk),
    '',
    "The Sandbox SDK's protocol is ported from its container's `session.ts` without the HTTP hop between caller and container (`bench/lib/sdk-shell.js`), so its figures are a lower bound: completion waits for `fs.watch` or a 50 ms poll, output goes through temp files and a line labeller in bash, trailing newlines and NUL bytes are lost.",
    '',
  ]
}

module.exports = { phase, targets, markdown }

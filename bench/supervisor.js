'use strict'
// The supervisor's phases of `npm run bench` (bench/run.js calls them; each measurement runs in
// a fresh `node bench/probe.js ...`):
//
// - hop: sequential /bin/true through the 2-worker pool with the supervisor (the default) and
//   with the direct path from before it (FINN_SANDBOX_TEST_HOOKS=1 FINN_SANDBOX_SUPERVISOR=off:
//   posix_spawn from Node, contained by process groups only), interleaved. Per job: wall time,
//   and the own CPU and context switches of Node, the supervisor and its reapers (the
//   commands' own CPU is not in it). The direct path needs an addon built with the
//   `test-hooks` feature (the development build); without it its rows carry the error.
// - nodekill: `kill -9` of a Node running five escaping trees (18 processes) on a pool; the
//   time until /proc holds no process carrying the run's token, and until Node itself is reaped.

const HOP_ENV = {
  supervisor: {},
  direct: { FINN_SANDBOX_TEST_HOOKS: '1', FINN_SANDBOX_SUPERVISOR: 'off' },
}

/** `ctx`: { node(script, args, opts), log, rotate, fmt, summarize, config: { rounds, jobs } }. */
async function phaseHop(ctx) {
  const { rounds, jobs } = ctx.config
  const modes = Object.keys(HOP_ENV)
  ctx.log(`\n[supervisor hop] sequential /bin/true, supervisor vs direct path: ${rounds} round(s) x ${jobs} jobs`)
  const runs = { supervisor: [], direct: [] }
  const errors = {}
  for (let r = 0; r < rounds; r++) {
    for (const mode of ctx.rotate(modes, r)) {
      const env = { ...process.env }
      delete env.FINN_SANDBOX_SUPERVISOR
      Object.assign(env, HOP_ENV[mode])
      const res = await ctx.node('probe.js', ['hop', mode, '--jobs', String(jobs)], { env, timeoutMs: 300_000 })
      if (res.error) {
        errors[mode] = res.error
        ctx.log(`  ${mode}: ERROR ${res.error}`)
        continue
      }
      if (res.failures) errors[mode] = `${res.failures} runs did not exit 0`
      runs[mode].push(res)
      ctx.log(
        `  round ${r + 1} ${mode.padEnd(10)} median ${ctx.fmt(ctx.summarize(res.samplesMs).median, 3)} ms, mean ${ctx.fmt(res.msPerJob, 3)} ms, own CPU ${ctx.fmt(res.cpuMsPerJob, 3)} ms, ${ctx.fmt(res.switchesPerJob, 1)} context switches per job`,
      )
    }
  }
  const out = { jobs, rounds }
  for (const mode of modes) {
    const rs = runs[mode]
    out[mode] = {
      summary: ctx.summarize(rs.flatMap((x) => x.samplesMs)),
      meanMsPerRound: rs.map((x) => x.msPerJob),
      cpuMsPerJob: ctx.summarize(rs.map((x) => x.cpuMsPerJob)),
      switchesPerJob: ctx.summarize(rs.map((x) => x.switchesPerJob)),
      helpers: rs.length ? rs[rs.length - 1].helpers : null,
      error: errors[mode],
    }
  }
  return out
}

async function phaseNodeKill(ctx) {
  const { rounds, boundMs } = ctx.config
  ctx.log(`\n[kill -9 of Node] five escaping trees (18 processes) on a pool, Node SIGKILLed: ${rounds} round(s), bound ${boundMs} ms`)
  const out = { boundMs, rounds: [] }
  for (let r = 0; r < rounds; r++) {
    const res = await ctx.node('probe.js', ['nodekill', '--bound-ms', String(boundMs)], { timeoutMs: 60_000 })
    if (res.error) {
      out.error = res.error
      ctx.log(`  ERROR ${res.error}`)
      continue
    }
    out.rounds.push(res)
    const gone = res.goneMs === null ? `${res.leftAtBound} of ${res.processes} still alive after ${boundMs} ms` : `last of ${res.processes} gone after ${ctx.fmt(res.goneMs, 1)} ms`
    ctx.log(`  round ${r + 1} ${gone}; Node reaped after ${ctx.fmt(res.nodeReapedMs, 1)} ms`)
  }
  out.goneMs = ctx.summarize(out.rounds.map((x) => (x.goneMs === null ? Infinity : x.goneMs)))
  out.nodeReapedMs = ctx.summarize(out.rounds.map((x) => x.nodeReapedMs))
  out.survivedRounds = out.rounds.filter((x) => x.goneMs === null).length
  return out
}

module.exports = { phaseHop, phaseNodeKill }

'use strict'
// node bench/supervisor.js [jobs] [rounds]: what the supervisor hop costs, and how fast Node's
// death takes the trees with it. Not part of `npm run bench`; prints a small table.
//
// 1. Sequential /bin/true through a one-worker pool, `jobs` per run (default 2000), with the
//    supervisor and with the old direct path (FINN_SANDBOX_TEST_HOOKS=1
//    FINN_SANDBOX_SUPERVISOR=off), each run in a fresh Node process, `rounds` (default 3)
//    interleaved rounds.
// 2. `kill -9` of a Node running five escaping trees (18 processes) on a pool: the time from
//    the kill until no process with the run's token is left in /proc, `rounds` times.

const fs = require('node:fs')
const path = require('node:path')
const { spawn, spawnSync } = require('node:child_process')

const ROOT = path.resolve(__dirname, '..')
const jobs = Number(process.argv[2] ?? 2000)
const rounds = Number(process.argv[3] ?? 3)

function sequential(mode) {
  const body = `
    const { WorkerPool } = require(${JSON.stringify(path.join(ROOT, 'index.js'))})
    const pool = new WorkerPool({ interactiveWorkers: 1 })
    const spec = { binaryPath: '/bin/true', args: [], cwd: '/', env: {} }
    const fs = require('node:fs')
    // utime+stime of our own processes (Node, and the supervisor with its reapers when there
    // are), in ms: the commands' own CPU is not in it.
    const tick = 1000 / 100
    const own = (pid) => {
      try {
        const f = fs.readFileSync('/proc/' + pid + '/stat', 'utf8').split(') ')[1].split(' ')
        return (Number(f[11]) + Number(f[12])) * tick
      } catch { return 0 }
    }
    const helpers = () => {
      const kids = fs.readFileSync('/proc/' + process.pid + '/task/' + process.pid + '/children', 'utf8').trim().split(/\s+/).filter(Boolean)
      const out = []
      for (const k of kids) {
        out.push(k)
        try { out.push(...fs.readFileSync('/proc/' + k + '/task/' + k + '/children', 'utf8').trim().split(/\s+/).filter(Boolean)) } catch {}
      }
      return out
    }
    const cpu = () => {
      const u = process.cpuUsage()
      return (u.user + u.system) / 1000 + helpers().reduce((a, p) => a + own(p), 0)
    }
    ;(async () => {
      for (let i = 0; i < 100; i++) await pool.exec(spec)
      const cpu0 = cpu()
      const start = process.hrtime.bigint()
      for (let i = 0; i < ${jobs}; i++) await pool.exec(spec)
      const ms = Number(process.hrtime.bigint() - start) / 1e6
      console.log(JSON.stringify({ msPerJob: ms / ${jobs}, cpuMsPerJob: (cpu() - cpu0) / ${jobs} }))
      await pool.shutdown()
    })()`
  const env = { ...process.env }
  if (mode === 'direct') Object.assign(env, { FINN_SANDBOX_TEST_HOOKS: '1', FINN_SANDBOX_SUPERVISOR: 'off' })
  const res = spawnSync(process.execPath, ['-e', body], { env, encoding: 'utf8' })
  if (res.status !== 0) throw new Error(res.stderr)
  return JSON.parse(res.stdout)
}

function holders(tok) {
  let n = 0
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8')
      if (stat.slice(stat.lastIndexOf(')') + 2)[0] === 'Z') continue
      if (fs.readFileSync(`/proc/${name}/cmdline`, 'latin1').includes(tok)) n++
    } catch {}
  }
  return n
}

async function killNine() {
  const tok = `9999.${String(Math.floor(Math.random() * 1e12)).padStart(12, '0')}`
  const scripts = [
    `trap '' TERM; sleep ${tok} & wait; : ${tok}`,
    `setsid sleep ${tok} & wait; : ${tok}`,
    `(sleep ${tok} &); sh -c 'sleep ${tok}; :' & wait; : ${tok}`,
    `trap '' TERM; setsid sleep ${tok} & (setsid sh -c 'sleep ${tok}; :' &); sh -c 'trap "" TERM; sleep ${tok}; :' & wait; : ${tok}`,
    `(setsid sleep ${tok} &); sleep ${tok}; : ${tok}`,
  ]
  const body = `
    const { WorkerPool } = require(${JSON.stringify(path.join(ROOT, 'index.js'))})
    const pool = new WorkerPool({ interactiveWorkers: 5 })
    for (const s of ${JSON.stringify(scripts)}) {
      pool.exec({ binaryPath: '/bin/sh', args: ['-c', s], cwd: '/', env: { PATH: '/usr/bin:/bin' }, timeoutMs: 600000 }).catch(() => {})
    }
    setInterval(() => {}, 1000)`
  const child = spawn(process.execPath, ['-e', body], { stdio: 'ignore' })
  while (holders(tok) < 17) await new Promise((r) => setTimeout(r, 5))
  let exitedAt
  child.on('exit', () => (exitedAt = process.hrtime.bigint()))
  const start = process.hrtime.bigint()
  child.kill('SIGKILL')
  // Polled every millisecond: a busy loop would take a core from the processes being killed.
  while (holders(tok) > 0) {
    if (Number(process.hrtime.bigint() - start) > 5e9) return { gone: Infinity, exited: NaN }
    await new Promise((r) => setTimeout(r, 1))
  }
  const gone = Number(process.hrtime.bigint() - start) / 1e6
  while (exitedAt === undefined) await new Promise((r) => setTimeout(r, 1))
  return { gone, exited: Number(exitedAt - start) / 1e6 }
}

async function main() {
  const runs = { supervisor: [], direct: [] }
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? ['supervisor', 'direct'] : ['direct', 'supervisor']
    for (const mode of order) runs[mode].push(sequential(mode))
  }
  console.log(`sequential /bin/true, ${jobs} jobs x ${rounds} interleaved runs (ms per job; own CPU: Node + supervisor + reapers, without the commands)`)
  for (const [mode, v] of Object.entries(runs)) {
    console.log(`  ${mode.padEnd(10)} wall ${v.map((x) => x.msPerJob.toFixed(3)).join('  ')}   own CPU ${v.map((x) => x.cpuMsPerJob.toFixed(3)).join('  ')}`)
  }
  const kills = []
  for (let r = 0; r < rounds; r++) kills.push(await killNine())
  console.log(`kill -9 of Node -> last of 18 processes gone (ms): ${kills.map((x) => x.gone.toFixed(1)).join('  ')}`)
  console.log(`kill -9 of Node -> Node reaped by its parent (ms):  ${kills.map((x) => x.exited.toFixed(1)).join('  ')}`)
}

main()

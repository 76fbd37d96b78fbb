'use strict'
// npm run demo: a pool runs a burst of real commands in both lanes while the event loop's delay
// and stats() are printed, a runaway process tree is killed on timeout, and the pool shuts down.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { monitorEventLoopDelay } = require('node:perf_hooks')
const { WorkerPool, PoolError } = require('./index.js')

const env = { PATH: '/usr/local/bin:/usr/bin:/bin' }
const sh = (script, extra = {}) => ({ binaryPath: '/bin/sh', args: ['-c', script], cwd: '/', env, ...extra })
const ms = (n) => `${(n / 1e6).toFixed(2)} ms`

async function main() {
  const pool = new WorkerPool({ interactiveWorkers: 4, maxQueueDepth: 128, killGraceMs: 500 })
  const delay = monitorEventLoopDelay({ resolution: 1 })
  delay.enable()

  console.log('1. a burst: 100 x /bin/true interactive, 10 x git-like system jobs, at once')
  const started = performance.now()
  const burst = []
  for (let i = 0; i < 100; i++) burst.push(pool.exec({ binaryPath: '/bin/true', args: [], cwd: '/', env }))
  for (let i = 0; i < 10; i++) burst.push(pool.exec(sh(`echo system job ${i}`), 'system'))
  const ticker = setInterval(() => console.log('   stats:', JSON.stringify(pool.stats())), 20)
  const results = await Promise.allSettled(burst)
  clearInterval(ticker)
  const ok = results.filter((r) => r.status === 'fulfilled' && r.value.exitCode === 0).length
  console.log(`   ${ok}/${results.length} ok in ${(performance.now() - started).toFixed(1)} ms;`,
    `event-loop delay p99 ${ms(delay.percentile(99))}, max ${ms(delay.max)}`)

  console.log('2. real exit codes and signals are results, not errors')
  const exited = await pool.exec(sh('echo "fatal: not a git repository" >&2; exit 128'))
  const killed = await pool.exec(sh('kill -SEGV $$'))
  console.log(`   exit ${exited.exitCode} (${exited.stderr.trim()}), signal death -> ${killed.exitCode}`)

  console.log('3. a runaway tree (a TERM-ignoring child, a grandchild, a setsid escapee) times out')
  const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'finn-demo-')), 'pids')
  const tree = `trap "" TERM; echo $$ >> ${log}; sleep 100 & echo $! >> ${log}; ` +
    `(sleep 100 & echo $! >> ${log}); setsid sleep 100 & echo $! >> ${log}; wait`
  delay.reset()
  const t0 = performance.now()
  try {
    await pool.exec(sh(tree, { timeoutMs: 300 }))
  } catch (err) {
    if (!(err instanceof PoolError)) throw err
    console.log(`   ${err.name} ${err.code}: ${err.message} after ${(performance.now() - t0).toFixed(0)} ms`,
      '(SIGTERM at 300 ms, SIGKILL after the 500 ms grace)')
    const pids = fs.readFileSync(log, 'utf8').trim().split('\n').map(Number)
    const alive = pids.filter((pid) => {
      try {
        return !/^\d+ \(.*\) [ZX]/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))
      } catch {
        return false
      }
    })
    console.log(`   pids of the tree ${pids.join(', ')}: ${alive.length === 0 ? 'all gone' : `STILL ALIVE: ${alive}`}`)
  }

  console.log('4. output is capped in bytes: `yes` with maxBuffer 64 KiB')
  const capped = await pool.exec({ binaryPath: 'yes', args: [], cwd: '/', env, maxBuffer: 65536 })
  console.log(`   truncated=${capped.truncated}, ${Buffer.byteLength(capped.stdout)} bytes, ends with ${JSON.stringify(capped.stdout.slice(-26))}`)

  console.log('5. shutdown with a job still running')
  const running = pool.exec(sh('sleep 30')).catch((err) => err)
  await pool.shutdown()
  console.log(`   running job: ${(await running).code}; final stats ${JSON.stringify(pool.stats())}`)
  delay.disable()
  console.log(`   event-loop delay during steps 3-5: max ${ms(delay.max)}`)
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})

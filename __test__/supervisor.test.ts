// Containment by the supervisor process: Node dying by any means, a reaper or the supervisor
// killed mid-job, and Node's own child_process beside the pool. Survivors are found by
// scanning /proc/<pid>/cmdline for a token unique to each test (`sleep 9999.<digits>` is a
// valid duration and a unique string), never only by recorded pids.
//
// With FINN_SANDBOX_TEST_HOOKS=1 FINN_SANDBOX_SUPERVISOR=off in the environment the same tests
// run the direct path (a fixture of the test hooks' build); the Node-death and crash tests then
// fail. The child_process test was shown to fail (it hangs: Node never sees its children exit)
// with a `waitpid(-1, WNOHANG)` loop added to the addon's reaper checkin.
import { execFile, spawn } from 'node:child_process'
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Worker } from 'node:worker_threads'
import { describe, expect, test } from 'vitest'
import { PoolError, WorkerPool } from '../index.js'
import { ENV, holders, rejectionOf, sh, statesProgram, until, zombieLeader } from './helpers.js'

/** Runs `fn` with FINN_SANDBOX_SUPERVISOR set to `path` (pools read it when constructed). */
function withSupervisor<T>(path: string, fn: () => T): T {
  const before = process.env.FINN_SANDBOX_SUPERVISOR
  process.env.FINN_SANDBOX_SUPERVISOR = path
  try {
    return fn()
  } finally {
    if (before === undefined) delete process.env.FINN_SANDBOX_SUPERVISOR
    else process.env.FINN_SANDBOX_SUPERVISOR = before
  }
}

const root = join(import.meta.dirname, '..')

function token(): string {
  return `9999.${String(Math.floor(Math.random() * 1e12)).padStart(12, '0')}`
}

function stat(pid: number): { state: string; ppid: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
    return { state: fields[0], ppid: Number(fields[1]) }
  } catch {
    return undefined
  }
}

/** Polls /proc until `n` processes hold `tok` (the trees are fully up). */
async function untilHolders(tok: string, n: number, timeoutMs = 10_000): Promise<number[]> {
  const start = Date.now()
  for (;;) {
    const found = holders(tok)
    if (found.length >= n) return found
    if (Date.now() - start > timeoutMs) throw new Error(`only ${found.length} of ${n} processes of ${tok} started`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

/** Polls /proc until no process holds `tok`, up to `boundMs`; returns the time taken and what is left. */
async function survivors(tok: string, boundMs: number): Promise<{ left: number[]; ms: number }> {
  const start = performance.now()
  for (;;) {
    const left = holders(tok)
    const ms = performance.now() - start
    if (left.length === 0 || ms > boundMs) return { left, ms }
    await new Promise((r) => setTimeout(r, 2))
  }
}

/** The zombie-leader and states programs, written once for this file. */
const fixtures = mkdtempSync(join(tmpdir(), 'finn-z-'))
const z = zombieLeader(fixtures)
const states = statesProgram(fixtures)

/** Commands built to outlive their job, and how many processes carry the token once all are up. */
function trees(tok: string): { scripts: string[]; processes: number } {
  return {
    scripts: [
      // TERM-immune leader and child (an ignored disposition is inherited across exec).
      `trap '' TERM; sleep ${tok} & wait; : ${tok}`,
      // A setsid escapee.
      `setsid sleep ${tok} & wait; : ${tok}`,
      // A background tree: a double-forked orphan and a child shell with its own child.
      `(sleep ${tok} &); sh -c 'sleep ${tok}; :' & wait; : ${tok}`,
      // Two setsid escapees, one double-forked, and a TERM-immune grandchild.
      `trap '' TERM; setsid sleep ${tok} & (setsid sh -c 'sleep ${tok}; :' &); sh -c 'trap "" TERM; sleep ${tok}; :' & wait; : ${tok}`,
      // A double-forked setsid escapee holding the pipe, and a leader sleeping.
      `(setsid sleep ${tok} &); sleep ${tok}; : ${tok}`,
      // Two processes whose leader thread has exited while a second thread runs on (shown as
      // Z in /proc/<pid>/stat), one of them setsid and double-forked.
      `trap '' TERM; ${z} ${tok} & (setsid ${z} ${tok} &); wait; : ${tok}`,
      // Stopped by its own tree: a sleep stopped by the leader, a shell that stops itself.
      `trap '' TERM; sleep ${tok} & kill -STOP $!; sh -c 'kill -STOP $$; : ${tok}' & exec sleep ${tok}`,
      // In a ptrace stop: a sleep seized and interrupted by its sibling, and a child that traces
      // itself through its parent and stops.
      `trap '' TERM; sleep ${tok} & perl -e 'syscall(101, 0x4206, $ARGV[0] + 0, 0, 0) == 0 or die; syscall(101, 0x4207, $ARGV[0] + 0, 0, 0); sleep' $! ${tok} & perl -e 'if (!fork) { syscall(101, 0, 0, 0, 0); kill STOP => $$; exit } sleep' ${tok} & exec sleep ${tok}`,
      // A vfork() parent waiting (D) for a child that neither execs nor exits.
      `trap '' TERM; ${states} v ${tok} & exec sleep ${tok}`,
      // A zombie leader whose other thread then calls setsid() and forks.
      `trap '' TERM; ${states} z ${tok} & exec sleep ${tok}`,
      // A subreaper of its own with orphans.
      `trap '' TERM; perl -e 'syscall(157, 36, 1, 0, 0, 0) == 0 or die; exec @ARGV' sh -c 'trap "" TERM; (sleep ${tok} &); (setsid sleep ${tok} &); wait; exec sleep ${tok}' & exec sleep ${tok}`,
      // clone(CLONE_PARENT) by a background process and by the leader (its sibling is the reaper's child).
      `${states} p ${tok} & exec ${states} p ${tok}`,
      // A clone() child with no exit signal (waitpid() without __WALL does not see it), orphaned.
      `trap '' TERM; ${states} c ${tok}; exec sleep ${tok}`,
    ],
    processes: 2 + 2 + 4 + 6 + 3 + 3 + 3 + 5 + 3 + 3 + 4 + 4 + 2,
  }
}

/** JS that starts the trees of `tok` on one pool, nothing awaiting them. */
function startTrees(tok: string): { code: string; processes: number } {
  const { scripts, processes } = trees(tok)
  const code = `
    const sandbox = require(${JSON.stringify(join(root, 'index.js'))})
    const pool = new sandbox.WorkerPool({ interactiveWorkers: ${scripts.length} })
    for (const s of ${JSON.stringify(scripts)}) {
      pool.exec({ binaryPath: '/bin/sh', args: ['-c', s], cwd: '/', env: ${JSON.stringify(ENV)}, timeoutMs: 600000 }).catch(() => {})
    }`
  return { code, processes }
}

/**
 * Starts a Node process that runs the trees on one pool, waits until all are up, then
 * ends that Node with `how`; returns the survivors and how long they took to go.
 */
async function nodeDies(how: 'SIGKILL' | 'exit' | 'throw') {
  const tok = token()
  const { code, processes } = startTrees(tok)
  const body = `${code}
    process.stdin.on('data', () => {
      if (${JSON.stringify(how)} === 'exit') process.exit(0)
      throw new Error('uncaught on purpose')
    })`
  const child = spawn(process.execPath, ['-e', body], { stdio: ['pipe', 'ignore', 'ignore'] })
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  await untilHolders(tok, processes)
  if (how === 'SIGKILL') child.kill('SIGKILL')
  else child.stdin.write('go\n')
  await exited
  return survivors(tok, 2000)
}

describe('Node dies with commands running', () => {
  test.each(['SIGKILL', 'exit', 'throw'] as const)('%s: no process of the trees survives', async (how) => {
    const { left, ms } = await nodeDies(how)
    expect(left).toEqual([])
    console.log(`node ${how}: last process of the trees gone ${ms.toFixed(1)} ms after Node exited`)
  })

  test('SIGKILL while a fork bomb of 2000 forks still grows, its forking processes exiting as they finish: none of it survives', async () => {
    const tok = token()
    const script = `trap '' TERM; ${states} b ${tok} & exec sleep ${tok}`
    const { child, exited } = await nodeRunning(script, tok, (pids) => pids.length >= 20)
    child.kill('SIGKILL')
    await exited
    expect((await survivors(tok, 5000)).left).toEqual([])
  })

  test.each(['kept', 'collected'] as const)(
    "a worker thread ended by terminate(), Node living on, its pool %s: no process of the pool's trees survives",
    async (pool) => {
      // terminate() emits no 'exit' in the thread: the pool's teardown hook on the thread's
      // environment kills the trees. Before it, an attack's trees ran on until their timeout;
      // with the hook removed when the pool was collected, a dropped pool's trees still did.
      const tok = token()
      const { code, processes } = startTrees(tok)
      const body =
        pool === 'kept'
          ? `${code}; require('node:worker_threads').parentPort.postMessage('ready')`
          : `
            let collected = false
            const registry = new FinalizationRegistry(() => (collected = true))
            ;(() => {
              ${code}
              registry.register(pool, 'pool')
            })()
            const tick = () => new Promise((r) => setImmediate(r))
            require('node:v8').setFlagsFromString('--expose-gc')
            const gc = require('node:vm').runInNewContext('gc')
            ;(async () => {
              while (!collected) {
                gc()
                await tick()
              }
              // The native pool goes with its wrapper; its finalizer runs on a later turn.
              for (let i = 0; i < 3; i++) {
                gc()
                await tick()
              }
              require('node:worker_threads').parentPort.postMessage('ready')
            })()`
      const worker = new Worker(body, { eval: true })
      const ready = new Promise((resolve) => worker.once('message', resolve))
      const exited = new Promise<void>((resolve) => worker.on('exit', () => resolve()))
      await untilHolders(tok, processes)
      await ready
      await worker.terminate()
      await exited
      expect((await survivors(tok, 2000)).left).toEqual([])
    },
  )
})

/** The job's reaper: the parent of the leader, which is the holder whose parent holds no token. */
function reaperOf(pids: number[]): number {
  const parents = new Set(pids.map((p) => stat(p)?.ppid ?? 0))
  for (const p of pids) parents.delete(p)
  expect(parents.size).toBe(1)
  return [...parents][0]
}

describe('a crash below the pool', () => {
  const script = (tok: string) => `(sleep ${tok} &); setsid sleep ${tok} & wait; : ${tok}`

  test('a reaper killed mid-job: WORKER_CRASHED, its tree dies, the next job runs, stats stay consistent', async () => {
    const p = new WorkerPool({ interactiveWorkers: 2 })
    const before = p.stats().totals.failed
    const tok = token()
    const job = p.exec(sh(script(tok), { timeoutMs: 60_000 }))
    const reaper = reaperOf(await untilHolders(tok, 3))
    process.kill(reaper, 'SIGKILL')
    const err = await rejectionOf(job, PoolError)
    expect(err.code).toBe('WORKER_CRASHED')
    expect((await survivors(tok, 2000)).left).toEqual([])
    expect((await p.exec(sh('echo next'))).stdout).toBe('next\n')
    const stats = p.stats()
    expect(stats.interactive).toEqual({ active: 0, idle: 2, queued: 0 })
    expect(stats.totals.failed).toBe(before + 1)
    await p.shutdown()
  })

  test('the supervisor killed mid-job: every job in flight rejects, the trees die, a new supervisor serves the next job', async () => {
    const p = new WorkerPool({ interactiveWorkers: 2 })
    const tok = token()
    const jobs = [p.exec(sh(script(tok), { timeoutMs: 60_000 })), p.exec(sh(script(tok), { timeoutMs: 60_000 }))]
    const pids = await untilHolders(tok, 6)
    const reapers = new Set(pids.map((pid) => stat(pid)?.ppid).filter((pp) => pp !== undefined && !pids.includes(pp)))
    expect(reapers.size).toBe(2)
    const supervisors = new Set([...reapers].map((r) => stat(r as number)?.ppid))
    expect(supervisors.size).toBe(1)
    const supervisor = [...supervisors][0] as number
    expect(stat(supervisor)?.ppid).toBe(process.pid)
    process.kill(supervisor, 'SIGKILL')
    const errors = await Promise.all(jobs.map((job) => rejectionOf(job, PoolError)))
    expect(errors.map((e) => e.code)).toEqual(['WORKER_CRASHED', 'WORKER_CRASHED'])
    expect((await survivors(tok, 2000)).left).toEqual([])
    const next = await p.exec(sh('echo $PPID'))
    expect(next.exitCode).toBe(0)
    const newSupervisor = stat(Number(next.stdout.trim()))?.ppid
    expect(newSupervisor).not.toBe(supervisor)
    expect(p.stats().interactive).toEqual({ active: 0, idle: 2, queued: 0 })
    // The dead supervisor was reaped: Node has no zombie child.
    const zombies = readdirSync('/proc')
      .filter((n) => /^\d+$/.test(n))
      .filter((n) => {
        const s = stat(Number(n))
        return s?.ppid === process.pid && s.state === 'Z'
      })
    expect(zombies).toEqual([])
    await p.shutdown()
  })
})

/** The reaper that ran a job of `p` (the command's parent), and the pool's supervisor, Node's child. */
async function helpersOf(p: WorkerPool): Promise<{ reaper: number; supervisor: number }> {
  const reaper = Number((await p.exec(sh('echo $PPID'))).stdout.trim())
  const supervisor = stat(reaper)?.ppid as number
  expect(stat(supervisor)?.ppid).toBe(process.pid)
  return { reaper, supervisor }
}

describe('an idle pool', () => {
  test('its last worker thread retiring (10 s without a job) takes the supervisor and the reapers with it; the next job starts a new supervisor', async () => {
    const p = new WorkerPool({ interactiveWorkers: 2 })
    const { reaper, supervisor } = await helpersOf(p)
    const gone = (pid: number) => {
      const s = stat(pid)
      return s === undefined || s.state === 'Z'
    }
    await until(() => gone(supervisor) && gone(reaper), 15_000)
    // Reaped by Node's addon, not left a zombie.
    await until(() => stat(supervisor) === undefined, 2000)
    expect(p.stats().interactive).toEqual({ active: 0, idle: 2, queued: 0 })
    const next = await p.exec(sh('echo $PPID'))
    expect(next.exitCode).toBe(0)
    const newSupervisor = stat(Number(next.stdout.trim()))?.ppid as number
    expect(newSupervisor).not.toBe(supervisor)
    expect(stat(newSupervisor)?.ppid).toBe(process.pid)
    await p.shutdown()
  }, 30_000)
})

describe('shutdown', () => {
  test('once shutdown() settles, the supervisor and its reapers are gone and reaped: not even a zombie is left', async () => {
    const p = new WorkerPool({ interactiveWorkers: 2 })
    const { reaper, supervisor } = await helpersOf(p)
    await p.shutdown()
    // Checked at once, not polled: the pool's processes are gone when the promise settles.
    expect(stat(supervisor)).toBeUndefined()
    expect(stat(reaper)).toBeUndefined()
  })
})

describe("Node's child_process beside the pool", () => {
  test('spawn and execFile get their own exit codes and output while the pool runs jobs', async () => {
    const p = new WorkerPool({ interactiveWorkers: 4, maxQueueDepth: 1000 })
    const run = promisify(execFile)
    const poolJobs = Array.from({ length: 200 }, (_, i) => p.exec(sh(`echo pool ${i}; exit ${i % 7}`)))
    const own = Array.from({ length: 30 }, async (_, i) => {
      if (i % 2 === 0) {
        const err = (await run('/bin/sh', ['-c', `echo cp ${i}; exit 3`]).then(
          () => undefined,
          (e) => e,
        )) as { code: number; stdout: string }
        return [err.code, err.stdout]
      }
      return await new Promise<[number | null, string]>((resolve) => {
        const c = spawn('/bin/sh', ['-c', `echo cp ${i}; exit 4`])
        let out = ''
        c.stdout.on('data', (d) => (out += d))
        c.on('close', (code) => resolve([code, out]))
      })
    })
    const mine = await Promise.all(own)
    mine.forEach(([code, out], i) => expect([code, out]).toEqual([i % 2 === 0 ? 3 : 4, `cp ${i}\n`]))
    const results = await Promise.all(poolJobs)
    results.forEach((r, i) => expect([r.exitCode, r.stdout]).toEqual([i % 7, `pool ${i}\n`]))
    await p.shutdown()
  })
})

describe('the supervisor binary', () => {
  test('missing or not executable: the constructor throws WORKER_CRASHED naming the file', () => {
    for (const [path, why] of [
      ['/nonexistent/finn-supervisor', /\/nonexistent\/finn-supervisor: No such file/],
      ['/etc/passwd', /\/etc\/passwd: not an executable file/],
    ] as const) {
      let err: unknown
      withSupervisor(path, () => {
        try {
          new WorkerPool()
        } catch (e) {
          err = e
        }
      })
      expect(err).toBeInstanceOf(PoolError)
      expect((err as PoolError).code).toBe('WORKER_CRASHED')
      expect((err as PoolError).message).toMatch(why)
    }
  })

  test('gone after construction: jobs reject WORKER_CRASHED naming it, and the pool recovers once it is back', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'finn-sup-'))
    const file = join(dir, 'finn-supervisor')
    const shipped = readdirSync(root).find((n) => n.startsWith('finn-supervisor.'))
    copyFileSync(join(root, shipped as string), file)
    const p = withSupervisor(file, () => new WorkerPool())
    renameSync(file, `${file}.away`)
    const err = await rejectionOf(p.exec(sh('echo hi')), PoolError)
    expect(err.code).toBe('WORKER_CRASHED')
    expect(err.message).toContain(file)
    renameSync(`${file}.away`, file)
    expect((await p.exec(sh('echo back'))).stdout).toBe('back\n')
    expect(p.stats().totals.failed).toBe(1)
    await p.shutdown()
  })
})

/**
 * A child Node whose one-slot pool runs `script` (600 s timeout), for tests that SIGKILL Node.
 * Resolves once `ready(reaper)` holds, where `reaper` is the one parent outside the processes
 * that carry `tok` (the job's reaper): Node's own command line carries the token too.
 */
async function nodeRunning(script: string, tok: string, ready: (holders: number[], reaper: number) => boolean) {
  const body = `
      const sandbox = require(${JSON.stringify(join(root, 'index.js'))})
      const pool = new sandbox.WorkerPool({ interactiveWorkers: 1 })
      pool.exec({ binaryPath: '/bin/sh', args: ['-c', ${JSON.stringify(script)}], cwd: '/', env: ${JSON.stringify(ENV)}, timeoutMs: 600000 }).catch(() => {})
      setInterval(() => {}, 1000)`
  const child = spawn(process.execPath, ['-e', body], { stdio: 'ignore' })
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  let reaper = 0
  await until(() => {
    const pids = holders(tok).filter((p) => p !== child.pid)
    const parents = new Set(pids.map((p) => stat(p)?.ppid ?? 0))
    for (const p of pids) parents.delete(p)
    reaper = [...parents][0]
    return parents.size === 1 && ready(pids, reaper)
  })
  return { child, exited, reaper }
}

describe('a command that stops its helpers', () => {
  // The command runs as the same user as its reaper and the supervisor, so it can SIGSTOP its
  // reaper; the supervisor is out of its reach (see "a command that attacks the supervisor"),
  // so this test stops it itself, as a command could where no seccomp filter can be set. Before
  // the fix, the job below hung past its timeout (the addon waited for the stopped reaper's
  // first answer without a bound) and its tree outlived even Node.
  const stops: Record<string, { supervisor: 'no' | 'once' | 'again' }> = {
    'its reaper': { supervisor: 'no' },
    'its reaper and the supervisor': { supervisor: 'once' },
    'its reaper and the supervisor, again and again': { supervisor: 'again' },
  }
  test('its reaper, then exits: the supervisor continues the reaper at once, and the job resolves long before its timeout', async () => {
    const p = new WorkerPool({ interactiveWorkers: 1 })
    await p.exec(sh('true'))
    const started = performance.now()
    const result = await p.exec(sh('kill -STOP $PPID; echo done', { timeoutMs: 10_000 }))
    expect(result).toMatchObject({ exitCode: 0, stdout: 'done\n' })
    expect(performance.now() - started).toBeLessThan(2000)
    await p.shutdown()
  })

  test('its reaper and the supervisor, then Node is SIGKILLed: the supervisor is continued (parent-death SIGCONT) and no process of the tree survives', async () => {
    const tok = token()
    const go = join(mkdtempSync(join(tmpdir(), 'finn-stop-')), 'go')
    // The command stops its reaper once the supervisor is stopped (running, it would continue
    // the reaper at once).
    const script = `(setsid sleep ${tok} &); while [ ! -e ${go} ]; do sleep 0.01; done; kill -STOP $PPID; sleep ${tok}; : ${tok}`
    // Up once the double-forked sleep has been reparented to the reaper, next to the waiting
    // command.
    const { child, exited, reaper } = await nodeRunning(script, tok, (pids) => pids.length >= 2)
    const supervisor = stat(reaper)?.ppid as number
    process.kill(supervisor, 'SIGSTOP')
    await until(() => stat(supervisor)?.state === 'T')
    writeFileSync(go, '')
    await until(() => stat(reaper)?.state === 'T' && stat(supervisor)?.state === 'T')
    child.kill('SIGKILL')
    await exited
    // The supervisor's wind-down waits 2 s for its reapers before it SIGKILLs all below it.
    expect((await survivors(tok, 5000)).left).toEqual([])
  })

  test.each(Object.entries(stops))('%s: the job still times out on time, no process of its tree survives, the next job runs', async (_, { supervisor }) => {
    const p = new WorkerPool({ interactiveWorkers: 1, killGraceMs: 100 })
    // Warm: the next job is sent to an idle reaper, from Node's thread.
    const helpers = await helpersOf(p)
    const tok = token()
    const started = performance.now()
    let settled = false
    const job = p.exec(sh(`(setsid sleep ${tok} &); while :; do kill -STOP $PPID; done & sleep ${tok}; : ${tok}`, { timeoutMs: 300 }))
    job.catch(() => {}).finally(() => (settled = true))
    if (supervisor !== 'no') {
      process.kill(helpers.supervisor, 'SIGSTOP')
      while (supervisor === 'again' && !settled) {
        process.kill(helpers.supervisor, 'SIGSTOP')
        await new Promise((r) => setTimeout(r, 1))
      }
    }
    const err = await rejectionOf(job, PoolError)
    const ms = performance.now() - started
    expect(err.code).toBe('EXEC_TIMEOUT')
    // The timeout, the grace, and one nudge period with room for a loaded machine.
    expect(ms).toBeLessThan(1500)
    expect((await survivors(tok, 2000)).left).toEqual([])
    expect((await p.exec(sh('echo next'))).stdout).toBe('next\n')
    await p.shutdown()
  })
})

describe('a command that attacks the supervisor', () => {
  // Before the shield (crates/finn-supervisor/src/shield.rs) a command could SIGKILL its reaper and the
  // supervisor together: its orphans went to init and outlived the job and Node (1 of 1).
  test('SIGKILLs its reaper and the supervisor: the supervisor refuses, kills the orphans, and runs the next job', async () => {
    const p = new WorkerPool({ interactiveWorkers: 1 })
    const { supervisor } = await helpersOf(p)
    const tok = token()
    const script = `(setsid sh -c 'sleep ${tok}; :' &); kill -9 $(cut -d' ' -f4 /proc/$PPID/stat) $PPID; sleep ${tok}`
    const err = await rejectionOf(p.exec(sh(script, { timeoutMs: 5000 })), PoolError)
    expect(err.code).toBe('WORKER_CRASHED')
    expect((await survivors(tok, 2000)).left).toEqual([])
    // Still running (a dead one would read undefined, or Z before its reaping).
    expect(stat(supervisor)?.state).toMatch(/^[RSD]$/)
    expect((await p.exec(sh('echo next'))).stdout).toBe('next\n')
    expect((await helpersOf(p)).supervisor).toBe(supervisor)
    await p.shutdown()
  })

  test('stops its reaper in a loop, then Node is SIGKILLed: the supervisor, out of its reach, kills every tree', async () => {
    const tok = token()
    // The loop marks its first stop of the reaper (the supervisor continues it at once, so a
    // sample of its state may never see it stopped).
    const stopped = join(mkdtempSync(join(tmpdir(), 'finn-stop-')), 'stopped')
    const script = `(setsid sleep ${tok} &); while :; do kill -STOP $PPID 2>/dev/null && : > ${stopped}; kill -STOP $(cut -d' ' -f4 /proc/$PPID/stat) 2>/dev/null; done & sleep ${tok}; : ${tok}`
    // The sleeps and the loop are up, and the reaper has been stopped at least once.
    const { child, exited, reaper } = await nodeRunning(script, tok, (pids) => pids.length >= 4 && existsSync(stopped))
    const supervisor = stat(reaper)?.ppid as number
    expect(stat(supervisor)?.state).not.toBe('T')
    child.kill('SIGKILL')
    await exited
    // The supervisor's wind-down waits 2 s for its reapers before it SIGKILLs all below it.
    expect((await survivors(tok, 5000)).left).toEqual([])
  })

  test('cannot signal or re-limit the supervisor or Node, by pid, group, pidfd or kill -1', async () => {
    const p = new WorkerPool({ interactiveWorkers: 1 })
    const script = [
      `S=$(cut -d' ' -f4 /proc/$PPID/stat)`,
      `for t in $S -$S ${process.pid}; do kill -CONT $t 2>/dev/null; echo signal=$?; done`,
      `prlimit --pid $S --cpu=0:0 2>/dev/null; echo limit=$?`,
      `perl -e 'sysopen(my $d, "/proc/$ARGV[0]", 0) or die; exit(syscall(424, fileno($d), 0, 0, 0) == -1 ? 1 : 0)' $S; echo pidfd=$?`,
      // kill -1 would reach them too: it is refused outright.
      `kill -CONT -1 2>/dev/null; echo all=$?`,
      `kill -CONT $PPID; echo reaper=$?`,
    ].join('; ')
    const r = await p.exec(sh(script))
    expect(r.stdout).toBe('signal=1\nsignal=1\nsignal=1\nlimit=1\npidfd=1\nall=1\nreaper=0\n')
    await p.shutdown()
  })
})

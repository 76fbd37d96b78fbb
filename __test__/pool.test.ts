import { execFileSync } from 'node:child_process'
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { Worker } from 'node:worker_threads'
import { join } from 'node:path'
import { afterEach, describe, expect, test } from 'vitest'
import { PoolError, PoolErrorCode, WorkerPool, type ExecResult } from '../index.js'
import { ENV, alive, lateness, pidsOf, readOr, rejectionOf, sh, until } from './helpers.js'

const pools: WorkerPool[] = []
function pool(config: ConstructorParameters<typeof WorkerPool>[0] = {}): WorkerPool {
  const p = new WorkerPool(config)
  pools.push(p)
  return p
}
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.shutdown()))
})

function rejection(promise: Promise<unknown>): Promise<PoolError> {
  return rejectionOf(promise, PoolError)
}

describe('results', () => {
  test('stdout, stderr, real exit codes and a float duration', async () => {
    const r = await pool().exec(sh('echo out; echo err >&2; exit 128'))
    expect(r).toMatchObject({ stdout: 'out\n', stderr: 'err\n', exitCode: 128, truncated: false })
    expect(typeof r.durationMs).toBe('number')
    expect(r.durationMs).toBeGreaterThan(0)
  })

  test('a signal death resolves with 128 + signo', async () => {
    const p = pool()
    expect((await p.exec(sh('kill -USR1 $$'))).exitCode).toBe(138)
    expect((await p.exec(sh('kill -KILL $$'))).exitCode).toBe(137)
  })

  test('the environment is exactly spec.env, stdin is /dev/null, cwd is spec.cwd', async () => {
    process.env.FINN_LEAK_CHECK = 'leaked'
    const dir = mkdtempSync(join(tmpdir(), 'finn-cwd-'))
    const r = await pool().exec(sh('env | sort; cat; pwd', { cwd: dir, env: { PATH: ENV.PATH, ONLY: 'me', GONE: undefined } }))
    expect(r.stdout).toBe(`ONLY=me\nPATH=${ENV.PATH}\nPWD=${dir}\n${dir}\n`)
    delete process.env.FINN_LEAK_CHECK
  })

  test('env keys are read as child_process reads them: inherited enumerable keys in, undefined and null out', async () => {
    const env = Object.create({ INHERITED: 'yes' })
    Object.assign(env, { PATH: ENV.PATH, GONE: undefined, NULLED: null })
    // A well-typed spec reaches the addon packed into one string; one the packing refuses (a
    // sessionId of the wrong type) goes field by field, whose errors name the field.
    const r = await pool().exec(sh('env | sort', { env }))
    expect(r.stdout).toBe(`INHERITED=yes\nPATH=${ENV.PATH}\nPWD=/\n`)
    const bad = await rejection(pool().exec(sh('true', { env, sessionId: 7 as unknown as string })))
    expect(bad.message).toMatch(/spec\.sessionId must be a string/)
  })

  test('no standard signal is ignored or blocked in the child, although Node ignores SIGPIPE', async () => {
    const r = await pool().exec(sh('grep -E "^Sig(Ign|Blk)" /proc/self/status'))
    const [blocked, ignored] = r.stdout.trim().split('\n').map((l) => BigInt(`0x${l.split('\t')[1]}`))
    expect(blocked).toBe(0n)
    // Signals 1-31 at default. glibc's posix_spawn leaves only its internal real-time signals
    // 32 and 33 ignored (sigaddset refuses them); glibc programs reinstall those at start-up.
    expect(ignored & 0x7fffffffn).toBe(0n)
    expect(ignored & ~0x1ffffffffn).toBe(0n)
  })

  test('bare binary names are looked up in the child PATH', async () => {
    const r = await pool().exec({ binaryPath: 'echo', args: ['found'], cwd: '/', env: ENV })
    expect(r.stdout).toBe('found\n')
  })

  test('a binary that cannot be spawned resolves non-zero, says why, and counts as failed', async () => {
    const p = pool()
    const r = await p.exec({ binaryPath: '/no/such/tool', args: [], cwd: '/', env: ENV })
    expect(r.exitCode).toBe(127)
    expect(r.stderr).toMatch(/\/no\/such\/tool.*No such file/)
    const missingCwd = await p.exec({ binaryPath: '/bin/true', args: [], cwd: '/no/such/dir', env: ENV })
    expect(missingCwd.exitCode).not.toBe(0)
    expect(missingCwd.stderr).toMatch(/working directory \/no\/such\/dir/)
    expect(p.stats().totals).toMatchObject({ failed: 2, completed: 0 })
  })
})

describe('jailRoot', () => {
  const root = mkdtempSync(join(tmpdir(), 'finn-jail-'))
  mkdirSync(join(root, 'inside'))
  const sibling = `${root}2` // shares the string prefix, not the path
  mkdirSync(sibling, { recursive: true })
  symlinkSync('/etc', join(root, 'link-out'))

  test('cwd inside the jail runs', async () => {
    const r = await pool().exec(sh('pwd', { cwd: join(root, 'inside') }), 'interactive', root)
    expect(r).toMatchObject({ exitCode: 0, stdout: `${join(root, 'inside')}\n` })
  })

  test.each([
    ['a sibling sharing the prefix', sibling],
    ['a symlink out of the jail', join(root, 'link-out')],
    ['a dot-dot escape', join(root, 'inside', '..', '..')],
  ])('%s is rejected without spawning', async (_, cwd) => {
    const p = pool()
    const r = await p.exec(sh('echo ran', { cwd }), 'interactive', root)
    expect(r).toEqual({ stdout: '', stderr: 'Working directory validation failed', exitCode: 1, truncated: false, durationMs: 0 })
  })

  test('without jailRoot there is no cwd check', async () => {
    expect((await pool().exec(sh('pwd', { cwd: sibling }))).stdout).toBe(`${sibling}\n`)
  })
})

describe('lanes and queues', () => {
  test('stats count a job at call time; a full queue rejects synchronously-detected', async () => {
    const p = pool({ interactiveWorkers: 1, maxQueueDepth: 2 })
    const first = p.exec(sh('echo 1'))
    const second = p.exec(sh('echo 2'))
    const third = p.exec(sh('echo 3'))
    expect(p.stats().interactive).toEqual({ active: 1, idle: 0, queued: 2 })
    const full = await rejection(p.exec(sh('echo 4')))
    expect(full.code).toBe(PoolErrorCode.WORKER_UNAVAILABLE)
    expect(full.message).toMatch(/queue full/i)
    expect((await Promise.all([first, second, third])).map((r) => r.stdout)).toEqual(['1\n', '2\n', '3\n'])
  })

  test('the system lane runs while interactive work saturates its slots, and never lends its slot', async () => {
    const p = pool({ interactiveWorkers: 1, maxQueueDepth: 5 })
    const blocker = p.exec(sh('sleep 0.5; echo interactive'))
    const queuedInteractive = p.exec(sh('echo queued'))
    expect(p.stats()).toMatchObject({ interactive: { active: 1, queued: 1 }, system: { active: false } })
    const started = performance.now()
    const sys = await p.exec(sh('echo system'), 'system')
    expect(sys.stdout).toBe('system\n')
    expect(performance.now() - started).toBeLessThan(400)
    expect(p.stats().interactive.queued).toBe(1)
    expect((await queuedInteractive).stdout).toBe('queued\n')
    await blocker
  })

  test('one system slot: a second system job queues, and its queue fills independently', async () => {
    const p = pool({ interactiveWorkers: 4, maxQueueDepth: 1 })
    const a = p.exec(sh('sleep 0.2'), 'system')
    const b = p.exec(sh('echo b'), 'system')
    expect(p.stats().system).toEqual({ active: true, queued: 1 })
    const full = await rejection(p.exec(sh('echo c'), 'system'))
    expect(full.message).toBe('System queue full')
    expect(p.stats().interactive).toEqual({ active: 0, idle: 4, queued: 0 })
    await Promise.all([a, b])
  })

  test('above half a full queue, dispatch goes round-robin across sessions', async () => {
    const p = pool({ interactiveWorkers: 1, maxQueueDepth: 8 })
    const order: string[] = []
    const job = (name: string, sessionId: string) =>
      p.exec(sh(`echo ${name}`, { sessionId })).then((r) => order.push(r.stdout.trim()))
    const blocker = p.exec(sh('sleep 0.2'))
    const jobs = ['a1', 'a2', 'a3', 'a4', 'a5'].map((n) => job(n, 'a'))
    jobs.push(...['b1', 'b2', 'b3'].map((n) => job(n, 'b')))
    await Promise.all([blocker, ...jobs])
    // 8 queued of 8: a1 b1 a2 b2 alternate; at 4 left (not above half) FIFO resumes.
    expect(order).toEqual(['a1', 'b1', 'a2', 'b2', 'a3', 'a4', 'a5', 'b3'])
  })

  test('stats are live and avgExecMs averages completed jobs', async () => {
    const p = pool({ interactiveWorkers: 2 })
    const running = p.exec(sh('sleep 0.3'))
    expect(p.stats().interactive).toEqual({ active: 1, idle: 1, queued: 0 })
    await running
    const s = p.stats()
    expect(s.interactive).toEqual({ active: 0, idle: 2, queued: 0 })
    expect(s.totals.completed).toBe(1)
    expect(s.totals.avgExecMs).toBeGreaterThanOrEqual(290)
    expect(s.totals.avgExecMs).toBeLessThan(1000)
    expect(JSON.parse(JSON.stringify(s))).toEqual(s)
  })
})

describe('timeouts', () => {
  test('the whole tree, a TERM-ignoring child and a setsid escapee included, is dead before EXEC_TIMEOUT', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'finn-tree-'))
    const log = join(dir, 'pids')
    const p = pool({ killGraceMs: 300 })
    const script = `echo leader $$ >> ${log}
      sh -c 'trap "" TERM; echo ignorer $$ >> ${log}; while :; do sleep 1; done' &
      (sleep 100 & echo grandchild $! >> ${log}; wait) &
      setsid sleep 100 & echo escapee $! >> ${log}
      wait`
    const started = performance.now()
    const err = await rejection(p.exec(sh(script, { timeoutMs: 300 })))
    const elapsed = performance.now() - started
    expect(err.code).toBe(PoolErrorCode.EXEC_TIMEOUT)
    expect(err.message).toBe('Command timed out after 300ms')
    const pids = pidsOf(readOr(log))
    expect(Object.keys(pids).sort()).toEqual(['escapee', 'grandchild', 'ignorer', 'leader'])
    for (const [name, pid] of Object.entries(pids)) expect(alive(pid), `${name} ${pid}`).toBe(false)
    // SIGTERM at 300 ms, the ignorer forced the grace, SIGKILL at ~600 ms.
    expect(elapsed).toBeGreaterThanOrEqual(590)
    expect(elapsed).toBeLessThan(3000)
    expect(p.stats().totals.timedOut).toBe(1)
  })

  test('a tree that obeys SIGTERM dies at once, without waiting the default 5 s grace', async () => {
    const started = performance.now()
    await rejection(pool().exec(sh('sleep 100 & sleep 100', { timeoutMs: 200 })))
    expect(performance.now() - started).toBeLessThan(1500)
  })

  test("a job's deadline is kept while Node's thread is busy, for a job sent from that thread", async () => {
    const p = pool({ killGraceMs: 300 })
    // A reaper is idle after this: the next job goes to it from Node's thread (crates/finn-pool/src/inline.rs).
    await p.exec(sh('exit 0'))
    const dir = mkdtempSync(join(tmpdir(), 'finn-busy-'))
    const marker = join(dir, 'terminated')
    const sent = Date.now()
    const job = p.exec(sh(`trap ': > ${marker}; exit 143' TERM; sleep 30 & wait`, { timeoutMs: 200 }))
    // Node's thread runs JS only: no timer, no I/O callback of the pool runs meanwhile.
    const end = Date.now() + 3000
    while (Date.now() < end) {
      // busy
    }
    // The command marked its SIGTERM while the loop ran, near the deadline (file times are a
    // clock tick coarse).
    expect(existsSync(marker), 'the command was not terminated while Node was busy').toBe(true)
    const terminatedAfter = statSync(marker).mtimeMs - sent
    expect(terminatedAfter).toBeGreaterThanOrEqual(180)
    expect(terminatedAfter).toBeLessThan(2000)
    expect((await rejection(job)).code).toBe(PoolErrorCode.EXEC_TIMEOUT)
    expect(p.stats().totals.timedOut).toBe(1)
  })

  test("a job's deadline is kept while the worker thread that sent it is blocked in Atomics.wait", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'finn-wait-'))
    const marker = join(dir, 'terminated')
    const index = join(__dirname, '..', 'index.js')
    const worker = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads')
      const { WorkerPool } = require(workerData.index)
      ;(async () => {
        const pool = new WorkerPool({ killGraceMs: 300 })
        await pool.exec({ binaryPath: '/bin/sh', args: ['-c', 'exit 0'], cwd: '/', env: {} })
        const sent = Date.now()
        const job = pool.exec({ binaryPath: '/bin/sh', args: ['-c', workerData.script], cwd: '/', env: {}, timeoutMs: 200 })
        // This thread's loop cannot run: the pool's handles on it neither.
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3000)
        const code = await job.then(() => 'resolved', (e) => e.code)
        await pool.shutdown()
        parentPort.postMessage({ sent, code })
      })()`,
      { eval: true, workerData: { index, script: `trap ': > ${marker}; exit 143' TERM; sleep 30 & wait` } },
    )
    const { sent, code } = await new Promise<{ sent: number; code: string }>((resolve, reject) => {
      worker.once('message', resolve)
      worker.once('error', reject)
    })
    await worker.terminate()
    expect(code).toBe(PoolErrorCode.EXEC_TIMEOUT)
    expect(existsSync(marker)).toBe(true)
    const terminatedAfter = statSync(marker).mtimeMs - sent
    expect(terminatedAfter).toBeGreaterThanOrEqual(180)
    expect(terminatedAfter).toBeLessThan(2000)
  })

  test('the clock starts at dispatch, not while queued', async () => {
    const p = pool({ interactiveWorkers: 1 })
    const first = p.exec(sh('sleep 0.4'))
    const second = p.exec(sh('sleep 0.2; echo ok', { timeoutMs: 350 }))
    await first
    expect((await second).stdout).toBe('ok\n')
  })
})

describe('output cap', () => {
  test('counts UTF-8 bytes of stdout+stderr with the marker, keeps a small stderr, never splits a character', async () => {
    const p = pool()
    const r = await p.exec(sh('echo oops >&2; while :; do printf "é€"; done', { maxBuffer: 1001 }))
    expect(r.truncated).toBe(true)
    expect(r.stderr).toBe('oops\n')
    expect(r.stdout.endsWith('\n[TRUNCATED at maxBuffer]')).toBe(true)
    const total = Buffer.byteLength(r.stdout) + Buffer.byteLength(r.stderr)
    expect(total).toBeLessThanOrEqual(1001)
    expect(total).toBeGreaterThan(1001 - 4)
    expect(r.stdout).not.toContain('\uFFFD')
  })

  test('caps the bytes returned, after invalid bytes become U+FFFD (3 bytes each)', async () => {
    // 100 kB of 0xff: capped as raw bytes and converted afterwards this returned 12,238 bytes.
    const r = await pool().exec(sh('head -c 100000 /dev/zero | tr "\\0" "\\377"', { maxBuffer: 4096 }))
    expect(r.truncated).toBe(true)
    const total = Buffer.byteLength(r.stdout) + Buffer.byteLength(r.stderr)
    expect(total).toBeLessThanOrEqual(4096)
    expect(total).toBeGreaterThan(4096 - 3)
    expect(r.stdout.startsWith('\uFFFD\uFFFD')).toBe(true)
  })

  test("the pool's own messages (a failed spawn, a rejected cwd) are held to maxBuffer too", async () => {
    // A missing program named by a 3,000-byte path: its message went out whole (3,060 bytes
    // under maxBuffer 1), as did the jail's rejection.
    const p = pool()
    const jail = mkdtempSync(join(tmpdir(), 'finn-msgcap-'))
    const runs = [
      p.exec({ binaryPath: `/nonexistent/${'é'.repeat(1500)}`, args: [], cwd: '/', env: ENV, maxBuffer: 100 }),
      p.exec({ ...sh('true'), cwd: '/', maxBuffer: 30 }, 'interactive', jail),
    ]
    const [missing, rejected] = await Promise.all(runs)
    for (const [r, cap] of [[missing, 100], [rejected, 30]] as const) {
      expect(r.truncated).toBe(true)
      expect(r.stdout + r.stderr).toMatch(/\n\[TRUNCATED at maxBuffer\]$/)
      expect(Buffer.byteLength(r.stdout) + Buffer.byteLength(r.stderr)).toBeLessThanOrEqual(cap)
      expect(r.stderr).not.toContain('\uFFFD')
    }
    expect(missing.exitCode).toBe(127)
    expect(missing.stderr.length).toBeGreaterThan(0)
    expect(rejected.exitCode).toBe(1)
  })

  test('output that fits is untouched', async () => {
    const r = await pool().exec(sh('printf 12345', { maxBuffer: 5 }))
    expect(r).toMatchObject({ stdout: '12345', truncated: false, exitCode: 0 })
  })

  test('an endless producer is stopped and the call returns promptly', async () => {
    const started = performance.now()
    const r = await pool().exec({ binaryPath: 'yes', args: [], cwd: '/', env: ENV, maxBuffer: 1 << 20 })
    expect(r.truncated).toBe(true)
    expect(Buffer.byteLength(r.stdout)).toBe(1 << 20)
    expect(performance.now() - started).toBeLessThan(2000)
  })

  test('200 MB of output grows the Node process by a few MB at most and leaves the event loop free', async () => {
    const p = pool()
    const before = process.memoryUsage().rss
    let peak = before
    const script = 'head -c 200000000 /dev/zero | tr "\\0" a; echo done >&2'
    const { worst, value: r } = await lateness(
      () => p.exec(sh(script, { maxBuffer: 64 * 1024 })),
      () => (peak = Math.max(peak, process.memoryUsage().rss)),
    )
    expect(r.truncated).toBe(true)
    expect(peak - before).toBeLessThan(16 * 1024 * 1024)
    expect(worst).toBeLessThan(50)
  })
})

describe('AbortSignal', () => {
  test('an already-aborted signal rejects at once without running', async () => {
    const p = pool()
    const err = await rejection(p.exec(sh('echo no'), 'interactive', undefined, { signal: AbortSignal.abort() }))
    expect(err.code).toBe(PoolErrorCode.ABORTED)
    expect(p.stats().totals.completed).toBe(0)
  })

  test('aborting a queued job removes it from the queue', async () => {
    const p = pool({ interactiveWorkers: 1 })
    const blocker = p.exec(sh('sleep 0.3'))
    const ac = new AbortController()
    const queued = p.exec(sh('echo never'), 'interactive', undefined, { signal: ac.signal })
    expect(p.stats().interactive.queued).toBe(1)
    ac.abort()
    const err = await rejection(queued)
    expect(err.code).toBe(PoolErrorCode.ABORTED)
    expect(p.stats().interactive.queued).toBe(0)
    await blocker
    expect(p.stats().totals.completed).toBe(1)
  })

  test('aborting a running job kills its tree like a timeout', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'finn-abort-'))
    const log = join(dir, 'pids')
    const p = pool()
    const ac = new AbortController()
    const running = p.exec(sh(`sleep 100 & echo child $! >> ${log}; echo leader $$ >> ${log}; wait`), 'interactive', undefined, {
      signal: ac.signal,
    })
    await until(() => Object.keys(pidsOf(readOr(log))).length === 2)
    ac.abort(new Error('user cancelled'))
    const err = await rejection(running)
    expect(err.code).toBe(PoolErrorCode.ABORTED)
    expect((err.cause as Error).message).toBe('user cancelled')
    for (const pid of Object.values(pidsOf(readOr(log)))) expect(alive(pid)).toBe(false)
    expect(p.stats().totals.timedOut).toBe(0)
  })

  /** A real signal with one member replaced by a throwing getter. */
  function signalThrowingOn(member: 'aborted' | 'addEventListener' | 'removeEventListener'): AbortSignal {
    const signal = new AbortController().signal
    Object.defineProperty(signal, member, {
      get() {
        throw new Error(`${member} is broken`)
      },
    })
    return signal
  }

  test('a signal that throws when read or listened to rejects INVALID_SPEC naming the field, and nothing runs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'finn-badsignal-'))
    const p = pool({ interactiveWorkers: 1 })
    const listenThrows = new AbortController().signal
    listenThrows.addEventListener = () => {
      throw new Error('no listeners here')
    }
    const cases: [string, AbortSignal, string][] = [
      ['aborted', signalThrowingOn('aborted'), 'options.signal.aborted threw: aborted is broken'],
      ['a getter', signalThrowingOn('addEventListener'), 'options.signal.addEventListener threw: addEventListener is broken'],
      ['a call', listenThrows, 'options.signal.addEventListener threw: no listeners here'],
    ]
    for (const [name, signal, message] of cases) {
      const marker = join(dir, name)
      const err = await rejection(p.exec(sh(`touch '${marker}'; sleep 0.5`), 'interactive', undefined, { signal }))
      expect(err.code, name).toBe(PoolErrorCode.INVALID_SPEC)
      expect(err.message, name).toBe(message)
      // Nothing was submitted: no job is running or queued, and none ran.
      expect(p.stats().interactive, name).toMatchObject({ active: 0, queued: 0 })
      expect(existsSync(marker), name).toBe(false)
    }
    const getterThrows = {
      get signal(): AbortSignal {
        throw new Error('options are broken')
      },
    }
    const err = await rejection(p.exec(sh('exit 0'), 'interactive', undefined, getterThrows))
    expect([err.code, err.message]).toEqual([PoolErrorCode.INVALID_SPEC, 'options.signal could not be read: options are broken'])
    expect((await p.exec(sh('echo still here'))).stdout).toBe('still here\n')
    expect(p.stats().totals).toMatchObject({ completed: 1, failed: 0 })
  })

  test('a signal whose removeEventListener throws: the job still settles, and so do the others', async () => {
    const p = pool()
    const signal = signalThrowingOn('removeEventListener')
    // Read before the job is submitted: the removal at the end uses the function read then.
    const broken = new AbortController().signal
    broken.removeEventListener = () => {
      throw new Error('cannot remove')
    }
    const results = await Promise.allSettled([
      p.exec(sh('echo one'), 'interactive', undefined, { signal: broken }),
      p.exec(sh('echo two')),
    ])
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value.stdout : r.reason))).toEqual(['one\n', 'two\n'])
    const err = await rejection(p.exec(sh('exit 0'), 'interactive', undefined, { signal }))
    expect(err.message).toBe('options.signal.removeEventListener threw: removeEventListener is broken')
  })
})

describe('shutdown', () => {
  test('rejects later, queued and running jobs with POOL_SHUTTING_DOWN, and resolves with no child alive', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'finn-shutdown-'))
    const log = join(dir, 'pids')
    const p = new WorkerPool({ interactiveWorkers: 1, shutdownDeadlineMs: 300 })
    const running = p.exec(sh(`trap "" TERM; echo leader $$ >> ${log}; sleep 100 & echo child $! >> ${log}; wait`))
    const queued = p.exec(sh('echo never'))
    await until(() => Object.keys(pidsOf(readOr(log))).length === 2)
    const started = performance.now()
    const done = p.shutdown()
    const later = await rejection(p.exec(sh('echo later')))
    expect(later).toMatchObject({ code: 'POOL_SHUTTING_DOWN', message: 'Pool is shutting down' })
    expect(await rejection(queued)).toMatchObject({ code: 'POOL_SHUTTING_DOWN', message: 'Pool shutting down' })
    expect((await rejection(running)).code).toBe(PoolErrorCode.POOL_SHUTTING_DOWN)
    await done
    // The leader ignores SIGTERM: it lived until the deadline's SIGKILL.
    expect(performance.now() - started).toBeGreaterThanOrEqual(290)
    for (const pid of Object.values(pidsOf(readOr(log)))) expect(alive(pid)).toBe(false)
    expect(p.stats().totals).toMatchObject({ timedOut: 0, completed: 0 })
    await p.shutdown() // idempotent
  })

  test('an idle pool shuts down at once', async () => {
    const p = new WorkerPool()
    const started = performance.now()
    await Promise.all([p.shutdown(), p.shutdown()])
    expect(performance.now() - started).toBeLessThan(100)
  })
})

/** Threads of this process that run jobs (comm is cut to 15 bytes). */
function jobThreads(): number {
  let n = 0
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      if (readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').startsWith('finn-sandbox-jo')) n++
    } catch {
      // the thread exited while we looked
    }
  }
  return n
}

describe('worker threads', () => {
  test('a job runs on a parked worker thread, never one thread per job; shutdown lets them go', async () => {
    const before = jobThreads()
    const p = new WorkerPool({ interactiveWorkers: 2 })
    let most = 0
    for (let i = 0; i < 40; i++) {
      expect((await p.exec(sh('exit 0'))).exitCode).toBe(0)
      most = Math.max(most, jobThreads() - before)
    }
    // Four at a time on two slots: the finishing worker runs the queued job itself.
    for (let round = 0; round < 10; round++) {
      await Promise.all([0, 1, 2, 3].map(() => p.exec(sh('exit 0'))))
      most = Math.max(most, jobThreads() - before)
    }
    expect(most).toBeGreaterThanOrEqual(1)
    expect(most).toBeLessThanOrEqual(2)
    await p.shutdown()
    // Parked workers are retired by shutdown, not left to their 10 s idle timeout.
    await until(() => jobThreads() <= before, 2000)
  })

  test('300 commands at once on 300 workers: one thread each while running, all gone after shutdown', async () => {
    const before = jobThreads()
    const p = new WorkerPool({ interactiveWorkers: 300, maxQueueDepth: 10 })
    const dir = mkdtempSync(join(tmpdir(), 'finn-many-'))
    const ran = join(dir, 'ran')
    mkdirSync(ran)
    // Each command announces itself, then blocks on a FIFO until the test's go: all 300 run at
    // once, and none burns CPU while it waits (300 shells polling with sleep starved the pool's
    // own processes on CI's 2 cores past the 20 s bound).
    const go = join(dir, 'go')
    execFileSync('mkfifo', [go])
    const held = openSync(go, 'r+') // read-write: the commands' opens never block, and reads wait for data
    const script = `touch ${ran}/$$; read line < ${go}`
    const runs = Array.from({ length: 300 }, () => p.exec(sh(script, { timeoutMs: 20_000 })))
    await until(() => readdirSync(ran).length === 300, 20_000)
    expect(p.stats().interactive).toMatchObject({ active: 300, queued: 0 })
    writeSync(held, '\n'.repeat(300)) // one line each: the shell's read takes a byte at a time
    const results = await Promise.all(runs)
    closeSync(held)
    expect(results.every((r) => r.exitCode === 0)).toBe(true)
    expect(jobThreads() - before).toBeLessThanOrEqual(300)
    await p.shutdown()
    await until(() => jobThreads() <= before, 3000)
  })
})

describe('event loop', () => {
  test('4 one-second commands on 4 workers take about one second and the event loop keeps ticking', async () => {
    const p = pool({ interactiveWorkers: 4 })
    const started = performance.now()
    const { worst, value: results } = await lateness(() => Promise.all([1, 2, 3, 4].map(() => p.exec(sh('sleep 1')))))
    const elapsed = performance.now() - started
    expect(results.every((r: ExecResult) => r.exitCode === 0)).toBe(true)
    expect(elapsed).toBeLessThan(1500)
    expect(worst).toBeLessThan(50)
  })
})

describe('bad input rejects with INVALID_SPEC naming the field, never a synchronous throw', () => {
  const good = sh('true')
  test.each([
    ['missing spec', undefined, /spec is required/],
    ['missing binaryPath', { ...good, binaryPath: undefined }, /spec\.binaryPath is required/],
    ['non-string binaryPath', { ...good, binaryPath: 7 }, /spec\.binaryPath must be a string/],
    ['non-array args', { ...good, args: 'ls' }, /spec\.args must be an array/],
    ['non-string arg', { ...good, args: ['-c', 5] }, /spec\.args\[1\] must be a string/],
    ['NUL in an arg', { ...good, args: ['-c', 'a\0b'] }, /spec\.args\[1\] must not contain NUL/],
    ['NUL in binaryPath', { ...good, binaryPath: '/bin/sh\0x' }, /spec\.binaryPath must not contain NUL/],
    ['missing cwd', { ...good, cwd: undefined }, /spec\.cwd is required/],
    ['non-object env', { ...good, env: 'PATH=/bin' }, /spec\.env must be an object/],
    ['non-string env value', { ...good, env: { A: 1 } }, /spec\.env\.A must be a string/],
    ['NUL in env', { ...good, env: { A: 'x\0' } }, /spec\.env\.A must not contain NUL/],
    ['negative timeout', { ...good, timeoutMs: -1 }, /spec\.timeoutMs must be a non-negative integer/],
    ['fractional timeout', { ...good, timeoutMs: 1.5 }, /spec\.timeoutMs must be a non-negative integer/],
    ['NaN timeout', { ...good, timeoutMs: NaN }, /spec\.timeoutMs must be a non-negative integer/],
    ['zero timeout', { ...good, timeoutMs: 0 }, /spec\.timeoutMs must be a positive integer/],
    ['timeout past Node timers', { ...good, timeoutMs: 2 ** 40 }, /spec\.timeoutMs must be at most 2147483647/],
    ['string maxBuffer', { ...good, maxBuffer: '1024' }, /spec\.maxBuffer must be a non-negative integer/],
    ['huge maxBuffer', { ...good, maxBuffer: 2 ** 40 }, /spec\.maxBuffer must be at most/],
    ['non-string sessionId', { ...good, sessionId: 3 }, /spec\.sessionId must be a string/],
  ])('%s', async (_, spec, message) => {
    const p = pool()
    let promise: Promise<unknown> | undefined
    expect(() => {
      promise = p.exec(spec as never)
    }).not.toThrow()
    const err = await rejection(promise!)
    expect(err.code).toBe(PoolErrorCode.INVALID_SPEC)
    expect(err.message).toMatch(message)
  })

  test('a bad lane, jailRoot or signal also rejects', async () => {
    const p = pool()
    expect((await rejection(p.exec(good, 'System' as never))).message).toMatch(/lane must be/)
    expect((await rejection(p.exec(good, 'interactive', 5 as never))).message).toMatch(/jailRoot must be a string/)
    expect((await rejection(p.exec(good, undefined, undefined, { signal: {} as never }))).message).toMatch(/options\.signal/)
  })

  test('a bad config throws a PoolError naming the field', () => {
    expect(() => new WorkerPool({ interactiveWorkers: 0 })).toThrow(/config\.interactiveWorkers/)
    expect(() => new WorkerPool({ maxQueueDepth: -1 })).toThrow(/config\.maxQueueDepth must be a non-negative integer/)
    expect(() => new WorkerPool('x' as never)).toThrow(PoolError)
  })
})

describe('panics', () => {
  test('a panic inside the addon becomes WORKER_CRASHED and the pool keeps working', async () => {
    process.env.FINN_SANDBOX_TEST_HOOKS = '1'
    const p = pool({ interactiveWorkers: 1 })
    delete process.env.FINN_SANDBOX_TEST_HOOKS
    const err = await rejection(p.exec(sh('echo x', { sessionId: '__finn_sandbox_test_panic__' })))
    expect(err.code).toBe(PoolErrorCode.WORKER_CRASHED)
    expect((await p.exec(sh('echo still'))).stdout).toBe('still\n')
    expect(p.stats().totals).toMatchObject({ failed: 1, completed: 1 })
    expect(p.stats().interactive.active).toBe(0)
  })

  test('a panic in a queued job does not touch the outcome of the job before it on the same worker', async () => {
    process.env.FINN_SANDBOX_TEST_HOOKS = '1'
    const p = pool({ interactiveWorkers: 1 })
    delete process.env.FINN_SANDBOX_TEST_HOOKS
    // One worker: the second job is queued and runs on the thread that ran the first, which
    // holds the first job's reply back until the next child runs.
    const first = p.exec(sh('echo first'))
    // The panic's rejection can arrive before the first job's reply (which waits for the next
    // child, and the panicking job starts none): catch it from the start, or it is unhandled.
    const panics = rejection(p.exec(sh('echo x', { sessionId: '__finn_sandbox_test_panic__' })))
    const third = p.exec(sh('echo third'))
    expect((await first).stdout).toBe('first\n')
    expect((await panics).code).toBe(PoolErrorCode.WORKER_CRASHED)
    expect((await third).stdout).toBe('third\n')
    expect(p.stats().totals).toMatchObject({ failed: 1, completed: 2 })
  })
})

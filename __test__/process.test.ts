// Background processes (`startProcess`, `Process`): real commands on the pool's supervisor,
// survival judged by a /proc scan for a unique token in command lines.
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import type { WorkerPool as Pool } from '../index.js'
import { holders, until } from './helpers.js'

const root = join(import.meta.dirname, '..')
const require = createRequire(import.meta.url)

// The public types (index.d.ts); the internal function also takes `inheritEnv` and `isolation`.
type LogEvent = import('../index.js').LogEvent
type Exit = import('../index.js').ProcessExit
type Process = import('../index.js').Process
type ProcessOptions = import('../index.js').ProcessOptions & { inheritEnv?: boolean }
// Loaded with require, as the internal export is: vitest's ESM copy of index.js would be a
// second module with a WorkerPool class of its own.
const { _startProcess: startProcess, WorkerPool, SessionError } = require('../index.js') as {
  _startProcess(pool: Pool, command: string | string[], options?: ProcessOptions & { isolation?: unknown }): Promise<Process>
  WorkerPool: typeof Pool
  SessionError: typeof import('../index.js').SessionError
}

// A short grace: the trees below include a child that ignores SIGTERM.
const pool = new WorkerPool({ killGraceMs: 200 })
afterAll(() => pool.shutdown())

let serial = 0
/** A token unique to this run and test, for the /proc scan. */
const token = () => `finnproc${process.pid}x${++serial}`

/**
 * A tree that escapes as far as a process can: a `setsid` child, a double-forked one, one that
 * ignores SIGTERM, and the leader; each a `sleep` renamed to carry `tok` in its command line.
 */
const escapingTree = (tok: string) =>
  [
    `setsid bash -c 'exec -a ${tok}-setsid sleep 1000' &`,
    `(bash -c 'exec -a ${tok}-orphan sleep 1000' &) ;`,
    `bash -c 'trap "" TERM; exec -a ${tok}-deaf sleep 1000' &`,
    `exec -a ${tok}-leader sleep 1000`,
  ].join(' ')

/** Every event of `proc` from `since` to its exit. */
async function collect(proc: Process, since?: number): Promise<LogEvent[]> {
  const out: LogEvent[] = []
  for await (const e of proc.streamLogs(since === undefined ? undefined : { since })) out.push(e)
  return out
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  return promise.then(
    () => 'resolved',
    (e: { name?: string; code?: string }) => `${e.name} ${e.code}`,
  )
}

describe('a background process', () => {
  test('reports its real pid, its status live, its exit code, times and logs', async () => {
    const proc = await startProcess(pool, 'echo pid $$; echo oops >&2; exit 3')
    expect(proc.status).toBe('running')
    expect(proc.endTime).toBeNull()
    expect(proc.startTime).toBeInstanceOf(Date)
    const exit = await proc.waitForExit()
    expect(exit).toEqual({ exitCode: 3, signal: null, timedOut: false })
    expect(proc.status).toBe('failed')
    expect(await proc.getStatus()).toBe('failed')
    expect(proc.exitCode).toBe(3)
    expect(proc.endTime!.getTime()).toBeGreaterThanOrEqual(proc.startTime.getTime())
    const logs = await proc.getLogs()
    // The pid is the command's own ($$ of its shell), not a wrapper's.
    expect(logs).toEqual({ stdout: `pid ${proc.pid}\n`, stderr: 'oops\n', truncated: false })
    expect(proc.command).toContain('echo pid')
  })

  test('an argv command runs without a shell: the pid is the program itself', async () => {
    const tok = token()
    const proc = await startProcess(pool, ['bash', '-c', `exec -a ${tok} sleep 1000`])
    await until(() => holders(tok).length === 1)
    expect(holders(tok)).toEqual([proc.pid])
    await proc.kill('SIGKILL')
    expect(proc.status).toBe('killed')
    expect(proc.signal).toBe('SIGKILL')
  })

  test('a chatty fast command loses no byte of its tail, in the ring and through onStdout', async () => {
    const chunks: Buffer[] = []
    let exited: Exit | undefined
    const proc = await startProcess(pool, 'seq 1 200000; echo tail >&2', {
      onStdout: (c) => chunks.push(c),
      onExit: (e) => (exited = e),
    })
    await proc.waitForExit()
    const expected = Array.from({ length: 200000 }, (_, i) => `${i + 1}\n`).join('')
    expect(Buffer.concat(chunks).toString()).toBe(expected)
    const logs = await proc.getLogs()
    expect(logs.stdout).toBe(expected)
    expect(logs.stderr).toBe('tail\n')
    expect(exited).toEqual({ exitCode: 0, signal: null, timedOut: false })
    expect(proc.status).toBe('completed')
  })

  test('streamLogs replays from a sequence number then follows, with no gap and no duplicate, under a tiny ring', async () => {
    const proc = await startProcess(pool, 'for i in $(seq 1 300); do echo line-$i; done; for t in 1 2 3; do sleep 0.05; echo t$t; done; echo last', {
      maxLogBytes: 64,
    })
    // A follower from the start, reading as the process runs.
    const live = collect(proc, 0)
    await proc.waitForExit()
    const all = await live
    const afterTruncation = all.filter((e) => e.type !== 'truncated')
    const seqs = afterTruncation.map((e) => e.seq)
    // Consecutive: no event skipped or delivered twice after the follower's position.
    for (let i = 1; i < seqs.length; i++) expect(seqs[i]).toBe(seqs[i - 1] + 1)
    expect(all.at(-1)).toMatchObject({ type: 'exit', exitCode: 0 })
    // Replayed after the end from the start: the ring kept only the newest events.
    const replay = await collect(proc, 0)
    expect(replay[0].type).toBe('truncated')
    expect(replay[1].seq).toBe(replay[0].seq + 1)
    const kept = replay.slice(1)
    for (let i = 1; i < kept.length; i++) expect(kept[i].seq).toBe(kept[i - 1].seq + 1)
    expect(kept.at(-1)!.type).toBe('exit')
    const text = Buffer.concat(kept.flatMap((e) => (e.type === 'stdout' ? [e.data] : []))).toString()
    expect(text.endsWith('last\n')).toBe(true)
    expect((await proc.getLogs()).truncated).toBe(true)
    // From a sequence number inside the ring: exactly from there.
    // (The writes 50 ms apart are separate events: at least three of them are in the ring.)
    expect(kept.length).toBeGreaterThanOrEqual(3)
    const from = kept.at(-3)!.seq
    const tail = await collect(proc, from)
    expect(tail.map((e) => e.seq)).toEqual(kept.slice(-3).map((e) => e.seq))
    // Async iteration is the stream from the start.
    const iterated: LogEvent[] = []
    for await (const e of proc) iterated.push(e)
    expect(iterated.map((e) => e.seq)).toEqual(replay.map((e) => e.seq))
  })

  test('streamLogs({ since }) joins a live stream where an earlier reader left off', async () => {
    const proc = await startProcess(pool, 'cat', { stdin: 'pipe' })
    await proc.writeStdin('one\n')
    await proc.waitForLog('one')
    const first = proc.streamLogs()
    const seen = (await first.next()).value as LogEvent
    await first.return!(undefined)
    const rest = collect(proc, seen.seq + 1)
    await proc.writeStdin('two\n')
    await proc.closeStdin()
    const events = await rest
    expect(events[0].seq).toBe(seen.seq + 1)
    expect(Buffer.concat(events.flatMap((e) => (e.type === 'stdout' ? [e.data] : []))).toString()).toBe('two\n')
    expect(events.at(-1)!.type).toBe('exit')
  })

  test('waitForLog finds a line by string or RegExp, live or already logged, on either stream', async () => {
    const proc = await startProcess(pool, 'echo starting; sleep 0.1; echo "ready on port 8080" >&2; cat', { stdin: 'pipe' })
    expect(await proc.waitForLog('starting')).toEqual({ line: 'starting', stream: 'stdout' })
    expect(await proc.waitForLog(/port (\d+)/)).toEqual({ line: 'ready on port 8080', stream: 'stderr' })
    // Output without a newline is matched once the process ends.
    await proc.writeStdin('no newline')
    await proc.closeStdin()
    expect(await proc.waitForLog('no newline')).toEqual({ line: 'no newline', stream: 'stdout' })
  })

  test('waitForLog rejects EPROCESSEXITED, ETIMEDOUT and ABORT_ERR as SessionErrors', async () => {
    const done = await startProcess(pool, 'echo nothing')
    expect(await codeOf(done.waitForLog('never'))).toBe('SessionError EPROCESSEXITED')
    const tok = token()
    const quiet = await startProcess(pool, `exec -a ${tok} sleep 1000`)
    expect(await codeOf(quiet.waitForLog('never', { timeoutMs: 20 }))).toBe('SessionError ETIMEDOUT')
    const controller = new AbortController()
    const waiting = quiet.waitForLog('never', { signal: controller.signal })
    controller.abort()
    expect(await codeOf(waiting)).toBe('SessionError ABORT_ERR')
    expect(await codeOf(quiet.waitForExit({ signal: AbortSignal.abort() }))).toBe('SessionError ABORT_ERR')
    expect(await codeOf(quiet.waitForExit({ timeoutMs: 10 }))).toBe('SessionError ETIMEDOUT')
    await quiet.kill('SIGKILL')
    expect(holders(tok)).toEqual([])
  })

  test('waitForPort resolves once a tiny HTTP server on 127.0.0.1 listens', async () => {
    const port = await freePort()
    const server = `require('node:http').createServer((q, s) => s.end('hi')).listen(${port}, '127.0.0.1', () => console.log('listening'))`
    const proc = await startProcess(pool, [process.execPath, '-e', `setTimeout(() => { ${server} }, 100)`])
    await proc.waitForPort(port, { timeoutMs: 20_000 })
    const body = await (await fetch(`http://127.0.0.1:${port}/`)).text()
    expect(body).toBe('hi')
    await proc.kill()
    expect(proc.status).toBe('killed')
  })

  test('waitForPort rejects EPROCESSEXITED as soon as the process exits, not at its timeout', async () => {
    const port = await freePort()
    const proc = await startProcess(pool, 'sleep 0.05; exit 1')
    // No timeout: only the exit can end this wait.
    expect(await codeOf(proc.waitForPort(port))).toBe('SessionError EPROCESSEXITED')
    expect(proc.status).toBe('failed')
  })

  test('kill ends the whole tree, setsid and double-fork escapees and a SIGTERM-deaf child included, and resolves when none is left', async () => {
    const tok = token()
    const proc = await startProcess(pool, escapingTree(tok))
    await until(() => holders(tok).length === 4)
    await proc.kill('SIGTERM', { graceMs: 200 })
    // Checked at once: kill resolves only when the tree is gone.
    expect(holders(tok)).toEqual([])
    expect(proc.status).toBe('killed')
    expect(proc.signal).toBe('SIGTERM')
    expect(proc.exitCode).toBeNull()
  })

  test('kill with another signal sends it to every process of the tree, setsid escapees included', async () => {
    const tok = token()
    // Each shell reports the SIGUSR1 it got on stderr, then exits. The script and the token come
    // through the environment, so only the sleeps carry the token in their command lines.
    const S = `trap 'echo $N USR1 >&2; exit 0' USR1; exec -a "$T-$N" sleep 1000 & wait`
    const proc = await startProcess(pool, 'N=setsid setsid bash -c "$S" & (N=orphan bash -c "$S" &) ; N=leader; eval "$S"', {
      env: { S, T: tok },
    })
    await until(() => holders(tok).length === 3)
    await proc.kill('SIGUSR1', { graceMs: 600_000 })
    const lines = (await proc.getLogs()).stderr.split('\n').filter(Boolean).sort()
    expect(lines).toEqual(['leader USR1', 'orphan USR1', 'setsid USR1'])
    expect(holders(tok)).toEqual([])
    // The leader handled the signal and exited 0 itself: that is its status.
    expect(proc.status).toBe('completed')
    expect(proc.exitCode).toBe(0)
  })

  test('a second kill brings the SIGKILL forward', async () => {
    const tok = token()
    const proc = await startProcess(pool, `trap "" TERM; exec -a ${tok} sleep 1000`)
    await until(() => holders(tok).length === 1)
    const slow = proc.kill('SIGTERM', { graceMs: 600_000 })
    // Without the escalation this waits the ten minutes of grace (past the test's timeout).
    await proc.kill('SIGKILL')
    await slow
    expect(holders(tok)).toEqual([])
    expect(proc.signal).toBe('SIGKILL')
  })

  test('timeoutMs is a hard deadline for the whole tree', async () => {
    const tok = token()
    const proc = await startProcess(pool, escapingTree(tok), { timeoutMs: 300 })
    const exit = await proc.waitForExit()
    expect(exit.timedOut).toBe(true)
    expect(proc.status).toBe('killed')
    expect(holders(tok)).toEqual([])
  })

  test('stdin: "pipe" takes writes in order and closeStdin gives EOF; without it stdin is /dev/null', async () => {
    const proc = await startProcess(pool, 'cat; echo eof', { stdin: 'pipe' })
    const writes = []
    for (let i = 0; i < 100; i++) writes.push(proc.writeStdin(`${i},`))
    writes.push(proc.writeStdin(new Uint8Array([0, 10])))
    await Promise.all(writes)
    await proc.closeStdin()
    await proc.waitForExit()
    const expected = Array.from({ length: 100 }, (_, i) => `${i},`).join('') + '\0\neof\n'
    expect((await proc.getLogs()).stdout).toBe(expected)
    expect(await codeOf(proc.writeStdin('late'))).toBe('SessionError EPROCESSEXITED')
    // Without a pipe: cat reads EOF at once, and writeStdin is refused naming the option.
    const plain = await startProcess(pool, 'cat; echo eof')
    await plain.waitForExit()
    expect((await plain.getLogs()).stdout).toBe('eof\n')
    const refused = await plain.writeStdin('x').catch((e) => e)
    expect(refused).toMatchObject({ name: 'SessionError', code: 'EINVAL' })
    expect(refused.message).toContain('stdin: "pipe"')
  })

  test('a large write waits for the reader without blocking Node, and fails EPROCESSEXITED when the reader dies', async () => {
    const proc = await startProcess(pool, 'head -c 10 > /dev/null; exit 0', { stdin: 'pipe' })
    // 4 MiB into a pipe of 64 KiB whose reader stops after 10 bytes.
    expect(await codeOf(proc.writeStdin(Buffer.alloc(4 << 20)))).toBe('SessionError EPROCESSEXITED')
  })

  test('bad options are EINVAL naming the option; a missing cwd is ENOENT', async () => {
    const bad: Array<[string | string[], ProcessOptions | undefined, string]> = [
      ['true', { maxLogBytes: 0 }, 'options.maxLogBytes'],
      ['true', { timeoutMs: -1 }, 'options.timeoutMs'],
      ['true', { stdin: 'x' as 'pipe' }, 'options.stdin'],
      ['true', { env: { 'A=B': 'x' } }, 'options.env'],
      ['true', { env: { A: 1 as unknown as string } }, 'options.env.A'],
      ['true', { onStdout: 'x' as unknown as () => void }, 'options.onStdout'],
      ['true', { id: '' }, 'options.id'],
      ['tr\0ue', undefined, 'command'],
      [[], undefined, 'command'],
    ]
    for (const [command, options, field] of bad) {
      const err = await startProcess(pool, command, options).catch((e) => e)
      expect(err).toBeInstanceOf(SessionError)
      expect(err).toMatchObject({ name: 'SessionError', code: 'EINVAL' })
      expect(err.message).toContain(field)
    }
    const iso = await startProcess(pool, 'true', { isolation: { mode: 'bogus' } }).catch((e) => e)
    expect(iso).toMatchObject({ name: 'SessionError', code: 'EINVAL' })
    expect(iso.message).toMatch(/^options\.isolation/)
    const missing = await startProcess(pool, 'true', { cwd: '/nonexistent/dir' }).catch((e) => e)
    expect(missing).toMatchObject({ name: 'SessionError', code: 'ENOENT' })
    const proc = await startProcess(pool, 'true')
    expect(await proc.kill('SIGNOPE').catch((e) => e.code)).toBe('EINVAL')
    expect(await proc.kill('SIGSTOP').catch((e) => e.code)).toBe('EINVAL')
    expect(await codeOf(proc.waitForExit({ timeoutMs: -5 }))).toBe('SessionError EINVAL')
    expect(await codeOf(proc.waitForPort(0))).toBe('SessionError EINVAL')
    await proc.waitForExit()
  })

  test('isolation applies to the process as to a pool job', async () => {
    const proc = await startProcess(pool, 'echo x > /etc/finn-proc-probe; echo rc=$?', { isolation: { mode: 'auto' }, cwd: '/tmp' })
    await proc.waitForExit()
    expect((await proc.getLogs()).stdout).not.toBe('rc=0\n')
  })

  test('cwd and env reach the command', async () => {
    const proc = await startProcess(pool, 'pwd; echo "$GREETING-${HOME:-nohome}"', {
      cwd: '/tmp',
      env: { GREETING: 'hello', HOME: undefined },
    })
    await proc.waitForExit()
    expect((await proc.getLogs()).stdout).toBe('/tmp\nhello-nohome\n')
  })

  test('Node blocked by JS pushes back on the command: its writes wait instead of filling memory', async () => {
    const proc = await startProcess(pool, ['head', '-c', '2000000000', '/dev/zero'], { maxLogBytes: 1 << 20 })
    const io = () => Number(/wchar: (\d+)/.exec(readFileSync(`/proc/${proc.pid}/io`, 'utf8'))![1])
    // Node's thread busy for 500 ms: no event is taken from the queue meanwhile.
    const until = Date.now() + 500
    while (Date.now() < until);
    // The pipe (64 KiB), the reads in flight and 64 queued events of at most 32 KiB each.
    expect(io()).toBeLessThan(8 << 20)
    await proc.kill('SIGKILL')
    expect((await proc.getLogs()).stdout.length).toBeLessThanOrEqual((1 << 20) + (32 << 10))
  })
})

describe('containment beyond kill', () => {
  test('pool.shutdown() ends a background tree and resolves only when it is gone', async () => {
    const own = new WorkerPool({ shutdownDeadlineMs: 200 })
    const tok = token()
    const proc = await startProcess(own, escapingTree(tok))
    await until(() => holders(tok).length === 4)
    await own.shutdown()
    expect(holders(tok)).toEqual([])
    await proc.waitForExit()
    expect(proc.status).toBe('killed')
    expect(await codeOf(startProcess(own, 'true'))).toBe('PoolError POOL_SHUTTING_DOWN')
  })

  test('a pool going idle keeps its supervisor, and so the process, while the process runs', async () => {
    const own = new WorkerPool()
    const tok = token()
    const proc = await startProcess(own, `exec -a ${tok} cat`, { stdin: 'pipe' })
    // A job's worker thread parks, and after 10 s idle leaves; the last one to leave an idle
    // pool lets the supervisor go, with every reaper under it.
    await own.exec({ binaryPath: '/bin/true', args: [], cwd: '/', env: {} })
    await new Promise((r) => setTimeout(r, 11_000))
    expect(holders(tok)).toEqual([proc.pid])
    await proc.writeStdin('still here\n')
    expect(await proc.waitForLog('still here')).toEqual({ line: 'still here', stream: 'stdout' })
    await own.shutdown()
    expect(holders(tok)).toEqual([])
  })

  test.each(['SIGKILL', 'process.exit()'])('%s of the Node process that started it leaves no process of the tree', async (how) => {
    const tok = token()
    // The command comes through the environment: Node's own command line must not hold the token.
    const script = `
      const sandbox = require(${JSON.stringify(join(root, 'index.js'))})
      sandbox._startProcess(new sandbox.WorkerPool(), process.env.TREE).then((p) => console.log(p.pid))
      process.stdin.on('data', () => process.exit(0))`
    const child = execFile(process.execPath, ['-e', script], { env: { ...process.env, TREE: escapingTree(tok) } })
    try {
      await until(() => holders(tok).length === 4, 20_000)
      if (how === 'SIGKILL') child.kill('SIGKILL')
      else child.stdin!.write('exit\n')
      // The kernel ends the reaper's tree once the reaper sees its socket close: bounded, not instant.
      await until(() => holders(tok).length === 0, 5_000)
    } finally {
      child.kill('SIGKILL')
    }
  })

  test('a running process keeps Node alive until it exits; then Node exits', async () => {
    const script = `
      const sandbox = require(${JSON.stringify(join(root, 'index.js'))})
      sandbox._startProcess(new sandbox.WorkerPool(), 'sleep 0.3; echo done', {
        onExit: (e) => console.log('exit', e.exitCode),
        onStdout: (c) => process.stdout.write(c),
      })`
    const out = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, ['-e', script], { timeout: 20_000 }, (err, stdout) => (err ? reject(err) : resolve(stdout))),
    )
    expect(out).toBe('done\nexit 0\n')
  })
})

/** A TCP port free on 127.0.0.1 a moment ago. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })
}

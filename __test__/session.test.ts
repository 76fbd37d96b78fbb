// Sessions: one bash kept alive between commands, run by a reaper of a pool's supervisor.
// Real bash and coreutils; survival is judged by a /proc scan for a token each test puts in
// its processes' command lines (`exec -a`), not by recorded pids alone.
import { execFile, spawn } from 'node:child_process'
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, describe, expect, test } from 'vitest'
import { createSession, probeIsolation, Session, SessionError, SessionErrorCode, WorkerPool } from '../index.js'
import { holders, readOr, until } from './helpers.js'

const run = promisify(execFile)
const root = join(import.meta.dirname, '..')
const pool = new WorkerPool()
afterAll(() => pool.shutdown())

let tokens = 0
/** A string unique to this test run, to find its processes by. */
const token = (name: string) => `finn-sess-${name}-${process.pid}-${++tokens}`

/** Escapes a command tries, each a `sleep` whose argv carries `tok`. */
const escapes = (tok: string) =>
  [
    `(bash -c 'exec -a ${tok} sleep 300' &)`,
    `setsid bash -c 'exec -a ${tok} sleep 300' &`,
    `bash -c 'exec -a ${tok} sleep 300' &`,
    `nohup bash -c 'exec -a ${tok} sleep 300' >/dev/null 2>&1 &`,
  ].join('\n')

async function rejection(promise: Promise<unknown>): Promise<SessionError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SessionError)
  return err as SessionError
}

async function session(options: Parameters<typeof createSession>[0] = {}): Promise<Session> {
  return createSession({ pool, cwd: tmpdir(), ...options })
}

describe('a session', () => {
  test('an echo round trip works and its state persists between commands', async () => {
    const s = await session({ env: { GREETING: 'hi' } })
    expect(s.pid).toBeGreaterThan(0)
    expect(typeof s.id).toBe('string')
    const r = await s.exec('echo "$GREETING"')
    expect(r).toMatchObject({ command: 'echo "$GREETING"', exitCode: 0, signal: null, success: true, stdout: 'hi\n', stderr: '', timedOut: false, timedOutBy: null, sessionRestarted: false })
    await s.exec("cd /usr && export A='x y' && f() { echo \"f:$1\"; } && shopt -s expand_aliases && alias hey='echo hey'")
    expect((await s.exec('pwd; echo "$A"; f 1; hey')).stdout).toBe('/usr\nx y\nf:1\nhey\n')
    await s.setEnv({ B: 'b', A: undefined })
    expect((await s.exec('echo "${A-unset} $B"')).stdout).toBe('unset b\n')
    await s.destroy()
  })

  test('bytes come through exactly: trailing newlines, NUL, invalid UTF-8 and a 1 MB line', async () => {
    const s = await session()
    expect((await s.exec("printf 'a\\n\\n\\n'")).stdout).toBe('a\n\n\n')
    const raw = await s.exec("printf 'x\\0y\\377\\n'", { encoding: 'buffer' })
    expect(raw.stdout).toEqual(Buffer.from([0x78, 0, 0x79, 0xff, 0x0a]))
    const line = await s.exec("head -c 1000000 /dev/zero | tr '\\0' a")
    expect(line.stdout.length).toBe(1_000_000)
    expect(line.stdout).toBe('a'.repeat(1_000_000))
    expect((await s.exec('printf err >&2')).stderr).toBe('err')
    await s.destroy()
  })

  test('stdin is EOF at once unless given; a string or bytes are written, then closed', async () => {
    const s = await session()
    expect((await s.exec('cat; echo done')).stdout).toBe('done\n')
    expect((await s.exec('cat', { stdin: 'in\n' })).stdout).toBe('in\n')
    expect((await s.exec('wc -c', { stdin: new Uint8Array([0, 1, 2]) })).stdout.trim()).toBe('3')
    await s.destroy()
  })

  test('exit, exec, set -e, a syntax error and an unterminated quote never kill or wedge it', async () => {
    const s = await session()
    await s.exec('cd /usr && export KEPT=1 && g() { echo g; }')
    const exit = await s.exec('exit 3')
    expect([exit.exitCode, exit.sessionRestarted]).toEqual([3, true])
    expect((await s.exec('pwd; echo $KEPT; g')).stdout).toBe('/usr\n1\ng\n')
    const ex = await s.exec('exec true')
    expect([ex.exitCode, ex.sessionRestarted]).toEqual([0, true])
    const e = await s.exec('set -e; false')
    expect([e.exitCode, e.sessionRestarted]).toEqual([1, true])
    await s.exec('set +e')
    const syntax = await s.exec('if then fi')
    expect(syntax.exitCode).toBe(2)
    expect(syntax.sessionRestarted).toBe(false)
    const quote = await s.exec("echo 'unterminated")
    expect(quote.exitCode).toBe(2)
    expect((await s.exec('pwd; echo $KEPT')).stdout).toBe('/usr\n1\n')
    await s.destroy()
  })

  test('calls run one at a time in call order', async () => {
    const s = await session()
    const dir = mkdtempSync(join(tmpdir(), 'finn-sess-order-'))
    const calls = [0, 1, 2, 3, 4].map((i) => s.exec(`echo ${i} >> ${dir}/log; echo ${i}`))
    const results = await Promise.all(calls)
    expect(results.map((r) => r.stdout)).toEqual(['0\n', '1\n', '2\n', '3\n', '4\n'])
    expect(readOr(join(dir, 'log'))).toBe('0\n1\n2\n3\n4\n')
    await s.destroy()
  })

  test('output streams live through onStdout/onStderr, in order, and adds up to the result', async () => {
    const s = await session()
    const out: Buffer[] = []
    const err: Buffer[] = []
    const r = await s.exec('for i in $(seq 1 2000); do echo "line $i"; echo "e$i" >&2; done', {
      onStdout: (c) => out.push(c),
      onStderr: (c) => err.push(c),
    })
    expect(Buffer.concat(out).toString()).toBe(r.stdout)
    expect(Buffer.concat(err).toString()).toBe(r.stderr)
    expect(r.stdout.split('\n')[1999]).toBe('line 2000')
    await s.destroy()
  })

  test('a slow onStdout holds the command back: no chunk is dropped and memory stays bounded', async () => {
    const s = await session()
    const total = 256 * 1024 * 1024
    let seen = 0
    let peak = 0
    const r = await s.exec(`head -c ${total} /dev/zero`, {
      maxOutputBytes: 1024,
      onStdout: (chunk) => {
        seen += chunk.length
        peak = Math.max(peak, process.memoryUsage().arrayBuffers)
        // A consumer slower than the producer: without backpressure chunks would pile up (or be dropped).
        const until = performance.now() + 0.1
        while (performance.now() < until);
      },
    })
    expect([seen, r.stdout.length, r.stdoutTruncated, r.exitCode]).toEqual([total, 1024, true, 0])
    // The queue holds 16 chunks of at most 64 KiB; the rest waits in the command's pipe.
    expect(peak).toBeLessThan(64 * 1024 * 1024)
    await s.destroy()
  })

  test('maxOutputBytes cuts a stream without splitting a character and says so', async () => {
    const s = await session()
    // 'é' is two bytes: 5 bytes hold two of them and half of a third.
    const r = await s.exec("printf 'ééééé'; printf 'ok' >&2", { maxOutputBytes: 5 })
    expect([r.stdout, r.stdoutTruncated, r.stderr, r.stderrTruncated]).toEqual(['éé', true, 'ok', false])
    const flood = await s.exec('yes | head -c 50000000', { maxOutputBytes: 1000 })
    expect([flood.stdout.length, flood.stdoutTruncated, flood.exitCode]).toEqual([1000, true, 0])
    await s.destroy()
  })

  test('bad input is refused with EINVAL naming the option, a missing cwd with ENOENT', async () => {
    const s = await session()
    const cases: [() => Promise<unknown>, string, RegExp][] = [
      [() => s.exec('echo a\0b'), 'EINVAL', /^command must not contain NUL/],
      [() => s.exec('true', { timeoutMs: -1 }), 'EINVAL', /^options\.timeoutMs/],
      [() => s.exec('true', { yieldMs: 0 }), 'EINVAL', /^options\.yieldMs/],
      [() => s.exec('true', { onTimeout: 'later' } as never), 'EINVAL', /^options\.onTimeout/],
      [() => s.exec('true', { stdin: 'pipe' }), 'EINVAL', /^options\.stdin/],
      [() => s.exec('true', { env: { 'A-B': 'x' } }), 'EINVAL', /^options\.env/],
      [() => s.exec('true', { encoding: 'latin1' as never }), 'EINVAL', /^options\.encoding/],
      [() => s.exec('true', { cwd: '/nonexistent/finn' }), 'ENOENT', /^options\.cwd/],
      [() => createSession({ pool, cwd: '/nonexistent/finn' }), 'ENOENT', /^options\.cwd/],
      [() => createSession({ pool: {} as never }), 'EINVAL', /^options\.pool/],
    ]
    for (const [call, code, message] of cases) {
      const err = await rejection(call())
      expect([err.code, err.name]).toEqual([code, 'SessionError'])
      expect(err.message).toMatch(message)
    }
    expect((await s.exec('echo still')).stdout).toBe('still\n')
    await s.destroy()
  })

  test('a command-scoped cwd and env do not outlive the command', async () => {
    const s = await session({ env: { KEEP: 'k' } })
    await s.exec('cd /usr')
    const r = await s.exec('pwd; echo "$X $KEEP"; cd /; export Y=1', { cwd: '/bin', env: { X: 'x' } })
    expect(realpathSync(r.stdout.split('\n')[0])).toBe(realpathSync('/bin'))
    expect(r.stdout.split('\n')[1]).toBe('x k')
    expect((await s.exec('pwd; echo "${Y-none}"')).stdout).toBe('/usr\nnone\n')
    expect((await s.exec('echo "${KEEP-none}"', { inheritEnv: false })).stdout).toBe('none\n')
    await s.destroy()
  })
})

describe('containment', () => {
  test('a timeout kills the command and every escapee, and the session keeps its cwd and env', async () => {
    const s = await session()
    const tok = token('timeout')
    await s.exec('cd /usr && export KEPT=yes')
    const shell = s.pid
    const r = await s.exec(`${escapes(tok)}\necho started; bash -c 'exec -a ${tok} sleep 300'`, { timeoutMs: 1000 })
    expect([r.timedOut, r.timedOutBy, r.success, r.stdout, r.sessionRestarted]).toEqual([true, 'wall', false, 'started\n', false])
    expect(r.exitCode).not.toBe(0)
    expect(s.pid).toBe(shell)
    expect(holders(tok)).toEqual([])
    expect((await s.exec('pwd; echo $KEPT')).stdout).toBe('/usr\nyes\n')
    await s.destroy()
  })

  test('an idle timeout ends a command that stops writing; a chatty one runs on', async () => {
    const s = await session()
    const quiet = await s.exec('echo a; sleep 30', { idleTimeoutMs: 300 })
    expect([quiet.timedOut, quiet.timedOutBy, quiet.stdout]).toEqual([true, 'idle', 'a\n'])
    const chatty = await s.exec('for i in 1 2 3 4 5; do echo $i; sleep 0.1; done', { idleTimeoutMs: 2000 })
    expect([chatty.timedOut, chatty.exitCode]).toEqual([false, 0])
    await s.destroy()
  })

  test("a command that is the shell's own loop, or keeps forking, ends by a restored shell", async () => {
    const s = await session()
    await s.exec('export KEPT=yes')
    const loop = await s.exec('while :; do :; done', { timeoutMs: 300 })
    expect([loop.timedOut, loop.sessionRestarted, loop.exitCode]).toEqual([true, true, 137])
    const forks = await s.exec('while :; do sleep 0.01; done', { timeoutMs: 300 })
    expect(forks.timedOut).toBe(true)
    expect((await s.exec('echo $KEPT')).stdout).toBe('yes\n')
    await s.destroy()
  })

  test('a command that kills its shell or tries to kill its reaper takes nothing along', async () => {
    const s = await session()
    const tok = token('kill')
    await s.exec('export KEPT=yes')
    const r = await s.exec(`setsid bash -c 'exec -a ${tok} sleep 300' & kill -9 $$`)
    expect([r.signal, r.sessionRestarted]).toEqual(['SIGKILL', true])
    expect(holders(tok)).toEqual([])
    // $PPID of the shell is its reaper, which a command may kill: the supervisor then kills its
    // orphans (as they come: destroy() does not wait for them), and the session goes on.
    await s.exec(`setsid bash -c 'exec -a ${tok} sleep 300' & kill -9 $PPID; true`)
    await until(() => holders(tok).length === 0, 10_000)
    expect(holders(tok)).toEqual([])
    expect((await s.exec('echo $KEPT')).stdout).toBe('yes\n')
    await s.destroy()
  })

  test('a command that fills the pid limit or floods output is ended by its timeout', async () => {
    const s = await session()
    const tok = token('fill')
    const fill = `for i in $(seq 1 300); do bash -c 'exec -a ${tok} sleep 300' & done; yes`
    const r = await s.exec(fill, { timeoutMs: 2000, maxOutputBytes: 4096 })
    expect([r.timedOut, r.stdoutTruncated]).toEqual([true, true])
    expect(holders(tok)).toEqual([])
    expect((await s.exec('echo alive')).stdout).toBe('alive\n')
    await s.destroy()
  })

  test('destroy() rejects the running and queued calls, kills everything, and is idempotent', async () => {
    const s = await session()
    const tok = token('destroy')
    await s.exec(escapes(tok))
    await until(() => holders(tok).length === 4)
    const running = s.exec(`bash -c 'exec -a ${tok} sleep 300'`)
    const queued = s.exec('echo never')
    const running_ = rejection(running)
    const queued_ = rejection(queued)
    const first = s.destroy()
    expect(s.destroy()).toBe(first)
    await first
    expect(s.destroyed).toBe(true)
    expect((await running_).code).toBe(SessionErrorCode.ESESSIONDESTROYED)
    expect((await queued_).code).toBe(SessionErrorCode.ESESSIONDESTROYED)
    expect((await rejection(s.exec('true'))).code).toBe('ESESSIONDESTROYED')
    expect(holders(tok)).toEqual([])
  })

  test('Symbol.asyncDispose destroys the session', async () => {
    const s = await session()
    const tok = token('dispose')
    await s.exec(escapes(tok))
    await until(() => holders(tok).length === 4)
    await s[Symbol.asyncDispose]()
    expect(s.destroyed).toBe(true)
    expect(holders(tok)).toEqual([])
  })

  test('an abort kills the running command (ABORT_ERR), drops a queued one, and the session goes on', async () => {
    const s = await session()
    const tok = token('abort')
    await s.exec('export KEPT=yes')
    const ac = new AbortController()
    const running = rejection(s.exec(`${escapes(tok)}\nbash -c 'exec -a ${tok} sleep 300'`, { signal: ac.signal }))
    const queued = new AbortController()
    const dropped = rejection(s.exec('echo dropped > /dev/null', { signal: queued.signal }))
    queued.abort()
    expect((await dropped).code).toBe('ABORT_ERR')
    await until(() => holders(tok).length === 5)
    ac.abort()
    expect((await running).code).toBe('ABORT_ERR')
    expect(holders(tok)).toEqual([])
    expect((await s.exec('echo $KEPT')).stdout).toBe('yes\n')
    const pre = new AbortController()
    pre.abort()
    expect((await rejection(s.exec('true', { signal: pre.signal }))).code).toBe('ABORT_ERR')
    await s.destroy()
  })

  test('pool.shutdown() kills the session and later calls reject ESESSIONDESTROYED', async () => {
    const own = new WorkerPool()
    const s = await createSession({ pool: own, cwd: tmpdir() })
    const tok = token('shutdown')
    await s.exec(escapes(tok))
    await until(() => holders(tok).length === 4)
    await own.shutdown()
    expect(holders(tok)).toEqual([])
    expect((await rejection(s.exec('true'))).code).toBe('ESESSIONDESTROYED')
  })

  test("a session outlives its pool's idle time: the pool keeps its supervisor while a session lives", async () => {
    // A pool 10 s without a job lets its worker threads and its supervisor go; a session's shell
    // lives under that supervisor, so the pool must keep it. The wait is the idle time itself.
    const own = new WorkerPool()
    await own.exec({ binaryPath: '/bin/true', args: [], cwd: '/', env: {} })
    const s = await createSession({ pool: own, cwd: tmpdir() })
    await s.exec('export KEPT=yes')
    const shell = s.pid
    await new Promise((r) => setTimeout(r, 11_500))
    const r = await s.exec('echo $KEPT')
    expect([r.stdout, r.sessionRestarted, s.pid]).toEqual(['yes\n', false, shell])
    await s.destroy()
    await own.shutdown()
  })

  test('Node killed by SIGKILL leaves no process of its sessions', async () => {
    const tok = token('sigkill')
    const dir = mkdtempSync(join(tmpdir(), 'finn-sess-kill-'))
    // The commands come through the environment: the child's own command line must not hold
    // the token, or the scan would count Node itself.
    const script = `
      const { createSession } = require(${JSON.stringify(join(root, 'index.js'))})
      createSession().then(async (s) => {
        await s.exec(process.env.ESCAPES)
        require('node:fs').writeFileSync(${JSON.stringify(join(dir, 'ready'))}, String(s.pid))
        await s.exec(process.env.LAST)
      })`
    const env = { ...process.env, ESCAPES: escapes(tok), LAST: `bash -c 'exec -a ${tok} sleep 300'` }
    const child = spawn(process.execPath, ['-e', script], { stdio: 'ignore', env })
    await until(() => readOr(join(dir, 'ready')) !== '' && holders(tok).length === 5, 20_000)
    child.kill('SIGKILL')
    await new Promise((r) => child.once('exit', r))
    // The reaper sees its socket close and kills its tree; the kernel ends them once scheduled.
    await until(() => holders(tok).length === 0, 10_000)
    expect(holders(tok)).toEqual([])
  })
})

describe('Node exiting and garbage collection', () => {
  /** Runs `body` in a fresh Node with `createSession` in scope and the commands in `ESCAPES`/`LAST` (not in argv, where the scan would find Node itself). */
  function child(tok: string, body: string, flags: string[] = []) {
    const script = `const { createSession } = require(${JSON.stringify(join(root, 'index.js'))});\n${body}`
    const env = { ...process.env, ESCAPES: escapes(tok), LAST: `bash -c 'exec -a ${tok} sleep 300'` }
    return run(process.execPath, [...flags, '-e', script], { env, timeout: 20_000 })
  }

  test('process.exit() with a command running leaves no process of the session', async () => {
    const tok = token('exit')
    const { stdout } = await child(
      tok,
      `createSession().then(async (s) => {
        await s.exec(process.env.ESCAPES)
        s.exec(process.env.LAST)
        setTimeout(() => { console.log('exiting'); process.exit(0) }, 300)
      })`,
    )
    expect(stdout).toBe('exiting\n')
    // The exit hook SIGKILLs and waits briefly; the kernel ends each once it is scheduled.
    await until(() => holders(tok).length === 0, 5_000)
    expect(holders(tok)).toEqual([])
  })

  test('a session collected by the garbage collector leaves no process', async () => {
    const tok = token('gc')
    const { stdout } = await child(
      tok,
      `(async () => {
        let s = await createSession()
        await s.exec(process.env.ESCAPES)
        console.log('started')
        s = null
        // Judged while this Node still runs: its exit would end the session anyway.
        const fs = require('node:fs')
        const left = () => fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p) && Number(p) !== process.pid).filter((p) => {
          try { return fs.readFileSync('/proc/' + p + '/cmdline', 'latin1').includes(${JSON.stringify(tok)}) } catch { return false }
        }).length
        for (let i = 0; i < 200 && left() > 0; i++) { global.gc(); await new Promise((r) => setTimeout(r, 50)) }
        console.log('left ' + left())
      })()`,
      ['--expose-gc'],
    )
    expect(stdout).toBe('started\nleft 0\n')
  })
})

describe('isolation', () => {
  test('a session with isolation writes only in its cwd, through restarts and timeouts', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'finn-sess-iso-'))
    const outside = mkdtempSync(join(tmpdir(), 'finn-sess-out-'))
    const s = await session({ cwd, isolation: { mode: 'auto' } })
    const write = (where: string) => `echo x > ${where}/f && echo wrote || echo refused`
    expect((await s.exec(write(cwd))).stdout).toBe('wrote\n')
    expect((await s.exec(write(outside))).stdout).toBe('refused\n')
    await s.exec('export KEPT=yes')
    expect((await s.exec('exit 4')).sessionRestarted).toBe(true)
    expect((await s.exec(`${write(outside)}; echo $KEPT`)).stdout).toBe('refused\nyes\n')
    const t = await s.exec('sleep 30', { timeoutMs: 300 })
    expect([t.timedOut, t.sessionRestarted]).toEqual([true, false])
    expect((await s.exec(write(outside))).stdout).toBe('refused\n')
    await s.destroy()
  })
})

describe('isolation by bwrap', () => {
  // bwrap is the job's leader and the shell its child: a timeout ends the shell too, and the
  // session comes back restored.
  test.skipIf(!probeIsolation().bwrap)('a bwrap session restores its state after a timeout', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'finn-sess-bwrap-'))
    const s = await session({ cwd, isolation: { mode: 'bwrap' } })
    await s.exec('export KEPT=yes')
    const t = await s.exec('sleep 30', { timeoutMs: 300 })
    expect([t.timedOut, t.sessionRestarted]).toEqual([true, true])
    expect((await s.exec('echo $KEPT; pwd')).stdout).toBe(`yes\n${cwd}\n`)
    await s.destroy()
  })
})

describe('unprivileged', () => {
  // The same session as the user CI runs the suite as (nobody), when this run is root.
  test.skipIf(process.getuid?.() !== 0)('runs as nobody through setpriv', async () => {
    // Outside the run's private temporary directory, which nobody cannot enter.
    const script = join('/tmp', `finn-sess-nobody-${process.pid}.js`)
    writeFileSync(
      script,
      `const { createSession } = require(${JSON.stringify(join(root, 'index.js'))})
      createSession({ cwd: '/tmp' }).then(async (s) => {
        const a = await s.exec('id -u; cd /; export X=1')
        const b = await s.exec('sleep 30', { timeoutMs: 300 })
        const c = await s.exec('pwd; echo $X')
        console.log(JSON.stringify([a.stdout, b.timedOut, c.stdout]))
        await s.destroy()
      })`,
    )
    const { stdout } = await run('setpriv', ['--reuid=nobody', '--regid=nogroup', '--clear-groups', process.execPath, script], { timeout: 20_000 })
    rmSync(script)
    expect(JSON.parse(stdout)).toEqual(['65534\n', true, '/\n1\n'])
  })
})

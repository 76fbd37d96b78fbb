// Attacks on a session from the commands it runs, and from the end of the thread that owns it.
// Survival is judged by a /proc scan for a token each test puts in its processes' command lines.
import { existsSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { afterAll, describe, expect, test } from 'vitest'
import { createSession, WorkerPool } from '../index.js'
import { holders, until } from './helpers.js'

const root = join(import.meta.dirname, '..')
const pool = new WorkerPool()
afterAll(() => pool.shutdown())

let tokens = 0
const token = (name: string) => `finn-sess-atk-${name}-${process.pid}-${++tokens}`

// The done descriptor is a fifo the shell keeps open while a command runs (its name in the
// session's directory was `$__finn_sess_dir/done`): a command can write to it, by name before
// the name was removed, through `/proc/$$/fd` still.
/** Sets `$d` to the shell's done fifo, as `/proc/$$/fd/<n>`. */
const FIND_DONE = 'for f in /proc/$$/fd/*; do case $(readlink "$f") in */done|*"/done (deleted)") d=$f;; esac; done; '

describe('the done fifo written by a command', () => {
  test('a garbled record kills the command at once, and the session goes on with its state', async () => {
    const s = await createSession({ pool, cwd: tmpdir() })
    await s.exec('cd / && export KEPT=1')
    const tok = token('garbled')
    // Before the fix: the exec rejected, the sleep outlived its timeout, and every later exec
    // rejected with the same parse error (the garbage stayed in the reader).
    const r = await s.exec(
      `${FIND_DONE}printf 'garbage\\n\\0\\0\\0\\0\\0\\0' > "$d"; bash -c 'exec -a ${tok} sleep 300'`,
      { timeoutMs: 1000 },
    )
    expect([r.exitCode, r.signal, r.sessionRestarted]).toEqual([null, 'SIGKILL', true])
    expect(holders(tok)).toEqual([])
    const next = await s.exec('echo "$PWD $KEPT"', { timeoutMs: 5000 })
    expect([next.stdout, next.exitCode]).toEqual(['/ 1\n', 0])
    await s.destroy()
  })

  test('a DEBUG trap carried into the session\'s code (set -T) garbles the record: restored, not wedged', async () => {
    // The trap's output goes where the session's code writes: into the record. Before the fix
    // that exec and every later one rejected with the parse error.
    const s = await createSession({ pool, cwd: tmpdir() })
    await s.exec('cd / && export KEPT=1')
    const r = await s.exec("set -T; trap 'echo x' DEBUG", { timeoutMs: 5000 })
    expect([r.signal, r.sessionRestarted]).toEqual(['SIGKILL', true])
    const next = await s.exec('echo "$PWD $KEPT"; false', { timeoutMs: 5000 })
    expect([next.stdout, next.exitCode]).toEqual(['/ 1\n', 1])
    await s.destroy()
  })

  test("bytes without end on the done fifo neither grow Node's memory nor outlast the command", async () => {
    const s = await createSession({ pool, cwd: tmpdir() })
    const before = process.memoryUsage().rss
    // A valid header for this command (its seq is in its stdout fifo's name), then 400 MB with
    // no NUL. Before the fix the reader kept it all (and rescanned it at every read).
    const r = await s.exec(
      `${FIND_DONE}o=$(readlink /proc/$$/fd/1); { printf "%s 0\\n" "\${o##*.}"; head -c 400000000 /dev/zero | tr "\\0" a; } > "$d"; echo after`,
      { timeoutMs: 60_000 },
    )
    expect(process.memoryUsage().rss - before).toBeLessThan(300 << 20)
    expect([r.timedOut, r.signal, r.sessionRestarted]).toEqual([false, 'SIGKILL', true])
    // A header that never ends is refused as soon as it cannot be one.
    const t = Date.now()
    const g = await s.exec(`${FIND_DONE}head -c 100000000 /dev/zero | tr '\\0' a > "$d"`, { timeoutMs: 60_000 })
    expect([g.timedOut, g.signal]).toEqual([false, 'SIGKILL'])
    expect(Date.now() - t).toBeLessThan(10_000)
    expect((await s.exec('echo ok')).stdout).toBe('ok\n')
    await s.destroy()
  }, 60_000)
})

// The commands' fifos are made by name in the session's directory, which the shell (the
// session's user) can write: before the fix, a name taken or the directory gone failed every
// later exec of the session (EEXIST, ENOENT) while it lived.
describe("the session's own code subverted by a command", () => {
  test('set -t (onecmd) does not make later commands report success without running', async () => {
    // With -t the shell exited after the request line, was restored with -t again, and exited
    // again before each later command: a host's `echo checking; false` came back exit 0 with
    // no output, and nothing had run.
    const s = await createSession({ pool, cwd: tmpdir() })
    await s.exec('set -t')
    for (const attempt of [1, 2]) {
      const r = await s.exec('echo checking; false', { timeoutMs: 5000 })
      expect([attempt, r.stdout, r.exitCode]).toEqual([attempt, 'checking\n', 1])
    }
    await s.exec('set -o onecmd; cd /')
    expect((await s.exec('exit 3')).sessionRestarted).toBe(true)
    const r = await s.exec('pwd; (exit 7)', { timeoutMs: 5000 })
    expect([r.stdout, r.exitCode]).toEqual(['/\n', 7])
    await s.destroy()
  })

  test('a readonly LC_ALL or IFS (what pre assigns) in posix mode does not stop every later command', async () => {
    // pre's `LC_ALL=C IFS= read` failed on the readonly variable, in posix mode the request
    // line was abandoned, and every later command timed out; the restore brought the readonly
    // variable back, so no restart ended it.
    for (const attack of ['set -o posix; readonly LC_ALL', 'set -o posix; declare -rx IFS=" "']) {
      const s = await createSession({ pool, cwd: tmpdir() })
      await s.exec(`cd / && ${attack}`)
      for (const c of ['echo one', 'exit 4', 'echo two']) {
        const r = await s.exec(c, { timeoutMs: 3000 })
        expect([attack, c, r.timedOut]).toEqual([attack, c, false])
      }
      const r = await s.exec('echo "$PWD"; shopt -o posix', { timeoutMs: 3000 })
      expect(r.stdout).toMatch(/^\/\nposix\s+on\n$/)
      await s.destroy()
    }
  })

  test('a shell ended by an earlier background job just before it reads a command: the command runs', async () => {
    // The next command's stdout fifo appears before its request is sent; a job of an earlier
    // command that kills the shell then (its trap exits 0) made the driver report the shell's
    // exit status 0 as the result of a command that never ran (6 of 10 tries).
    for (let i = 0; i < 10; i++) {
      const s = await createSession({ pool, cwd: tmpdir() })
      await s.exec(
        `trap 'exit 0' USR1; o=$(readlink /proc/$$/fd/1); n=$(( \${o##*.} + 1 )); sh=$$; d=$__finn_sess_dir; (while [ ! -p "$d/o.$n" ]; do :; done; kill -USR1 $sh) >/dev/null 2>&1 &`,
      )
      const r = await s.exec('echo ran; false', { timeoutMs: 5000 })
      expect([i, r.stdout === '' && r.exitCode === 0]).toEqual([i, false])
      expect(r.stdout).toBe('ran\n')
      await s.destroy()
    }
  })
})

describe('output faster than onStdout takes it', () => {
  /** A callback that holds Node's thread for `ms` per chunk. */
  const slow = (ms: number) => () => {
    const until = Date.now() + ms
    while (Date.now() < until);
  }
  const within = <T,>(p: Promise<T>, ms: number) =>
    Promise.race([p, new Promise<string>((resolve) => setTimeout(() => resolve('still running'), ms))])

  test('does not keep a command past its timeout, nor a finished one from ending', async () => {
    // The driver read a fifo until it was empty before it looked at the deadline again: with
    // `yes` writing faster than the callback took chunks, it never was, and the command ran
    // past its 1 s timeout for good. A background writer held a finished command the same way.
    const s = await createSession({ pool, cwd: tmpdir() })
    const tok = token('yes')
    const r = await within(s.exec(`bash -c 'exec -a ${tok} yes'`, { timeoutMs: 1000, onStdout: slow(50) }), 15_000)
    expect(typeof r === 'string' ? r : [r.timedOut, r.timedOutBy]).toEqual([true, 'wall'])
    expect(holders(tok)).toEqual([])
    const bg = await within(s.exec(`bash -c 'exec -a ${tok} yes' & sleep 0.2`, { timeoutMs: 20_000, onStdout: slow(50) }), 15_000)
    expect(typeof bg === 'string' ? bg : [bg.timedOut, bg.exitCode]).toEqual([false, 0])
    await s.destroy()
    expect(holders(tok)).toEqual([])
  }, 40_000)
})

describe('another session of the same user', () => {
  test("cannot write code into a session's script fifo by name", async () => {
    // The script fifo kept its name in the session's directory: a command of any session (or
    // pool job) of the same user wrote a line there, and the other session's shell ran it as
    // its own code, its environment in reach (an attack read its secret).
    const victim = await createSession({ pool, cwd: tmpdir(), env: { SECRET: 'victim-secret' } })
    const attacker = await createSession({ pool, cwd: tmpdir() })
    const dir = (await victim.exec('echo "$__finn_sess_dir"')).stdout.trim()
    const mark = join(dir, 'stolen')
    await attacker.exec(`printf 'echo "$SECRET" > ${mark}\\n' > ${dir}/script & sleep 0.3; kill %1 2>/dev/null`, { timeoutMs: 5000 })
    await victim.exec('true', { timeoutMs: 5000 })
    expect(existsSync(mark) ? readFileSync(mark, 'utf8') : 'nothing').toBe('nothing')
    expect((await victim.exec('echo ok', { timeoutMs: 5000 })).stdout).toBe('ok\n')
    await victim.destroy()
    await attacker.destroy()
  })
})

describe('the fifo directory changed by a command', () => {
  test.each([
    ['names taken ahead', 'touch "$__finn_sess_dir"/{o,e}.{1..40}; mkdir "$__finn_sess_dir"/o.5'],
    ['the directory removed', 'rm -rf "$__finn_sess_dir"'],
    ['the directory a symlink', 'd=$__finn_sess_dir; rm -rf "$d"; ln -s / "$d"'],
    ['the directory closed', 'chmod 0 "$__finn_sess_dir"'],
  ])('%s: the next commands run, and a restart too', async (_, attack) => {
    const s = await createSession({ pool, cwd: tmpdir() })
    await s.exec(`cd / && ${attack}`)
    for (const c of ['echo one', 'echo two']) {
      expect((await s.exec(c, { timeoutMs: 5000 })).stdout).toBe(`${c.slice(5)}\n`)
    }
    expect((await s.exec('exit 4')).sessionRestarted).toBe(true)
    expect((await s.exec('pwd', { timeoutMs: 5000 })).stdout).toBe('/\n')
    await s.destroy()
  })
})

describe('a background process', () => {
  test("output in tiny chunks neither blocks Node's event loop nor breaks its log's sequence", async () => {
    // The ring dropped its oldest event with Array.shift(), which copies the whole array once it
    // is large: a process writing a byte at a time (dd bs=1) filled the default 8 MiB ring with
    // 350,000 events, and Node's timers stopped firing for 42 s. Here the same ring is fed
    // events as the addon delivers them, at a rate no pipe need reach, and timed.
    const s = await createSession({ pool, cwd: tmpdir() })
    const p = await s.startProcess('dd if=/dev/zero bs=1 count=2000000 status=none', { maxLogBytes: 1 << 20 })
    expect((await p.waitForExit()).exitCode).toBe(0)
    let prev = -1
    for await (const e of p.streamLogs({ since: 0 })) {
      if (prev >= 0) expect(e.seq).toBe(prev + 1)
      prev = e.seq
    }
    const logs = await p.getLogs()
    expect([logs.truncated, logs.stdout.length <= 1 << 20]).toEqual([true, true])

    const q = await s.startProcess('sleep 30')
    const deliver = (q.constructor as unknown as { deliver(p: unknown, e: unknown): void }).deliver
    const chunk = Buffer.alloc(24, 'x')
    // The default 8 MiB ring full of 24-byte events (350,000 of them), then 50,000 more.
    for (let i = 0; i < 350_000; i++) deliver(q, { kind: 'stdout', data: chunk })
    const t = Date.now()
    for (let i = 0; i < 50_000; i++) deliver(q, { kind: 'stdout', data: chunk })
    expect(Date.now() - t).toBeLessThan(2_500)
    const events = []
    for await (const e of q.streamLogs({ since: 390_000 })) {
      events.push(e.seq)
      if (events.length === 3) break
    }
    expect(events).toEqual([390_000, 390_001, 390_002])
    expect((await q.getLogs()).stdout.length).toBeLessThanOrEqual(8 << 20)

    // Events of a byte each: the ring's count of events is bounded too (an object and a Buffer
    // each; by bytes alone 8 million of them, about 2 GB of Node's memory, fitted in 8 MiB).
    const b = await s.startProcess('sleep 30')
    const one = Buffer.from('x')
    for (let i = 0; i < 300_000; i++) deliver(b, { kind: 'stdout', data: one })
    let kept = 0
    for await (const e of b.streamLogs({ since: 0 })) {
      if (e.type === 'truncated') continue
      kept++
      if (e.seq === 299_999) break
    }
    expect(kept).toBeLessThanOrEqual((8 << 20) / 64)
    expect((await b.getLogs()).truncated).toBe(true)
    await s.destroy()
  }, 60_000)
})

describe('a background process log read from past its end', () => {
  test('streamLogs({ since }) after the exit event ends, for an ended process and at a later exit', async () => {
    // A reader resuming after the last event it saw (the exit's seq + 1) waited for ever.
    const s = await createSession({ pool, cwd: tmpdir() })
    const p = await s.startProcess('echo a; echo b >&2')
    await p.waitForExit()
    const read = async (since: number) => {
      const seqs: number[] = []
      for await (const e of p.streamLogs({ since })) seqs.push(e.seq)
      return seqs
    }
    const hung = new Promise((resolve) => setTimeout(() => resolve('hung'), 3000))
    expect(await Promise.race([read(3), hung])).toEqual([])
    expect(await read(2)).toEqual([2])
    const q = await s.startProcess('sleep 0.3; echo late')
    const later: number[] = []
    const reading = (async () => {
      for await (const e of q.streamLogs({ since: 100 })) later.push(e.seq)
      return 'ended'
    })()
    expect(await Promise.race([reading, new Promise((resolve) => setTimeout(() => resolve('hung'), 5000))])).toBe('ended')
    expect(later).toEqual([])
    await s.destroy()
  })
})

describe('waitForLog on a long line', () => {
  test("a 40 MB line without a newline does not hold Node's event loop", async () => {
    // Each chunk was added to the unfinished line and the whole of it split again: quadratic,
    // a 20 MB line held Node's timers for 5 s.
    const s = await createSession({ pool, cwd: tmpdir() })
    const p = await s.startProcess("head -c 40000000 /dev/zero | tr '\\0' a; echo; echo READY")
    const t = Date.now()
    expect((await p.waitForLog('READY', { timeoutMs: 60_000 })).line).toBe('READY')
    expect(Date.now() - t).toBeLessThan(5_000)
    await s.destroy()
  }, 90_000)
})

describe("the end of the session's thread", () => {
  test('a worker thread ended by terminate(), Node living on: no process of its session survives', async () => {
    // terminate() emits no 'exit' in the thread, and the session's thread ended only between
    // commands: a running `sleep 300` (no timeout) lived on with Node.
    const tok = token('worker')
    const body = `
      const { createSession } = require(${JSON.stringify(join(root, 'index.js'))})
      const { parentPort } = require('node:worker_threads')
      ;(async () => {
        const s = await createSession({ cwd: ${JSON.stringify(tmpdir())} })
        await s.exec("(bash -c 'exec -a ${tok} sleep 300' &); setsid bash -c 'exec -a ${tok} sleep 300' &")
        s.exec("bash -c 'exec -a ${tok} sleep 300'")
        s.exec('echo queued')
        parentPort.postMessage('ready')
      })()`
    const worker = new Worker(body, { eval: true })
    const ready = new Promise((resolve) => worker.once('message', resolve))
    const exited = new Promise<void>((resolve) => worker.on('exit', () => resolve()))
    await ready
    await until(() => holders(tok).length === 3, 10_000)
    await worker.terminate()
    await exited
    await until(() => holders(tok).length === 0, 5_000).catch(() => {})
    expect(holders(tok)).toEqual([])
  })
})

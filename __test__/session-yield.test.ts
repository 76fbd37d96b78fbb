// A session command that runs on after its exec is answered: `yieldMs` (the exec resolves with
// the output so far and a `Process` to follow the rest), `onTimeout: "background"` (a timeout
// hands the command on instead of killing it, under `backgroundTimeoutMs`) and `stdin: "pipe"`
// (the handle writes to it). Survival is judged by a /proc scan for a token in command lines;
// every wait is on a real event (a file the test writes, the process's exit), never a sleep.
import { execFile, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, expect, test } from 'vitest'
import { createSession, type Process, type Session, SessionError, WorkerPool } from '../index.js'
import { alive, holders, until } from './helpers.js'

const run = promisify(execFile)
const root = join(import.meta.dirname, '..')
const pool = new WorkerPool()
afterAll(() => pool.shutdown())
// Readable by any user: the suite also runs as nobody.
const dir = realpathSync(mkdtempSync(join(tmpdir(), 'finn-sess-yield-')))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

let tokens = 0
const token = (name: string) => `finn-sessyield-${name}-${process.pid}-${++tokens}`

/** A file the test creates to let a command go on: `wait_for <name>` in the command. */
const gate = (name: string) => join(dir, `${name}-${++tokens}`)
const waitFor = (path: string) => `while [ ! -e ${path} ]; do sleep 0.01; done`

/** A tree of `tok`-carrying sleeps: a child, a double fork, a `setsid` escapee. */
const tree = (tok: string) =>
  [
    `bash -c 'exec -a ${tok} sleep 300' &`,
    `(bash -c 'exec -a ${tok} sleep 300' &)`,
    `setsid bash -c 'exec -a ${tok} sleep 300' &`,
  ].join('\n')

async function logOf(p: Process): Promise<{ stdout: string; stderr: string; exit: unknown[] }> {
  let stdout = ''
  let stderr = ''
  const exit: unknown[] = []
  for await (const e of p.streamLogs()) {
    if (e.type === 'stdout') stdout += e.data.toString()
    else if (e.type === 'stderr') stderr += e.data.toString()
    else if (e.type === 'exit') exit.push(e.exitCode, e.signal)
    else throw new Error(`unexpected ${e.type}`)
  }
  return { stdout, stderr, exit }
}

async function withSession(body: (s: Session) => Promise<void>, p: WorkerPool = pool): Promise<void> {
  const s = await createSession({ pool: p, cwd: dir })
  try {
    await body(s)
  } finally {
    await s.destroy()
  }
}

test("yieldMs: the result's output plus the handle's log is the whole output, no gap, no duplicate", async () => {
  await withSession(async (s) => {
    const go = gate('counter')
    const chunks: Buffer[] = []
    // Writes a counter to both streams without pause, across the yield, until the test lets it end.
    const r = await s.exec(`i=0; while [ ! -e ${go} ]; do echo $i; echo e$i >&2; i=$((i+1)); done; echo end; exit 7`, {
      yieldMs: 50,
      onStdout: (c) => chunks.push(c),
    })
    expect([r.exitCode, r.signal, r.success, r.timedOut]).toEqual([null, null, false, false])
    const p = r.process!
    expect(p).toBeDefined()
    expect(p.status).toBe('running')
    expect(s.listProcesses()).toContain(p)
    expect(s.getProcess(p.id)).toBe(p)
    await p.waitForLog(/^[0-9]+$/)
    writeFileSync(go, '')
    const log = await logOf(p)
    expect(log.exit).toEqual([7, null])
    const out = (r.stdout as string) + log.stdout
    const err = (r.stderr as string) + log.stderr
    const lines = out.split('\n')
    expect(lines.slice(-2)).toEqual(['end', ''])
    const n = lines.length - 2
    expect(n).toBeGreaterThan(0)
    expect(lines.slice(0, -2)).toEqual(Array.from({ length: n }, (_, i) => String(i)))
    const errs = err.split('\n').slice(0, -1)
    expect(errs).toEqual(Array.from({ length: errs.length }, (_, i) => `e${i}`))
    expect(errs.length === n || errs.length === n + 1 || errs.length === n - 1).toBe(true)
    expect([p.status, p.exitCode]).toEqual(['failed', 7])
    // onStdout goes on after the yield: it saw the whole stream, once.
    expect(Buffer.concat(chunks).toString()).toBe(out)
  })
})

test('a command that ends within yieldMs is an ordinary result, with no process', async () => {
  await withSession(async (s) => {
    const r = await s.exec('echo quick; exit 3', { yieldMs: 60_000 })
    expect([r.stdout, r.exitCode, r.process]).toEqual(['quick\n', 3, undefined])
    expect(s.listProcesses()).toEqual([])
  })
})

test('after a yield the session goes on at once, from its state before that command', async () => {
  await withSession(async (s) => {
    await s.exec(`export BEFORE=kept; cd ${dir}`)
    const go = gate('state')
    const r = await s.exec(`cd /; export DURING=yielded; BEFORE=changed; ${waitFor(go)}; echo "$PWD $DURING $BEFORE"`, { yieldMs: 30 })
    const p = r.process!
    expect(p.status).toBe('running')
    // The session is free while the yielded command waits, and has its state from before it.
    const next = await s.exec('echo "$PWD|${DURING-unset}|$BEFORE"')
    expect([next.stdout, next.sessionRestarted, p.status]).toEqual([`${dir}|unset|kept\n`, false, 'running'])
    // It runs in a shell of its own now; the session has a fresh one.
    expect(s.pid).toBeGreaterThan(0)
    expect(s.pid).not.toBe(p.pid)
    await s.exec('export AFTER=1')
    writeFileSync(go, '')
    expect(await p.waitForExit()).toEqual({ exitCode: 0, signal: null, timedOut: false })
    // What the yielded command changed stays with it.
    expect((await p.getLogs()).stdout).toBe('/ yielded changed\n')
    expect((await s.exec('echo "$PWD|${DURING-unset}|$BEFORE|$AFTER"')).stdout).toBe(`${dir}|unset|kept|1\n`)
  })
})

test("a yielded command keeps its timeoutMs: its whole tree dies at it, escapees included", async () => {
  await withSession(async (s) => {
    const tok = token('wall')
    const r = await s.exec(`${tree(tok)}\nexec -a ${tok} sleep 300`, { yieldMs: 20, timeoutMs: 400 })
    const p = r.process!
    await until(() => holders(tok).length === 4)
    expect(await p.waitForExit()).toMatchObject({ timedOut: true, exitCode: null })
    expect(p.status).toBe('killed')
    expect(holders(tok)).toEqual([])
  })
})

test('a yielded command keeps its idleTimeoutMs', async () => {
  await withSession(async (s) => {
    const tok = token('idle')
    const r = await s.exec(`echo started; ${tree(tok)}\nexec -a ${tok} sleep 300`, { yieldMs: 20, idleTimeoutMs: 300 })
    const p = r.process!
    expect(await p.waitForExit()).toMatchObject({ timedOut: true })
    expect(holders(tok)).toEqual([])
  })
})

test("the exec's signal still kills a yielded command, whole tree", async () => {
  await withSession(async (s) => {
    const tok = token('abort')
    const ac = new AbortController()
    const r = await s.exec(`${tree(tok)}\nexec -a ${tok} sleep 300`, { yieldMs: 20, signal: ac.signal })
    const p = r.process!
    await until(() => holders(tok).length === 4)
    ac.abort()
    const exit = await p.waitForExit()
    expect([exit.timedOut, p.status]).toEqual([false, 'killed'])
    expect(holders(tok)).toEqual([])
    expect((await s.exec('echo alive')).stdout).toBe('alive\n')
  })
})

test("kill() of a yielded command resolves only once nothing of it is left (a stop that leaves it running)", async () => {
  await withSession(async (s) => {
    const tok = token('kill')
    // It ignores SIGTERM: the kill must escalate.
    const r = await s.exec(`trap '' TERM; ${tree(tok)}\nexec -a ${tok} sleep 300`, { yieldMs: 20 })
    const p = r.process!
    await until(() => holders(tok).length === 4)
    await p.kill('SIGTERM', { graceMs: 100 })
    expect(holders(tok)).toEqual([])
    expect(p.status).toBe('killed')
  })
})

test('a yielded command that floods its output while nobody follows it keeps a bounded log, and the session goes on', async () => {
  await withSession(async (s) => {
    const go = gate('flood')
    // 64 MiB after the yield, with nobody reading the log: the ring keeps the newest 8 MiB.
    const r = await s.exec(`${waitFor(go)}; head -c 67108864 /dev/zero | tr '\\0' x; echo; echo tail`, { yieldMs: 20 })
    const p = r.process!
    writeFileSync(go, '')
    expect((await s.exec('echo free')).stdout).toBe('free\n')
    expect(await p.waitForExit()).toEqual({ exitCode: 0, signal: null, timedOut: false })
    const logs = await p.getLogs()
    expect(logs.truncated).toBe(true)
    expect(logs.stdout.length).toBeLessThanOrEqual(8 * 1024 * 1024 + 64 * 1024)
    expect(logs.stdout.endsWith('x\ntail\n')).toBe(true)
  })
})

test('a yielded command that kills its own shell takes nothing else along', async () => {
  await withSession(async (s) => {
    const tok = token('own-shell')
    const go = gate('own-shell')
    await s.exec('export KEPT=yes')
    const r = await s.exec(`${tree(tok)}\n${waitFor(go)}; kill -9 $$`, { yieldMs: 20 })
    const p = r.process!
    await until(() => holders(tok).length === 3)
    writeFileSync(go, '')
    expect(await p.waitForExit()).toEqual({ exitCode: null, signal: 'SIGKILL', timedOut: false })
    // Its shell's end is the command's: what it left running dies with it.
    expect(holders(tok)).toEqual([])
    const next = await s.exec('echo $KEPT')
    expect([next.stdout, next.sessionRestarted]).toEqual(['yes\n', false])
  })
})

test('yielded commands that end leave no zombie behind', async () => {
  await withSession(async (s) => {
    for (let i = 0; i < 12; i++) {
      const go = gate('zombie')
      const r = await s.exec(`(sleep 0.01 &); ${waitFor(go)}; echo $BASHPID`, { yieldMs: 10 })
      writeFileSync(go, '')
      await r.process!.waitForExit()
      // The shell that ran it went with it.
      expect(alive(r.process!.pid)).toBe(false)
    }
    expect(zombiesBelow(process.pid)).toEqual([])
    expect(s.listProcesses().every((p) => p.status === 'completed')).toBe(true)
  })
})

/** Processes in state Z among the descendants of `pid`. */
function zombiesBelow(pid: number): number[] {
  const procs = new Map<number, { ppid: number; state: string }>()
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'latin1')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      procs.set(Number(name), { state: fields[0], ppid: Number(fields[1]) })
    } catch {}
  }
  const below = new Set([pid])
  let grew = true
  while (grew) {
    grew = false
    for (const [p, info] of procs) {
      if (!below.has(p) && below.has(info.ppid)) {
        below.add(p)
        grew = true
      }
    }
  }
  return [...below].filter((p) => procs.get(p)?.state === 'Z')
}

test('onTimeout "background": the timeout hands the command on, the session is free, backgroundTimeoutMs kills the whole tree', async () => {
  await withSession(async (s) => {
    const tok = token('bg')
    const r = await s.exec(`echo before; ${tree(tok)}\nexec -a ${tok} sleep 300`, { timeoutMs: 200, onTimeout: 'background', backgroundTimeoutMs: 600 })
    expect([r.timedOut, r.timedOutBy, r.exitCode, r.success, r.stdout]).toEqual([true, 'wall', null, false, 'before\n'])
    const p = r.process!
    expect(p.status).toBe('running')
    expect(holders(tok).length).toBe(4)
    expect((await s.exec('echo free')).stdout).toBe('free\n')
    expect(await p.waitForExit()).toMatchObject({ timedOut: true, exitCode: null })
    expect(holders(tok)).toEqual([])
  })
})

test('a yielded command whose timeout then fires with onTimeout "background" runs on to its hard deadline', async () => {
  await withSession(async (s) => {
    const tok = token('yield-bg')
    const r = await s.exec(`${tree(tok)}\nexec -a ${tok} sleep 300`, { yieldMs: 20, timeoutMs: 100, onTimeout: 'background', backgroundTimeoutMs: 300 })
    expect([r.timedOut, r.exitCode]).toEqual([false, null])
    const p = r.process!
    await until(() => holders(tok).length === 4)
    expect(await p.waitForExit()).toMatchObject({ timedOut: true, exitCode: null })
    expect(holders(tok)).toEqual([])
  })
})

test('onTimeout "background" with an idle timeout says so; a command that ends in the background keeps its status', async () => {
  await withSession(async (s) => {
    const go = gate('bg-idle')
    const r = await s.exec(`${waitFor(go)}; echo done; exit 5`, { idleTimeoutMs: 100, onTimeout: 'background' })
    expect([r.timedOut, r.timedOutBy, r.exitCode]).toEqual([true, 'idle', null])
    writeFileSync(go, '')
    expect(await r.process!.waitForExit()).toEqual({ exitCode: 5, signal: null, timedOut: false })
    expect((await r.process!.getLogs()).stdout).toBe('done\n')
  })
})

test('stdin "pipe": the handle writes to a yielded command and closeStdin gives it EOF', async () => {
  await withSession(async (s) => {
    const r = await s.exec('while read -r line; do echo "got $line"; done; echo eof', { yieldMs: 20, stdin: 'pipe' })
    const p = r.process!
    await p.writeStdin('one\n')
    await p.waitForLog('got one')
    await p.writeStdin(Buffer.from('two\n'))
    await p.closeStdin()
    expect(await p.waitForExit()).toEqual({ exitCode: 0, signal: null, timedOut: false })
    expect((r.stdout as string) + (await p.getLogs()).stdout).toBe('got one\ngot two\neof\n')
    const late = await p.writeStdin('x').catch((e: unknown) => e)
    expect((late as SessionError).code).toBe('EPROCESSEXITED')
    // Without "pipe" the handle has no stdin.
    const q = (await s.exec(`${waitFor(gate('never'))}`, { yieldMs: 10 })).process!
    expect(((await q.writeStdin('x').catch((e: unknown) => e)) as SessionError).code).toBe('EINVAL')
    await q.kill('SIGKILL')
  })
})

test('stdin "pipe" closed by the handle before the shell has opened it still gives EOF', async () => {
  await withSession(async (s) => {
    // 1 MiB of command text: the yield comes while the shell still reads it, before its
    // redirection has opened the command's stdin.
    const r = await s.exec(`cat; echo eof # ${'x'.repeat(1 << 20)}`, { yieldMs: 1, stdin: 'pipe' })
    const p = r.process!
    await p.closeStdin()
    expect(await p.waitForExit({ timeoutMs: 10_000 })).toEqual({ exitCode: 0, signal: null, timedOut: false })
    expect((r.stdout as string) + (await p.getLogs()).stdout).toBe('eof\n')
  })
})

test('stdin "pipe" with a command that ends before the yield: EOF at its end; alone it is refused', async () => {
  await withSession(async (s) => {
    const r = await s.exec('echo fast', { yieldMs: 60_000, stdin: 'pipe' })
    expect([r.stdout, r.exitCode, r.process]).toEqual(['fast\n', 0, undefined])
    const err = await s.exec('cat', { stdin: 'pipe' }).catch((e: unknown) => e)
    expect([(err as SessionError).code, (err as SessionError).message]).toEqual(['EINVAL', expect.stringMatching(/^options\.stdin/)])
    const bg = await s.exec('cat', { stdin: 'pipe', onTimeout: 'background' }).catch((e: unknown) => e)
    expect((bg as SessionError).code).toBe('EINVAL')
  })
})

test('bad yield and background options are refused naming the option', async () => {
  await withSession(async (s) => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ yieldMs: 0 }, /^options\.yieldMs/],
      [{ yieldMs: 1.5 }, /^options\.yieldMs/],
      [{ onTimeout: 'later' }, /^options\.onTimeout/],
      [{ backgroundTimeoutMs: 10 }, /^options\.backgroundTimeoutMs/],
      [{ onTimeout: 'background', backgroundTimeoutMs: -1 }, /^options\.backgroundTimeoutMs/],
    ]
    for (const [options, message] of cases) {
      const err = await s.exec('true', options as never).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(SessionError)
      expect([(err as SessionError).code, (err as SessionError).message]).toEqual(['EINVAL', expect.stringMatching(message)])
    }
  })
})

test('destroy() kills yielded and backgrounded commands, whole trees', async () => {
  const tok = token('destroy')
  const s = await createSession({ pool, cwd: dir })
  const a = await s.exec(`${tree(tok)}\nexec -a ${tok} sleep 300`, { yieldMs: 20 })
  const b = await s.exec(`${tree(tok)}\nexec -a ${tok} sleep 300`, { timeoutMs: 100, onTimeout: 'background' })
  await until(() => holders(tok).length === 8)
  await s.destroy()
  expect(holders(tok)).toEqual([])
  expect([a.process!.status, b.process!.status]).toEqual(['killed', 'killed'])
})

test('pool.shutdown() kills yielded commands', async () => {
  const own = new WorkerPool()
  const tok = token('shutdown')
  const s = await createSession({ pool: own, cwd: dir })
  const r = await s.exec(`${tree(tok)}\nexec -a ${tok} sleep 300`, { yieldMs: 20 })
  await until(() => holders(tok).length === 4)
  await own.shutdown()
  await r.process!.waitForExit()
  expect(holders(tok)).toEqual([])
})

test('Node killed by SIGKILL, or exiting, leaves no process of a yielded command', async () => {
  for (const end of ['kill', 'exit']) {
    const tok = token(`node-${end}`)
    const ready = join(dir, `ready-${end}-${tokens}`)
    // The command comes through the environment: the child's own argv must not hold the token.
    const script = `
      const { createSession } = require(${JSON.stringify(join(root, 'index.js'))})
      createSession().then(async (s) => {
        await s.exec(process.env.TREE, { yieldMs: 20 })
        await s.exec(process.env.TREE, { timeoutMs: 50, onTimeout: 'background' })
        const fs = require('node:fs')
        fs.writeFileSync(${JSON.stringify(ready)}, 'x')
        ${end === 'exit' ? `setInterval(() => fs.existsSync(${JSON.stringify(ready + '-go')}) && process.exit(0), 10)` : ''}
      })`
    const env = { ...process.env, TREE: `${tree(tok)}\nexec -a ${tok} sleep 300` }
    const child = spawn(process.execPath, ['-e', script], { stdio: 'ignore', env })
    const exited = new Promise((r) => child.once('exit', r))
    await until(() => existsSync(ready) && holders(tok).length === 8, 20_000)
    if (end === 'kill') child.kill('SIGKILL')
    else writeFileSync(`${ready}-go`, '')
    await exited
    await until(() => holders(tok).length === 0, 10_000)
    expect(holders(tok)).toEqual([])
  }
})

// The same tests as the user CI runs the suite as, when this run is root.
test.skipIf(process.getuid?.() !== 0)('yield, background and stdin pipe as nobody through setpriv', async () => {
  const script = join('/tmp', `finn-sess-yield-nobody-${process.pid}.js`)
  const tok = token('nobody')
  writeFileSync(
    script,
    `const { createSession } = require(${JSON.stringify(join(root, 'index.js'))})
    createSession({ cwd: '/tmp' }).then(async (s) => {
      const r = await s.exec('read -r x; echo "got $x"; ' + process.env.TREE, { yieldMs: 20, stdin: 'pipe' })
      await r.process.writeStdin('in\\n')
      await r.process.waitForLog('got in')
      await r.process.kill('SIGKILL')
      const b = await s.exec('sleep 300', { timeoutMs: 50, onTimeout: 'background', backgroundTimeoutMs: 100 })
      const e = await b.process.waitForExit()
      console.log(JSON.stringify([r.process.status, e.timedOut, (await s.exec('id -un')).stdout]))
      await s.destroy()
    })`,
  )
  try {
    const { stdout } = await run('setpriv', ['--reuid=nobody', '--regid=nogroup', '--clear-groups', process.execPath, script], {
      timeout: 20_000,
      env: { ...process.env, TREE: `${tree(tok)}\nexec -a ${tok} sleep 300` },
    })
    expect(JSON.parse(stdout)).toEqual(['killed', true, 'nobody\n'])
    expect(holders(tok)).toEqual([])
  } finally {
    rmSync(script, { force: true })
  }
})



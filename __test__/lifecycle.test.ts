import { execFile, execFileSync } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { describe, expect, test } from 'vitest'
import { alive, pidsOf, readOr, until } from './helpers.js'

const run = promisify(execFile)
const root = join(import.meta.dirname, '..')

/** Runs a CommonJS snippet in a fresh Node process with the package loaded as `sandbox`. */
function node(body: string, timeout = 30_000) {
  const script = `const sandbox = require(${JSON.stringify(join(root, 'index.js'))});\n${body}`
  return run(process.execPath, ['-e', script], { timeout, cwd: root })
}

describe('process lifetime', () => {
  test('an idle pool does not keep Node alive', async () => {
    const started = performance.now()
    const { stdout } = await node(`new sandbox.WorkerPool(); console.log('constructed')`)
    expect(stdout).toBe('constructed\n')
    expect(performance.now() - started).toBeLessThan(5000)
  })

  test('a pending job keeps Node alive until it settles', async () => {
    const { stdout } = await node(`
      new sandbox.WorkerPool()
        .exec({ binaryPath: '/bin/sh', args: ['-c', 'sleep 0.3; echo finished'], cwd: '/', env: {} })
        .then((r) => console.log(r.stdout.trim()))`)
    expect(stdout).toBe('finished\n')
  })

  // Root only: a cgroup v1 pids group (RLIMIT_NPROC counts every thread of the uid, and ignores root).
  const pidsGroup = process.getuid?.() === 0 && existsSync('/sys/fs/cgroup/pids/cgroup.procs')
  test.skipIf(!pidsGroup)('a shutdown that cannot wait (the process limit filled) rejects, a second one resolves, and Node then exits', async () => {
    // The waiting thread cannot be made: the unsettled promise's deferred used to keep Node's
    // loop alive for ever (an attack: still alive 15 s after the second shutdown, 3 of 3).
    const group = `/sys/fs/cgroup/pids/finn-test-shutdown-${process.pid}`
    const dir = mkdtempSync(join(tmpdir(), 'finn-full-'))
    mkdirSync(group)
    try {
      writeFileSync(join(group, 'pids.max'), '300')
      const script = `
        const sandbox = require(${JSON.stringify(join(root, 'index.js'))})
        const fs = require('node:fs')
        const pool = new sandbox.WorkerPool({ interactiveWorkers: 2, killGraceMs: 100 })
        // Forks until the kernel refuses (a shell exits at its first failed fork), then says so.
        const fill = 'for (1..400) { my $p = fork; last unless defined $p; if (!$p) { sleep 100; exit } } open(F, ">${dir}/filled"); close F; sleep 100'
        pool.exec({ binaryPath: '/usr/bin/perl', args: ['-e', fill], cwd: '/', env: {} }).catch(() => {})
        const poll = setInterval(async () => {
          if (!fs.existsSync('${dir}/filled')) return
          clearInterval(poll)
          const first = await pool.shutdown().then(() => 'resolved', (e) => e.code + ' ' + e.message)
          // Again once the killed tree has given its pids back (a caller retrying).
          let second
          for (let i = 0; i < 100 && second !== 'resolved'; i++) {
            await new Promise((r) => setTimeout(r, 50))
            second = await pool.shutdown().then(() => 'resolved', (e) => e.code)
          }
          console.log(JSON.stringify([first, second]))
        }, 5)`
      const { stdout } = await run('sh', ['-c', `echo $$ > ${group}/cgroup.procs && exec "$0" -e "$1"`, process.execPath, script], { timeout: 20_000 })
      const [first, second] = JSON.parse(stdout)
      expect(first).toMatch(/^WORKER_CRASHED could not wait for the shutdown/)
      expect(second).toBe('resolved')
    } finally {
      for (const pid of readOr(join(group, 'cgroup.procs')).split('\n').filter(Boolean)) {
        try {
          process.kill(Number(pid), 'SIGKILL')
        } catch {}
      }
      await until(() => readOr(join(group, 'cgroup.procs')).trim() === '', 5_000)
      rmdirSync(group)
    }
  })

  test('process.exit() during a job exits cleanly and kills the job tree', async () => {
    const log = join(mkdtempSync(join(tmpdir(), 'finn-exit-')), 'pids')
    const child = node(`
      const pool = new sandbox.WorkerPool()
      pool.exec({ binaryPath: '/bin/sh', args: ['-c', 'echo leader $$ >> ${log}; sleep 100 & echo child $! >> ${log}; wait'], cwd: '/', env: {} }).catch(() => {})
      const poll = setInterval(() => {
        if (require('node:fs').readFileSync('${log}', { encoding: 'utf8', flag: 'a+' }).includes('child')) process.exit(7)
      }, 5)`)
    const err = (await child.then(() => null, (e) => e)) as { code: number; signal: string | null }
    expect(err).toMatchObject({ code: 7, signal: null })
    const pids = pidsOf(readOr(log))
    expect(Object.keys(pids).sort()).toEqual(['child', 'leader'])
    // The exit hook sends SIGKILL synchronously, but the kernel ends a killed process only once
    // it is scheduled: on a loaded machine (load 30 here) the check can come first. A tree that
    // was never killed still runs `sleep 100` when the bound is over.
    for (const pid of Object.values(pids)) await until(() => !alive(pid), 5_000)
  })

  test('a pool in a worker thread: the thread ending idle, with jobs in flight, or by process.exit() leaves Node running and well', async () => {
    // A pool's inline host is a libuv handle on the worker thread's loop (binding/event_loop.rs):
    // Node aborts when a loop closes with a handle still open, so the thread's end must close it
    // (an async cleanup hook), handing a job still watched to a worker thread.
    const { stdout } = await node(`
      const { Worker } = require('node:worker_threads')
      const body = (mode) => \`
        const sandbox = require(\${JSON.stringify(${JSON.stringify(join(root, 'index.js'))})})
        const pool = new sandbox.WorkerPool()
        const spec = (args) => ({ binaryPath: '/bin/sh', args: ['-c', args], cwd: '/', env: {} })
        ;(async () => {
          for (let i = 0; i < 5; i++) await pool.exec(spec('true'))
          if ('\${mode}' === 'inflight') {
            pool.exec(spec('sleep 0.2')).catch(() => {})
            pool.exec(spec('true')).catch(() => {})
            setImmediate(() => process.exit(0))
          } else if ('\${mode}' === 'exit') process.exit(3)
        })()\`
      ;(async () => {
        for (const mode of ['idle', 'inflight', 'exit']) {
          const w = new Worker(body(mode), { eval: true })
          const code = await new Promise((resolve) => w.on('exit', resolve))
          console.log(mode, code)
        }
        const pool = new sandbox.WorkerPool()
        console.log((await pool.exec({ binaryPath: '/bin/echo', args: ['main'], cwd: '/', env: {} })).stdout.trim())
        await pool.shutdown()
      })()`)
    expect(stdout).toBe('idle 0\ninflight 0\nexit 3\nmain\n')
  })
})

describe('packaging', () => {
  test('ES modules get named exports from the CommonJS entry, including the JS-defined classes', async () => {
    // A consumer project of its own ("type": "module", like loa-finn) with the package in node_modules.
    const project = mkdtempSync(join(tmpdir(), 'finn-esm-'))
    mkdirSync(join(project, 'node_modules'))
    symlinkSync(root, join(project, 'node_modules', 'finn-sandbox'))
    copyFileSync(join(import.meta.dirname, 'fixtures', 'esm-import.mjs'), join(project, 'main.mjs'))
    const { stdout } = await run(process.execPath, [join(project, 'main.mjs')], { cwd: project })
    const out = JSON.parse(stdout)
    expect(out.stdout).toBe('esm\n')
    expect(out.names).toEqual(
      expect.arrayContaining(['PoolError', 'PoolErrorCode', 'SandboxError', 'WorkerPool', 'ToolSandbox', 'FilesystemJail', 'SecretRedactor', 'AuditLog', 'createExecutor', 'WorkerExecutor', 'ChildProcessExecutor', 'DisabledExecutor', 'SessionError', 'SessionErrorCode']),
    )
    expect(out.classes).toEqual(Array(7).fill('function'))
    expect(out.executor).toBe('WorkerExecutor')
    expect(out.poolError).toEqual([true, 'PoolError', 'SANDBOX_DISABLED', 'disabled'])
    expect(out.sandboxError).toEqual(['SandboxError'])
  })

  test.runIf(readOr(join(root, '.git', 'HEAD')) !== '')('the committed native loader matches what napi build generates', () => {
    // npm install / npm test rebuild native.js and native.d.ts; they must not drift from git.
    const diff = execFileSync('git', ['diff', '--name-only', '--', 'native.js', 'native.d.ts'], { cwd: root, encoding: 'utf8' })
    expect(diff).toBe('')
  })
})

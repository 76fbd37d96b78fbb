// Resource exhaustion: each case runs a job while the resource is out and asserts the error text
// names the resource, then a job after the resource returns, which must succeed. The fd and pids
// cases run in a child Node (the limits are per process or per group); the audit cases in this
// process, on a directory of their own. Root and non-root take different mechanisms (root
// ignores RLIMIT_NPROC and mode bits); a case that cannot run here says why in its skip.
import { type ChildProcessWithoutNullStreams, execFileSync, spawn, spawnSync } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, rmdirSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { afterAll, describe, expect, test } from 'vitest'
import { AuditLog, SandboxError, ToolSandbox, WorkerPool } from '../index.js'

const CHILD = join(import.meta.dirname, 'fixtures', 'exhaustion-child.cjs')
const isRoot = process.getuid?.() === 0
const NOBODY = 65534

interface Stats {
  interactive: { active: number; idle: number; queued: number }
}
interface Step {
  step: string
  stats?: Stats
  result?: { stdout: string; stderr: string; exitCode: number }
  error?: { name: string; code?: string; message: string }
  held?: number
  pid?: number
}

/** The text a job's failure shows: a rejection's message or a non-zero result's stderr. */
function failureText(s: Step): string {
  if (s.error) return s.error.message
  if (s.result && s.result.exitCode !== 0) return s.result.stderr
  return ''
}

function expectOk(s: Step | undefined) {
  expect(s?.result, JSON.stringify(s)).toMatchObject({ stdout: 'ok\n', exitCode: 0 })
}

/** Starts the child under `prefix` (e.g. prlimit or setpriv) and yields its JSON lines. */
function startChild(prefix: string[], mode: string): { child: ChildProcessWithoutNullStreams; next: () => Promise<Step> } {
  const argv = [...prefix, process.execPath, CHILD, mode]
  const child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (d) => (stderr += d))
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
  const next = async (): Promise<Step> => {
    const { value, done } = await lines.next()
    if (done) throw new Error(`child ended early: ${stderr}`)
    const step = JSON.parse(value) as Step
    if (step.step === 'crashed') throw new Error(`child crashed: ${JSON.stringify(step)}`)
    return step
  }
  return { child, next }
}

function exited(child: ChildProcessWithoutNullStreams): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode)
    else child.once('exit', (code) => resolve(code))
  })
}

function has(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0
}

// ── fds ──────────────────────────────────────────────────────────────────────────────────────

describe('fd limit', () => {
  test.skipIf(!has('prlimit'))('with RLIMIT_NOFILE used up a job fails naming it, and the next one after fds return succeeds', async () => {
    const { child, next } = startChild(['prlimit', '--nofile=64:64'], 'fds')
    child.stdin.end()
    expectOk(await next())
    const exhausted = await next()
    expect(exhausted.step).toBe('exhausted')
    expect(exhausted.held).toBeGreaterThan(0)
    const during = await next()
    expect(failureText(during)).toMatch(/too many open files \(os error 24\) \(open-file limit reached: RLIMIT_NOFILE\)/i)
    const after = await next()
    expect(after.step).toBe('after')
    expectOk(after)
    expect(await exited(child)).toBe(0)
  })
})

// ── pids ─────────────────────────────────────────────────────────────────────────────────────

const PIDS_ROOT = '/sys/fs/cgroup/pids'
function cgroupV1PidsWritable(): boolean {
  if (!isRoot || !existsSync(join(PIDS_ROOT, 'cgroup.procs'))) return false
  const probe = join(PIDS_ROOT, `finn-probe-${process.pid}`)
  try {
    mkdirSync(probe)
    rmdirSync(probe)
    return true
  } catch {
    return false
  }
}

/** Every live descendant of `pid`, from /proc. */
function descendants(pid: number): number[] {
  const parent = new Map<number, number>()
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8')
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]))
    } catch {
      // exited meanwhile
    }
  }
  const out: number[] = []
  const walk = (p: number) => {
    for (const [child, pp] of parent) {
      if (pp === p) {
        out.push(child)
        walk(child)
      }
    }
  }
  walk(pid)
  return out
}

/** Runs the pids child: `limit(pid)` makes new tasks fail, `lift(pid)` lets them through again. */
async function pidsCase(prefix: string[], limit: (pid: number) => void, lift: (pid: number) => void) {
  const { child, next } = startChild(prefix, 'pids')
  try {
    expectOk(await next())
    const ready = await next()
    expect(ready.step).toBe('ready')
    limit(ready.pid!)
    child.stdin.write('go\n')
    const during = await next()
    expect(during.step).toBe('during')
    expect(failureText(during)).toMatch(/process limit reached: RLIMIT_NPROC or the pids cgroup/)
    expect((await next()).step).toBe('lift')
    lift(ready.pid!)
    child.stdin.write('go\n')
    const after = await next()
    expect(after.step).toBe('after')
    expectOk(after)
    child.stdin.end()
    expect(await exited(child)).toBe(0)
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL')
  }
}

/**
 * The pool has no thread yet when the limit hits: jobs are refused (`WORKER_UNAVAILABLE`, retry
 * with backoff) naming the limit, their slots are freed, and once the limit is lifted every
 * slot runs again.
 */
async function pidsColdCase(prefix: string[], limit: (pid: number) => void, lift: (pid: number) => void) {
  const { child, next } = startChild(prefix, 'pids-cold')
  try {
    const ready = await next()
    expect(ready.step).toBe('ready')
    limit(ready.pid!)
    child.stdin.write('go\n')
    for (let i = 0; i < 3; i++) {
      const during = await next()
      expect(during.step).toBe('during')
      // Refused before a thread exists, or (if one started) the spawn fails naming the limit.
      if (during.error) expect(during.error.code, during.error.message).toBe('WORKER_UNAVAILABLE')
      expect(failureText(during)).toMatch(/process limit reached: RLIMIT_NPROC or the pids cgroup/)
    }
    const lifted = await next()
    expect(lifted.step).toBe('lift')
    // No slot is left taken by a job that never got a thread.
    expect(lifted.stats?.interactive).toEqual({ active: 0, idle: 4, queued: 0 })
    lift(ready.pid!)
    child.stdin.write('go\n')
    for (let i = 0; i < 3; i++) {
      const after = await next()
      expect(after.step).toBe('after')
      expectOk(after)
    }
    expect((await next()).stats?.interactive).toEqual({ active: 0, idle: 4, queued: 0 })
    child.stdin.end()
    expect(await exited(child)).toBe(0)
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL')
  }
}

describe('pids limit', () => {
  const cgroupCase = (name: string, run: typeof pidsCase) =>
    test.skipIf(!cgroupV1PidsWritable())(name, async () => {
      const group = join(PIDS_ROOT, `finn-test-${process.pid}-${Math.random().toString(36).slice(2)}`)
      mkdirSync(group)
      try {
        await run(
          // The child Node starts inside the group, so the supervisor and its reapers, which
          // start the commands, are in it too (as in a container's own pids cgroup).
          ['sh', '-c', `echo $$ > ${join(group, 'cgroup.procs')} && exec "$@"`, 'sh'],
          () => {
            // Every task the group has now (Node, its threads, the supervisor): no new one.
            writeFileSync(join(group, 'pids.max'), readFileSync(join(group, 'pids.current'), 'utf8').trim())
          },
          () => writeFileSync(join(group, 'pids.max'), 'max'),
        )
      } finally {
        // Once Node has exited its supervisor follows (it sees its socket close): then the group
        // is empty and can go. A process left in it past the deadline fails the test.
        const start = Date.now()
        while (readFileSync(join(group, 'cgroup.procs'), 'utf8').trim() !== '' && Date.now() - start < 5000) {
          await new Promise((r) => setTimeout(r, 20))
        }
        rmdirSync(group)
      }
    })
  cgroupCase('in a cgroup v1 pids group at its limit a job fails naming it, and succeeds once the limit is raised (root)', pidsCase)
  cgroupCase('before the pool has any thread: jobs are refused naming the limit, no slot leaks, all run once it is raised (root)', pidsColdCase)

  // RLIMIT_NPROC does nothing for root, so as root the child runs as nobody (the case loa-finn
  // ships: a non-root user); a non-root runner limits its own child directly.
  const nprocPrefix = isRoot ? ['setpriv', `--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups'] : []
  const canNproc = has('prlimit') && (!isRoot || has('setpriv'))
  // prlimit on another user's process needs CAP_SYS_RESOURCE, which containers often drop: as
  // root, prlimit runs as nobody too (a process may change the limits of its own user's).
  const prlimit = (args: string[]) =>
    isRoot ? execFileSync('setpriv', [...nprocPrefix.slice(1), 'prlimit', ...args], { encoding: 'utf8' }) : execFileSync('prlimit', args, { encoding: 'utf8' })
  const nprocCase = (name: string, run: typeof pidsCase) =>
    test.skipIf(!canNproc)(name, async () => {
      let hard = ''
      // Node and every process below it (the supervisor and its reapers start the commands).
      const tree = (pid: number) => [pid, ...descendants(pid)]
      await run(
        nprocPrefix,
        (pid) => {
          hard = prlimit(['--pid', String(pid), '--nproc', '--raw', '--noheadings', '--output=HARD']).trim()
          // Soft limit 1: the user already has these processes, so no new task may start.
          for (const p of tree(pid)) prlimit(['--pid', String(p), '--nproc=1:'])
        },
        (pid) => {
          for (const p of tree(pid)) prlimit(['--pid', String(p), `--nproc=${hard}:`])
        },
      )
    })
  nprocCase('with RLIMIT_NPROC reached a job fails naming it, and succeeds once the limit is raised (non-root)', pidsCase)
  nprocCase('with RLIMIT_NPROC reached before the pool has any thread: refused naming it, no slot leaks, all run once raised (non-root)', pidsColdCase)
})

// ── audit directory ──────────────────────────────────────────────────────────────────────────

const pool = new WorkerPool({ interactiveWorkers: 1 })
const mounts: string[] = []
const dirs: string[] = []
afterAll(async () => {
  await pool.shutdown()
  for (const m of mounts) spawnSync('umount', ['-l', m])
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

function canMount(): boolean {
  if (!isRoot) return false
  const probe = mkdtempSync(join(tmpdir(), 'finn-mnt-'))
  const ok = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe]).status === 0
  if (ok) spawnSync('umount', [probe])
  rmSync(probe, { recursive: true, force: true })
  return ok
}
const mountable = canMount()

/** A jail with an audit dir on its own small tmpfs (root), or a plain temp dir. */
function auditJail(tmpfsKb?: number): { jail: string; auditDir: string } {
  const jail = realpathSync(mkdtempSync(join(tmpdir(), 'finn-exh-')))
  dirs.push(jail)
  const auditDir = join(jail, 'audit')
  mkdirSync(auditDir)
  if (tmpfsKb !== undefined) {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${tmpfsKb}k`, 'tmpfs', auditDir])
    mounts.push(auditDir)
  }
  return { jail, auditDir }
}

function sandboxOn(jail: string) {
  const audit = new AuditLog(jail)
  // echo is not one of the read-only commands that may run without an audit trail.
  const policies = { echo: { binary: '/bin/echo', subcommands: [], deniedFlags: [], validatePaths: false } }
  const sandbox = new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 5000, maxOutput: 4096, policies }, audit, pool)
  return { audit, sandbox }
}

// Larger than a page, so a full tmpfs cannot take it in the slack of the file's last page.
const entry = () => ({ timestamp: new Date().toISOString(), action: 'allow' as const, command: 'probe', args: ['x'.repeat(8192)] })

async function expectDeniedThenRecovered(audit: AuditLog, sandbox: ToolSandbox, restore: () => void, auditDir: string) {
  expect(audit.append(entry())).toBe(false)
  const err = await sandbox.execute('echo hello').then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  expect((err as Error).message).toMatch(/audit log/i)
  expect((err as Error).message).toMatch(/denied \(fail-closed\)/)
  restore()
  expect(audit.append(entry())).toBe(true)
  const r = await sandbox.execute('echo hello')
  expect(r).toMatchObject({ stdout: 'hello\n', exitCode: 0, timedOut: false })
  // Whatever was written before and after the outage is whole lines of JSON.
  const text = readFileSync(join(auditDir, 'audit.log'), 'utf8')
  for (const line of text.split('\n').filter((l) => l !== '')) expect(() => JSON.parse(line), line).not.toThrow()
}

describe('audit directory', () => {
  test.skipIf(!mountable)('full (a 64 kB tmpfs): append is false, commands are denied fail-closed, both recover when space returns', async () => {
    const { jail, auditDir } = auditJail(64)
    const { audit, sandbox } = sandboxOn(jail)
    expect(audit.append(entry())).toBe(true)
    // Fill what is left, then try to write past it.
    const filler = join(auditDir, 'filler')
    const chunk = Buffer.alloc(4096, 'f')
    try {
      for (;;) writeFileSync(filler, chunk, { flag: 'a' })
    } catch (e) {
      expect((e as NodeJS.ErrnoException).code).toBe('ENOSPC')
    }
    // The audit file's last page may still have room: tiny entries (smaller than the sandbox's
    // own) take it until one no longer fits.
    let appended = 0
    while (audit.append({ timestamp: 't', action: 'deny', command: 'p', args: [] })) {
      if (++appended > 4096) throw new Error('the audit file never filled up')
    }
    await expectDeniedThenRecovered(audit, sandbox, () => rmSync(filler), auditDir)
  })

  test.skipIf(!mountable && isRoot)('read-only: append is false, commands are denied fail-closed, both recover when it is writable again', async () => {
    if (isRoot) {
      // Root ignores mode bits: a read-only mount is what stops it.
      const { jail, auditDir } = auditJail(256)
      execFileSync('mount', ['-o', 'remount,ro', auditDir])
      const { audit, sandbox } = sandboxOn(jail)
      await expectDeniedThenRecovered(audit, sandbox, () => execFileSync('mount', ['-o', 'remount,rw', auditDir]), auditDir)
    } else {
      const { jail, auditDir } = auditJail()
      chmodSync(auditDir, 0o555)
      const { audit, sandbox } = sandboxOn(jail)
      await expectDeniedThenRecovered(audit, sandbox, () => chmodSync(auditDir, 0o755), auditDir)
    }
  })
})

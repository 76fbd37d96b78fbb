// The repository check runs on Node's side, before any isolation, over files the agent writes:
// each test here gives it a hostile .git and measures what Node pays (peak RSS, time, its own
// fs calls), with bounds far from both the fixed cost and the cost without the bounds.
import { execFileSync, spawn } from 'node:child_process'
import { chmodSync, closeSync, constants, mkdirSync, mkdtempSync, openSync, readFileSync, realpathSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs'
import { stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import { alive, holders, until } from './helpers.js'
import { AuditLog, PoolError, PoolErrorCode, SandboxError, ToolSandbox, WorkerPool, type CommandPolicy, type SandboxConfig } from '../index.js'

const pool = new WorkerPool({ interactiveWorkers: 2, killGraceMs: 200 })
afterAll(() => pool.shutdown())

const GIT = realpathSync(execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim())
const ENV = { PATH: '/usr/bin:/bin', GIT_CONFIG_GLOBAL: '/dev/null', GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' }
/** The check's time bound (`REPOSITORY_CHECK_MS` in crates/finn-policy/src/host_git.rs). */
const CHECK_MS = 10_000

function tempDir(prefix: string): string {
  return realpathSync(mkdtempSync(join(tmpdir(), prefix)))
}

function git(cwd: string, ...args: string[]): string {
  return execFileSync(GIT, args, { cwd, encoding: 'utf8', env: ENV })
}

function make(jail: string, overrides: Partial<SandboxConfig> = {}) {
  const config: SandboxConfig = { allowBash: true, jailRoot: jail, execTimeout: 10_000, maxOutput: 65_536, ...overrides }
  return new ToolSandbox(config, new AuditLog(jail), pool)
}

/** A jail that is a repository with one commit. */
function repo(): string {
  const jail = tempDir('finn-repo-')
  git(jail, 'init', '-q')
  writeFileSync(join(jail, 'a.txt'), 'one\n')
  git(jail, 'add', 'a.txt')
  git(jail, 'commit', '-qm', 'init')
  return jail
}

/** The refusal's message, or undefined when the command ran. */
async function refusal(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p
    return undefined
  } catch (e) {
    if (!(e instanceof SandboxError)) throw e
    return e.message
  }
}

function status(field: string): number {
  const line = readFileSync('/proc/self/status', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${field}:`))
  return Number(line!.split(/\s+/)[1]) * 1024
}

/** How far Node's peak RSS rose above its RSS at the start while `work` ran, and how long it took. */
async function measured<T>(work: () => Promise<T>): Promise<{ value: T; peakGrowth: number; ms: number }> {
  // Resets VmHWM to the current RSS (proc(5): clear_refs "5").
  writeFileSync('/proc/self/clear_refs', '5')
  const base = status('VmRSS')
  const started = performance.now()
  const value = await work()
  const ms = performance.now() - started
  return { value, peakGrowth: status('VmHWM') - base, ms }
}

const MB = 1024 * 1024

describe('large or sparse repository files are not read whole', () => {
  test('a sparse 64 MiB .git/commondir, and a .git file padded to 64 MiB, are refused at once by their size', async () => {
    const jail = repo()
    const sandbox = make(jail)
    const commondir = join(jail, '.git', 'commondir')
    writeFileSync(commondir, 'x')
    truncateSync(commondir, 64 * MB)
    const dir = await measured(() => refusal(sandbox.execute('git log')))
    console.log(`commondir 64 MiB: peak RSS +${(dir.peakGrowth / MB).toFixed(1)} MB, ${dir.ms.toFixed(0)} ms`)
    expect(dir.value).toMatch(/^Repository config rejected: \.git\/commondir is larger than 4096 bytes/)
    expect(dir.value!.length).toBeLessThan(1000)
    expect(dir.peakGrowth).toBeLessThan(100 * MB)
    expect(dir.ms).toBeLessThan(3000)
    rmSync(commondir)

    git(jail, 'init', '-q', '--separate-git-dir', join(jail, 'real'))
    const dotGit = join(jail, '.git')
    writeFileSync(dotGit, 'gitdir: real\n')
    truncateSync(dotGit, 64 * MB)
    const file = await measured(() => refusal(sandbox.execute('git log')))
    console.log(`.git file 64 MiB: peak RSS +${(file.peakGrowth / MB).toFixed(1)} MB, ${file.ms.toFixed(0)} ms`)
    expect(file.value).toMatch(/^Repository config rejected: \.git is larger than 4096 bytes/)
    expect(file.value!.length).toBeLessThan(1000)
    expect(file.peakGrowth).toBeLessThan(100 * MB)
    expect(file.ms).toBeLessThan(3000)
  })

  test('a version-4 index of 40,000 prefix-compressed 4,000-byte paths costs Node neither memory nor time', async () => {
    const jail = repo()
    // Sorted paths sharing a 3,900-byte prefix: appended, and each stored in a few bytes.
    const script = `awk 'BEGIN { p = ""; for (i = 0; i < 39; i++) p = p sprintf("%099d/", 0); for (i = 0; i < 40000; i++) printf "100644 e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\\t%s%099d\\n", p, i }' | "$0" update-index --index-info && "$0" update-index --index-version 4`
    execFileSync('sh', ['-c', script, GIT], { cwd: jail, env: ENV })
    const size = readFileSync(join(jail, '.git', 'index')).length
    expect(size).toBeLessThan(4 * MB)
    const sandbox = make(jail)
    const r = await measured(() => refusal(sandbox.execute('git status')))
    console.log(`index v4 40,000 x 4,000 B (${(size / MB).toFixed(1)} MB): peak RSS +${(r.peakGrowth / MB).toFixed(1)} MB, ${r.ms.toFixed(0)} ms: ${r.value}`)
    expect(r.value).toMatch(/^Repository config rejected: (\.git\/index lists more than \d+ bytes of paths|git could not read the index)/)
    expect(r.peakGrowth).toBeLessThan(100 * MB)
    expect(r.ms).toBeLessThan(5000)
  })
})

describe('config listings are checked as they come, not held', () => {
  test('64 config.worktree files each listing ~30,000 allowed keys cost Node no memory', async () => {
    const jail = repo()
    // `name` alone is `user.name = true`: an allowed key, ~34 bytes of listing each, so each
    // file lists just under the 1 MiB a listing may print.
    const body = `[user]\n${'\tname\n'.repeat(30_000)}`
    for (let i = 0; i < 64; i++) {
      mkdirSync(join(jail, '.git', 'w', String(i)), { recursive: true })
      writeFileSync(join(jail, '.git', 'w', String(i), 'config.worktree'), body)
    }
    const sandbox = make(jail)
    const r = await measured(() => refusal(sandbox.execute('git log')))
    console.log(`64 config.worktree of 30,000 keys: peak RSS +${(r.peakGrowth / MB).toFixed(1)} MB, ${r.ms.toFixed(0)} ms: ${r.value}`)
    expect(r.peakGrowth).toBeLessThan(100 * MB)
    // 65 gits: allowed in ~1.5 s on an idle machine; on a loaded one the check's bound ends it.
    expect(r.ms).toBeLessThan(CHECK_MS + 2000)
  }, 40_000)
})

describe('what blocks the host git does not block Node', () => {
  test('a FIFO raced into .git/index: every execute() settles, none waits for the check bound', async () => {
    const jail = repo()
    const sandbox = make(jail)
    const index = join(jail, '.git', 'index')
    // Outside .git, so that the walk of the git directory does not refuse them first.
    const fifo = join(jail, 'racer-fifo')
    const saved = join(jail, 'racer-saved')
    execFileSync('mkfifo', [fifo])
    // The index is a FIFO for ~3 ms, then the real one for ~3 ms, again and again.
    const racer = spawn(
      process.execPath,
      [
        '-e',
        `const fs = require('fs'); const [i, f, s] = process.argv.slice(1); const hold = new Int32Array(new SharedArrayBuffer(4));
         for (;;) { fs.renameSync(i, s); fs.renameSync(f, i); Atomics.wait(hold, 0, 0, 3); fs.renameSync(i, f); fs.renameSync(s, i); Atomics.wait(hold, 0, 0, 3) }`,
        index,
        fifo,
        saved,
      ],
      { stdio: 'ignore' },
    )
    const outcomes: Record<string, number> = {}
    let slowest = 0
    try {
      for (let i = 0; i < 80; i++) {
        const started = performance.now()
        let timer: NodeJS.Timeout | undefined
        const late = new Promise<string>((resolve) => {
          timer = setTimeout(() => resolve('never settled'), CHECK_MS + 5_000)
        })
        const outcome = await Promise.race([
          sandbox.execute('git log').then(
            () => 'ran',
            (e: Error) => e.message.replace(/: .*/, ''),
          ),
          late,
        ])
        clearTimeout(timer)
        slowest = Math.max(slowest, performance.now() - started)
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1
        expect(outcome, `try ${i}`).not.toBe('never settled')
      }
    } finally {
      racer.kill('SIGKILL')
      // A host git still blocked in open() on the FIFO (without the fix) gets its writer.
      try {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK))
      } catch {
        // no reader waits
      }
    }
    console.log(`FIFO race: ${JSON.stringify(outcomes)}, slowest ${slowest.toFixed(0)} ms`)
    expect(slowest).toBeLessThan(3000)
  }, 120_000)

  test('1,000 config.worktree files are refused at once, naming the bound', async () => {
    const jail = repo()
    for (let i = 0; i < 1000; i++) {
      mkdirSync(join(jail, '.git', 'w', String(i)), { recursive: true })
      writeFileSync(join(jail, '.git', 'w', String(i), 'config.worktree'), '')
    }
    const sandbox = make(jail)
    const r = await measured(() => refusal(sandbox.execute('git log')))
    console.log(`1,000 config.worktree: ${r.ms.toFixed(0)} ms: ${r.value}`)
    expect(r.value).toMatch(/^Repository config rejected: more than \d+ config\.worktree files in the git directory/)
    expect(r.ms).toBeLessThan(1500)
  })

  test("400 config.worktree files checked by 4 execute() at once: Node's own fs.promises.stat is not held up", async () => {
    const jail = repo()
    for (let i = 0; i < 400; i++) {
      mkdirSync(join(jail, '.git', 'w', String(i)), { recursive: true })
      writeFileSync(join(jail, '.git', 'w', String(i), 'config.worktree'), '')
    }
    const sandbox = make(jail)
    const runs = Array.from({ length: 4 }, () => refusal(sandbox.execute('git log')))
    const started = performance.now()
    await stat(jail)
    const statMs = performance.now() - started
    await Promise.all(runs)
    console.log(`fs.promises.stat behind 4 checks of 400 config.worktree: ${statMs.toFixed(1)} ms`)
    expect(statMs).toBeLessThan(500)
  })
})

describe('the check reads nothing outside the jail', () => {
  test('a directory under .git swapped for a symlink to one outside the jail, again and again, is never walked', async () => {
    const jail = repo()
    const outside = tempDir('finn-outside-')
    symlinkSync('/nonexistent', join(outside, 'outside-name'))
    // d's 20,000 sibling files widen the time between d's lstat and its read: the walk looks at
    // the siblings listed after d before it reads d.
    const pad = join(jail, '.git', 'pad')
    mkdirSync(pad)
    for (let i = 0; i < 20_000; i++) writeFileSync(join(pad, `f${i}`), '')
    const d = join(pad, 'd')
    mkdirSync(d)
    const link = join(jail, 'link')
    const saved = join(jail, 'saved')
    symlinkSync(outside, link)
    // d is a symlink to the outside directory for ~1 ms, then the real directory for ~1 ms.
    const racer = spawn(
      process.execPath,
      [
        '-e',
        `const fs = require('fs'); const [d, l, s] = process.argv.slice(1); const hold = new Int32Array(new SharedArrayBuffer(4));
         for (;;) { fs.renameSync(d, s); fs.renameSync(l, d); Atomics.wait(hold, 0, 0, 1); fs.renameSync(d, l); fs.renameSync(s, d); Atomics.wait(hold, 0, 0, 1) }`,
        d,
        link,
        saved,
      ],
      { stdio: 'ignore' },
    )
    const sandbox = make(jail)
    const outcomes: Record<string, number> = {}
    try {
      for (let i = 0; i < 200 && (outcomes.changed ?? 0) < 5; i++) {
        const message = (await refusal(sandbox.execute('git status'))) ?? 'ran'
        expect(message, `try ${i}`).not.toContain('outside-name')
        const outcome = message.includes('changed during the check') ? 'changed' : message.replace(/: \.git\/.*/, '')
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1
      }
    } finally {
      racer.kill('SIGKILL')
    }
    console.log(`directory raced with a symlink out of the jail: ${JSON.stringify(outcomes)}`)
    // The race was won: a directory was seen, then found changed when read.
    expect(outcomes.changed).toBeGreaterThan(0)
  }, 120_000)
})

/**
 * A git for the policy whose every run (the check's included) hangs as a `sleep` carrying a
 * token of its own: the check's git may write nothing, so its processes are found by a /proc scan.
 */
function hangingGit(): { binary: string; pids: string } {
  const dir = tempDir('finn-hang-')
  const binary = join(dir, 'git')
  const token = `60.${String(Math.floor(Math.random() * 1e12)).padStart(12, '0')}`
  writeFileSync(binary, `#!/bin/sh\nexec sleep ${token}\n`)
  chmodSync(binary, 0o755)
  return { binary, pids: token }
}

function gitPolicy(binary: string): CommandPolicy {
  return { binary, subcommands: ['log', 'status'], deniedFlags: [], validatePaths: true }
}

/** The hanging gits of `token`, oldest first. */
function pidsIn(token: string): number[] {
  return holders(token).sort((a, b) => a - b)
}

describe('the check is bounded in time, abortable, and off libuv', () => {
  test('a host git that never finishes is killed at the check bound; a later execute() settles too', async () => {
    const jail = repo()
    const { binary, pids } = hangingGit()
    const sandbox = make(jail, { policies: { git: gitPolicy(binary) } })
    const started = performance.now()
    const [first, second] = await Promise.all([refusal(sandbox.execute('git log')), refusal(sandbox.execute('git status'))])
    const ms = performance.now() - started
    console.log(`hanging host git: both settled in ${ms.toFixed(0)} ms: ${first}`)
    for (const r of [first, second]) expect(r).toMatch(new RegExp(`^Repository config rejected: git config \\(the repository's config\\) did not finish within the check's ${CHECK_MS} ms`))
    expect(ms).toBeLessThan(CHECK_MS + 4000)
    for (const pid of pidsIn(pids)) expect(alive(pid), `git ${pid}`).toBe(false)
  }, 40_000)

  test("the job's AbortSignal ends the check and its host git at once, behind an earlier command still checking", async () => {
    const jail = repo()
    const { binary, pids } = hangingGit()
    const sandbox = make(jail, { policies: { git: gitPolicy(binary) } })
    // An earlier command whose check hangs until the bound: the aborted one does not wait for it.
    const earlier = refusal(sandbox.execute('git status'))
    const controller = new AbortController()
    const running = sandbox.execute('git log', { signal: controller.signal }).then(
      () => undefined,
      (e: unknown) => e,
    )
    await until(() => pidsIn(pids).length > 1)
    const started = performance.now()
    controller.abort()
    const err = await running
    const ms = performance.now() - started
    console.log(`abort during the check: settled ${ms.toFixed(0)} ms after abort()`)
    expect(err).toBeInstanceOf(PoolError)
    expect((err as PoolError).code).toBe(PoolErrorCode.ABORTED)
    expect(ms).toBeLessThan(1000)
    const [first, second] = pidsIn(pids)
    // Which of the two gits belongs to the aborted check is not known: one of them is dead now.
    expect(alive(first) && alive(second)).toBe(false)
    expect(await earlier).toMatch(/did not finish within the check's/)
    for (const pid of pidsIn(pids)) expect(alive(pid), `git ${pid}`).toBe(false)
  }, 40_000)

  test("four checks whose host git hangs leave Node's fs.promises.stat unhindered", async () => {
    const jail = repo()
    const { binary, pids } = hangingGit()
    const sandbox = make(jail, { policies: { git: gitPolicy(binary) } })
    const controller = new AbortController()
    const runs = Array.from({ length: 4 }, () => sandbox.execute('git log', { signal: controller.signal }).catch(() => undefined))
    await until(() => pidsIn(pids).length > 0)
    const started = performance.now()
    let timer: NodeJS.Timeout | undefined
    const statted = await Promise.race([
      stat(jail).then(() => true),
      new Promise<false>((resolve) => {
        timer = setTimeout(() => resolve(false), 5_000)
      }),
    ])
    clearTimeout(timer)
    const statMs = performance.now() - started
    controller.abort()
    await Promise.all(runs)
    console.log(`fs.promises.stat behind 4 hanging checks: ${statMs.toFixed(1)} ms`)
    expect(statted).toBe(true)
    expect(statMs).toBeLessThan(200)
  }, 40_000)

  test("one sandbox's checks held to the bound do not delay another sandbox's", async () => {
    const { binary, pids } = hangingGit()
    const hostile = make(repo(), { policies: { git: gitPolicy(binary) } })
    const controller = new AbortController()
    const held = Array.from({ length: 8 }, () => hostile.execute('git log', { signal: controller.signal }).catch(() => undefined))
    await until(() => pidsIn(pids).length >= 4)
    const other = make(repo())
    const started = performance.now()
    const r = await other.execute('git log --oneline')
    const ms = performance.now() - started
    controller.abort()
    await Promise.all(held)
    console.log(`another sandbox's git log behind 8 held checks: ${ms.toFixed(0)} ms`)
    expect(r.stdout).toContain('init')
    expect(ms).toBeLessThan(3000)
  }, 40_000)
})

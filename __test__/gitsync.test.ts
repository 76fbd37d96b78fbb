// loa-finn's GitSync drives git through `pool.exec({ binaryPath: git, args, cwd, timeoutMs: 30000,
// env, maxBuffer: 1048576 }, "system")`. Its whole archive/push/pull sequence runs here with real
// git on the system lane while interactive work saturates the pool, and the event loop stays free.
import { execFileSync } from 'node:child_process'
import { existsSync, mkdtempSync, realpathSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { afterAll, expect, test } from 'vitest'
import { WorkerPool, type ExecResult } from '../index.js'

const GIT = realpathSync(execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim())
const EMPTY_TREE = '4b825dc642cb6eb9a060e54bf8d69288fbee4904'
const pool = new WorkerPool({ interactiveWorkers: 2, maxQueueDepth: 10 })
afterAll(() => pool.shutdown())

// GitSync's env: PATH, GIT_TERMINAL_PROMPT=0, HOME (plus an identity for commits here).
function gitEnv(home: string): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    GIT_TERMINAL_PROMPT: '0',
    HOME: home,
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_AUTHOR_NAME: 'finn',
    GIT_AUTHOR_EMAIL: 'finn@example.invalid',
    GIT_COMMITTER_NAME: 'finn',
    GIT_COMMITTER_EMAIL: 'finn@example.invalid',
  }
}

/** GitSync.git(): system lane, no jailRoot; a non-zero exit throws with stderr. */
async function git(cwd: string, ...args: string[]): Promise<string> {
  const result: ExecResult = await pool.exec({ binaryPath: GIT, args, cwd, timeoutMs: 30_000, env: gitEnv(cwd), maxBuffer: 1_048_576 }, 'system')
  if (result.exitCode !== 0) throw new Error(`git ${args[0]} failed (exit ${result.exitCode}): ${result.stderr}`)
  return result.stdout
}

test('the GitSync sequence runs on the system lane while interactive work saturates the pool', async () => {
  const repo = realpathSync(mkdtempSync(join(tmpdir(), 'finn-gitsync-')))
  const remote = realpathSync(mkdtempSync(join(tmpdir(), 'finn-remote-')))
  const delay = monitorEventLoopDelay({ resolution: 1 })
  delay.enable()

  // Saturate the interactive lane: 2 running + 4 queued one-second jobs.
  const sh = (script: string) => ({ binaryPath: '/bin/sh', args: ['-c', script], cwd: '/', env: {} })
  const interactive = Array.from({ length: 6 }, () => pool.exec(sh('sleep 1')))
  expect(pool.stats().interactive).toEqual({ active: 2, idle: 0, queued: 4 })
  const started = performance.now()

  await git(repo, 'init', '-q', '-b', 'main')
  writeFileSync(join(repo, 'state.json'), '{"n":1}\n')
  await git(repo, 'add', 'state.json')
  await git(repo, 'commit', '-qm', 'state')

  // ensureArchiveBranch(): rev-parse --verify fails, then mktree reads an EOF stdin (loa-finn's
  // worker left stdin open, so this hung until the timeout).
  await expect(git(repo, 'rev-parse', '--verify', 'archive')).rejects.toThrow(/git rev-parse failed \(exit 128\)/)
  const emptyTree = (await git(repo, 'mktree')).trim()
  expect(emptyTree).toBe(EMPTY_TREE)
  const commit = (await git(repo, 'commit-tree', emptyTree, '-m', 'chore: initialize archive branch')).trim()
  await git(repo, 'branch', 'archive', commit)

  // snapshot(): a worktree in os.tmpdir(), outside the repository (loa-finn's worker rejected it
  // because it checked cwd against process.cwd()).
  const worktree = join(tmpdir(), `finn-archive-${Date.now()}`)
  await git(repo, 'worktree', 'add', worktree, 'archive')
  writeFileSync(join(worktree, 'snapshot-manifest.json'), '{"files":["state.json"]}\n')
  await git(worktree, 'add', 'snapshot-manifest.json')
  await git(worktree, 'commit', '-m', 'snapshot', '--allow-empty')
  const head = (await git(worktree, 'rev-parse', 'HEAD')).trim()
  expect(head).toMatch(/^[0-9a-f]{40}$/)
  await git(repo, 'worktree', 'remove', worktree, '--force')
  expect(existsSync(worktree)).toBe(false)

  // push()/pull(): a real (local) remote, then show ref:path.
  await git(remote, 'init', '-q', '--bare')
  await git(repo, 'remote', 'add', 'origin', remote)
  await git(repo, 'push', 'origin', 'archive')
  await git(repo, 'fetch', 'origin', 'archive')
  expect((await git(repo, 'rev-parse', 'origin/archive')).trim()).toBe(head)
  expect((await git(repo, 'merge-base', 'archive', 'origin/archive')).trim()).toBe(head)
  expect(await git(repo, 'show', 'origin/archive:snapshot-manifest.json')).toBe('{"files":["state.json"]}\n')

  // A missing remote fails fast instead of prompting or hanging.
  const missing = performance.now()
  await expect(git(repo, 'fetch', join(remote, 'missing'), 'archive')).rejects.toThrow(/git fetch failed \(exit 128\)/)
  expect(performance.now() - missing).toBeLessThan(5000)

  const systemDone = performance.now() - started
  await Promise.all(interactive)
  delay.disable()
  // Every git call ran while the interactive jobs were still busy (3 rounds of 1 s).
  expect(systemDone).toBeLessThan(1000)
  expect(delay.max / 1e6).toBeLessThan(50)
})

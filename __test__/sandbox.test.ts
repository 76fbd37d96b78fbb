import { execFileSync } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import { rejectionOf } from './helpers.js'
import {
  AuditLog,
  ChildProcessExecutor,
  DisabledExecutor,
  FilesystemJail,
  PoolError,
  PoolErrorCode,
  SandboxError,
  SecretRedactor,
  ToolSandbox,
  WorkerExecutor,
  WorkerPool,
  createExecutor,
  type AuditEntry,
  type CommandPolicy,
  type ExecSpec,
  type SandboxConfig,
} from '../index.js'

const pool = new WorkerPool({ interactiveWorkers: 2, killGraceMs: 200 })
afterAll(() => pool.shutdown())

function jailDir(prefix = 'finn-jail-'): string {
  return realpathSync(mkdtempSync(join(tmpdir(), prefix)))
}

function make(overrides: Partial<SandboxConfig> = {}, executor: unknown = pool) {
  const config: SandboxConfig = { allowBash: true, jailRoot: jailDir(), execTimeout: 10_000, maxOutput: 65_536, ...overrides }
  const auditLog = new AuditLog(config.jailRoot)
  const sandbox = new ToolSandbox(config, auditLog, executor as WorkerPool)
  return { sandbox, config, auditLog, jail: config.jailRoot }
}

function audit(log: AuditLog): (AuditEntry & Record<string, unknown>)[] {
  const text = readFileSync(join(log.getLogDir(), 'audit.log'), 'utf8')
  return text.trim().split('\n').map((line) => JSON.parse(line))
}

async function refusal(promise: Promise<unknown>): Promise<SandboxError> {
  const err = await rejectionOf(promise, SandboxError)
  expect(err.name).toBe('SandboxError')
  return err
}

function policy(binary: string, extra: Partial<CommandPolicy> = {}): CommandPolicy {
  return { binary, subcommands: [], deniedFlags: [], validatePaths: false, ...extra }
}

const GIT = execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim()

function git(cwd: string, ...args: string[]) {
  return execFileSync(GIT, args, {
    cwd,
    encoding: 'utf8',
    env: { PATH: process.env.PATH, HOME: cwd, GIT_CONFIG_GLOBAL: '/dev/null', GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' },
  })
}

/** A jail that is a git repository with one commit, and a marker path hostile config would create. */
function repoJail(overrides: Partial<SandboxConfig> = {}, executor: unknown = pool) {
  const { sandbox, jail, auditLog } = make(overrides, executor)
  git(jail, 'init', '-q')
  writeFileSync(join(jail, 'a.txt'), 'one\n')
  git(jail, 'add', 'a.txt')
  git(jail, 'commit', '-qm', 'init')
  writeFileSync(join(jail, 'a.txt'), 'two\n')
  const marker = join(jail, 'PWNED')
  const script = join(jail, 'evil.sh')
  writeFileSync(script, `#!/bin/sh\ntouch ${marker}\ncat\n`)
  chmodSync(script, 0o755)
  return { sandbox, jail, auditLog, marker, script }
}

describe('pipeline stages, messages and audit entries', () => {
  test('1. gate: allowBash false refuses and audits bash_disabled with the whole string', async () => {
    const { sandbox, auditLog } = make({ allowBash: false })
    const err = await refusal(sandbox.execute('ls -la'))
    expect(err.message).toBe('Bash execution is disabled (set FINN_ALLOW_BASH=true)')
    expect(audit(auditLog)).toMatchObject([{ action: 'deny', command: 'ls -la', args: [], reason: 'bash_disabled' }])
  })

  test('2. tokenizer: metacharacters and empty commands are refused, and audited', async () => {
    const { sandbox, auditLog } = make()
    for (const cmd of ['ls | cat', 'ls && rm x', 'ls; rm', 'echo $HOME', 'ls `id`', 'ls > /tmp/out', 'ls < x', 'cat ~/x', 'ls #', 'a\\b', 'ls (x)', 'ls {a}', 'ls !x']) {
      expect((await refusal(sandbox.execute(cmd))).message, cmd).toBe('Shell metacharacters rejected')
    }
    expect((await refusal(sandbox.execute('   '))).message).toBe('Empty command')
    expect(() => sandbox.tokenize('ls | x')).toThrow(SandboxError)
    expect(sandbox.tokenize('  git   log  --oneline ')).toEqual({ binary: 'git', args: ['log', '--oneline'] })
    const entries = audit(auditLog)
    expect(entries).toHaveLength(14)
    expect(entries[0]).toMatchObject({ action: 'deny', command: 'ls | cat', reason: 'tokenize_rejected: Shell metacharacters rejected' })
  })

  test('3-5. policy, subcommands and denied flags in every form', async () => {
    const { sandbox, auditLog } = make()
    const cases: [string, string, string][] = [
      ['curl http://evil.com', 'Command not allowed: curl', 'binary_not_allowed: curl'],
      ['git', 'Subcommand required for: git', 'subcommand_required'],
      ['git push', 'Subcommand not allowed: git push', 'subcommand_denied: push'],
      ['git log -c', 'Flag not allowed: -c', 'flag_denied: -c'],
      ['git log -ccore.pager=x', 'Flag not allowed: -c', 'flag_denied: -c'],
      ['git log --exec-path=/tmp/evil', 'Flag not allowed: --exec-path', 'flag_denied: --exec-path'],
      ['git log --git-dir=/etc', 'Flag not allowed: --git-dir', 'flag_denied: --git-dir'],
      ['git status --work-tree=/', 'Flag not allowed: --work-tree', 'flag_denied: --work-tree'],
    ]
    for (const [cmd, message] of cases) expect((await refusal(sandbox.execute(cmd))).message, cmd).toBe(message)
    expect(audit(auditLog).map((e) => e.reason)).toEqual(cases.map((c) => c[2]))
  })

  test('6. jail: traversal, absolute paths, symlinks (even inside) are refused; args become canonical paths', async () => {
    const { sandbox, jail, auditLog } = make()
    writeFileSync(join(jail, 'file.txt'), 'inside\n')
    mkdirSync(join(jail, 'sub'))
    symlinkSync('/etc/passwd', join(jail, 'evil-link'))
    symlinkSync(join(jail, 'file.txt'), join(jail, 'inner-link'))
    expect((await refusal(sandbox.execute('cat ../../../etc/passwd'))).message).toBe('Path escapes jail: ../../../etc/passwd')
    expect((await refusal(sandbox.execute('cat /etc/passwd'))).message).toBe('Path escapes jail: /etc/passwd')
    expect((await refusal(sandbox.execute('cat evil-link'))).message).toBe('Symlink rejected: evil-link')
    expect((await refusal(sandbox.execute('cat inner-link'))).message).toBe('Symlink rejected: inner-link')
    const ok = await sandbox.execute('cat sub/../file.txt')
    expect(ok).toEqual({ stdout: 'inside\n', stderr: '', exitCode: 0, timedOut: false, truncated: false })
    const missing = await sandbox.execute('ls -d not-there')
    expect(missing.exitCode).not.toBe(0)
    expect(missing.stderr).toContain(join(jail, 'not-there'))
    const reasons = audit(auditLog).filter((e) => e.action === 'deny').map((e) => e.reason)
    expect(reasons[0]).toBe('path_rejected: Path escapes jail: ../../../etc/passwd')
  })

  test('FilesystemJail directly', () => {
    const jail = jailDir()
    const fsJail = new FilesystemJail(jail)
    expect(fsJail.getJailRoot()).toBe(jail)
    expect(fsJail.validatePath('new/file.txt')).toBe(join(jail, 'new/file.txt'))
    expect(() => fsJail.validatePath('../x')).toThrow(/escapes jail/)
    expect(() => new FilesystemJail(join(jail, 'missing'))).toThrow(/ENOENT/)
  })

  test("getJail() refuses what the sandbox refuses commands: the audit log, .git/hooks, .git/config", async () => {
    const { sandbox, jail } = make()
    git(jail, 'init', '-q')
    writeFileSync(join(jail, 'notes.md'), 'n')
    await sandbox.execute('ls') // the audit log exists now
    const hostJail = sandbox.getJail()
    expect(hostJail.getJailRoot()).toBe(jail)
    expect(hostJail.validatePath('notes.md')).toBe(join(jail, 'notes.md'))
    expect(hostJail.validatePath('.git/HEAD')).toBe(join(jail, '.git/HEAD'))
    const refused = (path: string) => {
      try {
        hostJail.validatePath(path)
      } catch (e) {
        expect(e).toBeInstanceOf(SandboxError)
        return (e as Error).message
      }
      return 'accepted'
    }
    expect(refused('audit/audit.log')).toBe('Path is reserved for the host: audit/audit.log')
    for (const path of ['.git/hooks/pre-commit', '.git/hooks', '.git/config', './sub/../.git/config', '.git/config.worktree']) {
      expect(refused(path), path).toBe(`Path is protected (no command may write it): ${path}`)
    }
    // Commands still read them: only writes are theirs to refuse.
    expect((await sandbox.execute('cat .git/config')).exitCode).toBe(0)
    // The rule is the sandbox's isolation `fs.protect`, not a copy of its default.
    const custom = make({ isolation: { fs: { protect: ['private'] } } }).sandbox.getJail()
    expect(() => custom.validatePath('private/key')).toThrow('Path is protected (no command may write it): private/key')
    expect(custom.validatePath('.git/config')).toBe(join(custom.getJailRoot(), '.git/config'))
  })

  test('6a. a binary that does not exist fails closed', async () => {
    const { sandbox, auditLog } = make({ policies: { tool: policy('/__missing_binary__/tool') } })
    expect((await refusal(sandbox.execute('tool'))).message).toBe('Binary not available: tool')
    expect(audit(auditLog)[0]).toMatchObject({ action: 'deny', reason: 'binary_not_found_or_unresolvable: /__missing_binary__/tool' })
  })

  test('7. an audit failure lets only ls/cat/wc run', async () => {
    const jail = jailDir()
    writeFileSync(join(jail, 'audit'), 'a file where the audit directory should be')
    const sandbox = new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 5000, maxOutput: 4096 }, new AuditLog(jail), pool)
    expect((await refusal(sandbox.execute('git status'))).message).toBe('Audit log write failed — command denied (fail-closed)')
    expect((await sandbox.execute('ls')).exitCode).toBe(0)
  })

  test('8. the command runs with exactly the sandbox env, cwd the jail, HOME the jail', async () => {
    const { sandbox, jail } = make({ policies: { env: policy('/usr/bin/env') } })
    process.env.FINN_CANARY = 'must-not-leak'
    const r = await sandbox.execute('env')
    delete process.env.FINN_CANARY
    const env = Object.fromEntries(r.stdout.trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]))
    expect(env).toMatchObject({
      PATH: '/usr/local/bin:/usr/bin:/bin',
      HOME: jail,
      LANG: 'en_US.UTF-8',
      TERM: 'dumb',
      GIT_PAGER: 'cat',
      PAGER: 'cat',
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_CONFIG_SYSTEM: '/dev/null',
      GIT_TERMINAL_PROMPT: '0',
      GIT_CEILING_DIRECTORIES: join(jail, '..'),
    })
    expect(env.FINN_CANARY).toBeUndefined()
    expect(Object.keys(env).filter((k) => !k.startsWith('GIT_'))).toEqual(['PATH', 'HOME', 'LANG', 'TERM', 'PAGER'])
  })

  test('9. output is redacted and the outcome audited with duration, size, exit code', async () => {
    process.env.ANTHROPIC_API_KEY = 'sk-ant-api-my-very-secret-key-12345'
    const { sandbox, jail, auditLog } = make()
    delete process.env.ANTHROPIC_API_KEY
    writeFileSync(join(jail, 'leak.txt'), 'key sk-ant-api-my-very-secret-key-12345 and found sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ in logs\npassword: "hunter2hunter2hunter2hunter2"\n')
    const r = await sandbox.execute('cat leak.txt')
    expect(r.stdout).toBe('key [REDACTED] and found [REDACTED] in logs\npassword: "[REDACTED]"\n')
    const outcome = audit(auditLog).at(-1)!
    expect(outcome).toMatchObject({ action: 'allow', command: 'cat', args: ['leak.txt'], exitCode: 0, timedOut: false, truncated: false })
    expect(outcome.outputSize).toBe(Buffer.byteLength(r.stdout))
    expect(typeof outcome.duration).toBe('number')
  })

  test('a timeout is timedOut with 137 from EXEC_TIMEOUT; an exit of 137 alone is not a timeout', async () => {
    const jail = jailDir()
    const selfKill = join(jail, 'selfkill.sh')
    writeFileSync(selfKill, '#!/bin/sh\nkill -KILL $$\n')
    chmodSync(selfKill, 0o755)
    const policies = { sleep: policy('/bin/sleep'), selfkill: policy(selfKill) }
    const { sandbox, auditLog } = make({ jailRoot: jail, execTimeout: 200, policies })
    expect(await sandbox.execute('sleep 30')).toEqual({ stdout: '', stderr: 'Command timed out after 200ms', exitCode: 137, timedOut: true, truncated: false })
    expect(audit(auditLog).at(-1)).toMatchObject({ timedOut: true, exitCode: 137 })
    expect(await sandbox.execute('selfkill')).toMatchObject({ exitCode: 137, timedOut: false })
  })

  test('output over maxOutput is truncated with the marker', async () => {
    const { sandbox, jail } = make({ maxOutput: 100 })
    writeFileSync(join(jail, 'big.txt'), 'x'.repeat(10_000))
    const r = await sandbox.execute('cat big.txt')
    expect(r.truncated).toBe(true)
    expect(r.stdout.endsWith('\n[TRUNCATED at maxBuffer]')).toBe(true)
    expect(Buffer.byteLength(r.stdout)).toBeLessThanOrEqual(100)
  })

  test('an AbortSignal terminates the command', async () => {
    const { sandbox } = make({ policies: { sleep: policy('/bin/sleep') } })
    const ac = new AbortController()
    const running = sandbox.execute('sleep 30', { signal: ac.signal, sessionId: 's1' })
    setTimeout(() => ac.abort(), 50)
    const err = await running.then(() => null, (e: unknown) => e)
    expect(err).toBeInstanceOf(PoolError)
    expect((err as PoolError).code).toBe(PoolErrorCode.ABORTED)
  })

  test('a signal that cannot be listened to is refused before the check: nothing runs, nothing is audited as allowed', async () => {
    const { sandbox, auditLog, jail } = make({ policies: { touch: policy('/usr/bin/touch', { validatePaths: true }) } })
    const signal = new AbortController().signal
    signal.addEventListener = () => {
      throw new Error('no listeners here')
    }
    const err = await refusal(sandbox.execute('touch made', { signal }))
    expect(err.message).toBe('options.signal.addEventListener threw: no listeners here')
    const aborted = Object.defineProperty(new AbortController().signal, 'aborted', {
      get() {
        throw new Error('aborted is broken')
      },
    })
    expect((await refusal(sandbox.execute('touch made', { signal: aborted }))).message).toBe('options.signal.aborted threw: aborted is broken')
    // The next command settles after any job of the refused ones would have (commands start
    // in order): none ran, and the audit has this one's entries only.
    expect((await sandbox.execute('touch other')).exitCode).toBe(0)
    expect(existsSync(join(jail, 'made'))).toBe(false)
    expect(audit(auditLog).map((e) => [e.action, e.args])).toEqual([
      ['allow', ['other']],
      ['allow', ['other']],
    ])
  })

  test('an abort while the command is still being checked (off the JS thread) stops it too', async () => {
    const { sandbox } = make({ policies: { sleep: policy('/bin/sleep') } })
    const ac = new AbortController()
    const started = performance.now()
    const running = sandbox.execute('sleep 30', { signal: ac.signal })
    ac.abort()
    const err = await running.then(() => null, (e: unknown) => e)
    expect(err).toBeInstanceOf(PoolError)
    expect((err as PoolError).code).toBe(PoolErrorCode.ABORTED)
    expect(performance.now() - started).toBeLessThan(10_000)
  })
})

describe('the holes found in loa-finn, closed', () => {
  test('flags that read or write outside the jail, and their abbreviations', async () => {
    const { sandbox } = make()
    expect((await refusal(sandbox.execute('git diff --no-index /etc/passwd x'))).message).toBe('Flag not allowed: --no-index')
    expect((await refusal(sandbox.execute('git log --output=/tmp/finn-pwned'))).message).toBe('Flag not allowed: --output')
    expect((await refusal(sandbox.execute('git log --outp=/tmp/finn-pwned'))).message).toBe('Flag not allowed: --output')
    expect((await refusal(sandbox.execute('git diff --ext-diff'))).message).toBe('Flag not allowed: --ext-diff')
    expect((await refusal(sandbox.execute('git log -p --textconv'))).message).toBe('Flag not allowed: --textconv')
    expect((await refusal(sandbox.execute('wc --files0-from=/etc/passwd'))).message).toBe('Flag not allowed: --files0-from')
  })

  test('git does not walk up from the jail into an enclosing repository', async () => {
    const outer = jailDir('finn-outer-')
    git(outer, 'init', '-q')
    writeFileSync(join(outer, 'secret.txt'), 'outer secret\n')
    git(outer, 'add', '.')
    git(outer, 'commit', '-qm', 'outer')
    mkdirSync(join(outer, 'data'))
    const { sandbox } = make({ jailRoot: join(outer, 'data') })
    const log = await sandbox.execute('git log --oneline')
    expect(log.exitCode).not.toBe(0)
    expect(log.stderr).toMatch(/not a git repository/)
    const show = await sandbox.execute('git show HEAD:secret.txt')
    expect(show.stdout).not.toContain('outer secret')
  })

  test('a repository config written by the agent runs nothing: fsmonitor, hooks, external diff, textconv, pager', async () => {
    const { sandbox, jail, marker, script } = repoJail()
    const hooks = join(jail, '.git', 'hooks')
    for (const hook of ['post-index-change', 'pre-commit', 'post-checkout']) {
      writeFileSync(join(hooks, hook), `#!/bin/sh\ntouch ${marker}\n`)
      chmodSync(join(hooks, hook), 0o755)
    }
    // The job's spec on a clean repository: the environment is the second layer, tested alone.
    const specs: ExecSpec[] = []
    const recorder = make({ jailRoot: jail }, { exec: async (spec: ExecSpec) => (specs.push(spec), { stdout: '', stderr: '', exitCode: 0, truncated: false }) })
    for (const cmd of ['git status', 'git diff', 'git log -p', 'git show HEAD']) await recorder.sandbox.execute(cmd)
    writeFileSync(join(jail, '.gitattributes'), '*.txt diff=evil\n')
    const config = readFileSync(join(jail, '.git', 'config'), 'utf8')
    writeFileSync(
      join(jail, '.git', 'config'),
      `${config}[core]\n\tfsmonitor = ${script}\n\tpager = ${script}\n\thooksPath = ${hooks}\n[diff]\n\texternal = ${script}\n[diff "evil"]\n\ttextconv = ${script}\n\tcommand = ${script}\n[log]\n\tshowSignature = true\n[gpg]\n\tprogram = ${script}\n`,
    )
    // First layer: the allowlist refuses the repository, naming the first key.
    for (const cmd of ['git status', 'git diff', 'git log -p', 'git show HEAD']) {
      expect((await refusal(sandbox.execute(cmd))).message, cmd).toMatch(/^Repository config rejected: core\.fsmonitor is not on the allowlist/)
    }
    // Second layer: the same jobs run by hand with the hostile config in place.
    expect(specs).toHaveLength(4)
    for (const spec of specs) {
      const out = execFileSync(spec.binaryPath, spec.args, { cwd: spec.cwd, env: spec.env as NodeJS.ProcessEnv, encoding: 'utf8' })
      if (spec.args[0] === 'diff') expect(out).toContain('-one\n+two')
    }
    expect(existsSync(marker)).toBe(false)
  })

  test('filter drivers, includes and core.worktree are refused before git runs, by key name', async () => {
    const { sandbox, jail, marker, script, auditLog } = repoJail()
    const config = readFileSync(join(jail, '.git', 'config'), 'utf8')
    writeFileSync(join(jail, '.gitattributes'), '*.txt filter=evil\n')
    writeFileSync(join(jail, '.git', 'config'), `${config}[filter "evil"]\n\tclean = ${script}\n\tsmudge = ${script}\n`)
    expect((await refusal(sandbox.execute('git status'))).message).toMatch(/^Repository config rejected: filter\.evil\.clean is not on the allowlist/)
    writeFileSync(join(jail, '.git', 'config'), `${config}[include]\n\tpath = /tmp/elsewhere\n`)
    expect((await refusal(sandbox.execute('git diff'))).message).toMatch(/^Repository config rejected: include\.path is not on the allowlist/)
    writeFileSync(join(jail, '.git', 'config'), `${config}[core]\n\tworktree = /etc\n`)
    expect((await refusal(sandbox.execute('git status'))).message).toMatch(/^Repository config rejected: core\.worktree is not on the allowlist/)
    expect(existsSync(marker)).toBe(false)
    expect(audit(auditLog).at(-1)).toMatchObject({ action: 'deny', reason: expect.stringMatching(/^repository_rejected: core\.worktree is not on the allowlist/) })
  })

  test('a .git file pointing outside the jail is refused', async () => {
    const { sandbox, jail } = make()
    writeFileSync(join(jail, '.git'), 'gitdir: /etc\n')
    expect((await refusal(sandbox.execute('git status'))).message).toBe('Repository config rejected: gitdir points outside the jail')
  })
})

describe("Node's thread", () => {
  /** A repository jail whose git (found on PATH when the sandbox is made) sleeps 0.4 s per run. */
  function slowGitJail(overrides: Partial<SandboxConfig> = {}, executor: unknown = pool) {
    const bin = jailDir('finn-slow-git-')
    const fake = join(bin, 'git')
    writeFileSync(fake, `#!/bin/sh\nsleep 0.4\nexec ${GIT} "$@"\n`)
    chmodSync(fake, 0o755)
    const path = process.env.PATH
    process.env.PATH = `${bin}:${path}`
    try {
      return repoJail(overrides, executor)
    } finally {
      process.env.PATH = path
    }
  }

  // The checks before a git command run git (the index's entries, the remote); an agent's
  // repository can make that slow (a huge index). They used to run inside execute()'s
  // synchronous part, holding up the event loop for as long as git took.
  test('the repository check runs git off the JS thread: a slow git never holds up execute()', async () => {
    const { sandbox } = slowGitJail()
    const t0 = performance.now()
    const pending = sandbox.execute('git status --short')
    const syncMs = performance.now() - t0
    const result = await pending
    const totalMs = performance.now() - t0
    expect(result.exitCode).toBe(0)
    expect(result.stdout).toContain('a.txt')
    // The check ran the slow git too (at least once, 0.4 s, besides the command's own 0.4 s):
    // a lower bound, which no load can break.
    expect(totalMs).toBeGreaterThanOrEqual(800)
    expect(syncMs).toBeLessThan(150)
  })

  test('commands start in the order execute() was called, even when a later check ends first', async () => {
    const tiny = new WorkerPool({ interactiveWorkers: 1, maxQueueDepth: 0 })
    try {
      const { sandbox } = slowGitJail({}, tiny)
      // The git command's check takes 0.4 s or more, ls's a few ms: the pool has room for one.
      const first = sandbox.execute('git status --short')
      const second = sandbox.execute('ls')
      const err = await second.then(() => null, (e: unknown) => e)
      expect(err).toMatchObject({ name: 'PoolError', code: 'WORKER_UNAVAILABLE' })
      expect((await first).exitCode).toBe(0)
    } finally {
      await tiny.shutdown()
    }
  })
})

describe('SecretRedactor', () => {
  test('loa-finn behaviour, and sk-ant keys anywhere', () => {
    const r = new SecretRedactor({ ANTHROPIC_API_KEY: 'sk-ant-api-my-very-secret-key-12345', FINN_AUTH_TOKEN: 'short', GIT_TOKEN: undefined })
    expect(r.redact('The key is sk-ant-api-my-very-secret-key-12345 and more text')).toBe('The key is [REDACTED] and more text')
    expect(r.redact('Token is short')).toBe('Token is short')
    expect(r.redact('found sk-ant-api03-XXXXXXXXXXXXXXXXXXXXXXXXX in logs')).toBe('found [REDACTED] in logs')
    expect(r.redact('token: "abc123def456ghi789jkl012mnop"')).toBe('token: "[REDACTED]"')
    expect(new SecretRedactor({ GITHUB_TOKEN: 'ghp_0123456789abcdef' }).redact('x ghp_0123456789abcdef y')).toBe('x [REDACTED] y')
  })
})

describe('AuditLog', () => {
  test('several sandboxes on one log directory rotate as one file, lines never interleave', async () => {
    const jail = jailDir()
    writeFileSync(join(jail, 'f.txt'), 'x')
    const roomy = new WorkerPool({ interactiveWorkers: 4, maxQueueDepth: 100 })
    const sandboxes = [1, 2, 3].map(
      () => new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 5000, maxOutput: 4096 }, new AuditLog(jail, { maxFileSize: 2000, maxFiles: 3 }), roomy),
    )
    await Promise.all(Array.from({ length: 60 }, (_, i) => sandboxes[i % 3].execute('cat f.txt')))
    await roomy.shutdown()
    const dir = join(jail, 'audit')
    expect(readdirSync(dir).sort()).toEqual(['audit.1.log', 'audit.2.log', 'audit.3.log', 'audit.log'])
    for (const name of readdirSync(dir)) {
      const text = readFileSync(join(dir, name), 'utf8')
      const lines = text.trim().split('\n')
      // A file rotates once it has reached maxFileSize, so it ends below that plus its last line
      // (outcome lines carry the isolation's degraded list, longer for an unprivileged user).
      const longest = Math.max(...lines.map((l) => Buffer.byteLength(l) + 1))
      expect(Buffer.byteLength(text)).toBeLessThan(2000 + longest)
      for (const line of lines) expect(() => JSON.parse(line)).not.toThrow()
    }
  })

  test('append returns false instead of throwing', () => {
    const file = join(jailDir(), 'not-a-dir')
    writeFileSync(file, '')
    const log = new AuditLog(file)
    expect(log.getLogDir()).toBe(join(file, 'audit'))
    expect(log.append({ timestamp: new Date().toISOString(), action: 'allow', command: 'ls', args: [] })).toBe(false)
    expect(new AuditLog(jailDir()).append({ bogus: true } as never)).toBe(false)
  })
})

describe('executors', () => {
  test('createExecutor returns loa-finn executor classes and fails closed on unknown modes', async () => {
    expect(createExecutor('worker', pool)).toBeInstanceOf(WorkerExecutor)
    expect(createExecutor('child_process', pool)).toBeInstanceOf(ChildProcessExecutor)
    const disabled = createExecutor('disabled', pool)
    expect(disabled).toBeInstanceOf(DisabledExecutor)
    const err = await disabled.exec({} as ExecSpec).then(() => null, (e: unknown) => e)
    expect(err).toBeInstanceOf(PoolError)
    expect(err).toMatchObject({ code: 'SANDBOX_DISABLED', message: 'Sandbox is disabled (SANDBOX_MODE=disabled). Tool execution is not available.' })
    expect(() => createExecutor('bogus' as never, pool)).toThrow(new PoolError(PoolErrorCode.SANDBOX_DISABLED, 'Invalid SANDBOX_MODE: bogus. Tool execution is not available.'))
  })

  test('child_process mode runs commands with the same guarantees', async () => {
    const { sandbox, jail } = make({}, createExecutor('child_process', pool))
    writeFileSync(join(jail, 'x.txt'), 'cp\n')
    expect((await sandbox.execute('cat x.txt')).stdout).toBe('cp\n')
  })

  test('any JS executor gets the full spec; its timeout maps to timedOut, other failures are audited and rethrown', async () => {
    const specs: ExecSpec[] = []
    let behaviour: 'ok' | 'timeout' | 'boom' = 'ok'
    const executor = {
      async exec(spec: ExecSpec) {
        specs.push(spec)
        if (behaviour === 'timeout') throw new PoolError(PoolErrorCode.EXEC_TIMEOUT, 'Command timed out after 5ms')
        if (behaviour === 'boom') throw new PoolError(PoolErrorCode.WORKER_UNAVAILABLE, 'Interactive queue full')
        return { stdout: 'token=abcdefghijklmnopqrstuvwxyz', stderr: '', exitCode: 3, truncated: false, durationMs: 1 }
      },
    }
    const { sandbox, jail, auditLog } = make({ execTimeout: 1234, maxOutput: 999 }, executor)
    writeFileSync(join(jail, 'f'), '')
    expect(await sandbox.execute('cat f')).toEqual({ stdout: 'token=[REDACTED]', stderr: '', exitCode: 3, timedOut: false, truncated: false })
    expect(specs[0]).toMatchObject({ binaryPath: realpathSync('/bin/cat'), args: [join(jail, 'f')], cwd: jail, timeoutMs: 1234, maxBuffer: 999 })
    expect(specs[0].env.HOME).toBe(jail)
    behaviour = 'timeout'
    expect(await sandbox.execute('cat f')).toMatchObject({ timedOut: true, exitCode: 137, stderr: 'Command timed out after 5ms' })
    behaviour = 'boom'
    const err = await sandbox.execute('cat f').then(() => null, (e: unknown) => e)
    expect(err).toMatchObject({ name: 'PoolError', code: 'WORKER_UNAVAILABLE' })
    expect(audit(auditLog).at(-1)).toMatchObject({ action: 'allow', reason: 'execution_failed: WORKER_UNAVAILABLE' })
  })

  test('without an executor the command resolves disabled, and the outcome is still audited', async () => {
    const { sandbox, auditLog } = make({}, null)
    expect(await sandbox.execute('ls')).toEqual({ stdout: '', stderr: 'Sandbox is disabled (no executor available)', exitCode: 1, timedOut: false, truncated: false })
    expect(audit(auditLog).map((e) => [e.action, e.reason])).toEqual([
      ['allow', undefined],
      ['allow', 'no_executor'],
    ])
  })

  test('a full pool queue is audited as execution_failed and rejects with the PoolError', async () => {
    const tiny = new WorkerPool({ interactiveWorkers: 1, maxQueueDepth: 0 })
    const { sandbox, auditLog } = make({ policies: { sleep: policy('/bin/sleep') } }, tiny)
    const first = sandbox.execute('sleep 0.2')
    const err = await sandbox.execute('sleep 0.2').then(() => null, (e: unknown) => e)
    expect(err).toMatchObject({ name: 'PoolError', code: 'WORKER_UNAVAILABLE' })
    await first
    expect(audit(auditLog).some((e) => e.reason === 'execution_failed: WORKER_UNAVAILABLE')).toBe(true)
    await tiny.shutdown()
  })
})

// ToolSandbox isolation: the default `auto`, the per-command
// topology, the audit's applied/degraded, and JS executors. Every attack is judged from the host
// (a marker file, a listener this test starts), and runs again with `mode: "off"`, where it must
// land: that is each assertion's failing case.
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from 'node:fs'
import { connect, createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import { rejectionOf } from './helpers.js'
import {
  AuditLog,
  DisabledExecutor,
  PoolError,
  SandboxError,
  ToolSandbox,
  WorkerPool,
  probeIsolation,
  type AuditEntry,
  type CommandPolicy,
  type ExecSpec,
  type SandboxConfig,
} from '../index.js'

const pool = new WorkerPool({ interactiveWorkers: 2, killGraceMs: 200 })
afterAll(() => pool.shutdown())

const NODE = realpathSync(process.execPath)
const GIT = realpathSync(execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim())
const host = probeIsolation()
const root = host.uid === 0
/** Namespaces (mount, net, pid) apply: as root, or as non-root inside a user namespace. */
const ns = host.sysAdmin || host.userns

type Isolation = SandboxConfig['isolation']

/** `<base>/jail` and `<base>/data` (the audit log, outside the jail); `base` is outside. */
function dirs() {
  const base = realpathSync(mkdtempSync(join(tmpdir(), 'finn-sbx-iso-')))
  const jail = join(base, 'jail')
  mkdirSync(jail)
  return { base, jail, data: join(base, 'data') }
}

function nodePolicy(extra: Partial<CommandPolicy> = {}): CommandPolicy {
  return { binary: NODE, subcommands: [], deniedFlags: [], validatePaths: true, ...extra }
}

/**
 * A sandbox whose policies run Node on a script in the jail (the agent writes the jail): as
 * `node`, a program that may write the jail, and as `cat`, a name the topology gives a
 * read-only jail (the topology keys on the name the policy gives the program).
 */
function nodeSandbox(isolation: Isolation, executor: unknown = pool) {
  const d = dirs()
  const auditLog = new AuditLog(d.data)
  const config: SandboxConfig = {
    allowBash: true,
    jailRoot: d.jail,
    execTimeout: 20_000,
    maxOutput: 65_536,
    policies: { node: nodePolicy(), cat: nodePolicy() },
    ...(isolation === undefined ? {} : { isolation }),
  }
  const sandbox = new ToolSandbox(config, auditLog, executor as WorkerPool)
  return { ...d, sandbox, auditLog }
}

function audit(log: AuditLog): (AuditEntry & Record<string, unknown>)[] {
  const text = readFileSync(join(log.getLogDir(), 'audit.log'), 'utf8')
  return text.trim().split('\n').map((line) => JSON.parse(line))
}

function script(jail: string, name: string, body: string): string {
  writeFileSync(join(jail, name), body)
  return name
}

function git(cwd: string, ...args: string[]) {
  return execFileSync(GIT, args, {
    cwd,
    encoding: 'utf8',
    env: { PATH: process.env.PATH, HOME: cwd, GIT_CONFIG_GLOBAL: '/dev/null', GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' },
  })
}

/** A TCP listener on 127.0.0.1 that records the peer port of every connection it accepts. */
async function listener() {
  const peers: number[] = []
  let seen = () => {}
  const server: Server = createServer((s) => {
    peers.push(s.remotePort ?? -1)
    s.destroy()
    seen()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as { port: number }).port
  return {
    server,
    port,
    /**
     * Connects from the host and waits until the listener has accepted that connection: it
     * accepts in order, so every connection made before it has been counted by then.
     */
    async acceptedBeforeProbe(): Promise<number> {
      const probe = connect(port, '127.0.0.1')
      await new Promise<void>((resolve, reject) => probe.on('connect', resolve).on('error', reject))
      const mine = probe.localPort
      await new Promise<void>((resolve) => {
        seen = () => peers.includes(mine ?? -2) && resolve()
        seen()
      })
      probe.destroy()
      return peers.indexOf(mine ?? -2)
    },
  }
}

/** The layers this host applies by default, as the pool reports them. */
const EXPECTED_DEGRADED = [...(root ? [] : ['cgroup']), ...(ns ? [] : ['mountns'])]

describe.each([
  ['auto', undefined],
  ['off', { mode: 'off' } as const],
])('isolation %s', (mode, isolation) => {
  const lands = mode === 'off'

  test('a program that may write the jail writes inside it, never outside', async () => {
    const { sandbox, jail, base } = nodeSandbox(isolation)
    const outside = join(base, 'outside-marker')
    const evil = script(jail, 'w.js', `const fs = require('fs')
fs.writeFileSync(${JSON.stringify(join(jail, 'inside'))}, 'ok')
try { fs.writeFileSync(${JSON.stringify(outside)}, 'escaped') } catch (e) { process.stdout.write(e.code) }
`)
    const r = await sandbox.execute(`node ${evil}`)
    expect(r.exitCode).toBe(0)
    expect(readFileSync(join(jail, 'inside'), 'utf8')).toBe('ok')
    expect(existsSync(outside)).toBe(lands)
  })

  test('a read-only program cannot write the jail', async () => {
    const { sandbox, jail } = nodeSandbox(isolation)
    const marker = join(jail, 'written-by-a-reader')
    const evil = script(jail, 'r.js', `try { require('fs').writeFileSync(${JSON.stringify(marker)}, 'x') } catch (e) { process.stdout.write(e.code) }\n`)
    const r = await sandbox.execute(`cat ${evil}`)
    expect(r.exitCode).toBe(0)
    expect(existsSync(marker)).toBe(lands)
    if (!lands) expect(r.stdout).toMatch(/^E(ACCES|PERM|ROFS)$/)
  })

  test('a program cannot read the audit log kept outside the jail', async () => {
    const { sandbox, jail, auditLog } = nodeSandbox(isolation)
    const token = `TOKEN${Date.now()}`
    await expect(sandbox.execute(`curl ${token}`)).rejects.toThrow('Command not allowed: curl')
    const log = join(auditLog.getLogDir(), 'audit.log')
    expect(readFileSync(log, 'utf8')).toContain(token)
    for (const name of ['node', 'cat']) {
      const evil = script(jail, `l-${name}.js`, `try { process.stdout.write(require('fs').readFileSync(${JSON.stringify(log)}, 'utf8')) } catch (e) { process.stdout.write(e.code) }\n`)
      const r = await sandbox.execute(`${name} ${evil}`)
      expect(r.stdout.includes(token), name).toBe(lands)
      if (!lands) expect(r.stdout, name).toMatch(/^E(ACCES|PERM|NOENT)$/)
    }
  })

  test('cat of a file swapped for a symlink to an outside file after the jail checked it', async () => {
    const { jail, data, base } = dirs()
    const secret = join(base, 'secret.txt')
    writeFileSync(secret, 'OUTSIDE-SECRET\n')
    writeFileSync(join(jail, 'notes.txt'), 'notes\n')
    // The race, made deterministic: the agent swaps the file once the command passed its checks.
    const racing = {
      exec(spec: ExecSpec) {
        execFileSync('ln', ['-sfn', secret, join(jail, 'notes.txt')])
        return pool.exec(spec)
      },
    }
    const config: SandboxConfig = { allowBash: true, jailRoot: jail, execTimeout: 20_000, maxOutput: 65_536, ...(isolation === undefined ? {} : { isolation }) }
    const sandbox = new ToolSandbox(config, new AuditLog(data), racing)
    const r = await sandbox.execute('cat notes.txt')
    expect(r.stdout.includes('OUTSIDE-SECRET')).toBe(lands)
    if (!lands) expect(r.stderr).toMatch(/Permission denied/)
    // Another process's file in /dev/shm is outside too.
    const shm = join('/dev/shm', `finn-${Date.now()}-${process.pid}`)
    writeFileSync(shm, 'SHM-SECRET\n')
    try {
      writeFileSync(join(jail, 'n2.txt'), 'n2\n')
      const viaShm = new ToolSandbox(config, new AuditLog(data), { exec: (spec: ExecSpec) => (execFileSync('ln', ['-sfn', shm, join(jail, 'n2.txt')]), pool.exec(spec)) })
      expect((await viaShm.execute('cat n2.txt')).stdout.includes('SHM-SECRET')).toBe(lands)
    } finally {
      execFileSync('rm', ['-f', shm])
    }
    // Inside the jail, cat still reads.
    writeFileSync(join(jail, 'other.txt'), 'inside\n')
    const plain = new ToolSandbox(config, new AuditLog(data), pool)
    expect((await plain.execute('cat other.txt')).stdout).toBe('inside\n')
  })

  test("git log after .git was swapped for a symlink to another repository's, once checked", async () => {
    const { jail, data, base } = dirs()
    git(jail, 'init', '-q')
    git(jail, 'commit', '-q', '--allow-empty', '-m', 'mine')
    const other = join(base, 'other')
    mkdirSync(other)
    git(other, 'init', '-q')
    git(other, 'commit', '-q', '--allow-empty', '-m', 'OUTSIDE-SECRET')
    const racing = {
      exec(spec: ExecSpec) {
        execFileSync('mv', [join(jail, '.git'), join(jail, 'moved')])
        execFileSync('ln', ['-s', join(other, '.git'), join(jail, '.git')])
        return pool.exec(spec)
      },
    }
    const config: SandboxConfig = { allowBash: true, jailRoot: jail, execTimeout: 20_000, maxOutput: 65_536, ...(isolation === undefined ? {} : { isolation }) }
    const sandbox = new ToolSandbox(config, new AuditLog(data), racing)
    const r = await sandbox.execute('git log --format=%s')
    expect(`${r.stdout}${r.stderr}`.includes('OUTSIDE-SECRET')).toBe(lands)
  })

  test('a command gets no network: TCP to a listener the test starts on 127.0.0.1', async () => {
    const l = await listener()
    try {
      const { sandbox, jail } = nodeSandbox(isolation)
      const evil = script(jail, 'n.js', `const s = require('net').connect(${l.port}, '127.0.0.1')
s.on('connect', () => { process.stdout.write('connected'); s.end() })
s.on('error', (e) => process.stdout.write(e.code))
`)
      const r = await sandbox.execute(`node ${evil}`)
      expect(await l.acceptedBeforeProbe()).toBe(lands ? 1 : 0)
      if (!lands) expect(r.stdout).toMatch(/^E(ACCES|PERM)$/)
    } finally {
      l.server.close()
    }
  })
})

/** A jail that is a git repository with one commit and a modified file; default policies. */
function repoSandbox(isolation: Isolation, executor: unknown = pool) {
  const d = dirs()
  git(d.jail, 'init', '-q')
  writeFileSync(join(d.jail, 'a.txt'), 'one\n')
  git(d.jail, 'add', 'a.txt')
  git(d.jail, 'commit', '-qm', 'init')
  writeFileSync(join(d.jail, 'a.txt'), 'two\n')
  const auditLog = new AuditLog(d.data)
  const config: SandboxConfig = {
    allowBash: true,
    jailRoot: d.jail,
    execTimeout: 20_000,
    maxOutput: 65_536,
    ...(isolation === undefined ? {} : { isolation }),
  }
  const sandbox = new ToolSandbox(config, auditLog, executor as WorkerPool)
  return { ...d, sandbox, auditLog }
}

describe('git topology', () => {
  test('git status, log and diff work with the repository read-only, and git writes nothing', async () => {
    const { sandbox, jail, auditLog } = repoSandbox(undefined)
    const index = readFileSync(join(jail, '.git/index'))
    expect((await sandbox.execute('git status --porcelain')).stdout).toBe(' M a.txt\n')
    expect((await sandbox.execute('git log --oneline')).stdout).toMatch(/^[0-9a-f]+ init\n$/)
    expect((await sandbox.execute('git diff')).stdout).toContain('-one\n+two')
    expect(readFileSync(join(jail, '.git/index'))).toEqual(index)
    const outcomes = audit(auditLog).filter((e) => e.exitCode !== undefined)
    expect(outcomes).toHaveLength(3)
    for (const e of outcomes) {
      expect(e.exitCode).toBe(0)
      expect(e.isolation?.backend).toBe('native')
      expect(e.isolation?.applied).toEqual(expect.arrayContaining(['rlimits', 'privileges', 'landlock', 'seccomp']))
      expect(e.isolation?.degraded.map((d) => d.split(':')[0])).toEqual(EXPECTED_DEGRADED)
    }
  })

  test('git add and commit, when a policy lists them, write the repository under auto', async () => {
    const { jail, data } = dirs()
    git(jail, 'init', '-q')
    git(jail, 'config', 'user.name', 'agent')
    git(jail, 'config', 'user.email', 'agent@example.invalid')
    const config = readFileSync(join(jail, '.git/config'), 'utf8')
    writeFileSync(join(jail, 'b.txt'), 'b\n')
    const auditLog = new AuditLog(data)
    const gitPolicy: CommandPolicy = { binary: GIT, subcommands: ['status', 'log', 'add', 'commit'], deniedFlags: ['-c', '--exec-path', '--git-dir', '--work-tree'], validatePaths: false }
    const sandbox = new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 20_000, maxOutput: 65_536, policies: { git: gitPolicy } }, auditLog, pool)
    expect(await sandbox.execute('git add b.txt')).toMatchObject({ exitCode: 0, stderr: '' })
    expect(await sandbox.execute('git commit -q -m second')).toMatchObject({ exitCode: 0, stderr: '' })
    expect(git(jail, 'log', '--format=%s %an')).toBe('second agent\n')
    expect(git(jail, 'status', '--porcelain')).toBe('')
    expect(readFileSync(join(jail, '.git/config'), 'utf8')).toBe(config)
    const [add, commit] = audit(auditLog).filter((e) => e.exitCode !== undefined)
    for (const e of [add, commit]) {
      expect(e.isolation?.applied).toEqual(expect.arrayContaining(['landlock', 'seccomp']))
      expect(e.isolation?.applied.includes('protect')).toBe(ns)
    }
    // Paths to commit would read work tree files past `add`'s exclusions: refused.
    const err = await rejectionOf(sandbox.execute('git commit -m x b.txt'), SandboxError)
    expect(err.message).toBe('Flag not allowed: b.txt (git commit takes no paths; stage them with git add)')
  })

  test('git fetch and push reach a bare remote inside the jail; only they get the network', async () => {
    const { jail, data, base } = dirs()
    git(jail, 'init', '-q', '-b', 'main')
    git(jail, 'config', 'user.name', 'agent')
    git(jail, 'config', 'user.email', 'agent@example.invalid')
    writeFileSync(join(jail, 'a.txt'), 'a\n')
    git(jail, 'add', 'a.txt')
    git(jail, 'commit', '-qm', 'local')
    git(jail, 'init', '-q', '--bare', '-b', 'main', 'remote.git')
    // Someone else's commit, pushed to the remote from outside.
    const other = join(base, 'other')
    mkdirSync(other)
    git(other, 'init', '-q', '-b', 'main')
    git(other, 'commit', '-q', '--allow-empty', '-m', 'theirs')
    git(other, 'push', '-q', join(jail, 'remote.git'), 'main:refs/heads/theirs')
    git(jail, 'config', 'remote.origin.url', 'remote.git')
    git(jail, 'config', 'remote.origin.fetch', '+refs/heads/*:refs/remotes/origin/*')
    const gitPolicy: CommandPolicy = { binary: GIT, subcommands: ['log', 'fetch', 'push'], deniedFlags: ['-c', '--exec-path', '--git-dir', '--work-tree'], validatePaths: false }
    const auditLog = new AuditLog(data)
    const config: SandboxConfig = { allowBash: true, jailRoot: jail, execTimeout: 20_000, maxOutput: 65_536, policies: { git: gitPolicy } }
    const sandbox = new ToolSandbox(config, auditLog, pool)
    expect(await sandbox.execute('git fetch -q origin')).toMatchObject({ exitCode: 0, stderr: '' })
    expect(git(jail, 'rev-parse', 'refs/remotes/origin/theirs')).toBe(git(other, 'rev-parse', 'HEAD'))
    expect(await sandbox.execute('git push -q origin main')).toMatchObject({ exitCode: 0, stderr: '' })
    expect(git(join(jail, 'remote.git'), 'rev-parse', 'refs/heads/main')).toBe(git(jail, 'rev-parse', 'HEAD'))
    for (const e of audit(auditLog).filter((e) => e.exitCode !== undefined)) {
      expect(e.isolation?.applied).toEqual(expect.arrayContaining(['landlock', 'seccomp']))
    }
    // A remote outside the jail, or a URL as the operand, never runs.
    git(jail, 'config', 'remote.out.url', other)
    expect((await rejectionOf(sandbox.execute('git fetch out'), SandboxError)).message).toBe('Repository config rejected: remote out points outside the jail')
    expect((await rejectionOf(sandbox.execute(`git fetch ${other}`), SandboxError)).message).toMatch(/^Path escapes jail|^Flag not allowed/)
    // What each command is given: the network for fetch and push only.
    const specs: ExecSpec[] = []
    const recorder = { exec: async (spec: ExecSpec) => (specs.push(spec), { stdout: '', stderr: '', exitCode: 0, truncated: false, durationMs: 0 }) }
    const recorded = new ToolSandbox(config, new AuditLog(data), recorder)
    git(jail, 'config', 'remote.web.url', 'https://example.invalid/x.git')
    for (const c of ['git fetch web', 'git push web main', 'git fetch origin', 'git push origin main', 'git log']) await recorded.execute(c)
    // An https remote: its host only, through the pool's egress proxy (docs/network.md).
    const web = { allow: ['example.invalid'], allowPlainHttp: false, allowLocal: false, hosts: {} }
    expect(specs.map((s) => [s.args[0], s.isolation?.network, s.isolation?.fs?.writable])).toEqual([
      ['fetch', web, [jail]],
      ['push', web, [jail]],
      // A remote inside the jail needs no network.
      ['fetch', 'deny', [jail]],
      ['push', 'deny', [jail]],
      ['log', 'deny', []],
    ])
  })

  /** A jail holding a repository with one commit, whose `origin` is the bare `remote.git` beside it. */
  function withLocalRemote() {
    const made = dirs()
    git(made.jail, 'init', '-q', '-b', 'main')
    git(made.jail, 'commit', '-q', '--allow-empty', '-m', 'local')
    git(made.jail, 'init', '-q', '--bare', '-b', 'main', 'remote.git')
    git(made.jail, 'config', 'remote.origin.url', 'remote.git')
    return made
  }

  test("a hook in the local remote: git push would run it, with push's network", async () => {
    const { jail, data } = withLocalRemote()
    const l = await listener()
    try {
      const ran = join(jail, 'hook-ran')
      const hook = join(jail, 'remote.git', 'hooks', 'pre-receive')
      writeFileSync(hook, `#!/bin/sh\ntouch ${ran}\nexec ${NODE} -e "require('net').connect(${l.port}, '127.0.0.1').on('connect', () => process.exit(0))"\n`)
      execFileSync('chmod', ['+x', hook])
      // The probe: a push from the host runs the hook, which reaches the listener.
      git(jail, 'push', '-q', 'origin', 'main:refs/heads/probe')
      expect(existsSync(ran)).toBe(true)
      expect(await l.acceptedBeforeProbe()).toBe(1)
      execFileSync('rm', [ran])
      const gitPolicy: CommandPolicy = { binary: GIT, subcommands: ['log', 'fetch', 'push'], deniedFlags: ['-c', '--exec-path', '--git-dir', '--work-tree'], validatePaths: false }
      const sandbox = new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 20_000, maxOutput: 65_536, policies: { git: gitPolicy } }, new AuditLog(data), pool)
      for (const command of ['git push origin main', 'git fetch origin']) {
        const err = await rejectionOf(sandbox.execute(command), SandboxError)
        expect(err.message).toBe('Repository config rejected: remote origin has a hook (receive-pack would run it): hooks/pre-receive')
      }
      expect(existsSync(ran)).toBe(false)
      // Only the probe's first connection and the check's own.
      expect(await l.acceptedBeforeProbe()).toBe(2)
    } finally {
      l.server.close()
    }
  })

  test('a hook planted in the local remote between the check and the run reaches no network', async () => {
    for (const mode of ['auto', 'off'] as const) {
      const { jail, data } = withLocalRemote()
      const l = await listener()
      try {
        const ran = join(jail, 'hook-ran')
        const hook = join(jail, 'remote.git', 'hooks', 'pre-receive')
        // The race, made deterministic: an executor that lets the agent write the hook once the
        // command has passed its checks, then runs it on the pool.
        const racing = {
          exec(spec: ExecSpec) {
            writeFileSync(hook, `#!/bin/sh\ntouch ${ran}\nexec ${NODE} -e "require('net').connect(${l.port}, '127.0.0.1').on('connect', () => process.exit(0)).on('error', () => process.exit(0))"\n`)
            execFileSync('chmod', ['+x', hook])
            return pool.exec(spec)
          },
        }
        const gitPolicy: CommandPolicy = { binary: GIT, subcommands: ['push'], deniedFlags: ['-c'], validatePaths: false }
        const config: SandboxConfig = { allowBash: true, jailRoot: jail, execTimeout: 20_000, maxOutput: 65_536, policies: { git: gitPolicy }, ...(mode === 'off' ? { isolation: { mode: 'off' } } : {}) }
        const sandbox = new ToolSandbox(config, new AuditLog(data), racing)
        await sandbox.execute('git push origin main')
        expect(existsSync(ran), mode).toBe(true)
        expect(await l.acceptedBeforeProbe(), mode).toBe(mode === 'off' ? 1 : 0)
      } finally {
        l.server.close()
      }
    }
  })

  test('a remote URL git reads as another repository than the one checked: never fetched', async () => {
    const { jail, data, base } = dirs()
    git(jail, 'init', '-q', '-b', 'main')
    // A private repository outside the jail.
    const secret = `SECRET${Date.now()}`
    const other = join(base, 'private')
    mkdirSync(other)
    git(other, 'init', '-q', '-b', 'main')
    writeFileSync(join(other, 's.txt'), `${secret}\n`)
    git(other, 'add', 's.txt')
    git(other, 'commit', '-qm', 'private')
    // The checked repository is a decoy inside the jail; git reads `other` (file://host/path is
    // /path to git) or, past a directory git does not take for a repository, `<path>.git`.
    const decoy = join(jail, 'x', other)
    mkdirSync(decoy, { recursive: true })
    git(decoy, 'init', '-q', '--bare')
    mkdirSync(join(jail, 'fake', 'objects'), { recursive: true })
    mkdirSync(join(jail, 'fake', 'refs'))
    writeFileSync(join(jail, 'fake', 'HEAD'), 'garbage\n')
    git(jail, 'clone', '-q', '--bare', '--no-local', other, 'fake.git')
    const gitPolicy: CommandPolicy = { binary: GIT, subcommands: ['log', 'fetch', 'push'], deniedFlags: ['-c', '--exec-path', '--git-dir', '--work-tree'], validatePaths: false }
    const sandbox = new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 20_000, maxOutput: 65_536, policies: { git: gitPolicy } }, new AuditLog(data), pool)
    for (const url of [`file://x${other}`, 'fake']) {
      git(jail, 'config', 'remote.origin.url', url)
      git(jail, 'config', 'remote.origin.fetch', '+refs/heads/*:refs/remotes/origin/*')
      // The probe: git itself, run from the jail, fetches the private repository's commit.
      git(jail, 'fetch', '-q', 'origin')
      expect(git(jail, 'show', 'origin/main'), url).toContain(secret)
      git(jail, 'update-ref', '-d', 'refs/remotes/origin/main')
      const err = await rejectionOf(sandbox.execute('git fetch origin'), SandboxError)
      expect(err.message, url).toMatch(/^Repository config rejected: (remote origin is neither|git could not read it)/)
      expect(() => git(jail, 'rev-parse', '-q', '--verify', 'refs/remotes/origin/main')).toThrow()
    }
  })

  test('a .git file pointing at another repository is refused, never run', async () => {
    const { sandbox, jail, base, auditLog } = repoSandbox(undefined)
    const other = join(base, 'other')
    mkdirSync(other)
    git(other, 'init', '-q')
    execFileSync('rm', ['-rf', join(jail, '.git')])
    writeFileSync(join(jail, '.git'), `gitdir: ${join(other, '.git')}\n`)
    const err = await rejectionOf(sandbox.execute('git status'), SandboxError)
    expect(err.message).toBe('Repository config rejected: gitdir points outside the jail')
    expect(audit(auditLog).at(-1)).toMatchObject({ action: 'deny' })
  })
})

describe.each([
  ['auto', undefined],
  ['off', { mode: 'off' } as const],
])('protected paths, isolation %s', (mode, isolation) => {
  test('a program that may write the jail cannot write .git/hooks or .git/config (mount namespace: root, or a user namespace)', async () => {
    const { sandbox, jail, auditLog } = nodeSandbox(isolation)
    git(jail, 'init', '-q')
    const hook = join(jail, '.git/hooks/pre-commit')
    const config = join(jail, '.git/config')
    const before = readFileSync(config, 'utf8')
    const evil = script(jail, 'h.js', `const fs = require('fs')
for (const [p, s] of [[${JSON.stringify(hook)}, '#!/bin/sh\\ntouch /tmp/pwned\\n'], [${JSON.stringify(config)}, '[core]\\n\\tfsmonitor = /tmp/x\\n']]) {
  try { fs.writeFileSync(p, s) } catch (e) { process.stdout.write(e.code + '\\n') }
}
`)
    const r = await sandbox.execute(`node ${evil}`)
    expect(r.exitCode).toBe(0)
    const outcome = audit(auditLog).at(-1)!
    // Without a mount namespace (non-root where user namespaces are blocked) `protect` is
    // degraded and says so: the writes land.
    const held = mode === 'auto' && ns
    expect(existsSync(hook)).toBe(!held)
    expect(readFileSync(config, 'utf8') === before).toBe(held)
    if (mode === 'auto') {
      expect(outcome.isolation?.applied.includes('protect')).toBe(ns)
      if (!ns) expect(outcome.isolation?.degraded.some((d) => d.startsWith('protect:'))).toBe(true)
    } else {
      expect(outcome.isolation).toEqual({ backend: 'off', applied: [], degraded: [] })
    }
  })
})

describe.each([
  ['auto', undefined],
  ['off', { mode: 'off' } as const],
])('the audit log inside the jail, isolation %s', (mode, isolation) => {
  test('a program that may write the jail cannot write its audit log (mount namespace: root, or a user namespace)', async () => {
    const { jail } = dirs()
    const auditLog = new AuditLog(jail) // loa-finn's default: <jail>/audit/audit.log
    const config: SandboxConfig = {
      allowBash: true,
      jailRoot: jail,
      execTimeout: 20_000,
      maxOutput: 65_536,
      policies: { node: nodePolicy() },
      ...(isolation === undefined ? {} : { isolation }),
    }
    const sandbox = new ToolSandbox(config, auditLog, pool)
    const log = join(auditLog.getLogDir(), 'audit.log')
    expect(auditLog.append({ timestamp: new Date().toISOString(), action: 'allow', command: 'seed', args: [] })).toBe(true)
    const evil = script(jail, 'a.js', `try { require('fs').appendFileSync(${JSON.stringify(log)}, 'FORGED\\n') } catch (e) { process.stdout.write(e.code) }\n`)
    const r = await sandbox.execute(`node ${evil}`)
    expect(r.exitCode).toBe(0)
    const held = mode === 'auto' && ns
    expect(readFileSync(log, 'utf8').includes('FORGED')).toBe(!held)
    if (mode === 'auto' && !ns) {
      // The forged line is in the log: only the outcome entry (the last line) is read.
      const outcome = JSON.parse(readFileSync(log, 'utf8').trim().split('\n').at(-1)!) as AuditEntry
      expect(outcome.isolation?.degraded.some((d) => d.startsWith('hidden:'))).toBe(true)
    }
  })
})

describe('configuration and executors', () => {
  test('config.isolation is validated once, errors name the field; topology fields are refused', () => {
    const cases: Array<[unknown, string]> = [
      [{ network: 'allow' }, 'config.isolation.network: '],
      [{ fs: { writable: ['/tmp'] } }, 'config.isolation.fs.writable: '],
      [{ limits: { cpuSeconds: 0 } }, 'config.isolation.limits.cpuSeconds: '],
      [{ mode: 'strong' }, 'config.isolation.*: '],
      [{ mode: 'off', required: true }, 'config.isolation.required: '],
    ]
    for (const [isolation, prefix] of cases) {
      const { jail, data } = dirs()
      const make = () =>
        new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 1000, maxOutput: 100, isolation } as SandboxConfig, new AuditLog(data), pool)
      expect(make).toThrow(SandboxError)
      expect(make).toThrow(prefix)
    }
  })

  test('a JS executor gets the command isolation on spec.isolation; what it reports is audited', async () => {
    const specs: ExecSpec[] = []
    const recorder = {
      async exec(spec: ExecSpec) {
        specs.push(spec)
        return { stdout: '', stderr: '', exitCode: 0, truncated: false, durationMs: 1 }
      },
    }
    const { sandbox, jail, auditLog } = nodeSandbox({ limits: { cpuSeconds: 30 } }, recorder)
    await sandbox.execute(`cat ${script(jail, 'x.js', '')}`)
    await sandbox.execute(`node ${script(jail, 'y.js', '')}`)
    expect(specs[0].isolation).toMatchObject({ mode: 'auto', network: 'deny', fs: { writable: [] }, limits: { cpuSeconds: 30 } })
    expect(specs[1].isolation).toMatchObject({ mode: 'auto', network: 'deny', fs: { writable: [jail] } })
    const outcome = audit(auditLog).at(-1)!
    expect(outcome.isolation?.backend).toBe('none')
    expect(outcome.isolation?.applied).toEqual([])
    expect(outcome.isolation?.degraded[0]).toMatch(/^isolation: the executor is not finn-sandbox's pool/)

    // An executor that hands the spec to a WorkerPool (a runner of the caller's): applied there.
    const forwarding = { exec: (spec: ExecSpec) => pool.exec(spec) }
    const fwd = nodeSandbox(undefined, forwarding)
    const marker = join(fwd.base, 'outside-marker')
    const evil = script(fwd.jail, 'w.js', `try { require('fs').writeFileSync(${JSON.stringify(marker)}, 'x') } catch {}\n`)
    expect((await fwd.sandbox.execute(`node ${evil}`)).exitCode).toBe(0)
    expect(existsSync(marker)).toBe(false)
    expect(audit(fwd.auditLog).at(-1)!.isolation?.backend).toBe('native')
  })

  test('a required layer the host lacks refuses the command: ISOLATION_UNAVAILABLE, audited', async () => {
    // A network namespace needs CAP_SYS_ADMIN or a user namespace: where neither exists (non-root
    // in a container that blocks user namespaces) the command is refused.
    const { sandbox, jail, auditLog } = nodeSandbox({ required: true, namespaces: { net: true } })
    const marker = join(jail, 'ran')
    const run = sandbox.execute(`node ${script(jail, 'r.js', `require('fs').writeFileSync(${JSON.stringify(marker)}, '')\n`)}`)
    if (ns) {
      expect((await run).exitCode).toBe(0)
      expect(audit(auditLog).at(-1)!.isolation?.applied).toContain('netns')
    } else {
      const err = await rejectionOf(run, PoolError)
      expect(err.code).toBe('ISOLATION_UNAVAILABLE')
      expect(audit(auditLog).at(-1)).toMatchObject({ action: 'allow', reason: 'execution_failed: ISOLATION_UNAVAILABLE' })
    }
    expect(existsSync(marker)).toBe(ns)
  })

  test('a layer that fails in the command\'s process refuses the command: ISOLATION_UNAVAILABLE naming the layer, audited', async () => {
    // Above any kernel's fs.nr_open: setrlimit(RLIMIT_NOFILE) fails with EPERM in the child.
    const { sandbox, jail, auditLog } = nodeSandbox({ limits: { maxOpenFiles: 2 ** 32 } })
    const marker = join(jail, 'ran')
    const run = sandbox.execute(`node ${script(jail, 'r.js', `require('fs').writeFileSync(${JSON.stringify(marker)}, '')\n`)}`)
    const err = await rejectionOf(run, PoolError)
    expect(err.code, err.message).toBe('ISOLATION_UNAVAILABLE')
    expect(err.message).toMatch(/\brlimits\b/)
    expect(err.message).toContain('EPERM')
    expect(audit(auditLog).at(-1)).toMatchObject({ action: 'allow', reason: 'execution_failed: ISOLATION_UNAVAILABLE' })
    expect(existsSync(marker)).toBe(false)
  })

  test('required isolation refuses a JS executor at construction, and accepts the pool', () => {
    expect(() => nodeSandbox({ required: true }, { exec: async () => ({}) })).toThrow(
      'config.isolation.required: a JS executor cannot be made to apply isolation',
    )
    expect(() => nodeSandbox({ mode: 'native' }, { exec: async () => ({}) })).toThrow(
      'config.isolation.mode: a JS executor cannot be made to apply isolation',
    )
    expect(() => nodeSandbox({ required: true }, pool)).not.toThrow()
    expect(() => nodeSandbox({ required: true }, new DisabledExecutor())).not.toThrow()
  })
})

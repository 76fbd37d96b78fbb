// One test per attack on ToolSandbox's policy, each judged from the host: a marker file that must not
// exist, or an outside string that must not appear in any decoding of what the agent gets back
// (plain, base64, hex, whitespace removed, word-diff lines joined). Every attack also runs as
// loa-finn ran it (its environment, the arguments passed as written, `appendFileSync` for the
// audit log): that run must show the escape, which proves the probe can see it.
import { execFileSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { appendFileSync, chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, symlinkSync, linkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import { AuditLog, SandboxError, SecretRedactor, ToolSandbox, WorkerPool, type SandboxConfig } from '../index.js'

const pool = new WorkerPool({ interactiveWorkers: 2, killGraceMs: 200 })
afterAll(() => pool.shutdown())

const GIT = realpathSync(execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim())
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

function tempDir(prefix: string): string {
  const d = realpathSync(mkdtempSync(join(tmpdir(), prefix)))
  dirs.push(d)
  return d
}

/** A directory outside every jail holding `<name>.txt`, whose content is `secret`: a listing
 * leaks `name`, a read leaks `secret`. */
function outside() {
  const secret = `FINNOUT${randomBytes(12).toString('hex').toUpperCase()}`
  const name = `FINNNAME${randomBytes(12).toString('hex').toUpperCase()}`
  const dir = tempDir('finn-out-')
  const file = join(dir, `${name}.txt`)
  writeFileSync(file, `${secret}\n`)
  return { secret, name, dir, file }
}

function make(jail = tempDir('finn-jail-'), overrides: Partial<SandboxConfig> = {}) {
  const config: SandboxConfig = { allowBash: true, jailRoot: jail, execTimeout: 10_000, maxOutput: 1_048_576, ...overrides }
  const auditLog = new AuditLog(jail)
  return { sandbox: new ToolSandbox(config, auditLog, pool), jail, auditLog }
}

const IDENTITY = { GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' }

function git(cwd: string, ...args: string[]): string {
  return execFileSync(GIT, args, { cwd, encoding: 'utf8', env: { PATH: '/usr/bin:/bin', HOME: cwd, GIT_CONFIG_GLOBAL: '/dev/null', ...IDENTITY } })
}

/** A jail that is a repository with one commit of a.txt, a.txt modified, and a hostile script. */
function repoJail() {
  const made = make()
  const { jail } = made
  git(jail, 'init', '-q')
  writeFileSync(join(jail, 'a.txt'), 'one\n')
  git(jail, 'add', 'a.txt')
  git(jail, 'commit', '-qm', 'init')
  writeFileSync(join(jail, 'a.txt'), 'two\n')
  const marker = join(tempDir('finn-marker-'), 'PWNED')
  const script = join(jail, 'evil.sh')
  writeFileSync(script, `#!/bin/sh\ntouch ${marker}\ncat\n`)
  chmodSync(script, 0o755)
  return { ...made, marker, script }
}

/** loa-finn's sandbox environment (src/agent/sandbox.ts). */
function loaFinnEnv(jail: string): Record<string, string> {
  return { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: jail, LANG: 'en_US.UTF-8', TERM: 'dumb', GIT_PAGER: 'cat', PAGER: 'cat', GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_SYSTEM: '/dev/null', GIT_TERMINAL_PROMPT: '0' }
}

/** The command as loa-finn ran it once its checks passed (each attack passed them): stdout + stderr. */
function loaFinn(jail: string, command: string): string {
  const [binary, ...args] = command.split(/\s+/)
  try {
    return execFileSync(binary, args, { cwd: jail, env: loaFinnEnv(jail), encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 20_000 })
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string }
    return `${err.stdout ?? ''}${err.stderr ?? ''}`
  }
}

/** What the agent gets from finn-sandbox: the output, or the refusal's message. */
async function attempt(sandbox: ToolSandbox, command: string): Promise<{ text: string; refused?: string }> {
  try {
    const r = await sandbox.execute(command)
    return { text: `${r.stdout}${r.stderr}` }
  } catch (e) {
    if (!(e instanceof SandboxError)) throw e
    return { text: e.message, refused: e.message }
  }
}

/** Every reading of `text` in which an agent could recover `secret`. */
function decodings(text: string): string[] {
  const out = [text, text.replace(/\s+/g, '')]
  // `git diff --word-diff=porcelain` puts each piece of the new text on its own line behind
  // `+` or ` ` (removed pieces behind `-`, line ends as `~`).
  const lines = text.split('\n')
  out.push(lines.map((l) => l.replace(/^[-+ ~]/, '')).join(''))
  out.push(lines.filter((l) => /^[+ ]/.test(l)).map((l) => l.slice(1)).join(''))
  for (const token of text.match(/[A-Za-z0-9+/=_-]{8,}/g) ?? []) {
    out.push(Buffer.from(token, 'base64').toString('latin1'))
    out.push(Buffer.from(token.replace(/-/g, '+').replace(/_/g, '/'), 'base64').toString('latin1'))
  }
  for (const token of text.match(/(?:[0-9a-fA-F]{2}){4,}/g) ?? []) out.push(Buffer.from(token, 'hex').toString('latin1'))
  return out
}

function leaks(text: string, secret: string): boolean {
  return decodings(text).some((d) => d.includes(secret))
}

describe('the probes see an escape', () => {
  test('plain, base64, hex and split-up secrets are all found', () => {
    const s = 'FINNOUTABCDEF0123456789'
    expect(leaks(`x ${s} y`, s)).toBe(true)
    expect(leaks(`x ${Buffer.from(`pre${s}post`).toString('base64')} y`, s)).toBe(true)
    expect(leaks(Buffer.from(s).toString('hex'), s)).toBe(true)
    expect(leaks(s.split('').map((c) => `+${c}\n~`).join('\n'), s)).toBe(true)
    expect(leaks('nothing here', s)).toBe(false)
  })
})

describe('reads outside the jail, with no code execution', () => {
  test('git diff /dev/null <outside file>, and an outside directory (implicit --no-index)', async () => {
    const { sandbox, jail } = repoJail()
    const out = outside()
    mkdirSync(join(jail, 'd'))
    for (const command of [`git diff /dev/null ${out.file}`, `git diff d ${out.dir}`]) {
      expect(leaks(loaFinn(jail, command), out.secret), command).toBe(true)
      const r = await attempt(sandbox, command)
      expect(r.refused, command).toMatch(/^Path escapes jail/)
      expect(leaks(r.text, out.secret)).toBe(false)
    }
  })

  test('no repository in the jail: git diff of a directory holding a hard link, and of symlink/.. (implicit --no-index)', async () => {
    const { sandbox, jail } = make()
    const out = outside()
    mkdirSync(join(jail, 'a'))
    mkdirSync(join(jail, 'b'))
    writeFileSync(join(jail, 'a', 'f'), 'x\n')
    linkSync(out.file, join(jail, 'b', 'f'))
    symlinkSync(join(out.dir, 'sub'), join(jail, 'd'))
    mkdirSync(join(out.dir, 'sub'))
    writeFileSync(join(jail, 'z'), 'z\n')
    for (const command of ['git diff a b', `git diff z d/../${out.name}.txt`]) {
      expect(leaks(loaFinn(jail, command), out.secret), command).toBe(true)
      const r = await attempt(sandbox, command)
      expect(r.refused, command).toMatch(/^Subcommand not allowed: git diff \(no repository in the jail/)
      expect(leaks(r.text, out.secret)).toBe(false)
    }
  })

  test('cat and ls after --, through a directory named -', async () => {
    const { sandbox, jail } = make()
    const out = outside()
    mkdirSync(join(jail, '-'))
    const rel = `-/../../${basename(out.dir)}`
    for (const [command, probe] of [
      [`cat -- ${rel}/${out.name}.txt`, out.secret],
      [`ls -la -- ${rel}/`, out.name],
    ]) {
      expect(leaks(loaFinn(jail, command), probe), command).toBe(true)
      const r = await attempt(sandbox, command)
      expect(r.refused, command).toMatch(/^Path escapes jail: -\/\.\.\//)
      expect(leaks(r.text, probe)).toBe(false)
    }
  })

  test('wc --f=list and --fi=list (getopt prefixes of --files0-from)', async () => {
    const { sandbox, jail } = make()
    const out = outside()
    writeFileSync(join(jail, 'list'), `${out.file}\0`)
    for (const command of ['wc --f=list', 'wc --fi=list', 'wc --files0=list', 'wc --f list']) {
      // wc counted the outside file: 1 line, 1 word, its size.
      expect(loaFinn(jail, command), command).toMatch(new RegExp(`^\\s*1\\s+1\\s+${out.secret.length + 1} ${out.file}$`, 'm'))
      const r = await attempt(sandbox, command)
      expect(r.refused, command).toBe('Flag not allowed: --files0-from')
    }
  })

  test('.git/objects and .git/refs as symlinks into another repository', async () => {
    const { sandbox, jail } = make()
    const out = outside()
    const other = tempDir('finn-other-repo-')
    git(other, 'init', '-q', '-b', 'main')
    writeFileSync(join(other, 'secret.txt'), `${out.secret}\n`)
    git(other, 'add', 'secret.txt')
    git(other, 'commit', '-qm', out.secret)
    mkdirSync(join(jail, '.git'))
    writeFileSync(join(jail, '.git', 'HEAD'), 'ref: refs/heads/main\n')
    writeFileSync(join(jail, '.git', 'config'), '[core]\n\trepositoryformatversion = 0\n')
    symlinkSync(join(other, '.git', 'objects'), join(jail, '.git', 'objects'))
    symlinkSync(join(other, '.git', 'refs'), join(jail, '.git', 'refs'))
    for (const command of ['git log', 'git show HEAD:secret.txt']) {
      expect(leaks(loaFinn(jail, command), out.secret), command).toBe(true)
      const r = await attempt(sandbox, command)
      expect(r.refused, command).toMatch(/^Repository config rejected: symlink in the git directory: \.git\/(objects|refs)/)
      expect(leaks(r.text, out.secret)).toBe(false)
    }
  })

  test('core.worktree behind [x][core], and in config.worktree: git status -uall', async () => {
    for (const variant of ['one-line', 'config.worktree']) {
      const { sandbox, jail } = repoJail()
      const out = outside()
      const config = join(jail, '.git', 'config')
      if (variant === 'one-line') {
        appendFileSync(config, `[x][core] worktree=${out.dir}\n`)
      } else {
        git(jail, 'config', 'core.repositoryformatversion', '1')
        git(jail, 'config', 'extensions.worktreeConfig', 'true')
        writeFileSync(join(jail, '.git', 'config.worktree'), `[core]\n\tworktree = ${out.dir}\n`)
      }
      expect(leaks(loaFinn(jail, 'git status -uall'), out.name), variant).toBe(true)
      const r = await attempt(sandbox, 'git status -uall')
      expect(r.refused, variant).toMatch(/^Repository config rejected: core\.worktree is not on the allowlist/)
    }
  })

  test('a hard link to an outside file; ls -RL through a symlink to an outside directory', async () => {
    const { sandbox, jail } = make()
    const out = outside()
    linkSync(out.file, join(jail, 'h'))
    expect(leaks(loaFinn(jail, 'cat h'), out.secret)).toBe(true)
    expect((await attempt(sandbox, 'cat h')).refused).toBe('Hard-linked file rejected: h')
    mkdirSync(join(jail, 'd'))
    symlinkSync(out.dir, join(jail, 'd', 'link'))
    for (const command of ['ls -RL d', 'ls -R --dereference d', 'ls -R --dere d', 'ls -RH d']) {
      const r = await attempt(sandbox, command)
      expect(r.refused, command).toMatch(/^Flag not allowed: --dereference|^Flag not allowed: --dere /)
      expect(leaks(r.text, out.name)).toBe(false)
    }
    expect(leaks(loaFinn(jail, 'ls -RL d'), out.name)).toBe(true)
    // Without -L, ls lists the link itself and does not descend: allowed, and nothing leaks.
    const plain = await attempt(sandbox, 'ls -R d')
    expect(plain.refused).toBeUndefined()
    expect(plain.text).toContain('link')
    expect(leaks(plain.text, out.name)).toBe(false)
  })
})

/** Renames the entry `from` of the jail's index to `to` (same length), as an agent writing
 * `.git/index` itself can: git add refuses such names, git reads them. */
function renameIndexEntry(jail: string, from: string, to: string) {
  expect(to.length).toBe(from.length)
  const file = join(jail, '.git', 'index')
  const body = readFileSync(file).subarray(0, -20)
  const at = body.indexOf(from)
  expect(at).toBeGreaterThan(0)
  body.write(to, at, 'latin1')
  writeFileSync(file, Buffer.concat([body, createHash('sha1').update(body).digest()]))
}

describe('index entries outside the work tree (the agent writes .git/index)', () => {
  test('an entry ../<outside file>: git diff shows its content; ./audit/audit.log: the audit log', async () => {
    const { sandbox, jail } = repoJail()
    const out = outside()
    const token = `TOKEN${randomBytes(8).toString('hex')}`
    await attempt(sandbox, `cat ${token}`)
    const index = readFileSync(join(jail, '.git', 'index'))
    for (const [to, probe] of [
      [`../${basename(out.dir)}/${out.name}.txt`, out.secret],
      ['./audit/audit.log', token],
    ]) {
      const from = `zz${to.slice(2)}`
      mkdirSync(join(jail, from, '..'), { recursive: true })
      writeFileSync(join(jail, from), 'decoy\n')
      git(jail, 'add', '-f', from)
      rmSync(join(jail, from.split('/')[0]), { recursive: true })
      renameIndexEntry(jail, from, to)
      expect(leaks(loaFinn(jail, 'git diff'), probe), to).toBe(true)
      for (const command of ['git diff', 'git status']) {
        const r = await attempt(sandbox, command)
        expect(r.refused, `${to}: ${command}`).toBe(`Repository config rejected: index entry outside the work tree: ${to}`)
        expect(leaks(r.text, probe)).toBe(false)
      }
      writeFileSync(join(jail, '.git', 'index'), index)
    }
  })

  test('a bare layout at the jail root with core.bare = false: its index and work tree went unchecked', async () => {
    const { sandbox, jail } = repoJail()
    const out = outside()
    const to = `../${basename(out.dir)}/${out.name}.txt`
    const from = `zz${to.slice(2)}`
    mkdirSync(join(jail, from, '..'), { recursive: true })
    writeFileSync(join(jail, from), 'decoy\n')
    git(jail, 'add', '-f', from)
    rmSync(join(jail, 'zz'), { recursive: true })
    renameIndexEntry(jail, from, to)
    // The repository moved to the jail root: git's test for a bare repository (HEAD, objects/,
    // refs/) holds, and core.bare = false makes git take its cwd for the work tree.
    for (const f of readdirSync(join(jail, '.git'))) execFileSync('mv', [join(jail, '.git', f), jail])
    rmSync(join(jail, '.git'), { recursive: true })
    git(jail, 'config', 'core.bare', 'false')
    // The probe: git as the sandbox pinned it (GIT_DIR the jail, no work tree named).
    const pinned = (...args: string[]) => execFileSync(GIT, args, { cwd: jail, env: { ...loaFinnEnv(jail), GIT_DIR: jail }, encoding: 'utf8' })
    expect(leaks(pinned('diff'), out.secret)).toBe(true)
    for (const command of ['git diff', 'git status', 'git log -p']) {
      const r = await attempt(sandbox, command)
      expect(leaks(r.text, out.secret), command).toBe(false)
      expect(leaks(r.text, out.name), command).toBe(false)
    }
    expect((await attempt(sandbox, 'git diff')).text).toContain('must be run in a work tree')
  })
})

describe('the host is never blocked by the repository check', () => {
  test('a FIFO as .git/commondir, .git/config, .git/HEAD or .git/index is refused at once', async () => {
    for (const name of ['commondir', 'config', 'HEAD', 'index']) {
      const { sandbox, jail } = repoJail()
      const fifo = join(jail, '.git', name)
      rmSync(fifo, { force: true })
      execFileSync('mkfifo', [fifo])
      // Unblocks a reader after 3 s, again and again for 10 s, so that an unfixed check (which
      // blocks Node's thread: no timer can fire) returns and the test can fail instead of hang.
      // Once the FIFO is gone (the test removes it), the writer stops.
      execFileSync('sh', ['-c', `timeout 10 sh -c 'sleep 3; while [ -p ${fifo} ]; do : > ${fifo}; done' >/dev/null 2>&1 &`])
      const started = Date.now()
      const r = await attempt(sandbox, 'git log')
      rmSync(fifo)
      expect(Date.now() - started, name).toBeLessThan(2500)
      expect(r.refused, name).toMatch(/^Repository config rejected: (\.git\/commondir is not a regular file|special file in the git directory: \.git\/)/)
    }
  })
})

describe('program execution from repository files (a marker must not appear)', () => {
  const filterCases: [string, (jail: string, script: string) => void][] = [
    ['after \\r-only line breaks', (jail, script) => appendFileSync(join(jail, '.git', 'config'), `[x]\r[filter "evil"]\r\tclean = ${script}\r`)],
    [
      'behind a UTF-8 BOM',
      (jail, script) => {
        const config = join(jail, '.git', 'config')
        writeFileSync(config, `\ufeff[filter "evil"]\n\tclean = ${script}\n${readFileSync(config, 'utf8')}`)
      },
    ],
    [
      'inside [core][include] path=../evil.cfg',
      (jail, script) => {
        writeFileSync(join(jail, 'evil.cfg'), `[filter "evil"]\n\tclean = ${script}\n`)
        appendFileSync(join(jail, '.git', 'config'), '[core][include] path=../evil.cfg\n')
      },
    ],
    [
      'in .git/config.worktree with extensions.worktreeConfig',
      (jail, script) => {
        git(jail, 'config', 'core.repositoryformatversion', '1')
        git(jail, 'config', 'extensions.worktreeConfig', 'true')
        writeFileSync(join(jail, '.git', 'config.worktree'), `[filter "evil"]\n\tclean = ${script}\n`)
      },
    ],
  ]
  for (const [name, plant] of filterCases) {
    test(`a [filter] driver ${name}`, async () => {
      const { sandbox, jail, marker, script } = repoJail()
      writeFileSync(join(jail, '.gitattributes'), '*.txt filter=evil\n')
      plant(jail, script)
      loaFinn(jail, 'git status')
      expect(existsSync(marker), 'loa-finn ran the filter').toBe(true)
      rmSync(marker)
      const r = await attempt(sandbox, 'git status')
      expect(r.refused).toMatch(/^Repository config rejected: (filter\.evil\.clean|include\.path) is not on the allowlist/)
      expect(existsSync(marker)).toBe(false)
    })
  }

  test("a [filter] driver in a common dir that git reads as '.git/common' and a trim() as ' common'", async () => {
    // git keeps the leading space of .git/commondir; a check that trimmed it looked at one
    // directory's config while the job, pinned to the trimmed path, read the other's.
    for (const [commondir, refused] of [
      [' common\n', /^Repository config rejected: commondir is empty, or has whitespace/],
      ['common\n', /^Repository config rejected: filter\.evil\.clean is not on the allowlist/],
    ] as const) {
      const { sandbox, jail, marker, script } = repoJail()
      const dotGit = join(jail, '.git')
      for (const name of ['common', ' common']) {
        mkdirSync(join(dotGit, name))
        execFileSync('cp', ['-r', 'objects', 'refs', 'HEAD', name], { cwd: dotGit })
        writeFileSync(join(dotGit, name, 'config'), '[core]\n\trepositoryformatversion = 0\n\tbare = false\n')
      }
      appendFileSync(join(dotGit, commondir.trim(), 'config'), `[filter "evil"]\n\tclean = ${script}\n`)
      writeFileSync(join(dotGit, 'commondir'), commondir)
      writeFileSync(join(jail, '.gitattributes'), '*.txt filter=evil\n')
      for (const command of ['git status', 'git diff']) {
        const r = await attempt(sandbox, command)
        expect(r.refused, `${JSON.stringify(commondir)}: ${command}`).toMatch(refused)
        expect(existsSync(marker)).toBe(false)
      }
    }
  })

  test("a [filter] driver in a submodule's own config", async () => {
    const { sandbox, jail, marker, script } = repoJail()
    const sub = join(jail, 'sub')
    mkdirSync(sub)
    git(sub, 'init', '-q')
    writeFileSync(join(sub, 'b.txt'), 'one\n')
    writeFileSync(join(sub, '.gitattributes'), '*.txt filter=evil\n')
    git(sub, 'add', '.')
    git(sub, 'commit', '-qm', 'sub')
    git(jail, 'add', 'sub')
    git(jail, 'commit', '-qm', 'with sub')
    appendFileSync(join(sub, '.git', 'config'), `[filter "evil"]\n\tclean = ${script}\n`)
    writeFileSync(join(sub, 'b.txt'), 'two\n')
    loaFinn(jail, 'git status')
    expect(existsSync(marker), 'loa-finn ran the filter').toBe(true)
    rmSync(marker)
    const r = await attempt(sandbox, 'git status')
    expect(r.refused).toBe('Repository config rejected: nested repository or submodule: sub/.git')
    expect(existsSync(marker)).toBe(false)
  })

  test('git status -v runs a textconv driver', async () => {
    const { sandbox, jail, marker, script } = repoJail()
    writeFileSync(join(jail, '.gitattributes'), '*.txt diff=evil\n')
    git(jail, 'add', 'a.txt')
    appendFileSync(join(jail, '.git', 'config'), `[diff "evil"]\n\ttextconv = ${script}\n`)
    loaFinn(jail, 'git status -v')
    expect(existsSync(marker), 'loa-finn ran textconv').toBe(true)
    rmSync(marker)
    expect((await attempt(sandbox, 'git status -v')).refused).toMatch(/^Flag not allowed: -v/)
    expect((await attempt(sandbox, 'git status')).refused).toMatch(/^Repository config rejected: diff\.evil\.textconv/)
    expect(existsSync(marker)).toBe(false)
  })

  const lazyCases: [string, (jail: string, script: string) => void][] = [
    [
      'protocol.file.allow=always plus remote.origin.uploadpack',
      (jail, script) => {
        git(jail, 'config', 'remote.origin.url', `file://${jail}/none`)
        git(jail, 'config', 'remote.origin.uploadpack', script)
        git(jail, 'config', 'protocol.file.allow', 'always')
      },
    ],
    [
      'protocol.ext.allow=always plus an ext:: URL',
      (jail, script) => {
        git(jail, 'config', 'remote.origin.url', `ext::${script}`)
        git(jail, 'config', 'protocol.ext.allow', 'always')
      },
    ],
  ]
  for (const [name, plant] of lazyCases) {
    test(`lazy fetch in a partial clone: ${name}; the program leaks an outside file base64-encoded`, async () => {
      const { sandbox, jail, marker } = repoJail()
      const out = outside()
      const script = join(jail, 'fetch.sh')
      writeFileSync(script, `#!/bin/sh\ntouch ${marker}\nbase64 -w0 ${out.file} >&2\necho >&2\n`)
      chmodSync(script, 0o755)
      git(jail, 'config', 'core.repositoryformatversion', '1')
      git(jail, 'config', 'extensions.partialClone', 'origin')
      git(jail, 'config', 'remote.origin.promisor', 'true')
      plant(jail, script)
      const missing = '1234567890123456789012345678901234567890'
      const baseline = loaFinn(jail, `git show ${missing}`)
      expect(existsSync(marker), 'loa-finn fetched').toBe(true)
      expect(baseline).not.toContain(out.secret)
      expect(leaks(baseline, out.secret), 'only the base64 probe sees it').toBe(true)
      rmSync(marker)
      const r = await attempt(sandbox, `git show ${missing}`)
      expect(r.refused).toMatch(/^Repository config rejected: extensions\.partialclone is not on the allowlist/)
      expect(existsSync(marker)).toBe(false)
      expect(leaks(r.text, out.secret)).toBe(false)
    })
  }
})

describe('audit and redaction', () => {
  test('an audit/audit.log symlink made before the AuditLog: nothing is written through it', async () => {
    const jail = tempDir('finn-jail-')
    const out = outside()
    const victim = join(out.dir, 'victim.log')
    writeFileSync(victim, '')
    mkdirSync(join(jail, 'audit'))
    symlinkSync(victim, join(jail, 'audit', 'audit.log'))
    // loa-finn's writer: appendFileSync follows the link.
    appendFileSync(join(jail, 'audit', 'audit.log'), '{"probe":1}\n')
    expect(readFileSync(victim, 'utf8')).toContain('probe')
    writeFileSync(victim, '')
    const { sandbox, auditLog } = make(jail)
    expect(auditLog.append({ timestamp: 't', action: 'allow', command: 'ls', args: [] })).toBe(false)
    // Fail-closed: the audit cannot be written, so only ls/cat/wc run.
    await sandbox.execute('ls')
    expect(readFileSync(victim, 'utf8')).toBe('')
    // The same with the audit directory itself a symlink.
    const jail2 = tempDir('finn-jail-')
    symlinkSync(out.dir, join(jail2, 'audit'))
    const second = make(jail2)
    await second.sandbox.execute('ls')
    expect(readdirSync(out.dir).sort()).toEqual([`${out.name}.txt`, 'victim.log'])
  })

  test('the agent can neither read, edit nor list into its own audit log', async () => {
    const { sandbox, jail } = make()
    const token = `TOKEN${randomBytes(8).toString('hex')}`
    await attempt(sandbox, `cat ${token}`)
    expect(leaks(loaFinn(jail, 'cat audit/audit.log'), token)).toBe(true)
    for (const command of ['cat audit/audit.log', 'wc audit/audit.log', 'ls audit', `cat sub/../audit/audit.log`, 'cat -- audit/audit.log']) {
      const r = await attempt(sandbox, command)
      expect(r.refused, command).toMatch(/^Path is reserved for the host: /)
      expect(leaks(r.text, token)).toBe(false)
    }
  })

  test('git diff does not show the audit log even when the index tracks it', async () => {
    const { sandbox, jail } = repoJail()
    const token = `TOKEN${randomBytes(8).toString('hex')}`
    await attempt(sandbox, `cat ${token}`)
    // The agent writes the index: here, with git add, the audit log becomes a tracked file.
    const log = readFileSync(join(jail, 'audit', 'audit.log'), 'utf8')
    writeFileSync(join(jail, 'audit', 'audit.log'), '')
    git(jail, 'add', '-f', 'audit/audit.log')
    writeFileSync(join(jail, 'audit', 'audit.log'), log)
    expect(leaks(loaFinn(jail, 'git diff'), token)).toBe(true)
    const r = await attempt(sandbox, 'git diff')
    expect(r.refused).toBeUndefined()
    expect(r.text).toContain('-one')
    expect(leaks(r.text, token)).toBe(false)
  })

  test('a bare repository at the jail root: git diff of absolute or climbing paths (implicit --no-index) does not show the audit log', async () => {
    // No work tree: git takes an absolute path for one outside the repository and compares the
    // files themselves; `git diff <jail>/e <jail>` printed the audit log (isolation off).
    const { sandbox, jail } = make(undefined, { isolation: { mode: 'off' } })
    git(jail, 'init', '-q', '--bare', '.')
    mkdirSync(join(jail, 'e'))
    const token = `TOKEN${randomBytes(8).toString('hex')}`
    await attempt(sandbox, `cat ${token}`)
    const command = `git diff ${join(jail, 'e')} ${jail}`
    expect(leaks(loaFinn(jail, command), token)).toBe(true)
    for (const c of [command, `git diff e/.. ${join(jail, 'e')}`]) {
      const r = await attempt(sandbox, c)
      expect(r.refused, c).toMatch(/^Path not allowed: .* \(git diff in a bare repository would compare it as a file/)
      expect(leaks(r.text, token)).toBe(false)
    }
    // Revisions still diff.
    expect((await attempt(sandbox, 'git diff HEAD HEAD')).refused).toBeUndefined()
  })

  test('a flood of 11 MiB denied commands cannot rotate history out; no line exceeds 8 KiB', async () => {
    const jail = tempDir('finn-jail-')
    const auditLog = new AuditLog(jail, { maxFileSize: 64 * 1024, maxFiles: 2 })
    const sandbox = new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 10_000, maxOutput: 65_536 }, auditLog, pool)
    const token = `TOKEN${randomBytes(8).toString('hex')}`
    await attempt(sandbox, `curl ${token}`)
    const huge = 'A'.repeat(11 * 1024 * 1024)
    // loa-finn's entry for one of these is the whole command: 7 of them are 77 MiB, more than
    // its whole retention (10 MiB x 6 files) and far more than this log's 192 KiB.
    expect(JSON.stringify({ timestamp: 't', action: 'deny', command: 'curl', args: [huge], reason: 'binary_not_allowed: curl' }).length).toBeGreaterThan(11 * 1024 * 1024)
    for (let i = 0; i < 7; i++) await attempt(sandbox, `curl ${huge}`)
    const files = readdirSync(join(jail, 'audit'))
    const lines = files.flatMap((f) => readFileSync(join(jail, 'audit', f), 'utf8').trim().split('\n'))
    expect(lines.some((l) => l.includes(token))).toBe(true)
    for (const line of lines) expect(line.length).toBeLessThan(8192)
    const capped = lines.map((l) => JSON.parse(l)).filter((e) => e.sha256)
    expect(capped).toHaveLength(7)
    expect(capped[0].originalSize).toBeGreaterThan(11 * 1024 * 1024)
  })

  test('git diff --word-diff=porcelain --word-diff-regex=. cannot split a secret past the redactor', async () => {
    const secret = `ghp_${randomBytes(16).toString('hex')}`
    const before = process.env.GIT_TOKEN
    process.env.GIT_TOKEN = secret
    try {
      const { sandbox, jail } = repoJail()
      // A committed near-copy of the secret (its middle character changed): the word diff then
      // always splits the secret around that character. Against "one" it split it only when the
      // random bytes let the diff align a common character inside it (the probe failed 1 run in 3).
      const mid = secret.length >> 1
      writeFileSync(join(jail, 'a.txt'), `token ${secret.slice(0, mid)}Z${secret.slice(mid + 1)}\n`)
      git(jail, 'commit', '-qam', 'near')
      writeFileSync(join(jail, 'a.txt'), `token ${secret}\n`)
      const command = 'git diff --word-diff=porcelain --word-diff-regex=.'
      const baseline = loaFinn(jail, command)
      const redacted = new SecretRedactor({ GIT_TOKEN: secret }).redact(baseline)
      expect(redacted).not.toContain(secret)
      expect(leaks(redacted, secret), 'split across lines, the redactor missed it').toBe(true)
      for (const c of [command, 'git diff --word-diff-regex=.', 'git diff --color-words=.', 'git diff --word-diff']) {
        expect((await attempt(sandbox, c)).refused, c).toMatch(/^Flag not allowed: --(word-diff|color-words)/)
      }
      const plain = await attempt(sandbox, 'git diff')
      expect(plain.text).toContain('[REDACTED]')
      expect(leaks(plain.text, secret)).toBe(false)
    } finally {
      if (before === undefined) delete process.env.GIT_TOKEN
      else process.env.GIT_TOKEN = before
    }
  })
})

import { execFile, execFileSync, spawnSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import {
  ALLOWED_GIT_COMMANDS,
  AuditLog,
  PoolError,
  TOOL_NAMES,
  WorkerPool,
  createToolExecutor,
  executeTool,
  toolSchemas,
  type ExecResult,
  type ExecSpec,
  type ToolName,
  type ToolResult,
} from '../index.js'
import { alive, holders, until } from './helpers.js'

const pool = new WorkerPool({ interactiveWorkers: 2, killGraceMs: 200 })
afterAll(() => pool.shutdown())

const FINDERS = ['rg-fd', 'grep-find'] as const
const hasFast = ['rg', 'fdfind'].some((b) => {
  try {
    execFileSync('sh', ['-c', `command -v ${b}`])
    return true
  } catch {
    return false
  }
})

function dir(prefix: string): string {
  return realpathSync(mkdtempSync(join(tmpdir(), prefix)))
}

/** A worktree with nested, hidden, non-ASCII, dash-named, spaced and binary files. */
function fixture(): string {
  const wt = dir('finn-tools-')
  mkdirSync(join(wt, 'src/deep'), { recursive: true })
  mkdirSync(join(wt, 'docs'))
  mkdirSync(join(wt, '.hidden'))
  writeFileSync(join(wt, 'src/a.txt'), 'hello\nworld\nHello again\n')
  writeFileSync(join(wt, 'src/main.rs'), 'fn main() { println!("hello"); }\n')
  writeFileSync(join(wt, 'src/deep/x.rs'), '// hello from deep\n')
  writeFileSync(join(wt, 'docs/ünï.md'), 'Ärger und ärger\n')
  writeFileSync(join(wt, 'docs/-dash.txt'), '-e pattern\n--files\n')
  writeFileSync(join(wt, 'name with space.txt'), 'hello there\n')
  writeFileSync(join(wt, '.hidden/s.txt'), 'hello hidden\n')
  writeFileSync(join(wt, '.env'), 'hello env\n')
  writeFileSync(join(wt, 'bin.dat'), Buffer.from([0, 1, 2, 0x68, 0x69, 10]))
  return wt
}

const ok = (output: string): ToolResult => ({ ok: true, exitCode: 0, output, truncated: false })

/** Runs the call through both finder pairs and expects the same result from each. */
async function both(name: ToolName, args: object, wt: string): Promise<ToolResult> {
  const results: ToolResult[] = []
  for (const finders of hasFast ? FINDERS : (['grep-find'] as const)) {
    results.push(await executeTool(name, args, wt, { finders, runner: pool }))
  }
  if (results.length === 2) expect(results[1], `${name} ${JSON.stringify(args)}`).toEqual(results[0])
  return results[0]
}

describe('each tool, with rg/fd and with grep/find', () => {
  const wt = fixture()

  test('read numbers lines under a header and says how to read on', async () => {
    expect(await both('read', { path: 'src/a.txt' }, wt)).toEqual(ok('[File: src/a.txt]\n     1\thello\n     2\tworld\n     3\tHello again'))
    const page = await both('read', { path: 'src/a.txt', offset: 2, limit: 1 }, wt)
    expect(page).toEqual({
      ...ok('[File: src/a.txt]\n     2\tworld\n[truncated: lines 2-2 shown; cut by limit (1 lines)] continue with offset=3'),
      truncated: true,
    })
    const binary = await both('read', { path: 'bin.dat' }, wt)
    expect(binary.ok).toBe(false)
    expect(binary.error?.code).toBe('BINARY_FILE')
    expect((await both('read', { path: 'src' }, wt)).error?.code).toBe('NOT_A_FILE')
    expect((await both('read', { path: 'nope' }, wt)).error?.code).toBe('NOT_FOUND')
    // A FIFO would hold the read until its timeout.
    const wtf = fixture()
    execFileSync('mkfifo', [join(wtf, 'fifo')])
    const fifo = await executeTool('read', { path: 'fifo' }, wtf, { runner: pool, timeoutMs: 5_000 })
    expect(fifo.error).toEqual({ code: 'NOT_A_FILE', message: 'read: not a regular file: fifo' })
    // An aborted call runs nothing.
    const aborted = await executeTool('read', { path: 'src/a.txt' }, wt, { signal: AbortSignal.abort() })
    expect(aborted.error?.code).toBe('ABORTED')
  })

  test('ls sorts, marks directories and shows hidden entries', async () => {
    expect(await both('ls', {}, wt)).toEqual(ok('.env\n.hidden/\nbin.dat\ndocs/\nname with space.txt\nsrc/'))
    expect(await both('ls', { path: 'src' }, wt)).toEqual(ok('a.txt\ndeep/\nmain.rs'))
  })

  test('find globs names, relative to the worktree, sorted, hidden skipped', async () => {
    expect(await both('find', { pattern: '*.rs' }, wt)).toEqual(ok('src/deep/x.rs\nsrc/main.rs'))
    expect(await both('find', { pattern: '*', path: 'src' }, wt)).toEqual(ok('src/a.txt\nsrc/deep\nsrc/deep/x.rs\nsrc/main.rs'))
    expect(await both('find', { pattern: '-*' }, wt)).toEqual(ok('docs/-dash.txt'))
    expect(await both('find', { pattern: '[mx]*.r?' }, wt)).toEqual(ok('src/deep/x.rs\nsrc/main.rs'))
    expect(await both('find', { pattern: '[!a-m]*.txt' }, wt)).toEqual(ok('docs/-dash.txt\nname with space.txt'))
    expect(await both('find', { pattern: 'ü*' }, wt)).toEqual(ok('docs/ünï.md'))
    // `?` in a non-ASCII glob would be a byte to fd and rg, a character to grep: refused.
    expect((await both('find', { pattern: 'ü?ï.md' }, wt)).error?.code).toBe('INVALID_ARGUMENT')
    expect((await both('grep', { pattern: 'x', glob: 'ü?ï.md' }, wt)).error?.code).toBe('INVALID_ARGUMENT')
    expect(await both('find', { pattern: '*.env' }, wt)).toEqual(ok(''))
    const cut = await both('find', { pattern: '*', maxResults: 2 }, wt)
    expect(cut.truncated).toBe(true)
    expect(cut.output).toBe('bin.dat\ndocs\n[truncated: 2 of 10 entries shown; cut by maxResults (2)]')
  })

  test('grep gives sorted path:line:text and honours every parameter on both paths', async () => {
    expect(await both('grep', { pattern: 'hello' }, wt)).toEqual(
      ok('name with space.txt:1:hello there\nsrc/a.txt:1:hello\nsrc/deep/x.rs:1:// hello from deep\nsrc/main.rs:1:fn main() { println!("hello"); }'),
    )
    expect(await both('grep', { pattern: 'hello', ignoreCase: true, path: 'src/a.txt' }, wt)).toEqual(ok('src/a.txt:1:hello\nsrc/a.txt:3:Hello again'))
    expect(await both('grep', { pattern: 'ärger', ignoreCase: true }, wt)).toEqual(ok('docs/ünï.md:1:Ärger und ärger'))
    expect(await both('grep', { pattern: 'hell', word: true }, wt)).toEqual(ok(''))
    expect(await both('grep', { pattern: 'hello', glob: '*.rs' }, wt)).toEqual(
      ok('src/deep/x.rs:1:// hello from deep\nsrc/main.rs:1:fn main() { println!("hello"); }'),
    )
    // Patterns that look like options stay patterns.
    expect(await both('grep', { pattern: '--files' }, wt)).toEqual(ok('docs/-dash.txt:2:--files'))
    expect(await both('grep', { pattern: '-e' }, wt)).toEqual(ok('docs/-dash.txt:1:-e pattern'))
    expect(await both('grep', { pattern: '\\bworld\\b' }, wt)).toEqual(ok('src/a.txt:2:world'))
    const perFile = await both('grep', { pattern: 'l', path: 'src/a.txt', maxCount: 1 }, wt)
    expect(perFile).toEqual({ ...ok('src/a.txt:1:hello\n[truncated: 1 of 1 matching lines shown; cut by maxCount (1 per file)]'), truncated: true })
    // Exactly maxCount matches: nothing was cut.
    expect((await both('grep', { pattern: 'world', maxCount: 1 }, wt)).truncated).toBe(false)
    const total = await both('grep', { pattern: 'hello', maxResults: 1 }, wt)
    expect(total.truncated).toBe(true)
    expect(total.output).toBe('name with space.txt:1:hello there\n[truncated: 1 of 4 matching lines shown; cut by maxResults (1)]')
    // A line that is not UTF-8 is left out on both paths (grep reads it as binary).
    const wt3 = fixture()
    writeFileSync(join(wt3, 'latin1.txt'), Buffer.concat([Buffer.from('hello \xff', 'latin1'), Buffer.from('\nhello valid\n')]))
    expect(await both('grep', { pattern: 'valid|\\xff', path: 'latin1.txt' }, wt3)).toEqual(ok('latin1.txt:2:hello valid'))
    expect(await both('grep', { pattern: 'hello', glob: 'latin1.txt' }, wt3)).toEqual(ok('latin1.txt:2:hello valid'))
    const bad = await both('grep', { pattern: 'a(' }, wt)
    expect(bad.ok).toBe(false)
    expect(bad.error?.code).toBe('BAD_PATTERN')
  })

  test('.gitignore files of the searched directory and below hide entries on both paths; other ignore files do not', async () => {
    const wt2 = fixture()
    writeFileSync(join(wt2, '.gitignore'), 'build/\n*.log\n!keep.log\n')
    mkdirSync(join(wt2, 'build'))
    writeFileSync(join(wt2, 'build/out.rs'), 'hello build\n')
    writeFileSync(join(wt2, 'debug.log'), 'hello log\n')
    writeFileSync(join(wt2, 'keep.log'), 'hello keep\n')
    writeFileSync(join(wt2, 'src/.gitignore'), 'deep/\n')
    // rg's, fd's and the generic ignore files are nobody's rules here.
    for (const f of ['.ignore', '.rgignore', '.fdignore']) writeFileSync(join(wt2, f), 'src\nname*\n')
    expect(await both('find', { pattern: '*' }, wt2)).toEqual(
      ok('bin.dat\ndocs\ndocs/-dash.txt\ndocs/ünï.md\nkeep.log\nname with space.txt\nsrc\nsrc/a.txt\nsrc/main.rs'),
    )
    expect(await both('grep', { pattern: 'hello' }, wt2)).toEqual(
      ok('keep.log:1:hello keep\nname with space.txt:1:hello there\nsrc/a.txt:1:hello\nsrc/main.rs:1:fn main() { println!("hello"); }'),
    )
    expect(await both('find', { pattern: '*.rs', path: 'build' }, wt2)).toEqual(ok('build/out.rs'))
    // A file named as the path is searched whatever the rules say.
    expect(await both('grep', { pattern: 'hello', path: 'debug.log' }, wt2)).toEqual(ok('debug.log:1:hello log'))
  })

  test('the byte limit cuts whole lines, never a character, and says so', async () => {
    const r = await executeTool('grep', { pattern: 'ärger|hello' }, wt, { runner: pool, maxOutputBytes: 50 })
    expect(r.truncated).toBe(true)
    expect(r.output).toBe('docs/ünï.md:1:Ärger und ärger\n[truncated: 1 of 5 matching lines shown; cut by maxOutputBytes (50 bytes)]')
  })

  test('bad arguments are refused naming the field', async () => {
    const cases: [ToolName, object, string][] = [
      ['read', {}, 'args.path is required'],
      ['read', { path: 'a', offset: 0 }, 'args.offset must be an integer from 1 to 4294967295'],
      ['grep', { pattern: 'x', maxCount: -1 }, 'args.maxCount must be an integer from 1 to 100000'],
      ['find', { pattern: 'a/*' }, 'args.pattern must match names only (no /)'],
      ['ls', { path: 'src', recursive: true }, 'args.recursive is not a parameter of ls (it takes path)'],
    ]
    for (const [name, args, message] of cases) {
      expect(await executeTool(name, args, wt, { runner: pool })).toEqual({
        ok: false,
        exitCode: 1,
        output: '',
        truncated: false,
        error: { code: 'INVALID_ARGUMENT', message },
      })
    }
    const unknown = await executeTool('bash' as ToolName, {}, wt, { runner: pool })
    expect(unknown.error?.code).toBe('UNKNOWN_TOOL')
    await expect(executeTool('ls', {}, wt, { finders: 'fast' as 'auto' })).rejects.toThrow(/options\.finders must be/)
    await expect(executeTool('ls', {}, join(wt, 'missing'))).rejects.toThrow(/ENOENT/)
  })
})

describe('paths outside the worktree', () => {
  const outside = dir('finn-tools-outside-')
  writeFileSync(join(outside, 'secret.txt'), 'hello outside secret\n')
  const wt = fixture()
  symlinkSync(outside, join(wt, 'out'))
  symlinkSync(join(outside, 'secret.txt'), join(wt, 'src/link.txt'))
  linkSync(join(outside, 'secret.txt'), join(wt, 'hard.txt'))

  test('.., absolute paths, symlinks and hard links are refused by every tool, before anything runs', async () => {
    const runner = { exec: async (): Promise<ExecResult> => expect.unreachable('nothing runs') }
    const calls: [ToolName, object][] = []
    for (const path of ['..', '../x', outside, join(outside, 'secret.txt'), 'out', 'out/secret.txt', 'src/link.txt', 'hard.txt']) {
      calls.push(['read', { path }], ['ls', { path }], ['find', { pattern: '*', path }], ['grep', { pattern: 'hello', path }])
    }
    calls.push(['git', { command: 'log', args: ['--', '../x'] }], ['git', { command: 'diff', args: [join(outside, 'secret.txt')] }])
    for (const [name, args] of calls) {
      const r = await executeTool(name, args, wt, { runner })
      expect(r.ok, `${name} ${JSON.stringify(args)}`).toBe(true)
      expect(r.output, `${name} ${JSON.stringify(args)}`).toMatch(/^(Path escapes jail|Symlink rejected|Hard-linked file rejected)/)
    }
  })

  test('a search over the worktree neither follows symlinks nor shows a hard-linked file', async () => {
    for (const finders of hasFast ? FINDERS : (['grep-find'] as const)) {
      const r = await executeTool('grep', { pattern: 'outside' }, wt, { runner: pool, finders })
      expect(r.output).toBe('[matches in hard-linked files withheld: hard.txt]')
      expect(r.output).not.toContain('secret')
    }
  })

  test('a path swapped for a symlink during the call withholds what the runner read', async () => {
    for (const [name, args, victim] of [
      ['read', { path: 'src/a.txt' }, 'src/a.txt'],
      ['grep', { pattern: 'hello', path: 'docs' }, 'docs'],
      ['ls', { path: 'docs' }, 'docs'],
    ] as const) {
      const wt2 = fixture()
      writeFileSync(join(outside, 'a.txt'), 'hello outside secret\n')
      // The runner swaps the checked path for a symlink out, then runs the spec unisolated.
      const runner = {
        exec: async (spec: ExecSpec): Promise<ExecResult> => {
          renameSync(join(wt2, victim), join(wt2, `${victim}.old`))
          symlinkSync(victim === 'docs' ? outside : join(outside, 'a.txt'), join(wt2, victim))
          return pool.exec(spec)
        },
      }
      const r = await executeTool(name, args, wt2, { runner })
      expect(r.output, name).toBe(`Symlink rejected: ${victim}`)
    }
  })
})

describe('runners', () => {
  const wt = fixture()

  test('a recording runner receives the exact argv, never a shell', async () => {
    const specs: ExecSpec[] = []
    const runner = {
      exec: async (spec: ExecSpec): Promise<ExecResult> => {
        specs.push(spec)
        return { stdout: '', stderr: '', exitCode: 0, truncated: false, durationMs: 0 }
      },
    }
    const calls: [ToolName, object][] = [
      ['read', { path: 'src/a.txt', offset: 5 }],
      ['ls', { path: 'src' }],
      ['find', { pattern: '-name' }],
      ['grep', { pattern: '-rf', glob: '*.rs', ignoreCase: true, word: true, maxCount: 2 }],
    ]
    for (const finders of hasFast ? FINDERS : (['grep-find'] as const)) {
      for (const [name, args] of calls) await executeTool(name, args, wt, { runner, finders })
    }
    // Debian's fdfind is a link to /usr/lib/cargo/bin/fd: the spec names the realpath.
    const name = (binary: string) => binary.split('/').pop()?.replace(/^fdfind$/, 'fd')
    const argv = specs.map((s) => [name(s.binaryPath), ...s.args, `@${s.cwd.slice(wt.length) || '/'}`])
    const grepFind = [
      ['tail', '-n', '+5', '--', join(wt, 'src/a.txt'), '@/'],
      ['find', '.', '-mindepth', '1', '-maxdepth', '1', '-printf', '%y %f\\0', '@/src'],
      ['find', '.', '-mindepth', '1', '(', '-name', '.*', '-prune', ')', '-o', '-name', '-name', '(', '-type', 'd', '-printf', '%p/\\0', '-o', '-print0', ')', '@/'],
      ['grep', '-r', '-n', '-H', '--null', '-I', '-s', '--color=never', '-E', '-i', '-w', '--max-count=3', '--include=*.rs', '--exclude=.*', '--exclude-dir=.*', '-e', '-rf', '@/'],
    ]
    if (hasFast) {
      expect(argv.slice(0, 4)).toEqual([
        grepFind[0],
        grepFind[1],
        ['fd', '--glob', '--no-ignore', '--case-sensitive', '--color=never', '--print0', '--', '-name', '@/'],
        ['rg', '--no-config', '--no-ignore', '--color=never', '--no-heading', '--with-filename', '--line-number', '--null', '--no-messages', '--ignore-case', '--word-regexp', '--max-count=3', '--glob=*.rs', '--glob=!.*', '-e', '-rf', '--', '.', '@/'],
      ])
    }
    expect(argv.slice(-4)).toEqual(grepFind)
    // The child's whole environment is the sandbox's: nothing of Node's leaks in.
    expect(specs[0].env.HOME).toBe(wt)
    expect(Object.keys(specs[0].env)).not.toContain('NODE_OPTIONS')
    // A runner of the caller's gets no isolation unless asked for one.
    expect(specs[0].isolation).toBeUndefined()
    await executeTool('ls', {}, wt, { runner, isolation: { mode: 'auto' } })
    expect(specs.at(-1)?.isolation).toMatchObject({ mode: 'auto', network: 'deny', fs: { writable: [] } })
  })

  test('the shared pool (isolated), a WorkerPool and a JS runner give the same answers', async () => {
    const jsRunner = {
      exec: (spec: ExecSpec): Promise<ExecResult> =>
        new Promise((resolve) => {
          execFile(spec.binaryPath, spec.args, { cwd: spec.cwd, env: spec.env as NodeJS.ProcessEnv, maxBuffer: 1 << 26 }, (err, stdout, stderr) => {
            const code = err == null ? 0 : typeof err.code === 'number' ? err.code : 1
            resolve({ stdout, stderr, exitCode: code, truncated: false, durationMs: 0 })
          })
        }),
    }
    const calls: [ToolName, object][] = [
      ['read', { path: 'src/a.txt', offset: 2 }],
      ['ls', {}],
      ['find', { pattern: '*.md' }],
      ['grep', { pattern: 'hello', ignoreCase: true }],
      ['grep', { pattern: 'nothing-matches-this' }],
    ]
    for (const [name, args] of calls) {
      const shared = await executeTool(name, args, wt)
      const viaPool = await executeTool(name, args, wt, { runner: pool })
      const viaJs = await executeTool(name, args, wt, { runner: jsRunner })
      const isolated = await executeTool(name, args, wt, { runner: pool, isolation: { mode: 'auto' } })
      expect(viaPool, name).toEqual(shared)
      expect(viaJs, name).toEqual(shared)
      expect(isolated, name).toEqual(shared)
    }
  })

  test('a runner\'s timeout reads as TIMED_OUT', async () => {
    const runner = { exec: async (): Promise<ExecResult> => Promise.reject(new PoolError('EXEC_TIMEOUT', 'Command timed out after 5ms')) }
    expect(await executeTool('ls', {}, wt, { runner })).toEqual({
      ok: false,
      exitCode: 1,
      output: '',
      truncated: false,
      error: { code: 'TIMED_OUT', message: 'Command timed out after 5ms' },
    })
  })

  test('a runner that rejects gives ok: false with its code', async () => {
    const runner = { exec: async (): Promise<ExecResult> => Promise.reject(Object.assign(new Error('queue full'), { code: 'WORKER_UNAVAILABLE' })) }
    expect(await executeTool('ls', {}, wt, { runner })).toEqual({
      ok: false,
      exitCode: 1,
      output: '',
      truncated: false,
      error: { code: 'WORKER_UNAVAILABLE', message: 'queue full' },
    })
  })
})

describe('schemas', () => {
  test('one closed schema per tool, the git enum is ALLOWED_GIT_COMMANDS', () => {
    const schemas = toolSchemas()
    expect(Object.keys(schemas)).toEqual([...TOOL_NAMES])
    expect(TOOL_NAMES).toEqual(['read', 'ls', 'find', 'grep', 'git'])
    for (const name of TOOL_NAMES) expect(schemas[name]).toMatchObject({ type: 'object', additionalProperties: false })
    expect((schemas.git.properties as Record<string, { enum: string[] }>).command.enum).toEqual([...ALLOWED_GIT_COMMANDS])
    expect(ALLOWED_GIT_COMMANDS).toEqual(['status', 'log', 'diff', 'show', 'rev-parse', 'ls-files', 'blame', 'grep', 'branch'])
    expect(Object.isFrozen(ALLOWED_GIT_COMMANDS)).toBe(true)
    // A copy each time.
    ;(schemas.read as Record<string, unknown>).type = 'x'
    expect(toolSchemas().read.type).toBe('object')
  })
})

const GIT_ENV = { ...process.env, HOME: tmpdir(), GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' }
function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd, env: GIT_ENV, encoding: 'utf8' })
}

function repo(): string {
  const wt = dir('finn-tools-git-')
  git(wt, 'init', '-q', '-b', 'main')
  writeFileSync(join(wt, 'a.txt'), 'hello\n')
  git(wt, 'add', 'a.txt')
  git(wt, 'commit', '-q', '-m', 'first commit')
  return wt
}

describe('git', () => {
  test('read-only commands run pinned to the checked repository', async () => {
    const wt = repo()
    writeFileSync(join(wt, 'a.txt'), 'hello\nworld\n')
    const log = await executeTool('git', { command: 'log', args: ['--format=%s'] }, wt)
    expect(log).toEqual(ok('first commit'))
    expect((await executeTool('git', { command: 'status', args: ['--short'] }, wt)).output).toBe(' M a.txt')
    expect((await executeTool('git', { command: 'diff', args: ['--stat'] }, wt)).output).toContain('a.txt | 1 +')
    expect(await executeTool('git', { command: 'ls-files' }, wt)).toEqual(ok('a.txt'))
    expect(await executeTool('git', { command: 'grep', args: ['-n', '-e', '-x', 'a.txt'] }, wt)).toEqual({ ...ok(''), ok: false, exitCode: 1, error: { code: 'COMMAND_FAILED', message: 'exited with code 1' } })
    expect(await executeTool('git', { command: 'grep', args: ['-n', 'hello'] }, wt)).toEqual(ok('a.txt:1:hello'))
    expect((await executeTool('git', { command: 'blame', args: ['--porcelain', 'a.txt'] }, wt)).output).toContain('summary first commit')
    expect(await executeTool('git', { command: 'branch', args: ['--list'] }, wt)).toEqual(ok('* main'))
    expect(await executeTool('git', { command: 'branch' }, wt)).toEqual(ok('* main'))
    // A branch that would be created is refused: every tool only reads.
    const create = await executeTool('git', { command: 'branch', args: ['topic'] }, wt)
    expect(create.ok).toBe(true)
    expect(create.output).toMatch(/^Subcommand not allowed: git branch with these arguments/)
    expect(git(wt, 'branch', '--list').trim()).toBe('* main')
    const refused = await executeTool('git', { command: 'commit', args: ['-m', 'x'] }, wt)
    expect(refused.error?.code).toBe('INVALID_ARGUMENT')
  })

  test('every way git runs a program or reads outside is refused', async () => {
    const wt = repo()
    const marker = join(dir('finn-tools-marker-'), 'ran')
    const cases: [object, RegExp][] = [
      [{ command: 'diff', args: ['--ext-diff'] }, /^Flag not allowed: --ext-diff/],
      [{ command: 'show', args: ['--textconv', 'HEAD'] }, /^Flag not allowed: --textconv/],
      // Refused whichever letter of the cluster the policy reads first (`-c` is git's config).
      [{ command: 'grep', args: [`-O${marker}`, 'hello'] }, /^Flag not allowed: -/],
      [{ command: 'grep', args: ['-Osh', 'hello'] }, /^Flag not allowed: -Osh/],
      [{ command: 'grep', args: ['--open-files-in-pager=touch', 'hello'] }, /^Flag not allowed: --open-files-in-pager/],
      [{ command: 'grep', args: ['--no-index', 'hello'] }, /^Flag not allowed: --no-index/],
      [{ command: 'blame', args: ['--contents', '/etc/passwd', 'a.txt'] }, /^Flag not allowed: --contents/],
      [{ command: 'blame', args: ['--contents=/etc/passwd', 'a.txt'] }, /^Flag not allowed: --contents/],
      [{ command: 'log', args: ['--output=/tmp/x'] }, /^Flag not allowed: --output/],
    ]
    for (const [args, message] of cases) {
      const r = await executeTool('git', args, wt)
      expect(r.ok, JSON.stringify(args)).toBe(true)
      expect(r.output, JSON.stringify(args)).toMatch(message)
    }
    // Filters and textconv: attributes name a driver, the repository's config defines it.
    writeFileSync(join(wt, '.gitattributes'), '*.txt filter=evil diff=evil\n')
    git(wt, 'config', 'filter.evil.clean', `touch ${marker}; cat`)
    git(wt, 'config', 'filter.evil.smudge', `touch ${marker}; cat`)
    git(wt, 'config', 'diff.evil.textconv', `sh -c 'touch ${marker}; cat "$1"' -`)
    writeFileSync(join(wt, 'a.txt'), 'hello\nchanged\n')
    for (const args of [
      { command: 'status' },
      { command: 'diff' },
      { command: 'log', args: ['-p'] },
      { command: 'show', args: ['HEAD'] },
      { command: 'blame', args: ['a.txt'] },
      { command: 'grep', args: ['hello'] },
    ]) {
      const r = await executeTool('git', args, wt)
      expect(r.output, JSON.stringify(args)).toMatch(/^Repository config rejected: /)
    }
    expect(existsSync(marker)).toBe(false)
  })

  test('a worktree that is a bare repository is read, read-only', async () => {
    const source = repo()
    const bare = dir('finn-tools-bare-')
    rmSync(bare, { recursive: true })
    execFileSync('git', ['clone', '-q', '--no-local', '--bare', source, bare], { env: GIT_ENV })
    const head = readFileSync(join(bare, 'HEAD'), 'utf8')
    expect(await executeTool('git', { command: 'log', args: ['--format=%s'] }, bare)).toEqual(ok('first commit'))
    expect(await executeTool('git', { command: 'show', args: ['HEAD:a.txt'] }, bare)).toEqual(ok('hello'))
    expect(readFileSync(join(bare, 'HEAD'), 'utf8')).toBe(head)
  })
})

describe('createToolExecutor, as loa-finn\'s Orchestrator calls it', () => {
  test('execute(toolName, args, traceId) resolves { output, is_error } and audits every call', async () => {
    const wt = fixture()
    const data = dir('finn-tools-audit-')
    const audit = new AuditLog(data)
    const toolExecutor = createToolExecutor({ worktree: wt, audit })
    expect(await toolExecutor.execute('read', { path: 'src/a.txt', limit: 1 }, 'trace-1')).toEqual({
      output: '[File: src/a.txt]\n     1\thello\n[truncated: lines 1-1 shown; cut by limit (1 lines)] continue with offset=2',
      is_error: false,
    })
    expect(await toolExecutor.execute('read', { path: '../../etc/passwd' }, 'trace-2')).toEqual({ output: 'Path escapes jail: ../../etc/passwd', is_error: false })
    expect(await toolExecutor.execute('grep', { pattern: '(' }, 'trace-3')).toMatchObject({ is_error: true })
    expect(await toolExecutor.execute('bash', { command: 'id' })).toEqual({
      output: 'UNKNOWN_TOOL: toolName must be one of read, ls, find, grep, git, not "bash"',
      is_error: true,
    })
    expect(await toolExecutor.execute('ls', 'not an object')).toEqual({ output: 'INVALID_ARGUMENT: args must be an object', is_error: true })
    expect(await toolExecutor.execute('git', { command: 'status' })).toMatchObject({ is_error: true })
    const entries = readFileSync(join(audit.getLogDir(), 'audit.log'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
    expect(entries[0]).toMatchObject({ action: 'allow', command: 'tail', args: ['-n', '+1', '--', join(wt, 'src/a.txt')] })
    expect(entries[1]).toMatchObject({ action: 'allow', command: 'tail', exitCode: 0, isolation: { backend: expect.any(String) } })
    // The tool's own refusals are audited too, naming the tool and its arguments.
    expect(entries[2]).toMatchObject({ action: 'deny', command: 'read', args: ['{"path":"../../etc/passwd"}'], reason: 'path_rejected: Path escapes jail: ../../etc/passwd' })
    expect(entries.find((e) => e.command === 'bash')).toMatchObject({ action: 'deny', reason: expect.stringMatching(/^tool_unknown_tool: /) })
    // The runner ran git and failed: its outcome is audited too.
    expect(entries.at(-1)).toMatchObject({ command: 'git', args: ['status'], exitCode: 128 })
  })

  test('bad options throw naming the field', () => {
    expect(() => createToolExecutor({ worktree: 5 as unknown as string })).toThrow('worktree must be a string')
    expect(() => createToolExecutor({ worktree: tmpdir(), runner: {} as never })).toThrow('options.runner must be an object with exec(spec)')
    expect(() => createToolExecutor({ worktree: tmpdir(), isolation: { network: 'allow' } as never })).toThrow(/options\.isolation\.network/)
  })
})

describe('the shared pool', () => {
  test('holds neither the event loop open nor a process once Node exits', async () => {
    const wt = fixture()
    const token = `finn-tools-token-${randomUUID()}`
    writeFileSync(join(wt, 'token.txt'), `${token}\n`)
    // The script never shuts the pool down: Node must exit on its own once the call settled. It
    // reports every process below it (the pool's supervisor and whatever that started).
    const script = `
      const { executeTool } = require(${JSON.stringify(join(process.cwd(), 'index.js'))})
      const { readFileSync, readdirSync } = require('node:fs')
      const below = (pid) => {
        let out = []
        for (const t of readdirSync('/proc/' + pid + '/task')) {
          for (const c of readFileSync('/proc/' + pid + '/task/' + t + '/children', 'utf8').trim().split(' ').filter(Boolean)) {
            out.push(Number(c), ...below(c))
          }
        }
        return out
      }
      executeTool('grep', { pattern: ${JSON.stringify(token)} }, ${JSON.stringify(wt)}).then((r) => {
        process.stdout.write(JSON.stringify({ output: r.output, processes: below(process.pid) }))
      })`
    const run = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 20_000, killSignal: 'SIGKILL' })
    expect({ status: run.status, signal: run.signal, stderr: run.stderr }).toEqual({ status: 0, signal: null, stderr: '' })
    const { output, processes } = JSON.parse(run.stdout) as { output: string; processes: number[] }
    expect(output).toBe(`token.txt:1:${token}`)
    expect(processes.length).toBeGreaterThan(0)
    // Every process the pool had, and anything whose command line carries the call's pattern.
    await until(() => processes.every((pid) => !alive(pid)) && holders(token).length === 0)
  })
})

// Attacks on the structured tools by what an agent controls: the worktree's files (and a
// process of its own that changes them while a call runs) and the tools' arguments.
import { execFileSync, spawn } from 'node:child_process'
import { linkSync, mkdirSync, mkdtempSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import { AuditLog, WorkerPool, createToolExecutor, executeTool, type ExecResult, type ExecSpec } from '../index.js'

const pool = new WorkerPool({ interactiveWorkers: 2, killGraceMs: 200 })
afterAll(() => pool.shutdown())

const hasFast = ['rg', 'fdfind'].every((b) => {
  try {
    execFileSync('sh', ['-c', `command -v ${b}`])
    return true
  } catch {
    return false
  }
})
const FINDERS = hasFast ? (['rg-fd', 'grep-find'] as const) : (['grep-find'] as const)

function dir(prefix: string): string {
  return realpathSync(mkdtempSync(join(tmpdir(), prefix)))
}

describe('the host audit directory inside the worktree', () => {
  test('grep and find over the worktree never show the audit log, whatever runs them', async () => {
    const wt = dir('atk-audit-')
    writeFileSync(join(wt, 'a.txt'), 'allow me\n')
    const audit = new AuditLog(wt) // <wt>/audit/audit.log, loa-finn's default layout
    for (const finders of FINDERS) {
      const ex = createToolExecutor({ worktree: wt, audit, finders, runner: pool })
      // A call or two, so the log has lines with "allow" in it.
      await ex.execute('read', { path: 'a.txt' }, 't')
      expect(await ex.execute('read', { path: 'audit/audit.log' }, 't')).toEqual({
        output: 'Path is reserved for the host: audit/audit.log',
        is_error: false,
      })
      const grep = await ex.execute('grep', { pattern: 'allow' }, 't')
      expect(grep, finders).toEqual({ output: 'a.txt:1:allow me', is_error: false })
      const find = await ex.execute('find', { pattern: '*' }, 't')
      expect(find.output, finders).not.toContain('audit.log')
    }
  })

  test('the same answer isolated (the shared pool) and not, the audit directory left out alone', async () => {
    const wt = dir('atk-audit-iso-')
    mkdirSync(join(wt, 'data'))
    mkdirSync(join(wt, 'src/audit'), { recursive: true })
    mkdirSync(join(wt, 'data/keep'))
    writeFileSync(join(wt, 'src/audit/a.txt'), 'allow me\n')
    writeFileSync(join(wt, 'data/keep/b.txt'), 'allow too\n')
    writeFileSync(join(wt, 'data/c.txt'), 'allow three\n')
    const audit = new AuditLog(join(wt, 'data')) // <wt>/data/audit/audit.log
    const expected = {
      grep: { output: 'data/c.txt:1:allow three\ndata/keep/b.txt:1:allow too\nsrc/audit/a.txt:1:allow me', is_error: false },
      grepData: { output: 'data/c.txt:1:allow three\ndata/keep/b.txt:1:allow too', is_error: false },
      find: { output: 'data\ndata/c.txt\ndata/keep\ndata/keep/b.txt\nsrc\nsrc/audit\nsrc/audit/a.txt', is_error: false },
    }
    for (const finders of FINDERS) {
      for (const runner of [pool, undefined]) {
        const label = `${finders} ${runner ? 'pool' : 'shared, isolated'}`
        const ex = createToolExecutor({ worktree: wt, audit, finders, runner })
        await ex.execute('read', { path: 'data/c.txt' }, 't')
        expect(await ex.execute('grep', { pattern: 'allow' }, 't'), label).toEqual(expected.grep)
        expect(await ex.execute('grep', { pattern: 'allow', path: 'data' }, 't'), label).toEqual(expected.grepData)
        expect(await ex.execute('find', { pattern: '*' }, 't'), label).toEqual(expected.find)
      }
    }
  })
})

describe('grep of a path that is not a regular file', () => {
  test('a FIFO named as grep path is refused, not read until the timeout', async () => {
    const wt = dir('atk-fifo-')
    execFileSync('mkfifo', [join(wt, 'fifo')])
    for (const finders of FINDERS) {
      const started = Date.now()
      const r = await executeTool('grep', { pattern: 'x', path: 'fifo' }, wt, { runner: pool, finders, timeoutMs: 10_000 })
      expect(r.error, finders).toEqual({ code: 'NOT_A_FILE', message: 'grep: not a regular file or directory: fifo' })
      expect(Date.now() - started).toBeLessThan(5_000)
    }
  })
})

describe('a file changed while the search runs', () => {
  test('a hard link replaced by a plain file of the same name once read is not shown', async () => {
    for (const finders of FINDERS) {
      const wt = dir('atk-relink-')
      const outside = dir('atk-outside-')
      writeFileSync(join(outside, 'secret.txt'), 'hello outside secret\n')
      mkdirSync(join(wt, 'src'))
      linkSync(join(outside, 'secret.txt'), join(wt, 'src/linked.txt'))
      const runner = {
        exec: async (spec: ExecSpec): Promise<ExecResult> => {
          const r = await pool.exec(spec)
          rmSync(join(wt, 'src/linked.txt'))
          writeFileSync(join(wt, 'src/linked.txt'), 'plain\n')
          return r
        },
      }
      const r = await executeTool('grep', { pattern: 'hello' }, wt, { runner, finders })
      expect(r.output, finders).toBe('[matches in files changed during the call withheld: src/linked.txt]')
    }
  })

  test('a directory below the path swapped for a symlink out and back while the search runs', async () => {
    const wt = dir('atk-race-')
    const outside = dir('atk-outside-')
    mkdirSync(join(wt, 'src/sub'), { recursive: true })
    for (let i = 0; i < 200; i++) {
      writeFileSync(join(outside, `f${i}.txt`), 'hello SECRET\n')
      writeFileSync(join(wt, `src/sub/f${i}.txt`), 'hello inside\n')
    }
    // The agent's own process, swapping src/sub and a symlink to the outside directory.
    const swapper = `
import os, sys, time
os.chdir(sys.argv[1]); os.symlink(sys.argv[2], 'lnk'); end = time.time() + 6
while time.time() < end:
  os.rename('sub', 'real'); os.rename('lnk', 'sub'); time.sleep(0.0005)
  os.rename('sub', 'lnk'); os.rename('real', 'sub'); time.sleep(0.0005)
`
    const child = spawn('python3', ['-c', swapper, join(wt, 'src'), outside, 'atk-tools-swapper'], { stdio: 'ignore' })
    let runs = 0
    let leaks = 0
    try {
      const until = Date.now() + 4_000
      while (Date.now() < until) {
        for (const finders of FINDERS) {
          const r = await executeTool('grep', { pattern: 'hello' }, wt, { runner: pool, finders })
          runs++
          if (r.output.includes('SECRET')) leaks++
        }
      }
    } finally {
      child.kill('SIGKILL')
    }
    expect(runs).toBeGreaterThan(5)
    expect(leaks).toBe(0)
  }, 30_000)

  test('a hard-linked file removed before the call finishes is not shown', async () => {
    for (const finders of FINDERS) {
      const wt = dir('atk-link-')
      const outside = dir('atk-outside-')
      writeFileSync(join(outside, 'secret.txt'), 'hello outside secret\n')
      mkdirSync(join(wt, 'src'))
      writeFileSync(join(wt, 'src/a.txt'), 'hello inside\n')
      linkSync(join(outside, 'secret.txt'), join(wt, 'src/linked.txt'))
      // The agent's own process removes its hard link once the search has read it.
      const runner = {
        exec: async (spec: ExecSpec): Promise<ExecResult> => {
          const r = await pool.exec(spec)
          rmSync(join(wt, 'src/linked.txt'))
          return r
        },
      }
      const r = await executeTool('grep', { pattern: 'hello' }, wt, { runner, finders })
      expect(r.output, finders).not.toContain('secret')
    }
  })
})

describe('names that are not UTF-8', () => {
  test('a hard link with a name that is not UTF-8 does not escape the hard-link check', async () => {
    const wt = dir('atk-nonutf8-')
    const outside = dir('atk-outside-')
    writeFileSync(join(outside, 's'), 'hello SECRET\n')
    // The name reaches the check as `l\uFFFD` (lossy), which names no file: the lstat failed
    // and the match was shown.
    linkSync(join(outside, 's'), Buffer.from(`${wt}/l\xff`, 'latin1'))
    for (const finders of FINDERS) {
      const r = await executeTool('grep', { pattern: 'hello' }, wt, { runner: pool, finders })
      expect(r.output, finders).toBe('[matches in files with names that are not UTF-8 withheld: l\uFFFD]')
    }
  })
})

describe('names with a newline', () => {
  test('a hard link named x\\nsafe.txt is judged as itself, not as safe.txt', async () => {
    const wt = dir('atk-newline-')
    const outside = dir('atk-outside-')
    writeFileSync(join(outside, 's'), 'hello SECRET\n')
    writeFileSync(join(wt, 'safe.txt'), 'nothing\n')
    // grep's `name\0line:text` records split on newlines made `safe.txt` the match's file:
    // its hard-link check passed and the outside file's line was shown as safe.txt's.
    linkSync(join(outside, 's'), join(wt, 'x\nsafe.txt'))
    writeFileSync(join(wt, 'y\nz.txt'), 'hello plain\n')
    for (const finders of FINDERS) {
      const r = await executeTool('grep', { pattern: 'hello' }, wt, { runner: pool, finders })
      expect(r.output, finders).toBe('y\nz.txt:1:hello plain\n[matches in hard-linked files withheld: x\nsafe.txt]')
    }
  })
})

describe('a pattern that matches a newline', () => {
  test('is BAD_PATTERN on both paths, not an rg error here and two patterns for grep there', async () => {
    const wt = dir('atk-nl-pattern-')
    writeFileSync(join(wt, 'a.txt'), 'hello\n')
    for (const pattern of ['zzz\nhello', 'zzz\\nhello', 'a\\x0Ab', '[\\n]']) {
      for (const finders of FINDERS) {
        const r = await executeTool('grep', { pattern }, wt, { runner: pool, finders })
        expect(r.error, `${finders} ${JSON.stringify(pattern)}`).toEqual({
          code: 'BAD_PATTERN',
          message: 'args.pattern must not match a newline (\\n): lines are searched one by one',
        })
      }
    }
    // A class that holds a newline is fine: no line has one.
    for (const finders of FINDERS) {
      expect((await executeTool('grep', { pattern: 'hel[^\\n]o' }, wt, { runner: pool, finders })).output).toBe('a.txt:1:hello')
    }
  })
})

describe('syntax only Rust reads', () => {
  test('is BAD_PATTERN whichever program would run it', async () => {
    const wt = dir('atk-syntax-')
    writeFileSync(join(wt, 'a.txt'), 'ab cd\n[a]b\n')
    for (const [pattern, why] of [
      ['[a-z&&[^b]]b', 'a class set operation (&&, -- or ~~)'],
      ['[[a]b]', 'a class nested in a class'],
      ['[[:^alpha:]]', 'a negated ASCII class ([:^...:])'],
      ['(?-u)\\w', 'the u flag'],
      ['(?R)x', 'the R flag'],
      ['(?<n>ab)', '(?<name>...), not read by every rg (write (?P<name>...))'],
    ]) {
      for (const finders of FINDERS) {
        const r = await executeTool('grep', { pattern }, wt, { runner: pool, finders })
        expect(r.error, `${finders} ${pattern}`).toEqual({
          code: 'BAD_PATTERN',
          message: `args.pattern uses ${why}, which grep and rg read differently`,
        })
      }
    }
  })
})

describe('grep -P reads the pattern as rg does', () => {
  test('\\w, \\d and \\b are Unicode on both paths, with and without word', async () => {
    const wt = dir('atk-ucp-')
    writeFileSync(join(wt, 'a.txt'), 'héllo\nx\u0663y\nnaïve café\n')
    for (const [pattern, extra, output] of [
      ['h\\w+o', {}, 'a.txt:1:héllo'],
      ['x\\dy', {}, 'a.txt:2:x\u0663y'],
      ['\\bllo', {}, ''],
      ['caf\\w', { word: true }, 'a.txt:3:naïve café'],
      ['na\\w', { word: true }, ''],
      // ERE in a UTF-8 locale and PCRE with (*UCP) read [[:alpha:]] as Unicode, Rust as ASCII.
      ['^[[:alpha:]]$', {}, ''],
      ['^[[:alpha:] ]+$', {}, ''],
      ['[[:alpha:]]af', {}, 'a.txt:3:naïve café'],
      ['h[[:punct:][:alpha:]]llo', {}, ''],
    ] as const) {
      for (const finders of FINDERS) {
        const r = await executeTool('grep', { pattern, ...extra }, wt, { runner: pool, finders })
        expect(r, `${finders} ${pattern}`).toEqual({ ok: true, exitCode: 0, output, truncated: false })
      }
    }
  })
})

describe('a .gitignore the agent wrote', () => {
  test('a huge .gitignore fails the call, without growing Node by its compiled patterns', async () => {
    const wt = dir('atk-gitignore-')
    writeFileSync(join(wt, 'a.txt'), 'hello\n')
    // 200,000 patterns, 5 MB: compiled, several GB in Node's process (and no timeout applies).
    let big = ''
    for (let i = 0; i < 200_000; i++) big += `*x${i}y*z[ab]/**/q${i}\n`
    writeFileSync(join(wt, '.gitignore'), big)
    const before = process.memoryUsage().rss
    for (const finders of FINDERS) {
      const started = Date.now()
      const find = await executeTool('find', { pattern: '*' }, wt, { runner: pool, finders, timeoutMs: 5_000 })
      expect(find.error, finders).toEqual({
        code: 'TOOL_FAILED',
        message: 'find: .gitignore is larger than 262144 bytes: its rules are not read',
      })
      const grep = await executeTool('grep', { pattern: 'hello' }, wt, { runner: pool, finders, timeoutMs: 5_000 })
      expect(grep.error?.code, finders).toBe('TOOL_FAILED')
      expect(Date.now() - started).toBeLessThan(5_000)
    }
    expect(process.memoryUsage().rss - before).toBeLessThan(200 * 2 ** 20)
    // Many files under the byte bound: the patterns are counted over the call.
    const many = dir('atk-gitignore-many-')
    let lines = ''
    for (let i = 0; i < 3_000; i++) lines += `q${i}\n`
    for (const d of ['a', 'b', 'c']) {
      mkdirSync(join(many, d))
      writeFileSync(join(many, d, '.gitignore'), lines)
      writeFileSync(join(many, d, 'x.txt'), 'hello\n')
    }
    for (const finders of FINDERS) {
      const r = await executeTool('find', { pattern: '*' }, many, { runner: pool, finders })
      expect(r.error?.message, finders).toMatch(/^find: the .gitignore files read hold more than 8192 patterns/)
    }
  }, 60_000)
})

describe('hidden names on both paths', () => {
  test('a grep glob never opens hidden files to rg, and a find pattern with a leading dot is no fd error', async () => {
    const wt = dir('atk-hidden-')
    mkdirSync(join(wt, '.h/.in'), { recursive: true })
    mkdirSync(join(wt, 'd'))
    writeFileSync(join(wt, '.env'), 'hello env\n')
    writeFileSync(join(wt, '.h/x'), 'hello h\n')
    writeFileSync(join(wt, '.h/.in/y'), 'hello in\n')
    writeFileSync(join(wt, 'd/z'), 'hello z\n')
    const ok = (output: string) => ({ ok: true, exitCode: 0, output, truncated: false })
    for (const finders of FINDERS) {
      for (const glob of ['*', '.*', '.env']) {
        const expected = glob === '*' ? ok('d/z:1:hello z') : ok('')
        expect(await executeTool('grep', { pattern: 'hello', glob }, wt, { runner: pool, finders }), `${finders} ${glob}`).toEqual(expected)
      }
      expect(await executeTool('grep', { pattern: 'hello', glob: '*', path: '.h' }, wt, { runner: pool, finders }), finders).toEqual(ok('.h/x:1:hello h'))
      for (const pattern of ['.*', '.env']) {
        expect(await executeTool('find', { pattern }, wt, { runner: pool, finders }), `${finders} ${pattern}`).toEqual(ok(''))
      }
    }
  })
})

describe('a path swapped for a symlink during the call and back', () => {
  test('read, ls, find and grep withhold what the runner read through the symlink', async () => {
    for (const [name, args] of [
      ['read', { path: 'a.txt' }],
      ['grep', { pattern: 'e', path: 'a.txt' }],
      ['grep', { pattern: 'e', path: 'd' }],
      ['ls', { path: 'd' }],
      ['find', { pattern: '*', path: 'd' }],
    ] as const) {
      const wt = dir('atk-swapback-')
      const outside = dir('atk-outside-')
      writeFileSync(join(outside, 's'), 'SECRET\n')
      writeFileSync(join(wt, 'a.txt'), 'inside\n')
      // A directory: the outside one holds `s`, and so does the inside one, so that the
      // finish's look at d/s finds an ordinary file.
      mkdirSync(join(outside, 'dir'))
      writeFileSync(join(outside, 'dir/s'), 'SECRET\n')
      mkdirSync(join(wt, 'd'))
      writeFileSync(join(wt, 'd/s'), 'inside\n')
      const victim = args.path
      const target = victim === 'd' ? join(outside, 'dir') : join(outside, 's')
      // The agent's own process renames a.txt away, puts a symlink out in its place while the
      // command opens it, and renames it back: the same device and inode at the finish.
      const runner = {
        exec: async (spec: ExecSpec): Promise<ExecResult> => {
          renameSync(join(wt, victim), join(wt, 'real'))
          symlinkSync(target, join(wt, victim))
          try {
            return await pool.exec(spec)
          } finally {
            rmSync(join(wt, victim))
            renameSync(join(wt, 'real'), join(wt, victim))
          }
        },
      }
      const r = await executeTool(name, args, wt, { runner })
      expect(r.output, `${name} ${victim}`).toBe(`Path changed during the call: ${victim} (its output is withheld)`)
    }
  })
})

describe('a directory on the named path swapped for a symlink during the call and back', () => {
  test('read, ls, find and grep withhold what the runner read through it', async () => {
    for (const [name, args] of [
      ['read', { path: 'd/s' }],
      ['grep', { pattern: 'e', path: 'd/s' }],
      ['grep', { pattern: 'e', path: 'd/e' }],
      ['ls', { path: 'd/e' }],
      ['find', { pattern: '*', path: 'd/e' }],
    ] as const) {
      const wt = dir('atk-swapmid-')
      const outside = dir('atk-outside-')
      // The same names outside and inside: only the directory on the way differs.
      for (const root of [outside, join(wt, 'd')]) {
        mkdirSync(join(root, 'e'), { recursive: true })
        const text = root === outside ? 'SECRET\n' : 'inside\n'
        writeFileSync(join(root, 's'), text)
        writeFileSync(join(root, 'e/t'), text)
      }
      const runner = {
        exec: async (spec: ExecSpec): Promise<ExecResult> => {
          renameSync(join(wt, 'd'), join(wt, 'real'))
          symlinkSync(outside, join(wt, 'd'))
          try {
            return await pool.exec(spec)
          } finally {
            rmSync(join(wt, 'd'))
            renameSync(join(wt, 'real'), join(wt, 'd'))
          }
        },
      }
      const r = await executeTool(name, args, wt, { runner })
      expect(r.output, `${name} ${args.path}`).not.toMatch(/SECRET|^t$/)
      expect(r.output, `${name} ${args.path}`).toBe(`Path changed during the call: ${args.path} (its output is withheld)`)
    }
  })
})

describe('find through a directory swapped mid-walk', () => {
  test('names below a directory that changed during the call are withheld', async () => {
    for (const finders of FINDERS) {
      const wt = dir('atk-find-swap-')
      const outside = dir('atk-outside-')
      mkdirSync(join(wt, 'src/sub'), { recursive: true })
      writeFileSync(join(wt, 'src/sub/a.txt'), 'x\n')
      writeFileSync(join(wt, 'src/b.txt'), 'x\n')
      writeFileSync(join(outside, 'id_rsa'), 'x\n')
      // Stands for a walk that went through src/sub while it was a symlink out: the runner
      // reports the outside names under src/sub, and src/sub was swapped away and back.
      const runner = {
        exec: async (spec: ExecSpec): Promise<ExecResult> => {
          renameSync(join(wt, 'src/sub'), join(wt, 'src/real'))
          symlinkSync(outside, join(wt, 'src/sub'))
          rmSync(join(wt, 'src/sub'))
          renameSync(join(wt, 'src/real'), join(wt, 'src/sub'))
          return pool.exec(spec)
        },
      }
      const r = await executeTool('find', { pattern: '*', path: 'src' }, wt, { runner, finders })
      expect(r.output, finders).toBe('Path changed during the call: src (its output is withheld)')
      const r2 = await executeTool('find', { pattern: '*' }, wt, { runner, finders })
      expect(r2.output, finders).toBe('src\n[3 entries below directories changed during the call withheld]')
    }
  })
})

// The documentation, checked: every ```js example in README.md and docs/*.md runs against this
// checkout as `finn-sandbox`, every relative link (and #anchor) in the markdown resolves, and no
// page reads like a lab notebook (what happened in a session belongs in commit messages).
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, test } from 'vitest'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')

/** Directories never searched for markdown when git cannot list the tracked files. */
const SKIP_DIRS = new Set(['.git', 'node_modules', 'target', '.tmp', 'results', 'corpus'])

/** The markdown files of the repository: the ones git tracks or would (not ignored), or (a copy without .git) a walk. */
function markdownFiles(): string[] {
  const git = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard', '--', '*.md'], { cwd: ROOT, encoding: 'utf8' })
  if (git.status === 0 && git.stdout.length > 0) {
    return git.stdout.split('\0').filter(Boolean).filter((f) => existsSync(join(ROOT, f)))
  }
  const out: string[] = []
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) {
        if (!SKIP_DIRS.has(entry.name)) walk(join(dir, entry.name))
      } else if (entry.name.endsWith('.md')) {
        out.push(relative(ROOT, join(dir, entry.name)))
      }
    }
  }
  walk(ROOT)
  return out
}

const FILES = markdownFiles()
const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8')

/** The text outside fenced code blocks, each code line blanked so line numbers still match. */
function prose(text: string): string {
  let fenced = false
  return text
    .split('\n')
    .map((line) => {
      if (/^\s*(```|~~~)/.test(line)) {
        fenced = !fenced
        return ''
      }
      return fenced ? '' : line.replace(/`[^`]*`/g, '``')
    })
    .join('\n')
}

/** GitHub's heading anchors of a markdown file, plus explicit `<a id|name="...">` anchors. */
function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>()
  const seen = new Map<string, number>()
  let fenced = false
  for (const line of text.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
    if (fenced) continue
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (heading) {
      const base = heading[1]
        .replace(/<[^>]+>/g, '')
        .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, '')
        .replace(/ /g, '-')
      const n = seen.get(base) ?? 0
      seen.set(base, n + 1)
      anchors.add(n === 0 ? base : `${base}-${n}`)
    }
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1])
  }
  return anchors
}

/** Every link target of a markdown file's prose: inline `[x](t)`, images, and `[x]: t` definitions. */
function linksOf(text: string): Array<{ target: string; line: number }> {
  const links: Array<{ target: string; line: number }> = []
  prose(text)
    .split('\n')
    .forEach((line, i) => {
      for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) links.push({ target: m[1], line: i + 1 })
      const def = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)/.exec(line)
      if (def) links.push({ target: def[1], line: i + 1 })
    })
  return links
}

/** The ```js blocks of a markdown file, with the line each starts on. */
function jsExamples(text: string): Array<{ code: string; line: number }> {
  const out: Array<{ code: string; line: number }> = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    if (!/^```js\s*$/.test(lines[i])) continue
    const start = i
    const body: string[] = []
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) body.push(lines[i])
    out.push({ code: body.join('\n') + '\n', line: start + 1 })
  }
  return out
}

/**
 * Words of a lab notebook: what a session did, which issue or attack found what, how it was
 * before. Each is a phrase a product page has no reason to use; CHANGELOG.md says what changed
 * without them too, and bench/lib/report.js writes BENCHMARKS.md without them.
 */
const NARRATION: Array<[RegExp, string]> = [
  [/\bthis stop\b/i, 'this stop'],
  [/\bthis session\b/i, 'this session'],
  [/\b(an |the |a )?(earlier|previous|last) session\b/i, 'an earlier session'],
  [/\battack run\b/i, 'attack run'],
  [/\battacker helper\b/i, 'attacker helper'],
  [/\bfound by an? (attack|attacker)\b/i, 'found by an attack'],
  [/\bissues? \d+\b/i, 'issue N'],
  // "Before, x did y", "(before: 40)", "; before, it failed".
  [/(^|[(;.]\s*)before[,:] /i, 'before, ...'],
  [/\bas before\b/i, 'as before'],
  [/\bthe colleague\b/i, 'the colleague'],
  [/\b(reported|report) to the lead\b/i, 'reported to the lead'],
]

describe('documentation', () => {
  test('the markdown files are found', () => {
    expect(FILES).toContain('README.md')
    expect(FILES.some((f) => f.startsWith('docs/'))).toBe(true)
  })

  describe.each(FILES)('%s', (file) => {
    test('every relative link and anchor resolves', () => {
      const text = read(file)
      const broken: string[] = []
      for (const { target, line } of linksOf(text)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // https:, mailto:
        const [pathPart, anchor] = target.split('#', 2)
        const dest = pathPart === '' ? join(ROOT, file) : resolve(dirname(join(ROOT, file)), decodeURIComponent(pathPart))
        if (!existsSync(dest)) {
          broken.push(`${file}:${line}: ${target} (no such file)`)
          continue
        }
        if (anchor !== undefined && dest.endsWith('.md') && statSync(dest).isFile()) {
          if (!anchorsOf(readFileSync(dest, 'utf8')).has(decodeURIComponent(anchor))) {
            broken.push(`${file}:${line}: ${target} (no such anchor)`)
          }
        }
      }
      expect(broken).toEqual([])
    })

    // GitHub splits a table row on every unescaped `|`, inside code spans too: a row with more or
    // fewer cells than its header shifts or drops a column.
    test('every table row has as many cells as its header', () => {
      const bad: string[] = []
      let header = 0
      let fenced = false
      read(file)
        .split('\n')
        .forEach((line, i) => {
          if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
          if (fenced) return
          if (!line.startsWith('|')) {
            header = 0
            return
          }
          const cells = line.replace(/\\\|/g, '').split('|').length - 2
          if (header === 0) header = cells
          else if (cells !== header) bad.push(`${file}:${i + 1}: ${cells} cells, the header has ${header}`)
        })
      expect(bad).toEqual([])
    })

    test('reads as documentation, not as a lab notebook', () => {
      const found: string[] = []
      read(file)
        .split('\n')
        .forEach((line, i) => {
          for (const [re, name] of NARRATION) if (re.test(line)) found.push(`${file}:${i + 1}: "${name}" in: ${line.trim().slice(0, 120)}`)
        })
      expect(found).toEqual([])
    })
  })

  const examples = FILES.filter((f) => f === 'README.md' || f.startsWith('docs/')).flatMap((file) =>
    jsExamples(read(file)).map((ex) => ({ name: `${file}:${ex.line}`, ...ex })),
  )

  test('README.md has a WorkerPool and a ToolSandbox example', () => {
    const readme = examples.filter((e) => e.name.startsWith('README.md:')).map((e) => e.code)
    expect(readme.some((c) => c.includes('new WorkerPool'))).toBe(true)
    expect(readme.some((c) => c.includes('new ToolSandbox'))).toBe(true)
  })

  // Each example runs in a directory of its own, where `finn-sandbox` is this checkout.
  test.each(examples)('the example at $name runs', ({ code }) => {
    const dir = mkdtempSync(join(tmpdir(), 'finn-docs-'))
    mkdirSync(join(dir, 'node_modules'))
    symlinkSync(ROOT, join(dir, 'node_modules', 'finn-sandbox'), 'dir')
    const esm = /^\s*(import|export)\s/m.test(code)
    const file = join(dir, esm ? 'example.mjs' : 'example.cjs')
    writeFileSync(file, code)
    const run = spawnSync(process.execPath, [file], {
      cwd: dir,
      env: { ...process.env, TMPDIR: dir, HOME: dir },
      encoding: 'utf8',
      timeout: 20_000,
      killSignal: 'SIGKILL',
    })
    expect({ status: run.status, signal: run.signal, stderr: run.stderr }).toEqual({ status: 0, signal: null, stderr: '' })
  })
})

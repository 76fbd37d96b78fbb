// The short soak (scripts/soak.js --quick: 1,000 mixed jobs, the same checks as `npm run soak`)
// in a child Node, so its thread, fd and RSS readings are not disturbed by vitest's own.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'

const SCRIPT = resolve(__dirname, '..', 'scripts', 'soak.js')
const dir = mkdtempSync(join(tmpdir(), 'finn-soak-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

interface Figures {
  jobs: number
  ok: boolean
  failures: string[]
  unexpected: unknown[]
  survivors: number
  zombies: number
  threads: { delta: number }
  fds: { delta: number }
  rss: { secondHalf: number; overall: number }
  kinds: Record<string, number>
}

function soak(args: string[], env: Record<string, string> = {}): { status: number | null; figures: Figures; stderr: string } {
  const out = join(dir, `soak-${Math.random().toString(36).slice(2)}.json`)
  const r = spawnSync(process.execPath, ['--expose-gc', SCRIPT, ...args, '--out', out], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 120_000,
  })
  return { status: r.status, figures: JSON.parse(readFileSync(out, 'utf8')) as Figures, stderr: r.stderr }
}

describe('soak (short)', () => {
  test('1,000 mixed jobs leave no thread, fd, zombie or survivor behind, and RSS stays bounded', { timeout: 120_000 }, () => {
    const { status, figures, stderr } = soak(['--quick'])
    expect(figures.failures, stderr).toEqual([])
    expect(status).toBe(0)
    expect(figures.jobs).toBe(1000)
    expect(figures.unexpected).toEqual([])
    expect(figures.survivors).toBe(0)
    expect(figures.zombies).toBe(0)
    expect(figures.threads.delta).toBeLessThanOrEqual(0)
    expect(figures.fds.delta).toBeLessThanOrEqual(0)
    expect(figures.rss.secondHalf).toBeLessThanOrEqual(4 * 1024 * 1024)
    expect(figures.rss.overall).toBeLessThanOrEqual(16 * 1024 * 1024)
    // Every kind of job really ran.
    for (const kind of ['fast', 'failing', 'unspawnable', 'timeout', 'timeoutImmune', 'escapee', 'truncated', 'abortRunning', 'abortAtOnce', 'queueFull']) {
      expect(figures.kinds[kind], kind).toBeGreaterThan(0)
    }
  })

  test('a leaked fd makes the soak fail (its checks can fail)', { timeout: 120_000 }, () => {
    const { status, figures } = soak(['--jobs', '200'], { FINN_SOAK_TEST_LEAK_FD: '1' })
    expect(status).toBe(1)
    expect(figures.ok).toBe(false)
    expect(figures.failures).toContain('fds not back to start (+1)')
  })
})

import { readFileSync } from 'node:fs'
import { expect } from 'vitest'
import type { ExecSpec } from '../index.js'

export const ENV = { PATH: '/usr/local/bin:/usr/bin:/bin' }

/** A spec running `script` under /bin/sh. */
export function sh(script: string, extra: Partial<ExecSpec> = {}): ExecSpec {
  return { binaryPath: '/bin/sh', args: ['-c', script], cwd: '/', env: ENV, ...extra }
}

/** A pid is alive unless it is absent or a zombie (a zombie awaits a reaper, it runs nothing). */
export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]
    return state !== 'Z' && state !== 'X'
  } catch {
    return false
  }
}

/** Lines `name pid` printed by a test script, as a map. */
export function pidsOf(stdout: string): Record<string, number> {
  const out: Record<string, number> = {}
  for (const line of stdout.split('\n')) {
    const [name, pid] = line.trim().split(/\s+/)
    if (name && pid && /^\d+$/.test(pid)) out[name] = Number(pid)
  }
  return out
}

/** Resolves once `predicate` holds, polling a file the child writes (a real signal from it). */
export async function until(predicate: () => boolean, timeoutMs = 10_000): Promise<void> {
  const start = Date.now()
  while (!predicate()) {
    if (Date.now() - start > timeoutMs) throw new Error('condition not reached in time')
    await new Promise((r) => setTimeout(r, 5))
  }
}

/** Reads a file, or '' when it does not exist yet. */
export function readOr(path: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return ''
  }
}

/** The rejection of `promise`, checked to be an instance of `type`. */
export async function rejectionOf<T>(promise: Promise<unknown>, type: abstract new (...args: never[]) => T): Promise<T> {
  const err = await promise.then(
    () => {
      throw new Error(`expected a rejection with ${type.name}`)
    },
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(type)
  return err as T
}

/** Worst lateness of a 10 ms interval (ms) while `work` runs, and `work`'s value. */
export async function lateness<T>(work: () => Promise<T>, onTick?: () => void): Promise<{ worst: number; value: T }> {
  let worst = 0
  let last = performance.now()
  const timer = setInterval(() => {
    const now = performance.now()
    worst = Math.max(worst, now - last - 10)
    last = now
    onTick?.()
  }, 10)
  try {
    const value = await work()
    return { worst, value }
  } finally {
    clearInterval(timer)
  }
}

import { chmodSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { expect } from 'vitest'
import type { ExecSpec } from '../index.js'

export const ENV = { PATH: '/usr/local/bin:/usr/bin:/bin' }

/** A spec running `script` under /bin/sh. */
export function sh(script: string, extra: Partial<ExecSpec> = {}): ExecSpec {
  return { binaryPath: '/bin/sh', args: ['-c', script], cwd: '/', env: ENV, ...extra }
}

/** The state letter of `/proc/<path>/stat` ('' when it cannot be read). */
function stateAt(path: string): string {
  try {
    const stat = readFileSync(`${path}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]
  } catch {
    return ''
  }
}

/** The live threads of `pid`: their `/proc/<pid>/task/<tid>` paths. */
function liveTasks(pid: number): string[] {
  let tids: string[]
  try {
    tids = readdirSync(`/proc/${pid}/task`)
  } catch {
    return []
  }
  return tids.map((tid) => `/proc/${pid}/task/${tid}`).filter((t) => !['', 'Z', 'X'].includes(stateAt(t)))
}

/**
 * A pid is alive while any of its threads is: a zombie awaits a reaper and runs nothing, but a
 * process whose leader thread has exited shows `Z` in `/proc/<pid>/stat` while its other threads
 * run on.
 */
export function alive(pid: number): boolean {
  return liveTasks(pid).length > 0
}

/**
 * Live processes that carry `tok` in the command line of any live thread. Each thread is read on
 * its own: a process whose leader thread has exited has an empty `/proc/<pid>/cmdline`, while
 * `/proc/<pid>/task/<tid>/cmdline` of its running threads still shows it.
 */
export function holders(tok: string): number[] {
  const out: number[] = []
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    const pid = Number(name)
    if (pid === process.pid) continue
    const holds = liveTasks(pid).some((t) => {
      try {
        return readFileSync(`${t}/cmdline`, 'latin1').includes(tok)
      } catch {
        return false
      }
    })
    if (holds) out.push(pid)
  }
  return out
}

/**
 * Writes the zombie-leader program (`tests/fixtures/zombie-leader.s`) into `dir` as `z` and
 * returns its path: its main thread exits alone, and the process lives on in a second thread.
 */
export function zombieLeader(dir: string): string {
  return fixture(dir, 'zombie-leader', 'z')
}

/**
 * Writes the states program (`tests/fixtures/states.s`) into `dir` as `s` and returns its path:
 * its first argument picks a process state (`v` vfork, `z` zombie leader with setsid, `p`
 * CLONE_PARENT, `b` a bounded fork bomb).
 */
export function statesProgram(dir: string): string {
  return fixture(dir, 'states', 's')
}

/** Writes the program of `tests/fixtures/<name>.hex` into `dir` as the executable `file`. */
function fixture(dir: string, name: string, file: string): string {
  const hex = readFileSync(join(import.meta.dirname, '..', 'tests', 'fixtures', `${name}.hex`), 'utf8').trim()
  const path = join(dir, file)
  writeFileSync(path, Buffer.from(hex, 'hex'))
  chmodSync(path, 0o755)
  return path
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

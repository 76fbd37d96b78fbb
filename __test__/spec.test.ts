// One spec, two decoders: the packed string index.js builds (native submitPacked) and the
// field-by-field read (native submit) must give the same job or the same field-named error.
// Also: the defaults index.d.ts documents are the ones the addon exports from finn_job::limits.
import { createRequire } from 'node:module'
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import { WorkerPool, type ExecResult, type ExecSpec, type PoolLane } from '../index.js'
import { ENV, sh } from './helpers.js'

const native = createRequire(import.meta.url)('../native.js') as typeof import('../native.js')
const limits = native.limits()
type NativeWorkerPool = import('../native.js').NativeWorkerPool
type Ticket = import('../native.js').Ticket
const internals = WorkerPool as unknown as {
  nativeOf(pool: WorkerPool): NativeWorkerPool
  track(pool: WorkerPool, ticket: Ticket, signal?: AbortSignal): Promise<ExecResult>
}

const pool = new WorkerPool({ interactiveWorkers: 8, maxQueueDepth: 100 })
afterAll(() => pool.shutdown())

// Every packed submit is recorded with the native pool's answer.
const nativePool = internals.nativeOf(pool)
const packedSubmit = nativePool.submitPacked.bind(nativePool)
let lastPacked: Ticket | undefined
nativePool.submitPacked = (packed: string) => {
  lastPacked = packedSubmit(packed)
  return lastPacked
}

type Settled = { result: Omit<ExecResult, 'durationMs'> } | { error: { code: string; message: string } }

async function settle(promise: Promise<ExecResult>): Promise<Settled> {
  try {
    const { durationMs: _, ...result } = await promise
    return { result }
  } catch (err) {
    const { code, message } = err as { code: string; message: string }
    return { error: { code, message } }
  }
}

/** The outcome of `spec` through each decoder. */
async function bothWays(spec: ExecSpec, lane?: PoolLane, jailRoot?: string): Promise<[Settled, Settled]> {
  lastPacked = undefined
  const viaExec = pool.exec(spec, lane, jailRoot)
  const packed = lastPacked as Ticket | undefined
  expect(packed, 'index.js packed this spec').toBeDefined()
  const viaFields = settle(internals.track(pool, nativePool.submit(spec, lane, jailRoot)))
  // A NUL inside a value makes the packed form malformed by design; index.js then resubmits
  // field by field, so the caller's outcome is what counts.
  const viaPacked =
    packed!.id == null && packed!.errorMessage !== 'packed spec is malformed'
      ? Promise.resolve<Settled>({ error: { code: packed!.errorCode!, message: packed!.errorMessage! } })
      : settle(viaExec)
  viaExec.catch(() => {})
  return [await viaPacked, await viaFields]
}

const show = 'printf "%s|" "$0" "$@"; echo; env | sort; pwd'
const jail = mkdtempSync(join(tmpdir(), 'finn-spec-'))

describe('the packed and the field-by-field decoder agree', () => {
  const same: [string, ExecSpec, PoolLane?, string?][] = [
    ['a plain spec', sh(show)],
    ['args, unicode and empty ones', { ...sh(show), args: ['-c', show, 'zero', 'é ü', '', '--x=1'] }],
    ['env with undefined values left out', sh(show, { env: { ...ENV, A: 'a=b', GONE: undefined, E: '' } })],
    // Over maxBuffer while the leader still runs: always cut and killed (no race with its exit).
    ['timeout, maxBuffer (truncating), sessionId', sh("printf '%0200d' 0; exec sleep 10", { timeoutMs: 5000, maxBuffer: 100, sessionId: 's' })],
    ['the system lane', sh(show), 'system'],
    ['a jailRoot holding cwd', sh(show, { cwd: jail }), 'interactive', jail],
    ['a jailRoot not holding cwd', sh(show, { cwd: '/' }), undefined, jail],
    ['a bare binary found on env.PATH', { binaryPath: 'echo', args: ['found'], cwd: '/', env: ENV }],
    ['a binary that does not exist', { binaryPath: '/nonexistent/bin', args: [], cwd: '/', env: ENV }],
    ['timeoutMs 0', sh('true', { timeoutMs: 0 })],
    ['timeoutMs over the limit', sh('true', { timeoutMs: limits.maxTimeoutMs + 1 })],
    ['maxBuffer over the limit', sh('true', { maxBuffer: limits.maxBufferLimit + 1 })],
    ['an empty binaryPath', { ...sh('true'), binaryPath: '' }],
    ['an empty cwd', sh('true', { cwd: '' })],
    ['an env key with =', sh('true', { env: { 'A=B': 'x' } })],
    ['an empty env key', sh('true', { env: { '': 'x' } })],
    ['a NUL in an arg', { ...sh('true'), args: ['-c', 'true\0'] }],
    ['a NUL in an env value', sh('true', { env: { A: 'x\0y' } })],
    ['a NUL in the jailRoot', sh('true'), undefined, '/tmp\0x'],
  ]
  test.each(same)('%s', async (_, spec, lane, jailRoot) => {
    const [packed, fields] = await bothWays(spec, lane, jailRoot)
    expect(packed).toEqual(fields)
  })

  test('the cases above cover success, a result and field-named errors', async () => {
    const [ok] = await bothWays(sh(show))
    expect(ok).toMatchObject({ result: { exitCode: 0 } })
    const [cut] = await bothWays(same[3][1])
    expect(cut).toMatchObject({ result: { exitCode: 137, truncated: true } })
    const [bad] = await bothWays(sh('true', { timeoutMs: 0 }))
    expect(bad).toEqual({ error: { code: 'INVALID_SPEC', message: 'spec.timeoutMs must be a positive integer' } })
    const [nul] = await bothWays({ ...sh('true'), args: ['-c', 'true\0'] })
    expect(nul).toEqual({ error: { code: 'INVALID_SPEC', message: 'spec.args[1] must not contain NUL bytes' } })
  })
})

test('index.d.ts documents the defaults and limits the addon exports from finn_job::limits', () => {
  const dts = readFileSync(join(import.meta.dirname, '..', 'index.d.ts'), 'utf8')
  for (const phrase of [
    `up to ${limits.maxTimeoutMs};`,
    `Default ${limits.defaultTimeoutMs}.`,
    `Default ${limits.defaultMaxBuffer}.`,
    `1..${limits.maxInteractiveWorkers}. Default ${limits.defaultInteractiveWorkers}.`,
    `at this deadline. Default ${limits.defaultShutdownDeadlineMs}.`,
    `whenever the lane is busy. Default ${limits.defaultMaxQueueDepth}.`,
    `after a timeout or an abort. Default ${limits.defaultKillGraceMs}.`,
  ]) {
    expect(dts).toContain(phrase)
  }
})

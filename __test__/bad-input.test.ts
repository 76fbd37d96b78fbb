// Bad input to every export: each row is refused with a TypeError, PoolError or SandboxError whose
// message names the field, synchronously or as a rejection as the API promises, and Node
// survives all of it. Nothing is silently weakened: no row may be accepted with a default
// (a negative timeout must never mean "no timeout", a NaN worker count never "the default").
import { mkdtempSync, realpathSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import {
  AuditLog,
  ChildProcessExecutor,
  FilesystemJail,
  PoolError,
  PoolErrorCode,
  SandboxError,
  SecretRedactor,
  ToolSandbox,
  WorkerExecutor,
  WorkerPool,
  createExecutor,
} from '../index.js'
import { ENV } from './helpers.js'

// The APIs are called with values their types forbid: that is the point.
/* eslint-disable @typescript-eslint/no-explicit-any */
type Any = any

const dir = realpathSync(mkdtempSync(join(tmpdir(), 'finn-bad-')))
const pool = new WorkerPool({ interactiveWorkers: 2, maxQueueDepth: 100, killGraceMs: 100 })
afterAll(() => pool.shutdown())

const MB10 = 'x'.repeat(10 * 1024 * 1024)
const NUMBERS_NOT_COUNTS: [string, unknown][] = [
  ['NaN', NaN],
  ['Infinity', Infinity],
  ['-Infinity', -Infinity],
  ['negative', -1],
  ['negative zero-ish fraction', -0.5],
  ['fraction', 1.5],
  ['a numeric string', '5'],
  ['a boolean', true],
  ['a bigint', 5n],
  ['an object', { valueOf: () => 5 }],
  ['beyond 2^53', 2 ** 60],
  ['1e300', 1e300],
]

type Kind = 'TypeError' | 'PoolError' | 'SandboxError'
interface Row {
  name: string
  /** Runs the call; a returned promise must reject, anything else must throw. */
  call: () => unknown
  /** The error class; PoolErrors carry a code too. */
  kind: Kind | Kind[]
  code?: string
  /** A string the message must contain: the field's name. */
  field: string
}

async function refusalOf(row: Row): Promise<Error> {
  let outcome: unknown
  try {
    outcome = row.call()
  } catch (err) {
    return err as Error
  }
  if (outcome instanceof Promise) {
    return outcome.then(
      (value) => {
        throw new Error(`${row.name}: accepted (resolved with ${JSON.stringify(value)?.slice(0, 200)})`)
      },
      (err: unknown) => err as Error,
    )
  }
  throw new Error(`${row.name}: accepted (returned ${String(outcome).slice(0, 200)})`)
}

function check(rows: Row[]) {
  test.each(rows.map((r) => [r.name, r] as const))('%s', async (_name, row) => checkRow(row))
}

async function checkRow(row: Row) {
  {
    const err = await refusalOf(row)
    const kinds = Array.isArray(row.kind) ? row.kind : [row.kind]
    const classes = { TypeError, PoolError, SandboxError }
    expect(
      kinds.some((k) => err instanceof classes[k]),
      `${row.name}: got ${err?.constructor?.name}: ${err?.message}`,
    ).toBe(true)
    if (row.code !== undefined) expect((err as PoolError).code).toBe(row.code)
    expect(err.message, row.name).toContain(row.field)
    // A clear message: short, not a dump of the 10 MB value.
    expect(err.message.length, row.name).toBeLessThan(500)
  }
}

// ── WorkerPool ──────────────────────────────────────────────────────────────────────────────

const poolConfigRows: Row[] = []
for (const [field, extraBad] of [
  ['interactiveWorkers', [0, 4097]],
  ['shutdownDeadlineMs', [2 ** 31]],
  ['maxQueueDepth', [2 ** 31]],
  ['killGraceMs', [2 ** 31]],
] as const) {
  for (const [what, value] of [...NUMBERS_NOT_COUNTS, ...extraBad.map((v) => [String(v), v] as [string, unknown])]) {
    poolConfigRows.push({
      name: `new WorkerPool({ ${field}: ${what} })`,
      call: () => new WorkerPool({ [field]: value } as Any),
      kind: 'PoolError',
      code: 'INVALID_SPEC',
      field: `config.${field}`,
    })
  }
}
for (const [what, value] of [
  ['a number', 5],
  ['a string', 'x'],
  ['an array', []],
  ['a function', () => {}],
] as [string, unknown][]) {
  poolConfigRows.push({ name: `new WorkerPool(${what})`, call: () => new WorkerPool(value as Any), kind: 'PoolError', code: 'INVALID_SPEC', field: 'config' })
}
poolConfigRows.push({
  name: 'new WorkerPool({ workerScript: 5 })',
  call: () => new WorkerPool({ workerScript: 5 } as Any),
  kind: 'PoolError',
  code: 'INVALID_SPEC',
  field: 'config.workerScript',
})
poolConfigRows.push({
  name: 'new WorkerPool({ interactiveWorkers: <throwing getter> })',
  call: () =>
    new WorkerPool({
      get interactiveWorkers(): number {
        throw new Error('boom')
      },
    }),
  kind: 'PoolError',
  code: 'INVALID_SPEC',
  field: 'config.interactiveWorkers',
})

const good = { binaryPath: '/bin/true', args: [] as string[], cwd: '/', env: ENV }
const execRows: Row[] = []
const execRow = (name: string, spec: unknown, field: string, lane?: unknown, jailRoot?: unknown, options?: unknown): Row => ({
  name,
  call: () => pool.exec(spec as Any, lane as Any, jailRoot as Any, options as Any),
  kind: 'PoolError',
  code: 'INVALID_SPEC',
  field,
})
for (const [what, value] of [
  ['undefined', undefined],
  ['null', null],
  ['a number', 5],
  ['a string', '/bin/true'],
  ['an array', ['/bin/true']],
] as [string, unknown][]) {
  execRows.push(execRow(`exec(${what})`, value, 'spec'))
}
for (const [field, values] of [
  ['binaryPath', [['missing', undefined], ['a number', 5], ['empty', ''], ['with NUL', '/bin/tr\0ue'], ['10 MB', `/${MB10}`]]],
  ['cwd', [['missing', undefined], ['a number', 5], ['empty', ''], ['with NUL', '/\0tmp'], ['10 MB', `/${MB10}`]]],
  ['args', [['missing', undefined], ['a string', 'x'], ['an object', { 0: 'x' }]]],
  ['env', [['missing', undefined], ['a string', 'PATH=/bin'], ['an array', ['PATH=/bin']]]],
  ['sessionId', [['a number', 5], ['an object', {}]]],
] as [string, [string, unknown][]][]) {
  for (const [what, value] of values) {
    execRows.push(execRow(`exec: spec.${field} ${what}`, { ...good, [field]: value }, `spec.${field}`))
  }
}
execRows.push(execRow('exec: spec.args[1] a number', { ...good, args: ['a', 5] }, 'spec.args[1]'))
execRows.push(execRow('exec: spec.args[0] with NUL', { ...good, args: ['a\0b'] }, 'spec.args[0]'))
execRows.push(execRow('exec: spec.args[0] of 10 MB', { ...good, args: [MB10] }, 'spec.args[0]'))
execRows.push(execRow('exec: spec.args 100 x 100 kB (past the kernel limit)', { ...good, args: Array(100).fill('y'.repeat(100_000)) }, 'spec.args'))
execRows.push(execRow('exec: spec.env.A a number', { ...good, env: { A: 5 } }, 'spec.env.A'))
execRows.push(execRow('exec: spec.env.A with NUL', { ...good, env: { A: 'a\0b' } }, 'spec.env.A'))
execRows.push(execRow('exec: spec.env key with =', { ...good, env: { 'A=B': 'x' } }, 'spec.env'))
execRows.push(execRow('exec: spec.env empty key', { ...good, env: { '': 'x' } }, 'spec.env'))
execRows.push(execRow('exec: spec.env.BIG of 10 MB', { ...good, env: { BIG: MB10 } }, 'spec.env.BIG'))
for (const [what, value] of [...NUMBERS_NOT_COUNTS, ['zero', 0], ['2^31', 2 ** 31]] as [string, unknown][]) {
  execRows.push(execRow(`exec: spec.timeoutMs ${what}`, { ...good, timeoutMs: value }, 'spec.timeoutMs'))
}
for (const [what, value] of [...NUMBERS_NOT_COUNTS, ['512 MiB + 1', 512 * 1024 * 1024 + 1]] as [string, unknown][]) {
  execRows.push(execRow(`exec: spec.maxBuffer ${what}`, { ...good, maxBuffer: value }, 'spec.maxBuffer'))
}
execRows.push(execRow('exec: lane "bogus"', good, 'lane', 'bogus'))
execRows.push(execRow('exec: lane a number', good, 'lane', 1))
execRows.push(execRow('exec: jailRoot a number', good, 'jailRoot', undefined, 5))
execRows.push(execRow('exec: jailRoot with NUL', good, 'jailRoot', undefined, '/tmp\0x'))
execRows.push(execRow('exec: options a number', good, 'options', undefined, undefined, 5))
execRows.push(execRow('exec: options.signal not a signal', good, 'options.signal', undefined, undefined, { signal: {} }))
execRows.push(
  execRow(
    'exec: spec.binaryPath <throwing getter>',
    {
      ...good,
      get binaryPath(): string {
        throw new Error('boom')
      },
    },
    'spec.binaryPath',
  ),
)

describe('WorkerPool constructor', () => check(poolConfigRows))
describe('WorkerPool.exec', () => check(execRows))

describe('WorkerPool: valid extremes still work', () => {
  test('10,000 env entries run (and the child sees them all)', async () => {
    const env: Record<string, string> = { ...ENV }
    for (let i = 0; i < 10_000; i++) env[`V${i}`] = String(i)
    const r = await pool.exec({ binaryPath: '/bin/sh', args: ['-c', 'env | wc -l'], cwd: '/', env })
    expect(r.exitCode).toBe(0)
    expect(Number(r.stdout.trim())).toBeGreaterThanOrEqual(10_001)
  })

  test('stats() and shutdown() ignore extra arguments and stay correct', async () => {
    const p = new WorkerPool({ interactiveWorkers: 1 })
    expect((p.stats as Any)(NaN, 'x').interactive).toEqual({ active: 0, idle: 1, queued: 0 })
    await (p.shutdown as Any)(-1, {})
    await expect(p.exec(good)).rejects.toMatchObject({ code: PoolErrorCode.POOL_SHUTTING_DOWN })
  })

  test('after all the refusals above, the pool still runs a job', async () => {
    expect((await pool.exec({ ...good, binaryPath: '/bin/echo', args: ['ok'] })).stdout).toBe('ok\n')
  })
})

// ── Sandbox classes ───────────────────────────────────────────────────────────────────────────

const audit = new AuditLog(dir)
const config = { allowBash: true, jailRoot: dir, execTimeout: 1000, maxOutput: 4096 }
const sandboxRows: Row[] = []
for (const [what, value] of [
  ['undefined', undefined],
  ['a number', 5],
  ['an object', {}],
] as [string, unknown][]) {
  sandboxRows.push({ name: `new AuditLog(${what})`, call: () => new AuditLog(value as Any), kind: 'TypeError', field: 'dataDir' })
  sandboxRows.push({ name: `new FilesystemJail(${what})`, call: () => new FilesystemJail(value as Any), kind: 'TypeError', field: 'dataDir' })
}
sandboxRows.push({ name: 'new AuditLog(with NUL)', call: () => new AuditLog(`${dir}\0x`), kind: ['TypeError', 'SandboxError'], field: 'dataDir' })
sandboxRows.push({ name: 'new FilesystemJail(with NUL)', call: () => new FilesystemJail(`${dir}\0x`), kind: ['TypeError', 'SandboxError'], field: 'dataDir' })
for (const field of ['maxFileSize', 'maxFiles']) {
  // maxFiles 0 is meaningful (keep no rotated file); a zero maxFileSize would rotate every line.
  const extra: [string, unknown][] = field === 'maxFileSize' ? [['zero', 0]] : []
  for (const [what, value] of [...NUMBERS_NOT_COUNTS, ...extra]) {
    sandboxRows.push({
      name: `new AuditLog(dir, { ${field}: ${what} })`,
      call: () => new AuditLog(dir, { [field]: value } as Any),
      kind: 'SandboxError',
      field: `options.${field}`,
    })
  }
}
sandboxRows.push({
  name: 'new AuditLog(dir, { maxFiles: 1e6 }) (each rotation would rename a million files)',
  call: () => new AuditLog(dir, { maxFiles: 1e6 }),
  kind: 'SandboxError',
  field: 'options.maxFiles',
})
sandboxRows.push({ name: 'new AuditLog(dir, 5)', call: () => new AuditLog(dir, 5 as Any), kind: 'SandboxError', field: 'options' })
sandboxRows.push({ name: 'jail.validatePath(5)', call: () => new FilesystemJail(dir).validatePath(5 as Any), kind: ['TypeError', 'SandboxError'], field: 'ath' })
sandboxRows.push({
  name: 'jail.validatePath(with NUL)',
  call: () => new FilesystemJail(dir).validatePath(`${dir}/a\0b`),
  kind: 'SandboxError',
  field: 'ath',
})
sandboxRows.push({ name: 'new SecretRedactor(5)', call: () => new SecretRedactor(5 as Any), kind: ['TypeError', 'SandboxError'], field: 'env' })
sandboxRows.push({ name: "new SecretRedactor('x')", call: () => new SecretRedactor('x' as Any), kind: ['TypeError', 'SandboxError'], field: 'env' })
sandboxRows.push({ name: 'redactor.redact(5)', call: () => new SecretRedactor({}).redact(5 as Any), kind: 'TypeError', field: 'output' })
sandboxRows.push({ name: 'redactor.redact(undefined)', call: () => new SecretRedactor({}).redact(undefined as Any), kind: 'TypeError', field: 'output' })

const sandboxConfigRows: [string, unknown][] = [
  ['allowBash "yes"', 'yes'],
  ['allowBash 1', 1],
  ['jailRoot a number', 5],
  ['jailRoot missing', undefined],
  ['jailRoot with NUL', `${dir}\0x`],
  ['policies a number', 5],
  ['policies an array', []],
]
for (const [what, value] of [...NUMBERS_NOT_COUNTS, ['zero', 0], ['2^31', 2 ** 31]] as [string, unknown][]) {
  sandboxConfigRows.push([`execTimeout ${what}`, value])
}
for (const [what, value] of [...NUMBERS_NOT_COUNTS, ['512 MiB + 1', 512 * 1024 * 1024 + 1]] as [string, unknown][]) {
  sandboxConfigRows.push([`maxOutput ${what}`, value])
}
for (const [name, value] of sandboxConfigRows) {
  const field = name.split(' ')[0]
  sandboxRows.push({
    name: `new ToolSandbox({ ${name} })`,
    call: () => new ToolSandbox({ ...config, [field]: value } as Any, audit),
    kind: 'SandboxError',
    field: `config.${field}`,
  })
}
for (const [what, value] of [
  ['a number', 5],
  ['a string', 'x'],
  ['undefined', undefined],
] as [string, unknown][]) {
  sandboxRows.push({ name: `new ToolSandbox(config: ${what})`, call: () => new ToolSandbox(value as Any, audit), kind: ['TypeError', 'SandboxError'], field: 'config' })
}
const badPolicy = { binary: '/bin/ls', subcommands: [], deniedFlags: [], validatePaths: false }
for (const [what, p, field] of [
  ['binary relative', { ...badPolicy, binary: 'ls' }, 'config.policies.ls.binary'],
  ['binary a number', { ...badPolicy, binary: 5 }, 'config.policies.ls.binary'],
  ['binary with NUL', { ...badPolicy, binary: '/bin/l\0s' }, 'config.policies.ls.binary'],
  ['subcommands a string', { ...badPolicy, subcommands: 'x' }, 'config.policies.ls.subcommands'],
  ['deniedFlags [5]', { ...badPolicy, deniedFlags: [5] }, 'config.policies.ls.deniedFlags[0]'],
  ['validatePaths "no"', { ...badPolicy, validatePaths: 'no' }, 'config.policies.ls.validatePaths'],
  ['a number', 5, 'config.policies.ls'],
] as [string, unknown, string][]) {
  sandboxRows.push({
    name: `new ToolSandbox({ policies: { ls: ${what} } })`,
    call: () => new ToolSandbox({ ...config, policies: { ls: p } } as Any, audit),
    kind: 'SandboxError',
    field,
  })
}
sandboxRows.push({ name: 'new ToolSandbox(config, auditLog: {})', call: () => new ToolSandbox(config, {} as Any), kind: 'TypeError', field: 'AuditLog' })
sandboxRows.push({ name: 'new ToolSandbox(config, audit, executor: 5)', call: () => new ToolSandbox(config, audit, 5 as Any), kind: 'TypeError', field: 'executor' })
const sandbox = new ToolSandbox(config, audit, pool)
sandboxRows.push({ name: 'sandbox.tokenize(5)', call: () => sandbox.tokenize(5 as Any), kind: 'TypeError', field: 'commandString' })
sandboxRows.push({ name: 'sandbox.tokenize(undefined)', call: () => sandbox.tokenize(undefined as Any), kind: 'TypeError', field: 'commandString' })
sandboxRows.push({ name: 'sandbox.execute(5)', call: () => sandbox.execute(5 as Any), kind: 'TypeError', field: 'commandString' })
// loa-finn's refusal for a control byte in a command, kept as its message.
sandboxRows.push({ name: 'sandbox.execute(with NUL)', call: () => sandbox.execute('ls a\0b'), kind: 'SandboxError', field: 'rejected' })
sandboxRows.push({ name: 'sandbox.execute(cmd, { sessionId: 5 })', call: () => sandbox.execute('ls', { sessionId: 5 as Any }), kind: 'SandboxError', field: 'options.sessionId' })
sandboxRows.push({ name: 'sandbox.execute(cmd, { signal: {} })', call: () => sandbox.execute('ls', { signal: {} as Any }), kind: 'SandboxError', field: 'options.signal' })
sandboxRows.push({ name: 'sandbox.execute(cmd, 5)', call: () => sandbox.execute('ls', 5 as Any), kind: ['TypeError', 'SandboxError'], field: 'options' })

describe('AuditLog, FilesystemJail, SecretRedactor, ToolSandbox', () => check(sandboxRows))

describe('sandbox: valid extremes still work', () => {
  test('a 10 MB command is refused or run, never a crash, and the sandbox keeps working', async () => {
    const outcome = await sandbox.execute(`ls ${MB10}`).then(
      (r) => r,
      (e: unknown) => e,
    )
    // Either a refusal naming why, or a result (ls of a missing path exits non-zero).
    if (outcome instanceof Error) expect(outcome.message.length).toBeLessThan(500)
    else expect((outcome as { exitCode: number }).exitCode).not.toBe(0)
    expect((await sandbox.execute('ls')).exitCode).toBe(0)
  })

  test('SecretRedactor with 10,000 env entries builds and redacts', () => {
    const env: Record<string, string> = {}
    for (let i = 0; i < 10_000; i++) env[`VAR_${i}`] = `value-${i}-${'s'.repeat(12)}`
    env.GITHUB_TOKEN = 'ghp-secret-value-1234'
    const r = new SecretRedactor(env)
    expect(r.redact('a ghp-secret-value-1234 b value-9999-ssssssssssss')).toBe('a [REDACTED] b value-9999-ssssssssssss')
  })

  test('redacting 10 MB returns 10 MB', () => {
    expect(new SecretRedactor({}).redact(MB10).length).toBe(MB10.length)
  })

  test('append of a bad entry returns false, never throws', () => {
    for (const entry of [undefined, null, 5, 'x', {}, { action: 'maybe' }, { timestamp: 1, action: 'allow', command: 'ls', args: [] }]) {
      expect(audit.append(entry as Any)).toBe(false)
    }
  })
})

// ── Executors ────────────────────────────────────────────────────────────────────────────────

describe('executors', () =>
  check([
    { name: 'new WorkerExecutor(5)', call: () => new WorkerExecutor(5 as Any), kind: 'TypeError', field: 'pool' },
    { name: 'new WorkerExecutor({ exec })', call: () => new WorkerExecutor({ exec: () => {} } as Any), kind: 'TypeError', field: 'pool' },
    { name: "createExecutor('worker', undefined)", call: () => createExecutor('worker', undefined as Any), kind: 'TypeError', field: 'pool' },
    { name: "createExecutor('bogus', pool)", call: () => createExecutor('bogus' as Any, pool), kind: 'PoolError', code: 'SANDBOX_DISABLED', field: 'bogus' },
    { name: 'createExecutor(5, pool)', call: () => createExecutor(5 as Any, pool), kind: 'PoolError', code: 'SANDBOX_DISABLED', field: 'SANDBOX_MODE' },
    { name: 'createExecutor(<10 MB>, pool)', call: () => createExecutor(MB10 as Any, pool), kind: 'PoolError', code: 'SANDBOX_DISABLED', field: 'SANDBOX_MODE' },
    {
      name: 'new WorkerExecutor(pool).exec(5)',
      call: () => new WorkerExecutor(pool).exec(5 as Any),
      kind: 'PoolError',
      code: 'INVALID_SPEC',
      field: 'spec',
    },
    {
      name: 'new ChildProcessExecutor().exec({ timeoutMs: -1 })',
      call: () => new ChildProcessExecutor().exec({ ...good, timeoutMs: -1 }),
      kind: 'PoolError',
      code: 'INVALID_SPEC',
      field: 'spec.timeoutMs',
    },
  ]))

// Error codes have one source, the Rust enum the addon exports; index.js builds PoolErrorCode
// from it, index.d.ts must list the same codes, and native errors carry their code as a
// property set in Rust (no "CODE: message" string to parse).
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { expect, test } from 'vitest'
import { PoolError, PoolErrorCode, SandboxError, SessionError, SessionErrorCode, ToolSandbox, AuditLog, WorkerPool } from '../index.js'

const native = createRequire(import.meta.url)('../native.js') as typeof import('../native.js')
const codes = native.errorCodes()

test('index.js and index.d.ts list exactly the codes of the Rust enum, in its order', () => {
  expect(codes.pool.length).toBeGreaterThan(0)
  expect(Object.entries(PoolErrorCode)).toEqual(codes.pool.map((code) => [code, code]))
  const dts = readFileSync(join(import.meta.dirname, '..', 'index.d.ts'), 'utf8')
  const block = /export declare const PoolErrorCode: \{([\s\S]*?)\n\}/.exec(dts)
  expect(block, 'index.d.ts declares PoolErrorCode').not.toBeNull()
  const declared = [...block![1].matchAll(/readonly (\w+): '(\w+)'/g)].map((m) => [m[1], m[2]])
  expect(declared).toEqual(codes.pool.map((code) => [code, code]))
})

test('SessionErrorCode: index.js and index.d.ts list exactly the codes of the Rust enum, in its order', () => {
  expect(codes.session).toEqual(['ESESSIONDESTROYED', 'ETIMEDOUT', 'EPROCESSEXITED', 'ENOENT', 'EINVAL', 'ABORT_ERR'])
  expect(Object.entries(SessionErrorCode)).toEqual(codes.session.map((code) => [code, code]))
  const dts = readFileSync(join(import.meta.dirname, '..', 'index.d.ts'), 'utf8')
  const block = /export declare const SessionErrorCode: \{([\s\S]*?)\n\}/.exec(dts)
  expect(block, 'index.d.ts declares SessionErrorCode').not.toBeNull()
  const declared = [...block![1].matchAll(/readonly (\w+): '(\w+)'/g)].map((m) => [m[1], m[2]])
  expect(declared).toEqual(codes.session.map((code) => [code, code]))
})

test('SessionError is an Error with name SessionError and its code', () => {
  const err = new SessionError(SessionErrorCode.EINVAL, 'options.timeoutMs must be a positive integer')
  expect(err).toBeInstanceOf(Error)
  expect(err).toBeInstanceOf(SessionError)
  expect([err.name, err.code, err.message]).toEqual(['SessionError', 'EINVAL', 'options.timeoutMs must be a positive integer'])
})

function thrown(f: () => unknown): Error & { code?: unknown } {
  try {
    f()
  } catch (err) {
    return err as Error & { code?: unknown }
  }
  throw new Error('expected a throw')
}

test('native errors carry their code as a property and a message without a code prefix', () => {
  const bad = thrown(() => new native.NativeWorkerPool({ interactiveWorkers: 0 }, () => {}))
  expect(bad).toBeInstanceOf(Error)
  expect(bad.code).toBe('INVALID_SPEC')
  expect(bad.message).toMatch(/^config\.interactiveWorkers must be/)
  const jail = thrown(() => new native.NativeJail('/nonexistent/finn-jail'))
  expect(jail.code).toBe('ENOENT')
  const log = thrown(() => new native.NativeAuditLog('/tmp', { maxFiles: 'x' }))
  expect([log.code, log.message]).toEqual([codes.sandbox, 'options.maxFiles must be a non-negative integer'])
})

test('the wrappers read the code structurally', () => {
  const err = thrown(() => new WorkerPool({ interactiveWorkers: 0 }))
  expect(err).toBeInstanceOf(PoolError)
  expect(err.code).toBe(PoolErrorCode.INVALID_SPEC)
  expect(err.message).toMatch(/^config\.interactiveWorkers must be/)
  const sandbox = new ToolSandbox({ allowBash: true, jailRoot: '/tmp', execTimeout: 1000, maxOutput: 100 }, new AuditLog(join(tmpdir(), 'finn-codes-test')))
  const refused = thrown(() => sandbox.tokenize('ls; id'))
  expect(refused).toBeInstanceOf(SandboxError)
  expect(refused.message).not.toMatch(/^SANDBOX_ERROR/)
})

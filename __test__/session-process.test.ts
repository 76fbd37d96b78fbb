// A session's background processes: `Session.startProcess` on a reaper of its own, in the
// session's cwd and environment as they are when it starts, listed by the session, and killed
// with it. Survival is judged by a /proc scan for a token in the processes' command lines.
import { mkdtempSync, realpathSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, expect, test } from 'vitest'
import { createSession, SessionError, WorkerPool } from '../index.js'
import { holders, until } from './helpers.js'

const pool = new WorkerPool()
afterAll(() => pool.shutdown())
const dir = realpathSync(mkdtempSync(join(tmpdir(), 'finn-sess-proc-')))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

let tokens = 0
const token = (name: string) => `finn-sessproc-${name}-${process.pid}-${++tokens}`

test('a process starts in the cwd and exported environment the session has now', async () => {
  const s = await createSession({ pool, cwd: '/' })
  try {
    await s.exec(`cd ${dir} && export FINN_SP=from-session && FINN_LOCAL=not-exported`)
    const p = await s.startProcess('printf "%s|%s|%s" "$PWD" "$FINN_SP" "${FINN_LOCAL-unset}"')
    await p.waitForExit()
    expect((await p.getLogs()).stdout).toBe(`${dir}|from-session|unset`)
    const o = await s.startProcess('printf "%s|%s" "$PWD" "$FINN_SP"', { cwd: '/', env: { FINN_SP: undefined } })
    await o.waitForExit()
    expect((await o.getLogs()).stdout).toBe('/|')
    expect(s.listProcesses().map((x) => x.id)).toEqual([p.id, o.id])
    expect(s.getProcess(p.id)).toBe(p)
    expect(p.status).toBe('completed')
  } finally {
    await s.destroy()
  }
})

test('killAllProcesses and destroy() leave no process of a background tree, escapees included', async () => {
  const s = await createSession({ pool })
  const a = token('kill-all')
  const b = token('destroy')
  const tree = (tok: string) =>
    `(bash -c 'exec -a ${tok} sleep 300' &); setsid bash -c 'exec -a ${tok} sleep 300' & exec -a ${tok} sleep 300`
  try {
    const p = await s.startProcess(tree(a))
    await until(() => holders(a).length === 3)
    expect(await s.killAllProcesses()).toBe(1)
    expect(holders(a)).toEqual([])
    expect(p.status).toBe('killed')
    await s.startProcess(tree(b))
    await until(() => holders(b).length === 3)
  } finally {
    await s.destroy()
  }
  expect(holders(b)).toEqual([])
  await expect(s.startProcess('true')).rejects.toBeInstanceOf(SessionError)
})

test('startProcess refuses a per-process isolation, naming the option', async () => {
  const s = await createSession({ pool })
  try {
    const err = await s.startProcess('true', { isolation: { mode: 'off' } } as never).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(SessionError)
    expect((err as SessionError).code).toBe('EINVAL')
    expect((err as SessionError).message).toMatch(/options\.isolation/)
  } finally {
    await s.destroy()
  }
})

test("a background process's end leaves the session's shell alone (the supervisor stays while a session holds it)", async () => {
  const own = new WorkerPool()
  const s = await createSession({ pool: own })
  try {
    const pid = s.pid
    await s.exec('export FINN_KEPT=1')
    for (let i = 0; i < 3; i++) {
      const p = await s.startProcess('echo hi')
      await p.waitForExit()
      const r = await s.exec('echo "$FINN_KEPT"')
      expect(r.sessionRestarted).toBe(false)
      expect(r.stdout).toBe('1\n')
    }
    expect(s.pid).toBe(pid)
  } finally {
    await s.destroy()
    await own.shutdown()
  }
})

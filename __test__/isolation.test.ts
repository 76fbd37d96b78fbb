// Kernel isolation through the JS API: each attack runs isolated and with
// `mode: "off"`, where it must succeed (that proves the check can fail), and is judged from
// Node (files, listeners), never from the command's own output. The per-layer suite with real
// processes, also run as nobody, is tests/isolate.rs.
import { spawnSync } from 'node:child_process'
import { createSocket } from 'node:dgram'
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, statSync, writeFileSync } from 'node:fs'
import { createServer, connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import { type IsolationOptions, PoolError, WorkerPool, doctor, probeIsolation } from '../index.js'
import { ENV, rejectionOf } from './helpers.js'

/**
 * Under "off", a non-root command cannot read Node's environ either where the kernel has the
 * reapers' landlock signal scope (ABI 6): the scope refuses ptrace-mode reads of processes
 * outside the reaper's domain. Root still reads it there (though not its `mem`, nor what its
 * fds point at; see tests/supervisor.rs).
 */
const environScoped = (() => {
  const abi = probeIsolation().landlock
  return abi !== false && abi >= 6 && process.getuid?.() !== 0
})()

const pool = new WorkerPool({ interactiveWorkers: 2 })
afterAll(() => pool.shutdown())

const AUTO: IsolationOptions = { mode: 'auto' }
const OFF: IsolationOptions = { mode: 'off' }

function dirs() {
  const base = realpathSync(mkdtempSync(join(tmpdir(), 'finn-iso-')))
  const jail = join(base, 'jail')
  const evil = join(base, 'jail-evil')
  const out = join(base, 'outside')
  for (const d of [jail, evil, out]) mkdirSync(d)
  return { jail, evil, out }
}

function bash(script: string, cwd: string, isolation: IsolationOptions) {
  return pool.exec({ binaryPath: '/bin/bash', args: ['-c', script], cwd, env: ENV, isolation })
}

describe.each([
  ['auto', AUTO, true],
  ['off', OFF, false],
] as const)('mode %s', (_name, isolation, stopped) => {
  test('writes outside the jail: direct, <jail>-evil, symlink, hardlink, /proc/self/root, rename out', async () => {
    const d = dirs()
    writeFileSync(join(d.out, 'victim'), 'orig')
    writeFileSync(join(d.jail, 'mine'), 'data')
    const r = await bash(
      `o=${d.out}; echo x > $o/direct; echo x > ${d.evil}/evil; ln -s $o/viasym link; echo x > link
       ln $o/victim hard; echo pwned >> hard; echo x > /proc/self/root$o/procroot; mv mine $o/moved`,
      d.jail,
      isolation,
    )
    const landed = {
      direct: existsSync(join(d.out, 'direct')),
      evil: existsSync(join(d.evil, 'evil')),
      symlink: existsSync(join(d.out, 'viasym')),
      hardlink: readFileSync(join(d.out, 'victim'), 'utf8') !== 'orig',
      procRoot: existsSync(join(d.out, 'procroot')),
      renameOut: existsSync(join(d.out, 'moved')),
    }
    expect(Object.values(landed).every((v) => v === !stopped), `${JSON.stringify(landed)} ${r.stderr}`).toBe(true)
    // lstat: the link itself, not its (absent) target.
    expect(lstatSync(join(d.jail, 'link')).isSymbolicLink(), 'the jail stays writable').toBe(true)
    if (stopped) {
      expect(r.isolation?.backend).toBe('native')
      expect(r.isolation?.applied).toEqual(expect.arrayContaining(['landlock', 'seccomp', 'privileges', 'rlimits']))
    } else {
      expect(r.isolation).toBeUndefined()
    }
  })

  test("Node's /proc/<pid>/environ", async () => {
    const d = dirs()
    const r = await bash(`cat /proc/${process.pid}/environ > leak`, d.jail, isolation)
    const leaked = statSync(join(d.jail, 'leak')).size > 0
    expect(leaked, r.stderr).toBe(!stopped && !environScoped)
  })

  test('TCP and UDP to listeners on 127.0.0.1', async () => {
    const d = dirs()
    const tcp: Socket[] = []
    const server = createServer((s) => {
      tcp.push(s)
      s.resume()
    })
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok))
    const udp = createSocket('udp4')
    const datagrams: string[] = []
    udp.on('message', (m) => datagrams.push(m.toString()))
    await new Promise<void>((ok) => udp.bind(0, '127.0.0.1', ok))
    const tcpPort = (server.address() as { port: number }).port
    const udpPort = udp.address().port
    const r = await bash(
      `echo cmd > /dev/tcp/127.0.0.1/${tcpPort}; echo cmd > /dev/udp/127.0.0.1/${udpPort}`,
      d.jail,
      isolation,
    )
    // Sentinels from Node itself, after the command settled: once they have arrived, anything
    // the command sent (which was queued before them) has arrived too. The TCP sentinel is told
    // apart by its port: the command's own connection may still be the next one Node accepts.
    const sentinelPort = await new Promise<number>((ok) => {
      const c = connect(tcpPort, '127.0.0.1', () => {
        const port = c.localPort as number
        const seen = () => {
          if (!tcp.some((s) => s.remotePort === port)) return
          server.off('connection', seen)
          ok(port)
        }
        server.on('connection', seen)
        seen()
        c.end()
      })
    })
    const sentinelUdp = new Promise<void>((ok) => udp.on('message', (m) => m.toString() === 'sentinel' && ok()))
    udp.send('sentinel', udpPort, '127.0.0.1')
    await sentinelUdp
    const fromCommand = {
      tcp: tcp.filter((s) => s.remotePort !== sentinelPort).length,
      udp: datagrams.filter((m) => m !== 'sentinel').length,
    }
    expect(fromCommand, r.stderr).toEqual(stopped ? { tcp: 0, udp: 0 } : { tcp: 1, udp: 1 })
    for (const s of tcp) s.destroy()
    server.close()
    udp.close()
  })
})

test('a pool-wide default applies to jobs without their own isolation', async () => {
  const p = new WorkerPool({ isolation: AUTO })
  try {
    const d = dirs()
    const r = await p.exec({ binaryPath: '/bin/sh', args: ['-c', `echo x > ${d.out}/escaped`], cwd: d.jail, env: ENV })
    expect(existsSync(join(d.out, 'escaped')), r.stderr).toBe(false)
    expect(r.isolation?.applied).toContain('landlock')
  } finally {
    await p.shutdown()
  }
})

test('a layer that fails in the command\'s process rejects ISOLATION_UNAVAILABLE naming the layer and the errno, and runs nothing', async () => {
  const d = dirs()
  // Above any kernel's fs.nr_open: setrlimit(RLIMIT_NOFILE) fails with EPERM in the child, even
  // for root.
  const e = await rejectionOf(bash('touch ran', d.jail, { mode: 'auto', limits: { maxOpenFiles: 2 ** 32 } }), PoolError)
  expect(e.code, e.message).toBe('ISOLATION_UNAVAILABLE')
  expect(e.message).toMatch(/\brlimits\b/)
  expect(e.message).toContain('EPERM')
  expect(existsSync(join(d.jail, 'ran'))).toBe(false)
  // The pool goes on: the next isolated job runs.
  expect(await bash('echo ok', d.jail, AUTO)).toMatchObject({ exitCode: 0, stdout: 'ok\n' })
})

test('required isolation that cannot apply rejects with ISOLATION_UNAVAILABLE; bad options name the field', async () => {
  const d = dirs()
  const e = await rejectionOf(
    bash('touch ran', d.jail, { mode: 'auto', required: true, namespaces: { pid: true, mount: false } }),
    PoolError,
  )
  expect(e.code).toBe('ISOLATION_UNAVAILABLE')
  expect(e.message).toContain('pidns')
  expect(existsSync(join(d.jail, 'ran'))).toBe(false)
  const bad = await rejectionOf(bash('true', d.jail, { mode: 'auto', limits: { cpuSeconds: 0 } }), PoolError)
  expect(bad.code).toBe('INVALID_SPEC')
  expect(bad.message).toContain('spec.isolation.limits.cpuSeconds')
  const typo = await rejectionOf(
    bash('true', d.jail, { mode: 'strong' } as unknown as IsolationOptions),
    PoolError,
  )
  expect(typo.code).toBe('INVALID_SPEC')
  expect(typo.message).toContain('isolation')
})

// The network allowlist is not built yet: its object form (and serde's tagged-enum spelling,
// which would otherwise read `{ allow: null }` as the whole network) is refused, naming the field.
// A network object is a NetworkOptions allowlist (__test__/egress.test.ts), never serde's
// tagged form of "allow": `{ allow: null }` would otherwise be the whole network.
test('a network object that is not an allowlist is refused naming isolation.network, on a job and on the pool', async () => {
  const d = dirs()
  for (const network of [{ allow: null }, { deny: null }, { allow: ['allowed.test'], extra: 1 }]) {
    const e = await rejectionOf(
      bash('touch ran', d.jail, { mode: 'auto', network } as unknown as IsolationOptions),
      PoolError,
    )
    expect(e.code).toBe('INVALID_SPEC')
    expect(e.message).toContain('spec.isolation.network')
    expect(() => new WorkerPool({ isolation: { mode: 'auto', network } as unknown as IsolationOptions })).toThrow(
      /config\.isolation\.network/,
    )
  }
  // An allowlist without isolation would be the whole network.
  expect(() => new WorkerPool({ isolation: { network: { allow: ['allowed.test'] } } })).toThrow(/config\.isolation\.network/)
  expect(existsSync(join(d.jail, 'ran'))).toBe(false)
})

test('probeIsolation() and doctor() answer from cached probes', () => {
  const p = probeIsolation()
  expect(typeof p.seccomp).toBe('boolean')
  // One program laid out as a search: the kernel emulates it per syscall number at every load.
  expect(p.seccompInstructions).toBeGreaterThan(0)
  expect(p.seccompInstructions).toBeLessThan(200)
  expect(p.landlock === false || typeof p.landlock === 'number').toBe(true)
  expect(probeIsolation()).toBe(p)
  const t0 = performance.now()
  const d = doctor()
  expect(performance.now() - t0).toBeLessThan(50)
  expect(d.layers.map((l) => l.name)).toEqual(expect.arrayContaining(['landlock', 'seccomp', 'cgroup', 'mountns']))
  for (const l of d.layers) expect(l.available || typeof l.reason === 'string').toBe(true)
})

test('the probes run no program found by PATH: a fake `unshare` first on PATH never runs', () => {
  // A command that can write a file into a directory on Node's PATH must not get it run as
  // Node's user, outside every sandbox, by the first probeIsolation(), doctor() or isolated job.
  const d = dirs()
  const fakeBin = join(d.out, 'bin')
  mkdirSync(fakeBin)
  const marker = join(d.out, 'ran')
  for (const name of ['unshare', 'bwrap', 'true']) {
    writeFileSync(join(fakeBin, name), `#!/bin/sh\necho ${name} >> ${marker}\nexit 0\n`, { mode: 0o755 })
  }
  const index = resolve(__dirname, '..', 'index.js')
  const script = `
    const { WorkerPool, probeIsolation, doctor } = require(${JSON.stringify(index)})
    const userns = probeIsolation().userns
    doctor()
    const pool = new WorkerPool()
    pool.exec({ binaryPath: '/bin/echo', args: ['ok'], cwd: ${JSON.stringify(d.jail)}, env: {}, isolation: { mode: 'auto' } })
      .then((r) => { console.log(JSON.stringify({ userns, bwrap: probeIsolation().bwrap, stdout: r.stdout })); return pool.shutdown() })`
  const child = spawnSync(process.execPath, ['-e', script], {
    env: { PATH: `${fakeBin}:${process.env.PATH}` },
    encoding: 'utf8',
  })
  expect(child.status, child.stderr).toBe(0)
  expect(existsSync(marker), readFileSync(marker, { encoding: 'utf8', flag: 'a+' })).toBe(false)
  const r = JSON.parse(child.stdout)
  expect(r.bwrap === false || !r.bwrap.startsWith(fakeBin)).toBe(true)
  delete r.bwrap
  // The same answer as this process's probe, found without the PATH.
  expect(r).toEqual({ userns: probeIsolation().userns, stdout: 'ok\n' })
})

test('FINN_SANDBOX_LANDLOCK_ABI_MAX caps the landlock ABI reported and used; a bad value fails naming it', async () => {
  const kernel = probeIsolation().landlock
  const saved = process.env.FINN_SANDBOX_LANDLOCK_ABI_MAX
  try {
    process.env.FINN_SANDBOX_LANDLOCK_ABI_MAX = '3'
    const p = probeIsolation()
    const layers = doctor().layers
    const scope = layers.find((l) => l.name === 'landlock-scope')
    if (kernel !== false && kernel > 3) {
      expect({ landlock: p.landlock, kernel: p.landlockKernel }).toEqual({ landlock: 3, kernel })
      expect(p.landlockRights.map((r) => r.name)).toEqual(['landlock-net', 'landlock-ioctl', 'landlock-scope'])
      expect(scope?.available).toBe(false)
      expect(scope?.reason).toContain('FINN_SANDBOX_LANDLOCK_ABI_MAX')
      // An isolated job's degraded names each right it lacks, and what that means.
      const pool = new WorkerPool({ interactiveWorkers: 1 })
      try {
        const r = await pool.exec({ binaryPath: '/bin/true', args: [], cwd: '/tmp', env: {}, isolation: { mode: 'native' } })
        const degraded = r.isolation?.degraded.join('\n') ?? ''
        expect(degraded).toContain('landlock-scope: landlock ABI 3 < 6 (capped by FINN_SANDBOX_LANDLOCK_ABI_MAX')
        expect(degraded).toContain('landlock-ioctl:')
      } finally {
        await pool.shutdown()
      }
    }
    for (const bad of ['six', '-1', '2.5']) {
      process.env.FINN_SANDBOX_LANDLOCK_ABI_MAX = bad
      expect(() => probeIsolation()).toThrow(/FINN_SANDBOX_LANDLOCK_ABI_MAX/)
      expect(() => doctor()).toThrow(/FINN_SANDBOX_LANDLOCK_ABI_MAX/)
      let err: unknown
      try {
        new WorkerPool()
      } catch (e) {
        err = e
      }
      expect(err).toBeInstanceOf(PoolError)
      expect((err as PoolError).code).toBe('INVALID_SPEC')
      expect((err as Error).message).toContain('FINN_SANDBOX_LANDLOCK_ABI_MAX')
    }
  } finally {
    if (saved === undefined) delete process.env.FINN_SANDBOX_LANDLOCK_ABI_MAX
    else process.env.FINN_SANDBOX_LANDLOCK_ABI_MAX = saved
  }
})

test('a pool in a job\'s command runs its jobs without the landlock scope (under the outer job\'s watch)', async () => {
  // Below ABI 6 each command starts under a seccomp watch whose listener is its reaper's, and the
  // kernel allows one listener on a chain: the inner pool's reapers failed every spawn with
  // EBUSY. Here the outer pool, capped at 1, runs a Node that makes a pool of its own.
  const index = resolve(__dirname, '..', 'index.js')
  const inner = `const { WorkerPool } = require(${JSON.stringify(index)})
    const p = new WorkerPool()
    p.exec({ binaryPath: '/bin/echo', args: ['nested'], cwd: '/tmp', env: {} })
      .then((r) => process.stdout.write(r.stdout + r.stderr), (e) => console.log(e.code, e.message))
      .finally(() => p.shutdown())`
  const saved = process.env.FINN_SANDBOX_LANDLOCK_ABI_MAX
  process.env.FINN_SANDBOX_LANDLOCK_ABI_MAX = '1'
  const pool = new WorkerPool({ interactiveWorkers: 1 })
  if (saved === undefined) delete process.env.FINN_SANDBOX_LANDLOCK_ABI_MAX
  else process.env.FINN_SANDBOX_LANDLOCK_ABI_MAX = saved
  try {
    const env = { PATH: '/usr/bin:/bin', FINN_SANDBOX_LANDLOCK_ABI_MAX: '1' }
    const r = await pool.exec({ binaryPath: process.execPath, args: ['-e', inner], cwd: '/tmp', env, timeoutMs: 30_000 })
    expect(r.stdout, r.stderr).toBe('nested\n')
  } finally {
    await pool.shutdown()
  }
})

// The bwrap backend (mode "bwrap"): the same attacks, run under bubblewrap through the pool and
// judged from Node. The per-flag suite, also run as nobody, is tests/isolate_bwrap.rs.
const BWRAP: IsolationOptions = { mode: 'bwrap' }
const bwrapPath = probeIsolation().bwrap
if (bwrapPath === false) console.warn('bwrap tests skipped: bubblewrap is not installed (no `bwrap` in the system directories)')

describe.skipIf(bwrapPath === false).each([
  ['bwrap', BWRAP, true],
  ['off', OFF, false],
] as const)('bwrap backend, mode %s', (_name, isolation, stopped) => {
  test('writes outside the jail and to protected paths (renaming .git away included)', async () => {
    const d = dirs()
    writeFileSync(join(d.out, 'victim'), 'orig')
    mkdirSync(join(d.jail, '.git', 'hooks'), { recursive: true })
    writeFileSync(join(d.jail, '.git', 'config'), '[core]\n')
    const r = await bash(
      `o=${d.out}; echo x > $o/direct; ln -s $o/viasym link; echo x > link; ln $o/victim hard; echo pwned >> hard
       echo x > /proc/self/root$o/procroot; echo evil >> .git/config; echo evil > .git/hooks/pre-commit
       mv .git .git-away; mkdir -p .git/hooks; echo evil > .git/hooks/post-checkout; echo ok > plain`,
      d.jail,
      isolation,
    )
    const landed = {
      direct: existsSync(join(d.out, 'direct')),
      symlink: existsSync(join(d.out, 'viasym')),
      hardlink: readFileSync(join(d.out, 'victim'), 'utf8') !== 'orig',
      procRoot: existsSync(join(d.out, 'procroot')),
      gitAway: existsSync(join(d.jail, '.git-away')),
      recreatedHook: existsSync(join(d.jail, '.git', 'hooks', 'post-checkout')),
    }
    expect(Object.values(landed).every((v) => v === !stopped), `${JSON.stringify(landed)} ${r.stderr}`).toBe(true)
    expect(readFileSync(join(d.jail, 'plain'), 'utf8'), 'the jail stays writable').toBe('ok\n')
    if (stopped) {
      expect(readFileSync(join(d.jail, '.git', 'config'), 'utf8')).toBe('[core]\n')
      expect(existsSync(join(d.jail, '.git', 'hooks', 'pre-commit'))).toBe(false)
      expect(r.isolation?.backend).toBe('bwrap')
      expect(r.isolation?.applied).toEqual(expect.arrayContaining(['privileges', 'mountns', 'protect', 'pidns', 'netns', 'seccomp']))
    } else {
      expect(r.isolation).toBeUndefined()
    }
  })

  test("denied reads and Node's /proc/<pid>/environ", async () => {
    const d = dirs()
    const secret = join(d.out, 'netrc')
    writeFileSync(secret, 'NETRC-TOKEN')
    const iso = stopped ? { ...isolation, fs: { denyRead: [secret] } } : isolation
    const r = await bash(`cat ${secret} > leak1; cat /proc/${process.pid}/environ > leak2`, d.jail, iso)
    const leaked = [readFileSync(join(d.jail, 'leak1'), 'utf8').includes('NETRC-TOKEN'), statSync(join(d.jail, 'leak2')).size > 0]
    expect(leaked, r.stderr).toEqual([!stopped, !stopped && !environScoped])
  })

  test('TCP and UDP to listeners on 127.0.0.1', async () => {
    const d = dirs()
    const tcp: Socket[] = []
    let onConnection = () => {}
    const server = createServer((s) => {
      tcp.push(s)
      s.resume()
      onConnection()
    })
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok))
    const udp = createSocket('udp4')
    const datagrams: string[] = []
    udp.on('message', (m) => datagrams.push(m.toString()))
    await new Promise<void>((ok) => udp.bind(0, '127.0.0.1', ok))
    const tcpPort = (server.address() as { port: number }).port
    const udpPort = udp.address().port
    const r = await bash(`echo cmd > /dev/tcp/127.0.0.1/${tcpPort}; echo cmd > /dev/udp/127.0.0.1/${udpPort}`, d.jail, isolation)
    // Sentinels from Node after the command settled: once they arrived, the command's had too
    // (connections are accepted in order). The TCP sentinel is told apart by its port, since a
    // command's connection may still be on its way to 'connection' when the sentinel connects.
    const sentinel = connect(tcpPort, '127.0.0.1')
    await new Promise<void>((ok) => sentinel.on('connect', () => ok()))
    await new Promise<void>((ok) => {
      onConnection = () => {
        if (tcp.some((s) => s.remotePort === sentinel.localPort)) ok()
      }
      onConnection()
    })
    sentinel.end()
    const sentinelUdp = new Promise<void>((ok) => udp.on('message', (m) => m.toString() === 'sentinel' && ok()))
    udp.send('sentinel', udpPort, '127.0.0.1')
    await sentinelUdp
    const fromCommand = { tcp: tcp.length - 1, udp: datagrams.filter((m) => m !== 'sentinel').length }
    expect(fromCommand, r.stderr).toEqual(stopped ? { tcp: 0, udp: 0 } : { tcp: 1, udp: 1 })
    for (const s of tcp) s.destroy()
    server.close()
    udp.close()
  })
})

// bwrap is looked for in the system directories only (never PATH): this runs where none is there.
test.skipIf(bwrapPath !== false)('mode "bwrap" without bwrap rejects ISOLATION_UNAVAILABLE naming the binary, and runs nothing', () => {
  const d = dirs()
  const index = resolve(__dirname, '..', 'index.js')
  const script = `
    const { WorkerPool, probeIsolation } = require(${JSON.stringify(index)})
    const pool = new WorkerPool()
    pool.exec({ binaryPath: '/bin/touch', args: ['ran'], cwd: ${JSON.stringify(d.jail)}, env: {}, isolation: { mode: 'bwrap' } })
      .then(() => ({ ran: true }), (e) => ({ code: e.code, message: e.message }))
      .then((r) => { console.log(JSON.stringify({ ...r, bwrap: probeIsolation().bwrap, doctor: require(${JSON.stringify(index)}).doctor().layers.find((l) => l.name === 'bwrap') })); return pool.shutdown() })`
  const child = spawnSync(process.execPath, ['-e', script], { env: { PATH: d.out }, encoding: 'utf8' })
  expect(child.status, child.stderr).toBe(0)
  const r = JSON.parse(child.stdout)
  expect(r.bwrap).toBe(false)
  expect(r.code).toBe('ISOLATION_UNAVAILABLE')
  expect(r.message).toContain('bubblewrap is not installed')
  expect(r.message).toContain('apt-get install bubblewrap')
  expect(r.doctor).toMatchObject({ available: false, remedy: expect.stringContaining('apt-get install bubblewrap') })
  expect(existsSync(join(d.jail, 'ran'))).toBe(false)
})

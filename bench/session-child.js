'use strict'
// One measurement of the session phase in a fresh Node process, started by bench/session.js:
//   node bench/session-child.js true <session|pool|sdk> --iterations 300 --warmup 30
//   node bench/session-child.js bulk <session|execFile|sdk> --bytes 104857600
// `sdk` is the Sandbox SDK's shell protocol (bench/lib/sdk-shell.js).
// Prints one BENCH_RESULT line.

const { execFile } = require('node:child_process')
const { emit, fail, parseArgs } = require('./lib/child-util.js')

const { createSession, WorkerPool } = require('..')
const { SdkShell } = require('./lib/sdk-shell.js')

const ENV = { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: process.env.HOME || '/', LANG: 'C' }

async function roundTrips(mode, iterations, warmup) {
  const pool = new WorkerPool({ interactiveWorkers: 2 })
  let run
  let session
  if (mode === 'sdk') {
    session = new SdkShell({ cwd: '/tmp', env: ENV })
    run = () => session.exec('true')
  } else if (mode === 'session') {
    session = await createSession({ pool, cwd: '/tmp', env: ENV, inheritEnv: false })
    run = () => session.exec('true')
  } else {
    // A fresh bash per command, through the same pool: what each command costs without a session.
    const spec = { binaryPath: '/bin/bash', args: ['-c', 'true'], cwd: '/tmp', env: ENV }
    run = () => pool.exec(spec)
  }
  for (let i = 0; i < warmup; i++) await run()
  const samplesMs = []
  let failures = 0
  for (let i = 0; i < iterations; i++) {
    const t = process.hrtime.bigint()
    const r = await run()
    samplesMs.push(Number(process.hrtime.bigint() - t) / 1e6)
    if (r.exitCode !== 0) failures++
  }
  if (session) await session.destroy()
  await pool.shutdown()
  return { samplesMs, failures }
}

async function bulk(mode, bytes) {
  const command = `head -c ${bytes} /dev/zero`
  const t = process.hrtime.bigint()
  let got
  if (mode === 'sdk') {
    // The SDK's log is text split into lines: NUL bytes are lost, so `bytes` says what arrived.
    const shell = new SdkShell({ cwd: '/tmp', env: ENV })
    const t0 = process.hrtime.bigint()
    const r = await shell.exec(command)
    const ms = Number(process.hrtime.bigint() - t0) / 1e6
    await shell.destroy()
    return { ms, bytes: Buffer.byteLength(r.stdout) }
  }
  if (mode === 'session') {
    const pool = new WorkerPool({ interactiveWorkers: 2 })
    const session = await createSession({ pool, cwd: '/tmp', env: ENV, inheritEnv: false })
    const t0 = process.hrtime.bigint()
    const r = await session.exec(command, { encoding: 'buffer', maxOutputBytes: bytes + 1 })
    const ms = Number(process.hrtime.bigint() - t0) / 1e6
    got = r.stdout.length
    await session.destroy()
    await pool.shutdown()
    return { ms, bytes: got }
  }
  await new Promise((resolve, reject) =>
    execFile('/bin/sh', ['-c', command], { encoding: 'buffer', maxBuffer: bytes + 1, env: ENV }, (err, stdout) => {
      if (err) return reject(err)
      got = stdout.length
      resolve()
    }),
  )
  return { ms: Number(process.hrtime.bigint() - t) / 1e6, bytes: got }
}

async function main() {
  const { positional, flags } = parseArgs(process.argv.slice(2))
  const [what, mode] = positional
  if (what === 'true') return emit(await roundTrips(mode, Number(flags.iterations || 300), Number(flags.warmup || 30)))
  if (what === 'bulk') return emit(await bulk(mode, Number(flags.bytes || 100 * 1024 * 1024)))
  throw new Error(`unknown measurement ${what}`)
}

main().catch(fail)

'use strict'
// The contenders of `npm run bench`. Every one runs the same spec
// ({ binaryPath, args, cwd, env, timeoutMs, maxBuffer }) and answers with the same shape:
//   { status: 'ok' | 'timeout' | 'error', exitCode, truncated, outBytes, code, message }
// (never rejects), so the measurements treat them alike. Each is opened in the process that
// measures it (a fresh child process per measurement, see run.js), so nothing one contender
// loads or allocates changes the fork cost of another.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const childProcess = require('node:child_process')

const ROOT = path.resolve(__dirname, '..', '..')

/** The cwd and jailRoot every command gets, and the environment (loa-finn passes a sanitized env). */
const CWD = fs.realpathSync(os.tmpdir())
const ENV = { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: CWD, LANG: 'C.UTF-8' }

const CONTENDERS = {
  'addon-2': { label: 'finn-sandbox, 2 workers', kind: 'addon', workers: 2 },
  'addon-4': { label: 'finn-sandbox, 4 workers', kind: 'addon', workers: 4 },
  'wt-2': { label: 'worker_threads pool, 2 workers', kind: 'wt', workers: 2 },
  'wt-4': { label: 'worker_threads pool, 4 workers', kind: 'wt', workers: 4 },
  execFile: { label: 'child_process.execFile', kind: 'execFile' },
  spawn: { label: 'child_process.spawn', kind: 'spawn' },
  execa: { label: 'execa', kind: 'execa' },
}

function spec(binaryPath, args, extra = {}) {
  return { binaryPath, args, cwd: CWD, env: ENV, timeoutMs: 30_000, maxBuffer: 1024 * 1024, ...extra }
}

const byteLength = (s) => (typeof s === 'string' ? Buffer.byteLength(s) : s ? s.length : 0)

/**
 * Opens a contender in this process. `options.killGraceMs` is passed to the addon pool (the
 * other contenders have their own fixed escalation: see the kill measurement's notes).
 * Returns { id, label, run(spec) -> Promise<outcome>, close() -> Promise }.
 */
async function open(id, options = {}) {
  const meta = CONTENDERS[id]
  if (!meta) throw new Error(`unknown contender ${id}; one of ${Object.keys(CONTENDERS).join(', ')}`)
  const base = { id, label: meta.label }

  if (meta.kind === 'addon' || meta.kind === 'wt') {
    // Both pools share loa-finn's API; only the class differs.
    const file = meta.kind === 'addon' ? path.join(ROOT, 'index.js') : path.join(ROOT, 'bench', 'baselines', 'worker-pool.js')
    const { WorkerPool } = require(file)
    const config = { interactiveWorkers: meta.workers, maxQueueDepth: 100_000 }
    if (meta.kind === 'addon' && options.killGraceMs !== undefined) config.killGraceMs = options.killGraceMs
    const pool = new WorkerPool(config)
    return {
      ...base,
      run: (s) =>
        pool.exec(s, 'interactive', CWD).then(
          (r) => ({ status: 'ok', exitCode: r.exitCode, truncated: r.truncated, outBytes: byteLength(r.stdout) + byteLength(r.stderr) }),
          (e) => ({ status: e.code === 'EXEC_TIMEOUT' ? 'timeout' : 'error', code: e.code, message: e.message }),
        ),
      close: () => pool.shutdown(),
    }
  }

  if (meta.kind === 'execFile') {
    // Node's own timeout (SIGTERM to the direct child) and maxBuffer (per stream; the child is
    // killed when a stream goes over it).
    const run = (s) =>
      new Promise((resolve) => {
        childProcess.execFile(
          s.binaryPath,
          s.args,
          { cwd: s.cwd, env: s.env, timeout: s.timeoutMs, maxBuffer: s.maxBuffer, encoding: 'utf8' },
          (err, stdout, stderr) => {
            const outBytes = byteLength(stdout) + byteLength(stderr)
            if (!err) return resolve({ status: 'ok', exitCode: 0, truncated: false, outBytes })
            if (err.code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER') {
              return resolve({ status: 'ok', exitCode: null, truncated: true, outBytes, code: err.code })
            }
            if (err.killed) {
              return resolve({ status: 'timeout', code: 'ETIMEDOUT', message: 'killed by execFile timeout', outBytes })
            }
            if (typeof err.code === 'number') return resolve({ status: 'ok', exitCode: err.code, truncated: false, outBytes })
            resolve({ status: 'error', code: err.code, message: err.message })
          },
        )
      })
    return { ...base, run, close: async () => {} }
  }

  if (meta.kind === 'spawn') {
    // A plain spawn with Node's `timeout` option; output collected as Buffers up to maxBuffer
    // bytes (stdout+stderr), the child SIGTERMed when over, decoded to strings at the end
    // like the other contenders.
    const run = (s) =>
      new Promise((resolve) => {
        let child
        try {
          child = childProcess.spawn(s.binaryPath, s.args, {
            cwd: s.cwd,
            env: s.env,
            stdio: ['ignore', 'pipe', 'pipe'],
            timeout: s.timeoutMs,
          })
        } catch (err) {
          return resolve({ status: 'error', code: err.code, message: err.message })
        }
        const chunks = [[], []]
        let bytes = 0
        let truncated = false
        const collect = (i) => (chunk) => {
          if (truncated) return
          if (bytes + chunk.length > s.maxBuffer) {
            chunks[i].push(chunk.subarray(0, s.maxBuffer - bytes))
            bytes = s.maxBuffer
            truncated = true
            child.kill('SIGTERM')
            return
          }
          bytes += chunk.length
          chunks[i].push(chunk)
        }
        child.stdout.on('data', collect(0))
        child.stderr.on('data', collect(1))
        child.on('error', (err) => resolve({ status: 'error', code: err.code, message: err.message }))
        child.on('close', (code, signal) => {
          const stdout = Buffer.concat(chunks[0]).toString('utf8')
          const stderr = Buffer.concat(chunks[1]).toString('utf8')
          const outBytes = byteLength(stdout) + byteLength(stderr)
          if (child.killed && !truncated) {
            return resolve({ status: 'timeout', code: 'ETIMEDOUT', message: 'killed by spawn timeout', outBytes })
          }
          resolve({ status: 'ok', exitCode: code, truncated, outBytes })
        })
      })
    return { ...base, run, close: async () => {} }
  }

  if (meta.kind === 'execa') {
    // execa 9 is ESM-only.
    const { execa } = await import('execa')
    const run = (s) =>
      execa(s.binaryPath, s.args, {
        cwd: s.cwd,
        env: s.env,
        extendEnv: false,
        timeout: s.timeoutMs,
        maxBuffer: s.maxBuffer,
        stdin: 'ignore',
        reject: false,
      }).then(
        (r) => {
          const outBytes = byteLength(r.stdout) + byteLength(r.stderr)
          if (r.timedOut) return { status: 'timeout', code: 'ETIMEDOUT', message: r.shortMessage, outBytes }
          if (r.isMaxBuffer) return { status: 'ok', exitCode: r.exitCode ?? null, truncated: true, outBytes }
          if (r.failed && r.exitCode === undefined && !r.signal) {
            return { status: 'error', code: r.code, message: r.shortMessage }
          }
          return { status: 'ok', exitCode: r.exitCode ?? null, truncated: false, outBytes }
        },
        (e) => ({ status: 'error', code: e.code, message: e.message }),
      )
    return { ...base, run, close: async () => {} }
  }

  throw new Error(`unhandled contender kind ${meta.kind}`)
}

module.exports = { CONTENDERS, CWD, ENV, ROOT, open, spec }

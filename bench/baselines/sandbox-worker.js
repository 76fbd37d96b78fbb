'use strict'
// The worker side of the baseline pool: loa-finn's src/agent/sandbox-worker.ts (SDD §3.2,
// Cycle 005), transcribed to plain CommonJS for the benchmark. Receives an ExecSpec via
// parentPort, runs it with child_process.execFile, replies {type:'result', jobId, result}.
//
// Written as loa-finn wrote it, quirks included: execFile is given `detached: true`, but
// execFile does not pass `detached` on to spawn, so the child is NOT a process-group leader
// and `process.kill(-pid, ...)` fails with ESRCH (swallowed). The only kill that lands is
// execFile's own `timeout: 2 * timeoutMs` with SIGKILL, which reaches the direct child only.

const { parentPort } = require('node:worker_threads')
const { execFile } = require('node:child_process')
const { realpath } = require('node:fs/promises')
const { relative, isAbsolute, sep, resolve: resolvePath } = require('node:path')

const TRUNCATION_MARKER = '\n[TRUNCATED at maxBuffer]'
const isWindows = process.platform === 'win32'

// Defense-in-depth: re-check cwd is within expected jail using path.relative
async function validateCwd(cwd, jailRoot) {
  const cwdAbs = resolvePath(cwd)
  const jailAbs = resolvePath(jailRoot)

  const cwdReal = await realpath(cwdAbs)
  const jailReal = await realpath(jailAbs)

  const rel = relative(jailReal, cwdReal)
  if (rel === '') return
  if (rel === '..' || rel.startsWith(`..${sep}`) || isAbsolute(rel)) {
    throw new Error(`cwd ${cwdReal} escapes jail ${jailReal}`)
  }
}

// Kill child process group (or just child on Windows)
function killChild(child, signal) {
  if (!child.pid) return
  try {
    if (isWindows) {
      child.kill(signal)
    } else {
      process.kill(-child.pid, signal)
    }
  } catch {
    // Process may already be dead
  }
}

// Truncate stdout+stderr to fit within maxBuffer cap, appending marker
function truncateToMaxBuffer(stdout, stderr, maxBuffer) {
  const max = Math.max(0, maxBuffer | 0)
  const totalLen = stdout.length + stderr.length
  if (totalLen <= max) return { stdout, stderr, truncated: false }

  const budget = Math.max(0, max - TRUNCATION_MARKER.length)
  let out = stdout
  let err = stderr

  if (out.length > budget) {
    out = out.slice(0, budget) + TRUNCATION_MARKER
    err = ''
  } else {
    const remaining = budget - out.length
    err = err.slice(0, remaining) + TRUNCATION_MARKER
  }

  return { stdout: out, stderr: err, truncated: true }
}

function signalNumber(sig) {
  switch (sig) {
    case 'SIGKILL':
      return 9
    case 'SIGTERM':
      return 15
    case 'SIGINT':
      return 2
    default:
      return 0
  }
}

let currentChild = null
let currentJobId = null
const pendingAborts = new Set()

if (!parentPort) {
  throw new Error('sandbox-worker must be run as a worker thread')
}

parentPort.on('message', async (msg) => {
  // ── Abort handler ────────────────────────────────────────
  if (msg.type === 'abort') {
    pendingAborts.add(msg.jobId)

    if (msg.jobId === currentJobId) {
      if (currentChild?.pid) {
        killChild(currentChild, 'SIGTERM')

        // Escalate to SIGKILL after 5s if child hasn't exited
        const killTimer = setTimeout(() => {
          if (currentChild?.pid) {
            killChild(currentChild, 'SIGKILL')
          }
        }, 5_000)

        // Wait for close event before posting aborted — ensures no orphan
        currentChild.once('close', () => {
          clearTimeout(killTimer)
          currentChild = null
          currentJobId = null
          pendingAborts.delete(msg.jobId)
          parentPort.postMessage({ type: 'aborted', jobId: msg.jobId })
        })
      } else {
        currentJobId = null
        pendingAborts.delete(msg.jobId)
        parentPort.postMessage({ type: 'aborted', jobId: msg.jobId })
      }
    } else {
      pendingAborts.delete(msg.jobId)
      parentPort.postMessage({ type: 'aborted', jobId: msg.jobId })
    }
    return
  }

  // ── Exec handler ─────────────────────────────────────────
  if (msg.type !== 'exec') return

  const { jobId, spec, jailRoot } = msg
  currentJobId = jobId

  if (pendingAborts.has(jobId)) {
    currentJobId = null
    pendingAborts.delete(jobId)
    parentPort.postMessage({ type: 'aborted', jobId })
    return
  }

  try {
    await validateCwd(spec.cwd, jailRoot)
  } catch (err) {
    currentJobId = null
    parentPort.postMessage({
      type: 'result',
      jobId,
      result: {
        stdout: '',
        stderr: `Jail validation failed: ${err.message}`,
        exitCode: 1,
        truncated: false,
        durationMs: 0,
      },
    })
    return
  }

  // Safety ceiling only — main thread is authoritative for deadline
  const safetyCeiling = spec.timeoutMs * 2

  const start = performance.now()
  try {
    const result = await new Promise((resolve, reject) => {
      const child = execFile(
        spec.binaryPath,
        spec.args,
        {
          cwd: spec.cwd,
          env: spec.env,
          maxBuffer: spec.maxBuffer,
          timeout: safetyCeiling,
          encoding: 'utf-8',
          killSignal: 'SIGKILL',
          detached: !isWindows, // setsid on Linux/macOS for process group kill (ignored by execFile)
        },
        (err, stdout, stderr) => {
          if (err) {
            reject(Object.assign(err, { stdout, stderr }))
            return
          }
          resolve({ stdout, stderr, status: child.exitCode })
        },
      )

      currentChild = child

      if (pendingAborts.has(jobId) && currentChild?.pid) {
        killChild(currentChild, 'SIGTERM')
      }
    })

    const truncated = truncateToMaxBuffer(result.stdout, result.stderr, spec.maxBuffer)

    parentPort.postMessage({
      type: 'result',
      jobId,
      result: {
        stdout: truncated.stdout,
        stderr: truncated.stderr,
        exitCode: result.status ?? 0,
        truncated: truncated.truncated,
        durationMs: performance.now() - start,
      },
    })
  } catch (err) {
    const durationMs = performance.now() - start
    let stdout = err.stdout ?? ''
    let stderr = err.stderr ?? ''

    const truncated = truncateToMaxBuffer(stdout, stderr, spec.maxBuffer)
    stdout = truncated.stdout
    stderr = truncated.stderr

    let exitCode = 1
    if (typeof err.status === 'number') {
      exitCode = err.status
    } else if (err.signal) {
      exitCode = 128 + signalNumber(err.signal)
    } else if (err.killed) {
      exitCode = 137
    }

    parentPort.postMessage({
      type: 'result',
      jobId,
      result: { stdout, stderr, exitCode, truncated: truncated.truncated, durationMs },
    })
  } finally {
    currentChild = null
    currentJobId = null
    pendingAborts.delete(jobId)
  }
})

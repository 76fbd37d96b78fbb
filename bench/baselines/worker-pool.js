'use strict'
// The thing being replaced: loa-finn's worker_threads WorkerPool (src/agent/worker-pool.ts,
// SDD §3.1, Cycle 005), transcribed from TypeScript to plain CommonJS for the benchmark.
// N interactive workers + 1 system worker, per-lane FIFO queues, jobs posted with a
// crypto.randomUUID() jobId, a main-thread setTimeout per job that posts an abort message,
// and a 10 s "wedged" deadline after the abort. The worker side is ./sandbox-worker.js.
//
// Kept as loa-finn wrote it (including its quirks); only types were removed and a default
// workerScript was added. Not used by anything but bench/.

const { Worker } = require('node:worker_threads')
const { randomUUID } = require('node:crypto')
const path = require('node:path')

const PoolErrorCode = Object.freeze({
  WORKER_UNAVAILABLE: 'WORKER_UNAVAILABLE',
  POOL_SHUTTING_DOWN: 'POOL_SHUTTING_DOWN',
  SANDBOX_DISABLED: 'SANDBOX_DISABLED',
  EXEC_TIMEOUT: 'EXEC_TIMEOUT',
  WORKER_CRASHED: 'WORKER_CRASHED',
})

class PoolError extends Error {
  constructor(code, message) {
    super(message)
    this.name = 'PoolError'
    this.code = code
  }
}

class WorkerPool {
  constructor(config) {
    this.config = {
      interactiveWorkers: 2,
      workerScript: path.join(__dirname, 'sandbox-worker.js'),
      shutdownDeadlineMs: 10_000,
      maxQueueDepth: 10,
      ...config,
    }
    this.interactiveWorkers = []
    this.interactiveQueue = []
    this.systemQueue = []
    this.accepting = true
    this.completedCount = 0
    this.failedCount = 0
    this.timedOutCount = 0
    this.totalExecMs = 0

    for (let i = 0; i < this.config.interactiveWorkers; i++) {
      this.interactiveWorkers.push(this.spawnWorker())
    }
    this.systemWorker = this.spawnWorker()
  }

  /** Execute a command via the worker pool (lane default "interactive", jailRoot default ""). */
  async exec(spec, lane = 'interactive', jailRoot = '') {
    if (!this.accepting) {
      throw new PoolError(PoolErrorCode.POOL_SHUTTING_DOWN, 'Pool is shutting down')
    }

    const jobId = randomUUID()

    return new Promise((resolve, reject) => {
      const job = { jobId, spec, jailRoot, resolve, reject }

      if (lane === 'system') {
        if (this.systemWorker.state === 'idle') {
          this.dispatch(this.systemWorker, job)
        } else {
          if (this.systemQueue.length >= this.config.maxQueueDepth) {
            reject(new PoolError(PoolErrorCode.WORKER_UNAVAILABLE, 'System queue full'))
            return
          }
          this.systemQueue.push(job)
        }
      } else {
        const idle = this.interactiveWorkers.find((w) => w.state === 'idle')
        if (idle) {
          this.dispatch(idle, job)
        } else {
          if (this.interactiveQueue.length >= this.config.maxQueueDepth) {
            reject(new PoolError(PoolErrorCode.WORKER_UNAVAILABLE, 'Interactive queue full'))
            return
          }
          // Per-session fairness at >50% capacity (SD-016)
          if (spec.sessionId && this.interactiveQueue.length > this.config.maxQueueDepth * 0.5) {
            const lastSameSessionIdx = this.interactiveQueue.findLastIndex(
              (j) => j.spec.sessionId === spec.sessionId,
            )
            if (lastSameSessionIdx >= 0 && lastSameSessionIdx < this.interactiveQueue.length - 1) {
              this.interactiveQueue.splice(lastSameSessionIdx + 1, 0, job)
            } else {
              this.interactiveQueue.push(job)
            }
          } else {
            this.interactiveQueue.push(job)
          }
        }
      }
    })
  }

  /** Graceful shutdown per SDD §5.2 */
  async shutdown() {
    this.accepting = false

    for (const job of this.interactiveQueue.splice(0)) {
      job.reject(new PoolError(PoolErrorCode.POOL_SHUTTING_DOWN, 'Pool shutting down'))
    }
    for (const job of this.systemQueue.splice(0)) {
      job.reject(new PoolError(PoolErrorCode.POOL_SHUTTING_DOWN, 'Pool shutting down'))
    }

    const allWorkers = [...this.interactiveWorkers, this.systemWorker]
    for (const mw of allWorkers) {
      if (mw.state === 'busy' && mw.currentJobId) {
        try {
          mw.worker.postMessage({ type: 'abort', jobId: mw.currentJobId })
        } catch {
          /* worker may already be dead */
        }
      }
    }

    let deadlineTimer
    const hitDeadline = await Promise.race([
      Promise.all(allWorkers.map((mw) => this.waitForIdle(mw))).then(() => false),
      new Promise((resolve) => {
        deadlineTimer = setTimeout(() => resolve(true), this.config.shutdownDeadlineMs)
      }),
    ])
    // (added for the benchmark: do not keep the process alive for the deadline's full length)
    clearTimeout(deadlineTimer)

    if (hitDeadline) {
      for (const mw of allWorkers) {
        if (mw.pendingJob) {
          const job = mw.pendingJob
          this.clearTimers(mw)
          this.markIdle(mw)
          job.reject(new PoolError(PoolErrorCode.POOL_SHUTTING_DOWN, 'Pool shutdown deadline exceeded'))
        }
      }
    }

    for (const mw of allWorkers) {
      this.clearTimers(mw)
      try {
        await mw.worker.terminate()
      } catch {
        /* ok */
      }
    }
  }

  stats() {
    return {
      interactive: {
        active: this.interactiveWorkers.filter((w) => w.state === 'busy').length,
        idle: this.interactiveWorkers.filter((w) => w.state === 'idle').length,
        queued: this.interactiveQueue.length,
      },
      system: {
        active: this.systemWorker.state === 'busy',
        queued: this.systemQueue.length,
      },
      totals: {
        completed: this.completedCount,
        failed: this.failedCount,
        timedOut: this.timedOutCount,
        avgExecMs: this.completedCount > 0 ? Math.round(this.totalExecMs / this.completedCount) : 0,
      },
    }
  }

  // ── Private Methods ─────────────────────────────────────────

  spawnWorker() {
    const worker = new Worker(this.config.workerScript, {
      resourceLimits: { maxOldGenerationSizeMb: 256 },
    })
    const mw = {
      worker,
      state: 'idle',
      currentJobId: null,
      pendingJob: null,
      timeoutTimer: null,
      abortTimer: null,
    }
    worker.on('message', (msg) => this.handleWorkerMessage(mw, msg))
    worker.on('error', (err) => this.handleWorkerError(mw, err))
    worker.on('exit', (code) => this.handleWorkerExit(mw, code))
    return mw
  }

  dispatch(mw, job) {
    mw.state = 'busy'
    mw.currentJobId = job.jobId
    mw.pendingJob = job

    // Main-thread authoritative timeout
    mw.timeoutTimer = setTimeout(() => {
      this.handleTimeout(mw)
    }, job.spec.timeoutMs)

    mw.worker.postMessage({
      type: 'exec',
      jobId: job.jobId,
      spec: job.spec,
      jailRoot: job.jailRoot,
    })
  }

  handleWorkerMessage(mw, msg) {
    // Validate jobId correlation (SD-008, SD-014)
    if (!msg || !msg.jobId || msg.jobId !== mw.currentJobId) {
      return
    }

    if (msg.type === 'result' && mw.pendingJob) {
      const job = mw.pendingJob
      this.clearTimers(mw)
      this.markIdle(mw)
      this.completedCount++
      this.totalExecMs += msg.result.durationMs ?? 0
      job.resolve(msg.result)
      this.drainQueue(mw)
    } else if (msg.type === 'aborted' && mw.pendingJob) {
      const job = mw.pendingJob
      this.clearTimers(mw)
      this.markIdle(mw)
      this.timedOutCount++
      job.reject(new PoolError(PoolErrorCode.EXEC_TIMEOUT, `Command timed out after ${job.spec.timeoutMs}ms`))
      this.drainQueue(mw)
    }
  }

  handleTimeout(mw) {
    if (mw.state !== 'busy' || !mw.currentJobId) return

    mw.worker.postMessage({ type: 'abort', jobId: mw.currentJobId })

    // Hard deadline — if the worker doesn't respond to abort in 10 s, terminate
    mw.abortTimer = setTimeout(() => {
      if (mw.state === 'busy' && mw.pendingJob) {
        const job = mw.pendingJob
        this.clearTimers(mw)
        this.timedOutCount++
        this.markIdle(mw)
        job.reject(new PoolError(PoolErrorCode.EXEC_TIMEOUT, 'Worker wedged — terminated and replaced'))
        this.replaceWorker(mw)
      }
    }, 10_000)
  }

  handleWorkerError(_mw, _err) {
    // Worker errored but may still be alive — wait for exit event
  }

  handleWorkerExit(mw, _code) {
    if (mw.pendingJob) {
      const job = mw.pendingJob
      this.clearTimers(mw)
      this.failedCount++
      this.markIdle(mw)
      job.reject(new PoolError(PoolErrorCode.WORKER_CRASHED, 'Worker thread crashed'))
    } else {
      this.clearTimers(mw)
      this.markIdle(mw)
    }

    if (this.accepting) {
      this.replaceWorker(mw)
    }
  }

  replaceWorker(mw) {
    try {
      mw.worker.terminate()
    } catch {
      /* ok */
    }

    const replacement = this.spawnWorker()

    mw.worker = replacement.worker
    mw.state = 'idle'
    mw.currentJobId = null
    mw.pendingJob = null
    mw.timeoutTimer = null
    mw.abortTimer = null

    mw.worker.on('message', (msg) => this.handleWorkerMessage(mw, msg))
    mw.worker.on('error', (err) => this.handleWorkerError(mw, err))
    mw.worker.on('exit', (code) => this.handleWorkerExit(mw, code))

    this.drainQueue(mw)
  }

  drainQueue(mw) {
    if (mw.state !== 'idle') return
    const isSystem = mw === this.systemWorker
    const queue = isSystem ? this.systemQueue : this.interactiveQueue
    const next = queue.shift()
    if (next) {
      this.dispatch(mw, next)
    }
  }

  markIdle(mw) {
    mw.state = 'idle'
    mw.currentJobId = null
    mw.pendingJob = null
  }

  clearTimers(mw) {
    if (mw.timeoutTimer) {
      clearTimeout(mw.timeoutTimer)
      mw.timeoutTimer = null
    }
    if (mw.abortTimer) {
      clearTimeout(mw.abortTimer)
      mw.abortTimer = null
    }
  }

  waitForIdle(mw) {
    if (mw.state === 'idle') return Promise.resolve()
    return new Promise((resolve) => {
      const check = setInterval(() => {
        if (mw.state === 'idle') {
          clearInterval(check)
          clearTimeout(safety)
          resolve()
        }
      }, 100)
      const safety = setTimeout(() => {
        clearInterval(check)
        resolve()
      }, this.config.shutdownDeadlineMs + 1_000)
    })
  }
}

module.exports = { WorkerPool, PoolError, PoolErrorCode }

/**
 * finn-sandbox: run the commands of AI-agent runtimes from Node without blocking the event
 * loop or letting them escape. A drop-in for loa-finn's `WorkerPool`.
 */

/** Which slots a job uses: `interactive` (N slots) or `system` (one reserved slot). */
export type PoolLane = 'interactive' | 'system'

/** What to run. The child gets exactly `env` (nothing inherited) and stdin from /dev/null. */
export interface ExecSpec {
  /** Absolute path, or a bare name looked up in `env.PATH` as execvp would. */
  binaryPath: string
  /** Passed verbatim, no shell. */
  args: string[]
  /** Working directory of the child. */
  cwd: string
  /** Positive integer; counted from dispatch (time queued does not count). Default 30000. */
  timeoutMs?: number
  /** The child's entire environment; `undefined` values are left out. */
  env: Record<string, string | undefined>
  /** Cap on stdout+stderr UTF-8 bytes, truncation marker included. Default 1048576. */
  maxBuffer?: number
  /** Fairness key: above half a full queue, dispatch goes round-robin across sessions. */
  sessionId?: string
}

/** What a job resolves with. A non-zero exit or a signal is a result, not an error. */
export interface ExecResult {
  stdout: string
  stderr: string
  /** The real exit code, or `128 + signo` when a signal ended the child. */
  exitCode: number
  /** True when the output went over `maxBuffer`; the cut stream ends with `\n[TRUNCATED at maxBuffer]`. */
  truncated: boolean
  /** Wall-clock milliseconds from spawn until the child's tree was gone. */
  durationMs: number
}

export interface WorkerPoolConfig {
  /** Concurrent interactive jobs, 1..4096. Default 2. */
  interactiveWorkers?: number
  /** After `shutdown()`, running jobs get SIGTERM at once and SIGKILL at this deadline. Default 10000. */
  shutdownDeadlineMs?: number
  /** Queued jobs per lane beyond the running ones; 0 refuses whenever the lane is busy. Default 10. */
  maxQueueDepth?: number
  /** SIGTERM-to-SIGKILL grace after a timeout or an abort. Default 5000. */
  killGraceMs?: number
  /** Accepted and ignored: a native pool has no worker script. */
  workerScript?: string
}

export interface WorkerPoolStats {
  interactive: { active: number; idle: number; queued: number }
  system: { active: boolean; queued: number }
  totals: {
    /** Jobs that resolved with a result (non-zero exits and jail rejections included). */
    completed: number
    /** Jobs whose binary could not be spawned, and internal crashes. */
    failed: number
    /** Jobs rejected with EXEC_TIMEOUT. */
    timedOut: number
    /** Mean `durationMs` of completed jobs, rounded; 0 before the first. */
    avgExecMs: number
  }
}

export interface ExecOptions {
  /** Aborting removes a queued job, or terminates a running one's process tree; rejects with ABORTED. */
  signal?: AbortSignal
}

/** Error codes of `PoolError`; each value equals its name. */
export declare const PoolErrorCode: {
  /** The lane's queue is full: retry with backoff. */
  readonly WORKER_UNAVAILABLE: 'WORKER_UNAVAILABLE'
  /** `shutdown()` has begun: do not retry. */
  readonly POOL_SHUTTING_DOWN: 'POOL_SHUTTING_DOWN'
  /** Execution is disabled by configuration: do not retry. */
  readonly SANDBOX_DISABLED: 'SANDBOX_DISABLED'
  /** The command ran past `timeoutMs`; its whole process tree is dead when this rejects. */
  readonly EXEC_TIMEOUT: 'EXEC_TIMEOUT'
  /** An internal failure (a panic in the addon); the pool keeps working. */
  readonly WORKER_CRASHED: 'WORKER_CRASHED'
  /** The caller's AbortSignal fired. */
  readonly ABORTED: 'ABORTED'
  /** The spec or an argument is invalid; the message names the field. */
  readonly INVALID_SPEC: 'INVALID_SPEC'
}
export type PoolErrorCode = (typeof PoolErrorCode)[keyof typeof PoolErrorCode]

/** Every rejection of the pool is a `PoolError`. */
export declare class PoolError extends Error {
  readonly name: 'PoolError'
  readonly code: PoolErrorCode
  constructor(code: PoolErrorCode, message: string, options?: ErrorOptions)
}

/** A command refused by the sandbox's policy. */
export declare class SandboxError extends Error {
  readonly name: 'SandboxError'
  constructor(message: string, options?: ErrorOptions)
}

/**
 * Runs commands on a tokio runtime in Rust: interactive and system lanes, per-lane queues,
 * timeouts that kill the whole process tree, never a fork of the Node process.
 */
export declare class WorkerPool {
  /** Throws a `PoolError` (INVALID_SPEC) for a bad config. */
  constructor(config?: WorkerPoolConfig)
  /**
   * Runs `spec` in `lane` (default "interactive"). With `jailRoot`, the realpath of `cwd` must
   * lie inside the realpath of `jailRoot`, else the job resolves with exit code 1 and stderr
   * "Working directory validation failed". Never throws: every failure is a rejected `PoolError`.
   */
  exec(spec: ExecSpec, lane?: PoolLane, jailRoot?: string, options?: ExecOptions): Promise<ExecResult>
  /** Rejects queued jobs, terminates running ones, resolves when no child is alive. Idempotent. */
  shutdown(): Promise<void>
  /** A synchronous snapshot of the pool. */
  stats(): WorkerPoolStats
}

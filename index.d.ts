/**
 * finn-sandbox: run the commands of AI-agent runtimes from Node without blocking the event
 * loop or letting them escape. A drop-in for loa-finn's `WorkerPool`.
 */

/** Which slots a job uses: `interactive` (N slots) or `system` (one reserved slot). */
export type PoolLane = 'interactive' | 'system'

/** What to run. The child gets exactly `env` (nothing inherited) and stdin from /dev/null. */
export interface ExecSpec {
  /** Absolute path, or a bare name looked up in `env.PATH` as execvp would. At most 4095 bytes. */
  binaryPath: string
  /** Passed verbatim, no shell. Each at most 131071 bytes; with `env`, within the kernel's ARG_MAX. */
  args: string[]
  /** Working directory of the child. At most 4095 bytes. */
  cwd: string
  /** Positive integer up to 2147483647; counted from dispatch (time queued does not count). Default 30000. */
  timeoutMs?: number
  /** The child's entire environment; `undefined` values are left out. */
  env: Record<string, string | undefined>
  /** Cap on stdout+stderr UTF-8 bytes, truncation marker included. Default 1048576. */
  maxBuffer?: number
  /** Fairness key: above half a full queue, dispatch goes round-robin across sessions. */
  sessionId?: string
  /** Kernel-enforced isolation for this job; overrides `WorkerPoolConfig.isolation`. */
  isolation?: IsolationOptions
}

/**
 * Kernel-enforced isolation of a command, applied by the supervisor's job reaper between fork
 * and exec. Landlock, seccomp, no_new_privs and rlimits need no privilege; cgroups apply where
 * the host permits (root), namespaces as root or, for other users, inside a user namespace where
 * the host allows one (`applied` then lists `userns`); `ExecResult.isolation.degraded` says what
 * did not, and why.
 */
export interface IsolationOptions {
  /** `off` (default for a WorkerPool job), `auto` (the strongest layers this host allows), `native` (fails without landlock and seccomp), `bwrap` (bubblewrap: the same options as mounts, namespaces and the same seccomp filter; fails without a usable `bwrap`). `auto` takes bwrap only where landlock or seccomp is missing and bwrap can run. */
  mode?: 'off' | 'auto' | 'native' | 'bwrap'
  /** Refuse to run (PoolError ISOLATION_UNAVAILABLE) when landlock, seccomp or an explicitly requested namespace cannot apply. */
  required?: boolean
  fs?: {
    /** Writable roots (absolute). Default: the job's cwd. */
    writable?: string[]
    /** Default `"all"`. */
    readable?: 'all' | string[]
    /** Never readable. Default: ~/.ssh ~/.aws ~/.gnupg ~/.netrc ~/.git-credentials ~/.docker ~/.kube ~/.config/gcloud ~/.config/gh ~/.npmrc /etc/shadow /etc/shadow- /etc/gshadow /etc/gshadow- /etc/sudoers /etc/sudoers.d /var/backups/{shadow,gshadow}.bak /etc/ssh/ssh_host_{rsa,ecdsa,ed25519,dsa}_key. */
    denyRead?: string[]
    /** Read-only inside the writable roots (needs the mount namespace). Default `.git/hooks`, `.git/config`, `.git/config.worktree`; a missing one inside an existing directory is created empty first (a file for the two configs, else a directory). */
    protect?: string[]
  }
  /** Default `deny`: every non-Unix socket (seccomp) and TCP (landlock). A `NetworkOptions` object: only what it lists, through the pool's egress proxy (needs `mode` other than `off`; docs/network.md). */
  network?: 'deny' | 'allow' | NetworkOptions
  /** Default `deny`: `socket(AF_UNIX)` (socketpair stays allowed) and abstract sockets. */
  unixSockets?: 'deny' | 'allow'
  limits?: {
    /** Default 256 (a pids cgroup; RLIMIT_NPROC per uid without one). */
    maxProcesses?: number
    /** Default 2 GiB (a memory cgroup; RLIMIT_AS per process without one, which does not count files written to a tmpfs). */
    maxMemoryBytes?: number
    /** RLIMIT_CPU: CPU seconds for each process of the job, not for the job as a whole (its wall time is bounded by the timeout). */
    cpuSeconds?: number
    /** RLIMIT_FSIZE: the largest file a process may write (larger writes, `truncate` and `fallocate` fail with EFBIG); not a total over files. */
    maxFileBytes?: number
    maxOpenFiles?: number
  }
  /** Default: mount where useful and permitted (as non-root, inside a user namespace); net and pid only when asked (each adds a few tenths of a ms per exec, README's cost table). */
  namespaces?: { pid?: boolean; net?: boolean; mount?: boolean }
}

/**
 * A network allowlist: the command's only route out is the pool's egress proxy, reached through
 * `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` and git's `http.proxy`, which allows what this lists.
 * A bad entry is an error naming it (`isolation.network.allow[1]`).
 */
export interface NetworkOptions {
  /** `"github.com"`, `"*.githubusercontent.com"` (subdomains only), `"registry.npmjs.org:443"`, IP literals (`"10.0.0.5:8080"`, `"[fd00::1]:443"`). Without a port: 443 for CONNECT, 80 for plain HTTP. */
  allow: string[]
  /** Plain HTTP through the proxy. Default false: CONNECT only. */
  allowPlainHttp?: boolean
  /** Loopback, private, link-local, carrier-grade NAT, unique local and cloud metadata addresses. Default false. */
  allowLocal?: boolean
  /** Static name -> address entries the proxy uses instead of DNS. */
  hosts?: Record<string, string>
}

/** What isolation a command ran under. */
export interface IsolationInfo {
  /** `'native'` or `'bwrap'`. */
  backend: string
  applied: string[]
  degraded: string[]
}

/** Machine facts, probed once and cached. */
export interface IsolationProbe {
  /** The landlock ABI version in use (capped by `FINN_SANDBOX_LANDLOCK_ABI_MAX` when set), or false. */
  landlock: number | false
  /** The kernel's own landlock ABI when `FINN_SANDBOX_LANDLOCK_ABI_MAX` caps `landlock` below it, else false. */
  landlockKernel: number | false
  /** Each landlock right of ABI 3 to 6 missing here (truncate, TCP, ioctl on devices, signal and abstract-socket scope): what a job may do without it. */
  landlockRights: Array<{ name: string; sinceAbi: number; missing: string }>
  seccomp: boolean
  /** Instructions in the seccomp program each isolated job loads (network, Unix sockets and IPC denied): the kernel's cost of loading it grows with its length. */
  seccompInstructions: number
  /** User namespaces can be made (without root, the mount, pid and net namespaces are made inside one). */
  userns: boolean
  cgroup: string | false
  /** The path of an executable `bwrap` in PATH, or false. */
  bwrap: string | false
  sysAdmin: boolean
  uid: number
  /** The network allowlist's rung here: 1, a job gets a network namespace of its own whose only route is the egress proxy; 2, no namespace can be made and the job's reaper makes each of its TCP connects, to the proxy or nowhere; 3, neither, and an allowlist means no network (docs/network.md). */
  egress: 1 | 2 | 3
}

/** Why each isolation layer is or is not available here, and what would fix it. */
export interface IsolationDoctor {
  backend: string
  layers: Array<{ name: string; available: boolean; reason?: string; remedy?: string }>
  ms: number
  /** The network allowlist's rung (see `IsolationProbe.egress`), why, and what would raise it. */
  egress: { rung: 1 | 2 | 3; reason: string; remedy?: string }
}

/** Throws when `FINN_SANDBOX_LANDLOCK_ABI_MAX` is set to anything but a whole number. */
export declare function probeIsolation(): IsolationProbe
/** Throws when `FINN_SANDBOX_LANDLOCK_ABI_MAX` is set to anything but a whole number. */
export declare function doctor(): IsolationDoctor

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
  /** Present when the job ran isolated. */
  isolation?: IsolationInfo
}

export interface WorkerPoolConfig {
  /** Concurrent interactive jobs, 1..4096. Default 2. */
  interactiveWorkers?: number
  /** After `shutdown()`, running jobs get SIGTERM at once and SIGKILL at this deadline. Default 10000. At most 2147483647. */
  shutdownDeadlineMs?: number
  /** Queued jobs per lane beyond the running ones; 0 refuses whenever the lane is busy. Default 10. At most 1000000. */
  maxQueueDepth?: number
  /** SIGTERM-to-SIGKILL grace after a timeout or an abort. Default 5000. At most 2147483647. */
  killGraceMs?: number
  /**
   * Once a command's main process has exited, how long the rest of its tree (background
   * children, `setsid` escapees) may keep running and writing before it is SIGKILLed and the job
   * settles with the main process's exit code. Default 100.
   */
  drainMs?: number
  /** Accepted and ignored: a native pool has no worker script. */
  workerScript?: string
  /** Isolation for every job that brings none of its own. Default off. */
  isolation?: IsolationOptions
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
  /** Required isolation cannot be applied on this host, or a layer failed to set up for this job (the command did not run); the message names the layers and why. */
  readonly ISOLATION_UNAVAILABLE: 'ISOLATION_UNAVAILABLE'
}
export type PoolErrorCode = (typeof PoolErrorCode)[keyof typeof PoolErrorCode]

/** Every rejection of the pool is a `PoolError`. */
export declare class PoolError extends Error {
  readonly name: 'PoolError'
  readonly code: PoolErrorCode
  constructor(code: PoolErrorCode, message: string, options?: ErrorOptions)
}

/** Error codes of `SessionError`; each value equals its name. */
export declare const SessionErrorCode: {
  /** The session was destroyed: the call came after `destroy()`, or was running or queued when it was called. */
  readonly ESESSIONDESTROYED: 'ESESSIONDESTROYED'
  /** A wait ran past its `timeoutMs` (a command's own timeout is a result, not this error). */
  readonly ETIMEDOUT: 'ETIMEDOUT'
  /** The process waited on exited first. */
  readonly EPROCESSEXITED: 'EPROCESSEXITED'
  /** A path does not exist (a bad `cwd`). */
  readonly ENOENT: 'ENOENT'
  /** A bad argument (a NUL in a command, a bad env name, a bad option value); the message names the option. */
  readonly EINVAL: 'EINVAL'
  /** The caller's AbortSignal fired. */
  readonly ABORT_ERR: 'ABORT_ERR'
}
export type SessionErrorCode = (typeof SessionErrorCode)[keyof typeof SessionErrorCode]

/** Every rejection of a session is a `SessionError`. */
export declare class SessionError extends Error {
  readonly name: 'SessionError'
  readonly code: SessionErrorCode
  constructor(code: SessionErrorCode, message: string, options?: ErrorOptions)
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

// ── Sandbox (loa-finn's src/agent/sandbox.ts, audit-log.ts, sandbox-executor.ts) ──────────

/** One allowed binary. */
export interface CommandPolicy {
  /** Absolute path of the binary (realpath-resolved at execution; a missing one fails closed). */
  binary: string
  /** When non-empty, the first argument must be one of these. */
  subcommands: string[]
  /** Refused as `-x`, `-xvalue`, `--flag`, `--flag=value`, and 3+ character abbreviations of long flags. */
  deniedFlags: string[]
  /** Non-flag arguments must be paths inside the jail (replaced by their canonical form). */
  validatePaths: boolean
  /**
   * The hosts this program's commands may reach, only through the pool's egress proxy
   * (docs/network.md). Without it a command gets no network (git's fetch, clone and push get
   * their remote's hosts, so git's policy takes none). Needs isolation on; where the host cannot
   * make the job a network namespace the command gets no network (`auto`) or is refused
   * (`required`), never the whole network.
   */
  network?: NetworkOptions
}

/** loa-finn's `FinnConfig["sandbox"]`, plus optional policies replacing the defaults. */
export interface SandboxConfig {
  /** False refuses every command ("Bash execution is disabled"). Missing means false. */
  allowBash: boolean
  /** The jail: must exist; commands run with it as cwd and HOME. */
  jailRoot: string
  /** Timeout of each command in ms, a positive integer. */
  execTimeout: number
  /** Cap on stdout+stderr bytes of each command. */
  maxOutput: number
  /** Replaces the default policies (git, br, ls, cat, wc). */
  policies?: Record<string, CommandPolicy>
  /**
   * Kernel-enforced isolation of every command. Default `{ mode: 'auto' }` (an object without
   * `mode` is `auto` too); `{ mode: 'off' }` turns it off. `fs.writable` and `network` are set
   * per command from what it runs (README "ToolSandbox": read-only git and read-only tools get no
   * writable root, other commands the jail, only git fetch/clone/push the network) and are
   * refused here. With `required: true` (or `mode: 'native'`) a JS executor (not a WorkerPool, WorkerExecutor or
   * ChildProcessExecutor) is refused at construction. Audit outcome entries record
   * `isolation: { backend, applied, degraded }`.
   */
  isolation?: Omit<IsolationOptions, 'network' | 'fs'> & { fs?: Omit<NonNullable<IsolationOptions['fs']>, 'writable'> }
}

export interface SandboxCommand {
  binary: string
  args: string[]
}

export interface SandboxResult {
  stdout: string
  stderr: string
  exitCode: number
  /** True when the command hit `execTimeout` (then exitCode is 137); never guessed from exit codes. */
  timedOut: boolean
  truncated: boolean
}

/** Anything that runs an `ExecSpec`: loa-finn's executors, or a `WorkerPool`. */
export interface SandboxExecutor {
  exec(spec: ExecSpec): Promise<ExecResult>
}

export type SandboxMode = 'worker' | 'child_process' | 'disabled'

export interface AuditEntry {
  /** `new Date().toISOString()` */
  timestamp: string
  action: 'allow' | 'deny'
  command: string
  args: string[]
  reason?: string
  /** Milliseconds. */
  duration?: number
  /** Bytes of redacted stdout+stderr. */
  outputSize?: number
  /** On the outcome entry of a command that ran: its isolation (`backend` `off` when off, `none` when a JS executor reported none). */
  isolation?: IsolationInfo
}

export interface AuditLogOptions {
  /** Rotate once the current file reaches this size (a positive integer). Default 10 MiB. */
  maxFileSize?: number
  /** Rotated files kept (audit.1.log .. audit.N.log), 0..1000. Default 5. */
  maxFiles?: number
}

/**
 * JSONL audit log at `<dataDir>/audit/audit.log` with size-based rotation. All instances on one
 * directory share a single writer in the process (the first instance's options apply), so
 * per-session instances rotate as one file and lines never interleave.
 */
export declare class AuditLog {
  constructor(dataDir: string, options?: AuditLogOptions)
  /** Never throws: false on any error. */
  append(entry: AuditEntry): boolean
  /** `<dataDir>/audit` */
  getLogDir(): string
}

/** Paths must resolve inside the jail root, through no symlink. */
export declare class FilesystemJail {
  /** The root is the realpath of `dataDir`; throws (ENOENT) when it does not exist. */
  constructor(dataDir: string)
  /** The canonical path, or throws `SandboxError` ("Path escapes jail: …", "Symlink rejected: …"). */
  validatePath(inputPath: string): string
  getJailRoot(): string
}

/** Replaces secret values (from `env`) and secret-looking tokens with `[REDACTED]`. */
export declare class SecretRedactor {
  constructor(env?: Record<string, string | undefined>)
  /** Throws `TypeError` when `output` is not a string. */
  redact(output: string): string
}

export interface SandboxExecuteOptions {
  /**
   * Aborting terminates the command's process tree, or ends its repository check (the check's
   * git is killed) if the command has not started yet; rejects `PoolError` ABORTED.
   */
  signal?: AbortSignal
  /** Fairness key for the pool's round-robin dispatch. */
  sessionId?: string
}

/**
 * loa-finn's policy pipeline in Rust: gate, tokenize, policy, subcommand, denied flags, jail,
 * audit, execute, redact. With a `WorkerPool` (or a `WorkerExecutor`) as executor the whole
 * pipeline runs natively on the pool's interactive lane, with the jail as `jailRoot`.
 */
export declare class ToolSandbox {
  constructor(config: SandboxConfig, auditLog: AuditLog, executor?: SandboxExecutor | WorkerPool)
  /** Throws `SandboxError` for an empty command or shell metacharacters, `TypeError` for a non-string. */
  tokenize(commandString: string): SandboxCommand
  /**
   * Refusals throw `SandboxError`; executor failures other than a timeout are rethrown. A git
   * command's repository check runs off libuv's pool, at most 4 at once per sandbox, and is
   * refused past 10 s.
   */
  execute(commandString: string, options?: SandboxExecuteOptions): Promise<SandboxResult>
  /**
   * The jail for a host tool's checks of the agent's paths: this sandbox's root, refusing its
   * audit directory ("Path is reserved for the host: …") and every path no command may write
   * (`isolation.fs.protect`, by default `.git/hooks`, `.git/config` and `.git/config.worktree`:
   * "Path is protected (no command may write it): …"), reads included, since the check cannot
   * tell a read from a write.
   */
  getJail(): FilesystemJail
}

/** Runs specs on a pool's interactive lane. */
export declare class WorkerExecutor implements SandboxExecutor {
  constructor(pool: WorkerPool)
  readonly pool: WorkerPool
  exec(spec: ExecSpec): Promise<ExecResult>
}

/** Runs each spec at once, without lanes, with the same kill and output guarantees. */
export declare class ChildProcessExecutor implements SandboxExecutor {
  constructor()
  exec(spec: ExecSpec): Promise<ExecResult>
}

/** Always rejects `PoolError` SANDBOX_DISABLED. */
export declare class DisabledExecutor implements SandboxExecutor {
  exec(spec: ExecSpec): Promise<ExecResult>
}

/** `worker` | `child_process` | `disabled`; anything else throws `PoolError` SANDBOX_DISABLED. */
export declare function createExecutor(mode: SandboxMode, pool: WorkerPool): SandboxExecutor

// ── Sessions (docs/sessions.md) ─────────────────────────────────────────────────────────────

/** Options of `createSession`. Bad values reject `SessionError` EINVAL naming the option. */
export interface SessionOptions {
  /** Default: a random UUID. */
  id?: string
  /** The first shell's working directory. Default `process.cwd()`; missing: ENOENT. */
  cwd?: string
  /** Variables for the first shell, over the inherited ones; `undefined` removes one. */
  env?: Record<string, string | undefined>
  /** Start from Node's `process.env`. Default `true`. */
  inheritEnv?: boolean
  /** `timeoutMs` of every `exec` that gives none. Default: none. */
  defaultTimeoutMs?: number
  /** Per stream, in bytes of output. Default 16 MiB. */
  maxOutputBytes?: number
  /** Applied once to the shell's start, as for a `WorkerPool` job; the session's private fifo directory is added to the writable roots. */
  isolation?: IsolationOptions
  /** An absolute path or a name looked up in the session's `PATH`. Default `"bash"`. */
  shell?: string
  /** The pool whose supervisor runs the shell. Default: a pool shared by the module. */
  pool?: WorkerPool
}

/** Options of `Session.exec`. Bad values reject `SessionError` EINVAL naming the option. */
export interface SessionExecOptions {
  /** Wall-clock limit: the command's whole tree is killed, the result has `timedOut: true`, the session keeps its state. Default: the session's `defaultTimeoutMs`. */
  timeoutMs?: number
  /** The same, once neither stream has had a byte for this long. */
  idleTimeoutMs?: number
  /** `"kill"` (default): a timeout kills the command's tree. `"background"`: it resolves the exec (`timedOut: true`, `exitCode: null`, `process`) and the command runs on under `backgroundTimeoutMs`. */
  onTimeout?: 'kill' | 'background'
  /** With `onTimeout: "background"` only: how long the command may run on after its timeout before its whole tree is killed. Default 1 h (3600000). */
  backgroundTimeoutMs?: number
  /** An upper bound on the wait: after it the exec resolves with the output so far and, if the command still runs, `exitCode: null` and `process` to follow the rest (its `timeoutMs`, `idleTimeoutMs` and `signal` still apply). The session goes on at once from its state before the command. */
  yieldMs?: number
  /** Aborting kills the command's tree and rejects `SessionError` ABORT_ERR; a queued call is dropped. After a yield or a move to the background it kills the command's `process`. */
  signal?: AbortSignal
  /** Working directory for this command only (it runs in a subshell); missing: ENOENT. */
  cwd?: string
  /** Variables for this command only (it runs in a subshell); `undefined` unsets one. */
  env?: Record<string, string | undefined>
  /** With `false`, this command sees only `env`. Default `true`. */
  inheritEnv?: boolean
  /** Written to the command's stdin, then EOF. Default: EOF at once. `"pipe"`: stdin stays open for the returned `process`'s `writeStdin`/`closeStdin`; it needs `yieldMs`, or `onTimeout: "background"` with a timeout (EINVAL otherwise); a command that ends before it is handed on reads EOF at its end. */
  stdin?: string | Uint8Array | 'pipe'
  /** Each chunk as it is read, in order; the command waits while callbacks fall behind. */
  onStdout?(chunk: Buffer): void
  onStderr?(chunk: Buffer): void
  /** `"utf8"` (default: strings, invalid sequences as U+FFFD) or `"buffer"` (the bytes exactly). */
  encoding?: 'utf8' | 'buffer'
  /** Per stream; past it the rest is dropped (`stdoutTruncated`/`stderrTruncated`), never splitting a UTF-8 character in `"utf8"`. Default: the session's. */
  maxOutputBytes?: number
}

/** What `Session.exec` resolves with. A non-zero exit, a signal or a timeout is a result, not an error. */
export interface SessionExecResult<Output extends string | Buffer = string | Buffer> {
  command: string
  /** `$?`, or the status of a shell the command ended (`exit 3`: 3); 137 when the shell had to be killed to end a timed-out command; `null` when a signal killed the shell, or while the command runs on (`process`). */
  exitCode: number | null
  /** The signal that killed the shell (`"SIGKILL"`), else `null`. */
  signal: string | null
  /** `exitCode === 0` and not timed out. */
  success: boolean
  stdout: Output
  stderr: Output
  stdoutTruncated: boolean
  stderrTruncated: boolean
  timedOut: boolean
  timedOutBy: 'wall' | 'idle' | null
  durationMs: number
  /** The shell was replaced (after `exit`, `exec`, `set -e`, a signal, or a command only its death could end) and its state restored. */
  sessionRestarted: boolean
  /** Set when `yieldMs` elapsed or `onTimeout: "background"` took the command: it runs on (`exitCode: null`). This result's output plus the process's log is the whole output. */
  process?: Process
}

/** One event of a background process's log, numbered in order from 0. */
export type LogEvent =
  | { type: 'stdout' | 'stderr'; seq: number; time: number; data: Buffer }
  | { type: 'truncated'; seq: number; time: number }
  | { type: 'exit'; seq: number; time: number; exitCode: number | null; signal: string | null }

/** How a background process ended. */
export interface ProcessExit {
  exitCode: number | null
  signal: string | null
  timedOut: boolean
}

/** A wait's bound and its cancellation. */
export interface ProcessWaitOptions {
  timeoutMs?: number
  signal?: AbortSignal
}

/** A background process of a session, on a reaper of its own (docs/processes.md). */
export interface Process extends AsyncIterable<LogEvent> {
  readonly id: string
  /** The command's pid (`bash -c`'s; the program's when the command `exec`s it). */
  readonly pid: number
  readonly command: string
  readonly status: 'running' | 'completed' | 'failed' | 'killed' | 'error'
  readonly exitCode: number | null
  readonly signal: string | null
  readonly startTime: Date
  readonly endTime: Date | null
  getStatus(): Promise<string>
  getLogs(): Promise<{ stdout: string; stderr: string; truncated: boolean }>
  /** Replays from sequence number `since` (a `truncated` event first when the ring lost it), then follows; ends after the exit event. */
  streamLogs(options?: { since?: number }): AsyncIterableIterator<LogEvent>
  /** Rejects `ETIMEDOUT`, `ABORT_ERR` or `EPROCESSEXITED`. */
  waitForLog(pattern: string | RegExp, options?: ProcessWaitOptions): Promise<{ line: string; stream: string }>
  /** Resolves once `host:port` (default 127.0.0.1) accepts a connection; rejects as soon as the process exits. */
  waitForPort(port: number, options?: ProcessWaitOptions & { host?: string }): Promise<void>
  waitForExit(options?: ProcessWaitOptions): Promise<ProcessExit>
  /** Signals the whole tree (default SIGTERM), SIGKILL after `graceMs` (default 5000); resolves when every process of it is gone. */
  kill(signal?: string | number, options?: { graceMs?: number }): Promise<void>
  /** With `stdin: "pipe"` only. */
  writeStdin(data: string | Uint8Array): Promise<void>
  closeStdin(): Promise<void>
}

export interface ProcessOptions {
  id?: string
  /** Default: the session's working directory when the call is made. */
  cwd?: string
  /** Over the session's exported environment when the call is made; `undefined` removes a name. */
  env?: Record<string, string | undefined>
  /** A hard deadline: the whole tree is killed at it. */
  timeoutMs?: number
  stdin?: 'ignore' | 'pipe'
  /** The log ring's size in bytes. Default 8 MiB. */
  maxLogBytes?: number
  onStdout?(chunk: Buffer): void
  onStderr?(chunk: Buffer): void
  onExit?(e: ProcessExit): void
}

/** A bash kept alive between commands: `cd`, `export`, functions, aliases and `set` options persist. */
export declare class Session implements AsyncDisposable {
  private constructor()
  readonly id: string
  /** The shell's pid (a new one after a restart). */
  readonly pid: number
  readonly destroyed: boolean
  /** Runs `command` after the calls made before it. Rejects `SessionError` (EINVAL, ENOENT, ABORT_ERR, ESESSIONDESTROYED). */
  exec(command: string, options: SessionExecOptions & { encoding: 'buffer' }): Promise<SessionExecResult<Buffer>>
  exec(command: string, options?: SessionExecOptions & { encoding?: 'utf8' }): Promise<SessionExecResult<string>>
  exec(command: string, options?: SessionExecOptions): Promise<SessionExecResult>
  /** Exports (or, for `undefined`, unsets) variables in the shell, in call order. */
  setEnv(vars: Record<string, string | undefined>): Promise<void>
  /** Starts `command` (`bash -c`) on a reaper of its own, in the session's cwd and exported environment as they are after the calls before it, under the session's isolation. */
  startProcess(command: string, options?: ProcessOptions): Promise<Process>
  getProcess(id: string): Process | undefined
  /** Running processes and the last 100 finished ones. */
  listProcesses(): Process[]
  /** Kills every running process's tree; resolves with how many there were. */
  killAllProcesses(signal?: string | number): Promise<number>
  /** Kills the shell and everything the session started, and resolves once all are gone; running and queued calls reject ESESSIONDESTROYED. Idempotent. */
  destroy(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
}

/** Starts a session run by a reaper of `options.pool`'s supervisor. Rejects `SessionError`. */
export declare function createSession(options?: SessionOptions): Promise<Session>
/** A structured agent tool (docs/tools.md). */
export type ToolName = 'read' | 'ls' | 'find' | 'grep' | 'git'

/** What a tool call resolves with. */
export interface ToolResult {
  /** False when the command failed (non-zero exit) or the call was bad; a refused path, command or flag is `ok` with the explanation in `output`, for the model to read and retry. */
  ok: boolean
  /** The command's exit code (0 for `grep` with or without matches; 0 when nothing ran). */
  exitCode: number
  /** Relative paths, sorted; cut on whole lines, never inside a UTF-8 character, to `maxOutputBytes`. */
  output: string
  /** True exactly when a limit cut the output (`limit`, `maxResults`, `maxCount`, `maxOutputBytes`, the runner's 8 MiB cap); the output's last line names it. */
  truncated: boolean
  /** Set when `ok` is false: `INVALID_ARGUMENT` (naming the field), `UNKNOWN_TOOL`, `NOT_FOUND`, `NOT_A_FILE`, `NOT_A_DIRECTORY`, `BINARY_FILE`, `BAD_PATTERN`, `COMMAND_FAILED`, `TIMED_OUT`, `ABORTED`, `TOOL_FAILED` (the addon could not plan or finish the call), or the runner's rejection code. */
  error?: { code: string; message: string }
}

/** Anything that runs an ExecSpec: a WorkerPool, a ToolSandbox executor, or any JS object. */
export interface ToolRunner {
  exec(spec: ExecSpec): Promise<ExecResult>
}

export interface ExecuteToolOptions {
  /** Default: the module's shared WorkerPool (made on first use; idle, it holds nothing open). */
  runner?: ToolRunner
  /** Default `{ mode: "auto" }` without a runner, none with one; read-only and without network either way (`fs.writable` and `network` are set per call and refused here). On `spec.isolation` for a runner. */
  isolation?: IsolationOptions
  /** Each call's allow and outcome entries, as a ToolSandbox command's. Default: no audit. */
  audit?: AuditLog
  /** The command's timeout. Default 30000. */
  timeoutMs?: number
  /** Cap on `ToolResult.output` in bytes. Default 65536. */
  maxOutputBytes?: number
  /** `auto` (default): rg and fd (or `fdfind`) where on PATH, else grep and find; the output is the same. */
  finders?: 'auto' | 'rg-fd' | 'grep-find'
  /** Ends the call's checks (`ABORTED`), and its command when the runner is a WorkerPool; another runner's `exec` is awaited. */
  signal?: AbortSignal
}

/** The tools' names. */
export declare const TOOL_NAMES: readonly ToolName[]
/** The git subcommands the `git` tool runs: the read-only ones of ToolSandbox's git policy. */
export declare const ALLOWED_GIT_COMMANDS: readonly string[]
/** One JSON Schema per tool (a fresh copy each call), for LLM tool declarations. */
export declare function toolSchemas(): Record<ToolName, Record<string, unknown>>
/** Runs one tool in `worktree` (must exist). Rejects only for bad `worktree` or `options` (SandboxError naming the field). */
export declare function executeTool(name: ToolName, args: object, worktree: string, options?: ExecuteToolOptions): Promise<ToolResult>

export interface ToolExecutorOptions extends Omit<ExecuteToolOptions, 'signal'> {
  worktree: string
}

/** loa-finn's Orchestrator `toolExecutor`: `execute` never rejects; `traceId` is the fairness key on a pool. */
export declare function createToolExecutor(options: ToolExecutorOptions): {
  execute(toolName: string, args: unknown, traceId?: string): Promise<{ output: string; is_error: boolean }>
}

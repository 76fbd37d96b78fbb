// Type-checked by `tsc -p __test__` in npm test (never run): loa-finn's imports and calls, from
// its src/agent/*.ts, src/index.ts, src/scheduler/health.ts and src/persistence/git-sync.ts.
// A drifting declaration fails the build; the @ts-expect-error lines fail it if they loosen.
import {
  AuditLog,
  ChildProcessExecutor,
  DisabledExecutor,
  FilesystemJail,
  PoolError,
  PoolErrorCode,
  SandboxError,
  SecretRedactor,
  ToolSandbox,
  WorkerExecutor,
  WorkerPool,
  createExecutor,
  createToolExecutor,
} from '../index.js'
import type {
  AuditEntry,
  CommandPolicy,
  ExecResult,
  ExecSpec,
  PoolLane,
  SandboxCommand,
  SandboxConfig,
  SandboxExecutor,
  SandboxMode,
  SandboxResult,
  WorkerPoolConfig,
  WorkerPoolStats,
} from '../index.js'

// src/config.ts: FinnConfig["sandbox"] and the pool's config block.
interface FinnSandboxConfig {
  allowBash: boolean
  jailRoot: string
  execTimeout: number
  maxOutput: number
}

export async function loaFinnCallSites(finn: FinnSandboxConfig, dataDir: string, mode: SandboxMode): Promise<void> {
  // src/index.ts
  const poolConfig: WorkerPoolConfig = { interactiveWorkers: 2, workerScript: '/app/dist/agent/sandbox-worker.js', shutdownDeadlineMs: 10_000, maxQueueDepth: 10 }
  const pool = new WorkerPool(poolConfig)
  const executor: SandboxExecutor = createExecutor(mode, pool)
  const health: { getWorkerPoolStats: () => WorkerPoolStats | undefined } = { getWorkerPoolStats: () => pool?.stats() }
  const active: number = pool.stats().interactive.active
  const systemBusy: boolean = pool.stats().system.active
  const avg: number = pool.stats().totals.avgExecMs
  void [health, active, systemBusy, avg]

  // src/persistence/git-sync.ts
  const gitEnv: Record<string, string> = { PATH: '/usr/bin', GIT_TERMINAL_PROMPT: '0' }
  const spec: ExecSpec = { binaryPath: '/usr/bin/git', args: ['status'], cwd: dataDir, timeoutMs: 30_000, env: gitEnv, maxBuffer: 1_048_576 }
  const result: ExecResult = await pool.exec(spec, 'system')
  const out: string = result.stdout
  const code: number = result.exitCode
  void [out, code]

  // src/agent/sandbox-executor.ts and session.ts: a WorkerPool where an executor is expected.
  const asExecutor: SandboxExecutor = pool
  const executors: SandboxExecutor[] = [new WorkerExecutor(pool), new ChildProcessExecutor(), new DisabledExecutor(), asExecutor]
  void executors
  const sandbox = new ToolSandbox(finn, new AuditLog(dataDir), executor)
  const withPool = new ToolSandbox(finn satisfies SandboxConfig, new AuditLog(dataDir, { maxFileSize: 1024, maxFiles: 3 }), pool)
  const r: SandboxResult = await sandbox.execute('git status')
  const timedOut: boolean = r.timedOut
  const cmd: SandboxCommand = withPool.tokenize('ls -la')
  const safe: string = sandbox.getJail().validatePath('notes.md')
  const root: string = new FilesystemJail(dataDir).getJailRoot()
  const redacted: string = new SecretRedactor(process.env).redact('x')
  void [timedOut, cmd, safe, root, redacted]

  // Errors: loa-finn constructs them itself and matches name/code.
  const disabled = new PoolError(PoolErrorCode.SANDBOX_DISABLED, 'Sandbox is disabled')
  const poolCode: PoolErrorCode = disabled.code
  const sandboxErr: Error = new SandboxError('Command not allowed: rm')
  void [poolCode, sandboxErr]

  const lane: PoolLane = 'interactive'
  const entry: AuditEntry = { timestamp: new Date().toISOString(), action: 'deny', command: 'rm', args: [], reason: 'binary_not_allowed: rm' }
  const ok: boolean = new AuditLog(dataDir).append(entry)
  const policy: CommandPolicy = { binary: '/usr/bin/git', subcommands: ['log'], deniedFlags: ['-c'], validatePaths: false }
  void [lane, ok, policy]

  // src/hounfour: the Orchestrator's toolExecutor, wired with the pool as its runner.
  interface ToolExecutor {
    execute(toolName: string, args: unknown, traceId: string): Promise<{ output: string; is_error: boolean }>
  }
  const toolExecutor: ToolExecutor = createToolExecutor({ worktree: dataDir, runner: pool })
  const viaExecutor: ToolExecutor = createToolExecutor({ worktree: dataDir, runner: executor, audit: new AuditLog(dataDir) })
  void [toolExecutor, viaExecutor]

  // @ts-expect-error: lanes are exactly "interactive" | "system"
  await pool.exec(spec, 'bogus')
  // @ts-expect-error: a spec needs binaryPath, args, cwd and env
  await pool.exec({ binaryPath: '/bin/true' })
  // @ts-expect-error: PoolError takes (code, message), the code first
  void new PoolError('message only')
  // @ts-expect-error: stats() is synchronous
  void (await pool.stats()).then
}

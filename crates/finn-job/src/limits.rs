//! Every default and limit of a job and a pool, defined once. The binding, the pool, the
//! sandbox pipeline and (through the addon's exports) `index.js` all read them from here.

/// A job's timeout when its spec names none.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Node's own timer limit (about 24.8 days); loa-finn's larger values fired at once.
pub const MAX_TIMEOUT_MS: u64 = 2_147_483_647;
/// A job's cap on stdout+stderr bytes when its spec names none (1 MiB).
pub const DEFAULT_MAX_BUFFER: u64 = 1_048_576;
/// V8 strings stop near 2^29 characters; a larger cap could never be returned anyway.
pub const MAX_BUFFER_LIMIT: u64 = 512 * 1024 * 1024;
/// SIGTERM-to-SIGKILL grace after a timeout or an abort.
pub const DEFAULT_KILL_GRACE_MS: u64 = 5_000;
/// Once a command's main process has exited, how long the rest of its tree may run before it
/// is killed and the job settles.
pub const DEFAULT_DRAIN_MS: u64 = 100;
/// From `shutdown()` until whatever still runs is SIGKILLed.
pub const DEFAULT_SHUTDOWN_DEADLINE_MS: u64 = 10_000;
/// Concurrent interactive jobs of a pool by default, and the most a pool may have.
pub const DEFAULT_INTERACTIVE_WORKERS: usize = 2;
pub const MAX_INTERACTIVE_WORKERS: usize = 4096;
/// Queued jobs per lane beyond the running ones.
pub const DEFAULT_MAX_QUEUE_DEPTH: usize = 10;
/// The sandbox's cap on a command's output when its config names none (loa-finn's 64 KiB).
pub const DEFAULT_SANDBOX_MAX_OUTPUT: u64 = 65_536;
/// A background process's log ring when its options name none (8 MiB): a server's recent
/// output for `getLogs()` and `streamLogs({ since })`, at a cost a few processes can afford.
pub const DEFAULT_MAX_LOG_BYTES: u64 = 8 * 1024 * 1024;
/// How long a session command moved to the background by its timeout (`onTimeout:
/// "background"`) runs on when its options name no `backgroundTimeoutMs` (1 h): long enough
/// for a build or a test run an agent comes back to, short enough that a forgotten one ends.
pub const DEFAULT_BACKGROUND_TIMEOUT_MS: u64 = 60 * 60 * 1000;
/// The largest log ring: as a job's output cap, what one V8 string can still hold.
pub const MAX_LOG_BYTES: u64 = MAX_BUFFER_LIMIT;
/// The longest queue a lane may have: each queued job holds its whole spec, so a deeper queue is
/// unbounded memory rather than a queue.
pub const MAX_QUEUE_DEPTH: usize = 1_000_000;
/// The longest `shutdownDeadlineMs` and `killGraceMs`: Node's timer limit, as for timeouts.
pub const MAX_DURATION_MS: u64 = MAX_TIMEOUT_MS;
/// The kernel's limit on one argument or `KEY=value` string, without its NUL (MAX_ARG_STRLEN is
/// 32 pages with it): a longer one makes `execve` fail with E2BIG.
pub const MAX_ARG_BYTES: usize = 32 * 4096 - 1;
/// PATH_MAX without its NUL: a longer `binaryPath`, `cwd` or `jailRoot` cannot name a file.
pub const MAX_PATH_BYTES: usize = 4095;
/// Rotated audit files kept at most: each rotation renames every one of them.
pub const MAX_AUDIT_FILES: u64 = 1000;
/// A structured tool's output (`ToolResult.output`) when the call names no `maxOutputBytes`:
/// the sandbox's own cap, so a tool answer costs a model what a command's does.
pub const DEFAULT_TOOL_OUTPUT_BYTES: u64 = DEFAULT_SANDBOX_MAX_OUTPUT;
/// What a tool's runner may print before it is cut (the job's `maxBuffer`): enough for a page of
/// `read` and for the listing `find` and `grep` sort before cutting to their limits.
pub const TOOL_RUN_MAX_BUFFER: u64 = 8 * 1024 * 1024;
/// Lines `read` shows when the call names no `limit`.
pub const DEFAULT_READ_LINES: u64 = 2_000;
/// Entries `ls` shows.
pub const MAX_LS_ENTRIES: u64 = 1_000;
/// `find`'s and `grep`'s `maxResults` when the call names none.
pub const DEFAULT_TOOL_RESULTS: u64 = 1_000;
/// The largest `limit`, `maxResults` or `maxCount` a call may ask for.
pub const MAX_TOOL_RESULTS: u64 = 100_000;
